"""One function per ``agentlog`` command: read the arguments, ask the deployment's
``Service`` (``backend``), show the answer (``render``). Exit status: 0 done, 1 failed."""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from agentlog.schemas.event_docs import reference
from agentlog.schemas.event_schema import payload_schema, schema_text
from agentlog.schemas.events import KINDS
from agentlog.schemas.search import time_bound_ms
from agentlog.streams.api.service import NotFound, Service
from agentlog.streams.cli import render
from agentlog.streams.cli.backend import backend, publish, reading
from agentlog.streams.cli.demo_runner import run_demo
from agentlog.streams.config import Settings
from agentlog.streams.memory.jobs import Memory, extract_parallel


class UsageError(Exception):
    pass


def cmd_publish(args: argparse.Namespace, settings: Settings) -> int:
    data = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    if not args.verbose:  # the report below says each rejection; the log's line is for a server's log
        logging.getLogger("agentlog.publish").setLevel(logging.ERROR)
    report = publish(settings, data)
    render.show(report, args.json, render.print_publish)
    # Some rejected is a normal day (they are dead-lettered); none accepted is a mistake.
    return 1 if report["rejected"] and not report["accepted"] else 0


def cmd_run(args: argparse.Namespace, settings: Settings) -> int:
    # The deferred imports here load what only this command needs: faust and the Kafka
    # client (a worker, a wait for the workers), Starlette and uvicorn (the server).
    role = getattr(args, "role", "all")
    if role != "all" and (args.until_idle or not settings.distributed):
        print("agentlog: --role is for the Kafka deployment's workers (AGENTLOG_KAFKA_BOOTSTRAP), "
              "without --until-idle", file=sys.stderr)  # fmt: skip
        return 2
    if settings.distributed and not args.until_idle:
        from agentlog.streams.kafka.app import run_worker  # noqa: PLC0415

        return run_worker(settings, "info" if args.verbose else "warn", role)
    if args.until_idle:
        with render.progress("processing") as update:
            if settings.distributed:  # waits for the workers (or one started for it)
                from agentlog.streams.kafka.idle import run_until_idle_on_kafka  # noqa: PLC0415

                result = run_until_idle_on_kafka(settings, update)
            else:
                with backend(settings) as svc:
                    result = svc.catch_up(update)
        if args.json:
            render.print_json(result)
        else:
            rejected = result.get("rejected", 0)
            of_them = f" ({rejected:,} rejected, logged in rejected_events)" if rejected else ""
            print(f"processed {render.counted(result.get('processed', 0), 'record')}{of_them}; all sinks flushed")
        return 0
    from agentlog.streams.embedded.server import serve  # noqa: PLC0415

    return serve(settings, args.host or settings.http_host, args.port or settings.http_port)


def _answer(args: argparse.Namespace, settings: Settings, ask: Callable[[Service], Any],
            as_text: Callable[[Any], None]) -> int:  # fmt: skip
    """A query command: ``ask`` the deployment's service, then show the answer."""
    with reading(settings) as settings, backend(settings) as svc:
        result = ask(svc)
    render.warn(result.get("warnings", []))  # on stderr: a failing store, a query of no word
    render.show(result, args.json, as_text)
    return 0


def cmd_state(args: argparse.Namespace, settings: Settings) -> int:
    return _answer(args, settings, lambda svc: svc.state(args.thread), render.print_state)


def cmd_threads(args: argparse.Namespace, settings: Settings) -> int:
    ask = lambda svc: svc.thread_list(project=args.project, status=args.status, limit=args.limit)  # noqa: E731
    return _answer(args, settings, ask, render.print_threads)


def cmd_context(args: argparse.Namespace, settings: Settings) -> int:
    ask = lambda svc: svc.context(args.thread, args.budget, args.query, args.model, args.format)  # noqa: E731
    return _answer(args, settings, ask, render.print_context if args.format == "generic" else render.print_payload)


def cmd_search(args: argparse.Namespace, settings: Settings) -> int:
    def ask(svc: Service) -> dict[str, Any]:
        return svc.search(args.query, thread_id=args.thread, kind=args.kind, tool_name=args.tool,
                          window_id=args.window, project=args.project, after=args.after,
                          since_ms=time_bound_ms(args.since), until_ms=time_bound_ms(args.until),
                          limit=args.limit)  # fmt: skip

    return _answer(args, settings, ask, render.print_search)


def cmd_read(args: argparse.Namespace, settings: Settings) -> int:
    return _answer(args, settings, lambda svc: svc.read(args.event_id), render.print_read)


def cmd_sql(args: argparse.Namespace, settings: Settings) -> int:
    with reading(settings) as settings, backend(settings) as svc:
        result = svc.sql(args.query)
    print(render.format_rows(result, "json" if args.json else args.format))
    return 0


