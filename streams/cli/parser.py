"""The ``agentlog`` command line: its commands, their arguments and help texts."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TypeVar

from agentlog import __version__
from agentlog.schemas.events import KINDS
from agentlog.schemas.requests import CONTEXT_FORMATS, DEFAULT_THREAD_LIMIT, ID_RE, MAX_LEASE_SECONDS, MAX_THREAD_LIMIT
from agentlog.schemas.state import THREAD_STATUSES
from agentlog.streams.cli.commands import (
    cmd_bench, cmd_context, cmd_demo, cmd_memory, cmd_publish, cmd_read, cmd_rebuild, cmd_run, cmd_schema,
    cmd_search, cmd_sql, cmd_state, cmd_threads,
)  # fmt: skip

EPILOG = """Configuration (environment): AGENTLOG_DATA_DIR (default ./.agentlog),
AGENTLOG_CLICKHOUSE_URL (a ClickHouse server; unset = chDB in the data directory),
AGENTLOG_GRACE_SECONDS, AGENTLOG_CALL_TIMEOUT_SECONDS, AGENTLOG_MAX_EVENT_BYTES,
AGENTLOG_HTTP_HOST / AGENTLOG_HTTP_PORT (for `agentlog run`),
AGENTLOG_API_TOKEN (Bearer token the HTTP API requires; needed to listen beyond loopback;
commands send it to a running server), AGENTLOG_ALLOWED_HOSTS (extra Host names the API
answers to, comma-separated), AGENTLOG_MAX_REQUEST_BYTES (largest request body, default 64 MiB)."""


T = TypeVar("T")


def _lengths(text: str) -> tuple[int, ...]:
    """``200,2000`` -> (200, 2000): positive thread lengths."""
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text!r}") from error
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"thread lengths must be positive numbers: {text!r}")
    return values


def _parsed(text: str, convert: Callable[[str], T], noun: str) -> T:
    """``convert(text)``; what cannot be converted is a usage error naming ``noun``."""
    try:
        return convert(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"not {noun}: {text!r}") from error


def _positive(text: str) -> int:
    """A count of at least 1."""
    value = _parsed(text, int, "a number")
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


def _thread_limit(text: str) -> int:
    """``threads --limit``: what the HTTP route takes, refused here in the option's words."""
    value = _parsed(text, int, "a number")
    if not 1 <= value <= MAX_THREAD_LIMIT:
        raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_THREAD_LIMIT}: {text!r}")
    return value


MAX_WORKERS = 64
"""Extraction processes one command may start: each is a whole interpreter with its stores."""


def _workers(text: str) -> int:
    value = _positive(text)
    if value > MAX_WORKERS:
        raise argparse.ArgumentTypeError(f"at most {MAX_WORKERS} worker processes: {text!r}")
    return value


def _lease_seconds(text: str) -> float:
    """A lease length as the HTTP API takes it: above 0, at most a day."""
    value = _parsed(text, float, "a number of seconds")
    if not 0 < value <= MAX_LEASE_SECONDS:  # NaN fails this too
        raise argparse.ArgumentTypeError(f"must be above 0 and at most {MAX_LEASE_SECONDS:,.0f} seconds: {text!r}")
    return value


