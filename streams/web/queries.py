"""What the pages read, all through the ``Service`` the HTTP API holds: its operations for
threads, state, context, search and memory, and SQL through the same sandbox as
``agentlog sql`` for what only the log has (a thread's events, its pairs, the charts).

Text shown to people is redacted like the state (the log keeps the original; its link is
``/events/{id}``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from agentlog.processors.redaction import redact_if
from agentlog.streams.api.service import Service

TIMELINE_PAGE = 500
"""Events on one page of a thread's timeline (newest page first; older pages by link)."""
OUTPUT_CHARS = 1000
"""A tool output is shown up to this many characters; the whole one is a link away."""
WATERFALL_CALLS = 200
"""The waterfall shows a thread's newest calls (each live update sends it again); the rest
are in the timeline and in ``tool_calls``."""


def literal(text: str) -> str:
    """``text`` as a ClickHouse string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def sql_rows(service: Service, statement: str) -> list[dict[str, Any]]:
    result = service.sql(statement)
    return [dict(zip(result.columns, row)) for row in result.rows]


def redacting(service: Service) -> bool:
    settings = getattr(service, "settings", None)
    return bool(getattr(settings, "redact", True))


EVENT_COLUMNS = ("event_id, kind, toString(ts) AS ts, ifNull(turn_id, '') AS turn_id, agent_id, window_id, "
                 "payload, offset")  # fmt: skip


@dataclass(frozen=True)
class Timeline:
    events: list[dict[str, Any]]
    """Oldest first; each with its ``payload`` parsed (and redacted)."""
    older: int | None
    """The offset to ask for the page before this one, if there is one."""


def _parsed(rows: list[dict[str, Any]], redact: bool) -> list[dict[str, Any]]:
    for row in rows:
        try:
            row["payload"] = redact_if(redact, orjson.loads(row["payload"]))
        except orjson.JSONDecodeError:
            row["payload"] = {}
    return rows


def timeline(service: Service, thread_id: str, before: int | None = None, limit: int = TIMELINE_PAGE) -> Timeline:
    """The thread's newest ``limit`` events (before offset ``before``), oldest first."""
    bound = f" AND offset < {int(before)}" if before is not None else ""
    rows = sql_rows(service, f"SELECT {EVENT_COLUMNS} FROM events WHERE thread_id = {literal(thread_id)}{bound} "
                             f"ORDER BY partition DESC, offset DESC LIMIT {int(limit) + 1}")  # fmt: skip
    older = rows[limit - 1]["offset"] if len(rows) > limit else None
    return Timeline(_parsed(rows[:limit][::-1], redacting(service)), older)


def events_after(service: Service, thread_id: str, after: int, limit: int = TIMELINE_PAGE) -> list[dict[str, Any]]:
    """The thread's events past offset ``after`` (what a live page has not shown yet)."""
    rows = sql_rows(service, f"SELECT {EVENT_COLUMNS} FROM events WHERE thread_id = {literal(thread_id)} "
                             f"AND offset > {int(after)} ORDER BY partition, offset LIMIT {int(limit)}")  # fmt: skip
    return _parsed(rows, redacting(service))


def tool_calls(service: Service, thread_id: str, limit: int = WATERFALL_CALLS) -> list[dict[str, Any]]:
    """The thread's newest ``limit`` pair rows (newest row per call), oldest first, each with
    the start of its result's output and ``total``, how many pairs the thread has."""
    t = literal(thread_id)
    rows = sql_rows(service, f"""
        SELECT c.call_id AS call_id, c.orphan_event_id AS orphan_event_id, c.tool_name AS tool_name,
               c.status AS status, c.synthetic AS synthetic, c.latency_ms AS latency_ms,
               c.output_bytes AS output_bytes, c.call_event_id AS call_event_id,
               c.result_event_id AS result_event_id, ifNull(c.turn_id, '') AS turn_id,
               toUnixTimestamp64Milli(c.call_ts) AS call_ms, toUnixTimestamp64Milli(c.result_ts) AS result_ms,
               substringUTF8(JSONExtractString(r.payload, 'output'), 1, {OUTPUT_CHARS}) AS output,
               lengthUTF8(JSONExtractString(r.payload, 'output')) AS output_chars,
               count() OVER () AS total
        FROM tool_calls AS c FINAL
        LEFT JOIN (SELECT event_id, payload FROM events WHERE thread_id = {t} AND kind = 'tool_result') AS r
               ON r.event_id = if(c.result_event_id != '', c.result_event_id, c.orphan_event_id)
        WHERE c.thread_id = {t}
        ORDER BY ifNull(c.call_ts, c.result_ts) DESC, c.call_id DESC LIMIT {int(limit)}""")  # fmt: skip
    rows.reverse()
    redact = redacting(service)
    for row in rows:
        row["output"] = redact_if(redact, row["output"] or "")
    return rows


CHARTS: dict[str, tuple[str, str]] = {
    "events per minute by kind": (
        "SELECT toUnixTimestamp(toStartOfMinute(ts)) AS minute, kind, count() AS events FROM events "
        "GROUP BY minute, kind ORDER BY minute, kind LIMIT 5000", "lines"),
    "tool latency by tool (ms)": (
        "SELECT tool_name, quantile(0.5)(latency_ms) AS p50, quantile(0.99)(latency_ms) AS p99 "
        "FROM tool_calls FINAL WHERE latency_ms IS NOT NULL GROUP BY tool_name ORDER BY tool_name LIMIT 50", "bars"),
    "failure and timeout rate by tool": (
        "SELECT tool_name, countIf(status IN ('error', 'cancelled', 'missing')) / count() AS failure_rate, "
        "countIf(status = 'timeout') / count() AS timeout_rate FROM tool_calls FINAL "
        "WHERE status != 'orphan' GROUP BY tool_name ORDER BY tool_name LIMIT 50", "bars"),
    "rejected events by reason": (
        "SELECT substring(reason, 1, 60) AS reason, count() AS rejected FROM rejected_events "
        "GROUP BY reason ORDER BY rejected DESC LIMIT 20", "bars"),
    "compactions per thread": (
        "SELECT thread_id, count() AS compactions FROM events WHERE kind = 'compaction' "
        "GROUP BY thread_id ORDER BY compactions DESC, thread_id LIMIT 20", "bars"),
}
"""The analytics page's charts: a title, the query (shown beside its chart) and its shape."""


__all__ = ["CHARTS", "OUTPUT_CHARS", "TIMELINE_PAGE", "WATERFALL_CALLS", "Timeline", "events_after", "literal", "sql_rows",
           "timeline", "tool_calls"]  # fmt: skip