def cmd_rebuild(args: argparse.Namespace, settings: Settings) -> int:
    with render.progress("rebuilding") as update:
        if settings.distributed:  # the workers are stopped: the stores are opened here
            from agentlog.streams.kafka.rebuild import rebuild_on_kafka  # noqa: PLC0415 - loads faust

            result = rebuild_on_kafka(settings, update)
        else:
            with backend(settings) as svc:
                result = svc.rebuild(update)
    if args.json:
        render.print_json(result)
    else:
        print(f"rebuilt {result['threads']} threads from {result['events']} logged events")
    return 0


def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    if args.data_dir:
        data_dir = Path(args.data_dir)
        # a second run would report its own events as duplicates and the old rejections as new
        if data_dir.exists() and any(data_dir.iterdir()):
            raise UsageError(f"the demo writes a fresh data directory, and {data_dir} is not empty: "
                             "remove it or name another (its data stays usable with AGENTLOG_DATA_DIR)")
    else:
        data_dir = Path(tempfile.mkdtemp(prefix="agentlog-demo-"))
    return run_demo(Settings(**{**settings.__dict__, "data_dir": data_dir}), as_json=args.json)


_MEMORY_OPTIONS = {
    "event_id": ("EVENT_ID", {"revoke"}, None), "reason": ("--reason", {"revoke"}, None),
    "project": ("--project", {"show"}, None), "key": ("--key", {"show"}, None),
    "workers": ("--workers", {"extract"}, 1), "owner": ("--owner", {"consolidate"}, None),
    "lease_seconds": ("--lease-seconds", {"extract", "consolidate"}, 60.0),
    "high_risk": ("--high-risk", {"consolidate"}, None),
    "pause_before_publish": ("--pause-before-publish", {"consolidate"}, 0.0),
}  # fmt: skip
"""Each option of ``agentlog memory``: its name, the actions that take it, its default."""


def _check_memory_options(args: argparse.Namespace) -> None:
    """An option the action does not take is refused, not ignored: ``memory show --reason x``
    or ``memory status --workers 8`` would otherwise look as if they did something."""
    for attr, (name, actions, default) in _MEMORY_OPTIONS.items():
        if args.action not in actions and getattr(args, attr, default) != default:
            takes = " and ".join(f"`memory {a}`" for a in sorted(actions))
            raise UsageError(f"{name} is for {takes}, not `memory {args.action}`")


def cmd_memory(args: argparse.Namespace, settings: Settings) -> int:
    _check_memory_options(args)
    if args.action == "extract":
        reports = extract_parallel(settings, args.workers, args.lease_seconds)
        result: Any = {
            "extracted_threads": sorted(t for r in reports for t in r["extracted_threads"]),
            "candidates": sum(r["candidates"] for r in reports),
            "failed": {t: e for r in reports for t, e in r["failed"].items()},
            "refused": sum(r["refused"] for r in reports),  # out-of-scope facts and revokes
            "llm_rejected": sum(r["llm_rejected"] for r in reports),  # proposals their sources did not back
            "workers": len(reports),
        }
    else:
        with reading(settings) if args.action in ("show", "status") else nullcontext(settings) as settings:
            result = _memory_job(args, settings)
    render.show(result, args.json, lambda r: render.print_memory(args.action, r))
    return 0


def _memory_job(args: argparse.Namespace, settings: Settings) -> Any:
    """``agentlog memory consolidate | show | revoke | status``: one job, closed after."""
    job = Memory(settings)
    try:
        if args.action == "consolidate":
            return job.consolidate(args.owner, args.lease_seconds, args.high_risk or None, args.pause_before_publish)
        if args.action == "show":
            return job.show(args.project, args.key)
        if args.action == "revoke":
            if not args.event_id:
                raise UsageError("memory revoke needs the EVENT_ID of the source to withdraw")
            try:
                return job.revoke(args.event_id, args.reason)
            except LookupError as error:
                raise NotFound(str(error)) from error
        return job.status()
    finally:
        job.close()


def cmd_schema(args: argparse.Namespace, settings: Settings) -> int:
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
    # Deferred: the benchmarks are development tools, out of every other command's path.
    from agentlog.bench.run import run_bench  # noqa: PLC0415

    return run_bench(args)


__all__ = [
    "UsageError", "cmd_bench", "cmd_context", "cmd_demo", "cmd_memory", "cmd_publish", "cmd_read",
    "cmd_rebuild", "cmd_run", "cmd_schema", "cmd_search", "cmd_sql", "cmd_state", "cmd_threads",
]  # fmt: skip
