"""The ``agentlog`` command (SPEC §7). Every query command takes ``--json``."""

from __future__ import annotations

import argparse
import csv
import io
import json
import logging
import os
import sqlite3
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import orjson

from agentlog.processors.context import BudgetTooSmall
from agentlog.schemas.requests import DEFAULT_THREAD_LIMIT, MAX_THREAD_LIMIT
from agentlog.schemas.search import time_bound_ms
from agentlog.schemas.state import THREAD_STATUSES
from agentlog.sinks.base import QueryResult, StoreError
from agentlog.sinks.memory_sqlite import StaleToken
from agentlog.streams.config import Settings
from agentlog.streams.runtime import tune_gc
from agentlog.streams.api.service import NotFound, Unavailable
from agentlog.streams.embedded.service import DataDirLock

EPILOG = """Configuration (environment): AGENTLOG_DATA_DIR (default ./.agentlog),
AGENTLOG_CLICKHOUSE_URL (a ClickHouse server; unset = chDB in the data directory),
AGENTLOG_GRACE_SECONDS, AGENTLOG_CALL_TIMEOUT_SECONDS, AGENTLOG_MAX_EVENT_BYTES,
AGENTLOG_HTTP_HOST / AGENTLOG_HTTP_PORT (for `agentlog run`),
AGENTLOG_API_TOKEN (Bearer token the HTTP API requires; needed to listen beyond loopback;
commands send it to a running server), AGENTLOG_ALLOWED_HOSTS (extra Host names the API
answers to, comma-separated), AGENTLOG_MAX_REQUEST_BYTES (largest request body, default 64 MiB)."""


class UsageError(Exception):
    pass


@contextmanager
def _offline(settings: Settings, url: str) -> Iterator[Any]:
    """Kafka with no worker answering: the log and the index, opened here."""
    from agentlog.streams.kafka.offline import OfflineService  # noqa: PLC0415

    print(f"agentlog: no worker answers at {url}; answering from the log and the index "
          "(events a worker has not processed yet are not included)", file=sys.stderr)  # fmt: skip
    lock = DataDirLock(settings)
    if not lock.acquire(timeout=300):
        raise StoreError(f"another agentlog process is using {settings.data_dir}; wait for it to finish")
    try:
        service = OfflineService(settings)
        try:
            yield service
        finally:
            service.close()
    finally:
        lock.release()


def _print_json(value: Any) -> None:
    sys.stdout.write(orjson.dumps(value, default=str, option=orjson.OPT_INDENT_2).decode() + "\n")


@contextmanager
def backend(settings: Settings) -> Iterator[Any]:
    """The running server's API if one holds the data directory, else the stores here."""
    from agentlog.streams.api.client import RemoteService, answers, server_url  # noqa: PLC0415

    url = server_url(settings)
    if settings.distributed:  # the faust worker holds the stores and serves the queries
        url = f"http://{settings.http_host}:{settings.worker_port}"
        if not answers(url, settings.api_token):
            with _offline(settings, url) as service:
                yield service
            return
    if url:
        remote = RemoteService(url, settings.api_token)
        try:
            yield remote
        finally:
            remote.close()
        return
    lock = DataDirLock(settings)
    if not lock.acquire(timeout=300):
        url = server_url(settings)
        if not url:
            raise StoreError(f"another agentlog process is using {settings.data_dir}; wait for it to finish")
        yield RemoteService(url, settings.api_token)
        return
    from agentlog.streams.embedded.service import EmbeddedService  # noqa: PLC0415

    try:
        with _progress("rebuilding from the topic") as update:  # only if a store needs it
            service = EmbeddedService(settings, update)
    except BaseException:
        lock.release()
        raise
    try:
        yield service
    finally:
        service.close()
        lock.release()


@contextmanager
def _progress(label: str) -> Iterator[Callable[[int, int], None]]:
    """A progress bar on stderr when it is a terminal (silent otherwise); yields its
    ``update(done, total)``. The bar appears at the first update, so work that turns out
    to be nothing (a data directory with nothing to heal) shows none."""
    if not sys.stderr.isatty():
        yield lambda _d, _t: None
        return
    from rich.progress import Progress  # noqa: PLC0415

    with ExitStack() as stack:
        shown: list[tuple[Progress, Any]] = []

        def update(done: int, total: int) -> None:
            if not shown:
                bar = stack.enter_context(Progress(transient=True))
                shown.append((bar, bar.add_task(label, total=total or None)))
            bar, task = shown[0]
            bar.update(task, completed=done, total=total or None)

        yield update


# -- commands -------------------------------------------------------------------------