def _id(text: str) -> str:
    """A thread or event id as the contract writes one: a usage error otherwise, not an
    answer that no such thread has events."""
    if ID_RE.fullmatch(text) is None:
        raise argparse.ArgumentTypeError(f"not an id (1-128 of A-Z a-z 0-9 . _ : -): {text!r}")
    return text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentlog",
        description="Agent events in; working state, context, search and SQL out.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log what happens on stderr: each applied event and ignored duplicate by thread and event id")
    parser.add_argument("--version", action="version", version=f"agentlog {__version__}",
                        help="print the installed version and exit")  # what a bug report needs first
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, fn: Callable[..., int], help_text: str, json_flag: bool = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        if json_flag:
            p.add_argument("--json", action="store_true", help="machine-readable output")
        p.set_defaults(fn=fn)
        return p

    p = add("demo", cmd_demo, "run the whole pipeline on a built-in sample workload and show the results")
    p.add_argument("--data-dir", help="keep the demo's data here, a new or empty directory (default: a fresh temporary one)")
    p = add("run", cmd_run, "run processors and sinks and serve the HTTP API (--until-idle: drain and exit)")
    p.add_argument("--until-idle", action="store_true", help="process everything pending, flush every sink, exit")
    p.add_argument("--host", help="HTTP host (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="HTTP port (default 8787)")
    p.add_argument("--role", choices=["all", "processor", "sinks"], default="all",
                   help="Kafka only: all (default) runs processor and sinks in one worker; processor runs the "
                        "processor alone and sinks the log and index writers alone, as separate processes "
                        "scaled apart (each kind shares the partitions among its processes)")
    p = add("publish", cmd_publish, "publish JSON-lines events from FILE or - (stdin); reports accepted and rejected. "
            "Exit status 1 if every record was rejected (rejected ones are dead-lettered with their reason), "
            "else 0, also when the input held no record")
    p.add_argument("file", metavar="FILE|-",
                   help="a file of JSON lines (or one JSON array or object); - reads stdin")
    p = add("state", cmd_state, "show a thread's working state")
    p.add_argument("thread", metavar="THREAD", type=_id, help="the thread id (`agentlog threads` lists them)")
    p = add("threads", cmd_threads, "list the threads, newest activity first: project, events, last activity "
            "(newest event time), open calls (tool calls without a result yet), recent failures and status. "
            "Status: waiting_approval (an approval request has no decision), idle (no event for 30 minutes), "
            "failing (a failure within 5 minutes of the last activity), else active")
    p.add_argument("--project", help="only this project's threads")
    p.add_argument("--status", choices=THREAD_STATUSES, help="only threads with this status")
    p.add_argument("--limit", type=_thread_limit, default=DEFAULT_THREAD_LIMIT,
                   help=f"at most this many threads (1..{MAX_THREAD_LIMIT}, default {DEFAULT_THREAD_LIMIT})")
    p = add("context", cmd_context, "assemble a thread's context under a token budget")
    p.add_argument("thread", metavar="THREAD", type=_id, help="the thread id (`agentlog threads` lists them)")
    p.add_argument("--budget", type=int, required=True, help="token budget (o200k_base tokens)")
    p.add_argument("--query", help="recall evidence matching this query (default: the latest user message and the goal)")
    p.add_argument("--model", help="model family, to choose the tokenizer (default o200k_base)")
    p.add_argument("--format", choices=CONTEXT_FORMATS, default="generic",
                   help="openai: print the Chat Completions request's messages; anthropic: the Messages "
                        "request's system and messages (as JSON, ready to send; --json: the whole answer). "
                        "Default generic: the context as agentlog assembles it")
    p = add("search", cmd_search, "keyword search over events; hits say whether they came from the index or active state")
    p.add_argument("query", metavar="QUERY",
                   help="words to find (BM25); an exact identifier such as an error name matches too")
    p.add_argument("--thread", help="only this thread (and see its not-yet-indexed events)")
    p.add_argument("--kind", choices=KINDS, metavar="KIND", help=f"only this event kind ({', '.join(KINDS)})")
    p.add_argument("--tool", help="only this tool name")
    p.add_argument("--window", help="only this window")
    p.add_argument("--project", help="only this project")
    p.add_argument("--after", metavar="EVENT_ID", type=_id, help="read-your-writes: see this event's thread up to it")
    p.add_argument("--since", metavar="TIME", help="only events at or after this event time "
                   "(RFC 3339, e.g. 2026-11-30T10:00:00Z, or epoch milliseconds)")
    p.add_argument("--until", metavar="TIME", help="only events at or before this event time (same forms)")
    p.add_argument("--limit", type=int, default=10, help="at most this many hits (default 10)")
    p = add("read", cmd_read, "the original event, by id, from the log")
    p.add_argument("event_id", metavar="EVENT_ID", type=_id, help="the event_id as published (search hits name it)")
    p = add("sql", cmd_sql, "read-only SQL over the log (tables: events, tool_calls, rejected_events)")
    p.add_argument("query", metavar="SQL", help="one SELECT (or DESCRIBE), quoted as one argument")
    p.add_argument("--format", choices=["table", "json", "csv"], default="table",
                   help="table (default), json (a list of row objects, as --json) or csv with a header")
    p = add("memory", cmd_memory, "long-term memory: extract, consolidate, show, revoke, status")
    p.add_argument("action", choices=["extract", "consolidate", "show", "revoke", "status"],
                   help="extract candidates from new events, consolidate them into the published view, "
                        "show the view, revoke a source event, or status of the jobs")
    p.add_argument("event_id", nargs="?", metavar="EVENT_ID", type=_id, help="for revoke: the source event to withdraw")
    p.add_argument("--reason", help="for revoke: why the source is withdrawn")
    p.add_argument("--project", help="for show: only this project's facts")
    p.add_argument("--key", help="for show: only this key")
    p.add_argument("--workers", type=_workers, default=1,
                   help=f"for extract: parallel worker processes (1 to {MAX_WORKERS}, default 1)")
    p.add_argument("--owner", help="for consolidate: the lease owner name (default: unique per process)")
    p.add_argument("--lease-seconds", type=_lease_seconds, default=60.0,
                   help="for extract and consolidate: lease length in seconds (above 0, at most 86,400; default 60)")
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
    p.add_argument("--memory-sessions", type=int, default=300,
                   help="generated sessions for the memory extraction benchmark (precision and recall)")
    p.add_argument("--kafka-events", type=int, default=100_000, help="events for the Kafka benchmark")
    p.add_argument("--client-events", type=int, default=30_000, help="events for the client benchmark")
    p.add_argument("--step-lengths", type=_lengths, default=(200, 2_000, 20_000), metavar="N,N,...",
                   help="thread lengths of the step benchmark (default 200,2000,20000)")
    p.add_argument("--steps", type=_positive, default=None,
                   help="measured steps per series of the step benchmark (default 1,000)")
    p.add_argument("--in-process-only", action="store_true",
                   help="with --only step: only the in-process series (no server over HTTP, no LangGraph)")
    p.add_argument("--json", action="store_true", help="with --only fidelity or memory: its figures as one JSON object")
    p.add_argument("--only", choices=["all", "pipeline", "memory", "context", "fidelity", "step", "crowd", "kafka",
                                         "rebuild", "client", "web"],
                   default="all",
                   help="run one section: pipeline (processors, whole pipeline, state/read), memory "
                        "(extraction precision and recall per origin and language over generated en/ja/zh "
                        "sessions with planted facts and decoys, then extraction and consolidation throughput), "
                        "context (assembly vs thread length, naive baseline, search, retention table), "
                        "fidelity (what the assembled messages hold of 20 long generated sessions at 1,500, "
                        "4,000 and 8,000 tokens: retention, leakage, false recall, order, reads that change), "
                        "step (publish one event then state, or then context at 8,000 tokens, in-process "
                        "and over HTTP against `agentlog run`, beside LangGraph when installed: "
                        "pip install 'agentlog[bench]'), "
                        "crowd (a new question's context step in a 2,000-event thread alone and among 10 and "
                        "100 other threads' events in one data directory), "
                        "kafka (faust worker vs a bare kafka-python loop, index lag at 2k events/s; needs "
                        "eval \"$(infra/up)\"; part of 'all' when Kafka is configured), rebuild (`agentlog rebuild` "
                        "of an --events log, without a server and through one; not part of 'all'), client (publishing "
                        "--client-events through agentlog.Client beside writing the same JSON lines yourself, "
                        "per-event cost and ratio)")
    return parser


__all__ = ["EPILOG", "build_parser"]
