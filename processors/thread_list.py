"""One summary row per thread, for ``agentlog threads`` and ``GET /threads`` (SPEC §7).

Pure: the row is computed from a thread's working state and the time the caller reads
its clock at (``now_ms``), so every deployment answers with the same rows.

A thread's ``status`` follows these rules, first match wins:

- ``waiting_approval``: an approval request has no decision yet (a person must act,
  however old the thread is);
- ``idle``: its last activity is more than ``IDLE_AFTER_MS`` (30 minutes) before now;
- ``failing``: its newest failure (a failed, timed-out, cancelled or missing tool result,
  or an ``error`` event) is at most ``FAILING_WITHIN_MS`` (5 minutes) of event time
  before its last activity;
- ``active``: anything else.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agentlog.processors.redaction import redact_if
from agentlog.processors.truncation import clip_at_word
from agentlog.schemas.events import epoch_ms_of
from agentlog.schemas.requests import DEFAULT_THREAD_LIMIT
from agentlog.schemas.state import THREAD_STATUSES, ThreadStatus, WorkingState

IDLE_AFTER_MS = 30 * 60 * 1000
FAILING_WITHIN_MS = 5 * 60 * 1000
GOAL_CHARS = 80
"""A row's goal is its first ~80 characters (``agentlog state`` shows it whole)."""

ROW_FIELDS = ("thread_id", "project", "event_count", "last_activity", "open_calls", "failures",
              "pending_approvals", "status", "window_id", "goal")  # fmt: skip


def last_activity(state: WorkingState) -> str | None:
    """The newest event time of the thread, as its producer wrote it (RFC 3339)."""
    return state.newest_ts or state.last_ts


def pending_approvals(state: WorkingState) -> int:
    """Requests without a decision (the same rule as the state's ``pending_approvals``)."""
    return sum(1 for a in state.approvals.values() if a.decision is None and a.action is not None)


def status_of(state: WorkingState, now_ms: float) -> ThreadStatus:
    """The thread's status by the rules in this module's docstring."""
    if pending_approvals(state):
        return "waiting_approval"
    newest = last_activity(state)
    if newest is None:
        return "idle"
    newest_ms = epoch_ms_of(newest)
    if now_ms - newest_ms > IDLE_AFTER_MS:
        return "idle"
    if state.failures and newest_ms - max(epoch_ms_of(f.ts) for f in state.failures) <= FAILING_WITHIN_MS:
        return "failing"
    return "active"


def short_goal(text: str, redact: bool) -> str:
    # Redacted whole before it is cut: a cut secret is one no pattern recognises.
    text = " ".join(redact_if(redact, text).split())
    return text if len(text) <= GOAL_CHARS else clip_at_word(text, GOAL_CHARS - 1) + "…"


def thread_row(state: WorkingState, now_ms: float, redact: bool = True) -> dict[str, Any]:
    """The thread's summary row (``ROW_FIELDS``), redacted like its state when ``redact``."""
    row = {
        "thread_id": state.thread_id,
        "project": state.project,
        "event_count": state.event_count,
        "last_activity": last_activity(state),
        "open_calls": len(state.pending_calls),
        "failures": len(state.failures),  # the recent ones the state keeps (at most 20)
        "pending_approvals": pending_approvals(state),
        "status": status_of(state, now_ms),
        "window_id": state.window_id,
        "goal": None if state.goal is None else short_goal(state.goal.text, redact),
    }
    return redact_if(redact, row)  # type: ignore[no-any-return]


def log_row(thread_id: str, project: str, event_count: int, last_ts: str | None) -> dict[str, Any]:
    """A row from the log alone (a Kafka worker's answer for a thread another worker owns):
    what the state would add is ``None``."""
    return {"thread_id": thread_id, "project": project, "event_count": event_count, "last_activity": last_ts,
            "open_calls": None, "failures": None, "pending_approvals": None, "status": None,
            "window_id": None, "goal": None}  # fmt: skip


def log_ts(value: Any) -> str | None:
    """ClickHouse's ``toString`` of a UTC ``DateTime64`` as RFC 3339 (``...T...Z``)."""
    if value is None or value == "":
        return None
    return str(value).replace(" ", "T", 1) + "Z"


def _newest_first(row: dict[str, Any]) -> tuple[float, str]:
    ts = row["last_activity"]
    return (-epoch_ms_of(ts) if ts else float("inf"), row["thread_id"])


def select_rows(
    rows: Iterable[dict[str, Any]], project: str | None = None, status: str | None = None,
    limit: int = DEFAULT_THREAD_LIMIT,
) -> dict[str, Any]:  # fmt: skip
    """The rows a listing answers: filtered, newest activity first (ties by thread id),
    at most ``limit``; ``total`` counts every match."""
    matched = [r for r in rows if (project is None or r["project"] == project)
               and (status is None or r["status"] == status)]  # fmt: skip
    matched.sort(key=_newest_first)
    return {"threads": matched[:limit], "total": len(matched)}


__all__ = [
    "FAILING_WITHIN_MS", "GOAL_CHARS", "IDLE_AFTER_MS", "ROW_FIELDS", "THREAD_STATUSES", "ThreadStatus",
    "last_activity", "log_row", "log_ts", "pending_approvals",
    "select_rows", "status_of", "thread_row",
]  # fmt: skip