def _warn(warnings: list[str]) -> None:
    """Why an answer may be stale (a store is failing), on stderr: stdout stays the answer."""
    for warning in warnings:
        print(f"agentlog: warning: the answer may be stale: {warning}", file=sys.stderr)


def cmd_publish(args: argparse.Namespace, settings: Settings) -> int:
    data = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    from agentlog.streams.api.client import RemoteService, server_url  # noqa: PLC0415

    url = server_url(settings)
    if settings.distributed:
        from agentlog.streams.kafka.publisher import KafkaPublisher  # noqa: PLC0415

        kafka = KafkaPublisher(settings)
        report = kafka.publish(data).as_dict()
        kafka.close()
    elif url:
        report = RemoteService(url, settings.api_token).publish(data)
    else:  # the topic is a SQLite file: appending needs no lock on the other stores
        from agentlog.streams.embedded.publisher import LocalPublisher  # noqa: PLC0415

        publisher = LocalPublisher(settings)
        report = publisher.publish(data).as_dict()
        publisher.close()
    if args.json:
        _print_json(report)
    else:
        print(f"accepted {report['accepted']}, rejected {report['rejected']}")
        for r in report["rejections"][:10]:
            print(f"  record {r['record']}: {r['reason']}", file=sys.stderr)
    # Some rejected is a normal day (they are dead-lettered); none accepted is a mistake.
    return 1 if report["rejected"] and not report["accepted"] else 0


def cmd_run(args: argparse.Namespace, settings: Settings) -> int:
    if settings.distributed and not args.until_idle:
        from agentlog.streams.kafka.app import run_worker  # noqa: PLC0415

        return run_worker(settings, "info" if args.verbose else "warn")
    if args.until_idle:
        with _progress("processing") as update:
            if settings.distributed:  # waits for the workers (or one started for it)
                from agentlog.streams.kafka.idle import run_until_idle_on_kafka  # noqa: PLC0415

                result = run_until_idle_on_kafka(settings, update)
            else:
                with backend(settings) as svc:
                    result = svc.catch_up(update)
        if args.json:
            _print_json(result)
        else:
            print(f"processed {result.get('processed', 0)} records; all sinks flushed")
        return 0
    from agentlog.streams.embedded.server import serve  # noqa: PLC0415

    return serve(settings, args.host or settings.http_host, args.port or settings.http_port)


def cmd_state(args: argparse.Namespace, settings: Settings) -> int:
    with backend(settings) as svc:
        state = svc.state(args.thread)
    _warn(state.get("warnings", []))
    if args.json:
        _print_json(state)
        return 0
    print(f"thread {state['thread_id']}  project {state['project']}  window {state['window_id']}  "
          f"events {state['event_count']}")  # fmt: skip
    print(f"goal: {(state['goal'] or {}).get('text', '-')}")
    for c in state["constraints"]:
        print(f"constraint: {c['text']}")
    for name in ("plan", "tasks"):
        for item in state[name]:
            ident = item.get("step_id") or item.get("task_id")
            print(f"{name[:-1] if name == 'tasks' else 'step'} {ident} [{item['status']}] {item.get('text') or ''}")
    for f in state["files"]:
        print(f"file {f['path']} {f['change']}{'' if f['confirmed'] else ' (unconfirmed)'}")
    for a in state["pending_approvals"]:
        print(f"pending approval {a['approval_id']}: {a['action']}")
    for a in state["agents"]:
        print(f"agent {a['agent_id']} {a['status']}")
    for c in state["pending_calls"]:
        print(f"pending call {c['call_id']} {c['tool_name']}")
    for fl in state["failures"][-5:]:
        print(f"failure {fl['event_id']} {fl.get('tool_name') or fl['kind']} {fl.get('status') or ''} {fl['message']}")
    return 0


THREAD_COLUMNS = (("thread", "thread_id"), ("project", "project"), ("events", "event_count"),
                  ("last activity", "last_activity"), ("open calls", "open_calls"), ("failures", "failures"),
                  ("status", "status"))  # fmt: skip


def cmd_threads(args: argparse.Namespace, settings: Settings) -> int:
    with backend(settings) as svc:
        result = svc.thread_list(project=args.project, status=args.status, limit=args.limit)
    _warn(result.get("warnings", []))
    if args.json:
        _print_json(result)
        return 0
    rows = [tuple("-" if r[key] is None else r[key] for _name, key in THREAD_COLUMNS)
            for r in result["threads"]]  # fmt: skip
    print(format_rows(QueryResult([name for name, _key in THREAD_COLUMNS], rows), "table"))
    if result["total"] > len(rows):
        print(f"({result['total']} threads match; --limit shows more)")
    return 0


def cmd_context(args: argparse.Namespace, settings: Settings) -> int:
    with backend(settings) as svc:
        result = svc.context(args.thread, args.budget, args.query, args.model)
    if args.json:
        _print_json(result)
        return 0
    meta = result["meta"]
    print(f"{meta['used_tokens']}/{meta['budget']} tokens ({meta['encoding']})")
    for m in result["messages"]:
        content = m.get("content") or json.dumps(m.get("tool_calls"))
        print(f"--- {m['role']}{' ' + m['tool_call_id'] if m.get('tool_call_id') else ''}\n{content}")
    return 0


def cmd_search(args: argparse.Namespace, settings: Settings) -> int:
    with backend(settings) as svc:
        result = svc.search(args.query, thread_id=args.thread, kind=args.kind, tool_name=args.tool,
                            window_id=args.window, project=args.project, after=args.after,
                            since_ms=time_bound_ms(args.since), until_ms=time_bound_ms(args.until),
                            limit=args.limit)  # fmt: skip
    _warn(result.get("warnings", []))
    if args.json:
        _print_json(result)
        return 0
    for h in result["hits"]:
        print(f"{h['score']:7.3f} [{h['source']}] {h['event_id']} {h['thread_id']} {h['kind']} "
              f"{h['tool_name']} {h['ts']}\n        {h['snippet']}")  # fmt: skip
    if not result["hits"]:
        print("no hits")
    return 0


def cmd_read(args: argparse.Namespace, settings: Settings) -> int:
    with backend(settings) as svc:
        result = svc.read(args.event_id)
    if args.json:
        _print_json(result)
    else:
        print(f"# source: {result['source']}")
        print(orjson.dumps(result["event"], option=orjson.OPT_INDENT_2).decode())
    return 0


def format_rows(result: QueryResult, fmt: str) -> str:
    if fmt == "json":
        return orjson.dumps([dict(zip(result.columns, r)) for r in result.rows], default=str,
                            option=orjson.OPT_INDENT_2).decode()  # fmt: skip
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf)
        writer.writerow(result.columns)
        writer.writerows(result.rows)
        return buf.getvalue().rstrip("\n")
    cells = [[str(c) for c in result.columns]] + [["" if v is None else str(v) for v in r] for r in result.rows]
    widths = [min(60, max(len(row[i]) for row in cells)) for i in range(len(result.columns))]
    lines = [" | ".join(v[:60].ljust(w) for v, w in zip(row, widths)) for row in cells]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines) + f"\n({len(result.rows)} rows)"


def cmd_sql(args: argparse.Namespace, settings: Settings) -> int:
    with backend(settings) as svc:
        result = svc.sql(args.query)
    print(format_rows(result, "json" if args.json else args.format))
    return 0


def cmd_rebuild(args: argparse.Namespace, settings: Settings) -> int:
    with _progress("rebuilding") as update:
        if settings.distributed:  # the workers are stopped: the stores are opened here
            from agentlog.streams.kafka.rebuild import rebuild_on_kafka  # noqa: PLC0415 - needs faust

            result = rebuild_on_kafka(settings, update)
        else:
            with backend(settings) as svc:
                result = svc.rebuild(update)
    if args.json:
        _print_json(result)
    else:
        print(f"rebuilt {result['threads']} threads from {result['events']} logged events")
    return 0


def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    from agentlog.streams.cli.demo_runner import run_demo  # noqa: PLC0415

    if args.data_dir:
        data_dir = Path(args.data_dir)
    else:
        data_dir = Path(tempfile.mkdtemp(prefix="agentlog-demo-"))
    return run_demo(Settings(**{**settings.__dict__, "data_dir": data_dir}), as_json=args.json)


def cmd_memory(args: argparse.Namespace, settings: Settings) -> int:
    from agentlog.streams.memory.jobs import Memory, extract_parallel  # noqa: PLC0415

    if args.action == "extract":
        reports = extract_parallel(settings, args.workers, args.lease_seconds)
        result: Any = {
            "extracted_threads": sorted(t for r in reports for t in r["extracted_threads"]),
            "candidates": sum(r["candidates"] for r in reports),
            "failed": {t: e for r in reports for t, e in r["failed"].items()},
            "refused": sum(r["refused"] for r in reports),  # out-of-scope facts and revokes
            "workers": len(reports),
        }
    else:
        job = Memory(settings)
        try:
            if args.action == "consolidate":
                result = job.consolidate(args.owner, args.lease_seconds, args.high_risk or None,
                                         args.pause_before_publish)  # fmt: skip
            elif args.action == "show":
                result = job.show(args.project, args.key)
            elif args.action == "revoke":
                if not args.event_id:
                    raise UsageError("memory revoke needs the EVENT_ID of the source to withdraw")
                try:
                    result = job.revoke(args.event_id, args.reason)
                except LookupError as error:
                    raise NotFound(str(error)) from error
            else:
                result = job.status()
        finally:
            job.close()
    if args.json:
        _print_json(result)
    elif args.action == "show":
        print(f"memory view version {result['version']}")
        for f in result["facts"]:
            flags = f" [{', '.join(f['flags'])}]" if f["flags"] else ""
            print(f"{f['project']}/{f['key']} = {f['value']!r} ({f['status']}, {f['evidence_type']}, "
                  f"source {f['source_event_id']}){flags}{' — ' + f['note'] if f['note'] else ''}")  # fmt: skip
    else:
        print(orjson.dumps(result, default=str, option=orjson.OPT_INDENT_2).decode())
    return 0


def cmd_schema(args: argparse.Namespace, settings: Settings) -> int:
    from agentlog.schemas.event_docs import reference  # noqa: PLC0415 - only this command needs them
    from agentlog.schemas.event_schema import payload_schema, schema_text
    from agentlog.schemas.events import KINDS

    if args.markdown:
        sys.stdout.write(reference())
    elif args.kind is None:
        sys.stdout.write(schema_text())
    elif args.kind in KINDS:
        sys.stdout.write(schema_text(payload_schema(args.kind)))
    else:
        raise UsageError(f"unknown kind {args.kind!r}; the kinds: {', '.join(KINDS)}")
    return 0


def cmd_bench(args: argparse.Namespace, settings: Settings) -> int:
    from agentlog.bench.run import run_bench  # noqa: PLC0415

    return run_bench(args)


# -- parser ---------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentlog",
        description="Agent events in; working state, context, search and SQL out.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log what happens (per thread and event)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, fn: Callable[..., int], help_text: str, json_flag: bool = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        if json_flag:
            p.add_argument("--json", action="store_true", help="machine-readable output")
        p.set_defaults(fn=fn)
        return p

    p = add("demo", cmd_demo, "run the whole pipeline on a built-in sample workload and show the results")
    p.add_argument("--data-dir", help="keep the demo's data here (default: a fresh temporary directory)")
    p = add("run", cmd_run, "run processors and sinks and serve the HTTP API (--until-idle: drain and exit)")
    p.add_argument("--until-idle", action="store_true", help="process everything pending, flush every sink, exit")
    p.add_argument("--host", help="HTTP host (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="HTTP port (default 8787)")
    p = add("publish", cmd_publish, "publish JSON-lines events from FILE or - (stdin); reports accepted and rejected. "
            "Exit status 0 if any record was accepted (rejected ones are dead-lettered with their reason), "
            "1 if every record was rejected")
    p.add_argument("file", metavar="FILE|-")
    p = add("state", cmd_state, "show a thread's working state")
    p.add_argument("thread", metavar="THREAD")
    p = add("threads", cmd_threads, "list the threads, newest activity first: project, events, last activity "
            "(newest event time), open calls (tool calls without a result yet), recent failures and status. "
            "Status: waiting_approval (an approval request has no decision), idle (no event for 30 minutes), "
            "failing (a failure within 5 minutes of the last activity), else active")
    p.add_argument("--project", help="only this project's threads")
    p.add_argument("--status", choices=THREAD_STATUSES, help="only threads with this status")
    p.add_argument("--limit", type=int, default=DEFAULT_THREAD_LIMIT,
                   help=f"at most this many threads (1..{MAX_THREAD_LIMIT}, default {DEFAULT_THREAD_LIMIT})")
    p = add("context", cmd_context, "assemble a thread's context under a token budget")
    p.add_argument("thread", metavar="THREAD")
    p.add_argument("--budget", type=int, required=True, help="token budget (o200k_base tokens)")
    p.add_argument("--query", help="also recall evidence matching this query")
    p.add_argument("--model", help="model family, to choose the tokenizer (default o200k_base)")
    p = add("search", cmd_search, "keyword search over events; hits say whether they came from the index or active state")
    p.add_argument("query", metavar="QUERY")
    p.add_argument("--thread", help="only this thread (and see its not-yet-indexed events)")
    p.add_argument("--kind", help="only this event kind")
    p.add_argument("--tool", help="only this tool name")
    p.add_argument("--window", help="only this window")
    p.add_argument("--project", help="only this project")
    p.add_argument("--after", metavar="EVENT_ID", help="read-your-writes: see this event's thread up to it")
    p.add_argument("--since", metavar="TIME", help="only events at or after this event time "
                   "(RFC 3339, e.g. 2026-11-30T10:00:00Z, or epoch milliseconds)")
    p.add_argument("--until", metavar="TIME", help="only events at or before this event time (same forms)")
    p.add_argument("--limit", type=int, default=10, help="at most this many hits (default 10)")
    p = add("read", cmd_read, "the original event, by id, from the log")
    p.add_argument("event_id", metavar="EVENT_ID")
    p = add("sql", cmd_sql, "read-only SQL over the log (tables: events, tool_calls, rejected_events)")
    p.add_argument("query", metavar="SQL")
    p.add_argument("--format", choices=["table", "json", "csv"], default="table")
    p = add("memory", cmd_memory, "long-term memory: extract, consolidate, show, revoke, status")
    p.add_argument("action", choices=["extract", "consolidate", "show", "revoke", "status"])
    p.add_argument("event_id", nargs="?", metavar="EVENT_ID", help="for revoke: the source event to withdraw")
    p.add_argument("--reason", help="for revoke: why the source is withdrawn")
    p.add_argument("--project", help="for show: only this project's facts")
    p.add_argument("--key", help="for show: only this key")
    p.add_argument("--workers", type=int, default=1, help="for extract: parallel worker processes")
    p.add_argument("--owner", help="for consolidate: the lease owner name (default: unique per process)")
    p.add_argument("--lease-seconds", type=float, default=60.0, help="lease length (default 60)")
    p.add_argument("--high-risk", action="append", metavar="KEY_GLOB",
                   help="for consolidate: keys whose fallback value becomes 'unknown, needs check'")
    p.add_argument("--pause-before-publish", type=float, default=0.0, help=argparse.SUPPRESS)
    add("rebuild", cmd_rebuild, "replay the log into state, pairs and index (with a progress bar); "
        "on Kafka, stop the workers first: it writes the snapshots the workers restore")
    p = add("schema", cmd_schema, "print the JSON Schema of an event (draft 2020-12): the envelope and "
            "every kind's payload, chosen by `kind`; the same as schemas/event.schema.json. "
            "docs/events.md explains each field", json_flag=False)
    p.add_argument("--kind", metavar="KIND", help="only this kind's payload schema (e.g. tool_call)")
    p.add_argument("--markdown", action="store_true", help="the field reference of docs/events.md instead")
    p = add("bench", cmd_bench, "measure throughput and latency percentiles of the hot paths", json_flag=False)
    p.add_argument("--events", type=int, default=200_000, help="events for the pipeline benchmark")
    p.add_argument("--threads", type=int, default=1_000, help="threads they spread over")
    p.add_argument("--processor-events", type=int, default=200_000, help="events for the processors-only run")
    p.add_argument("--memory-facts", type=int, default=100_000, help="facts for the memory benchmark")
    p.add_argument("--kafka-events", type=int, default=100_000, help="events for the Kafka benchmark")
    p.add_argument("--only", choices=["all", "pipeline", "memory", "context", "kafka", "rebuild"], default="all",
                   help="run one section: pipeline (processors, whole pipeline, state/read), memory, "
                        "context (assembly vs thread length, naive baseline, search, retention table), "
                        "kafka (faust worker vs a bare kafka-python loop, index lag at 2k events/s; needs "
                        "eval \"$(infra/up)\"; part of 'all' when Kafka is configured), rebuild (`agentlog rebuild` "
                        "of an --events log, without a server and through one; not part of 'all')")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s %(message)s", stream=sys.stderr,
    )  # fmt: skip
    tune_gc()
    settings: Settings | None = None
    try:
        settings = Settings.from_env()
        code = int(args.fn(args, settings))
        sys.stdout.flush()  # here, so a closed pipe is seen below rather than at exit
        return code
    except NotFound as error:
        print(f"agentlog: not found: {error}", file=sys.stderr)
        return 1
    except BudgetTooSmall as error:
        print(f"agentlog: {error}", file=sys.stderr)
        return 2
    except StaleToken as error:
        print(f"agentlog: refused: {error}", file=sys.stderr)
        return 3
    except BrokenPipeError:
        # The reader went away (`agentlog sql ... | head`): nothing more to say. Python's
        # documented recipe: point stdout at devnull so the exit flush cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except sqlite3.DatabaseError as error:  # a store went bad while in use
        from agentlog.streams.embedded.datadir import diagnose  # noqa: PLC0415

        print(f"agentlog: error: {diagnose(settings, error) if settings else error}", file=sys.stderr)
        return 1
    except (StoreError, Unavailable, UsageError, OSError, ValueError) as error:
        print(f"agentlog: error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
