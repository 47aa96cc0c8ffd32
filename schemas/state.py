"""The per-thread working state (SPEC §3) and the tool-call pair rows it produces.

These are slotted dataclasses, not ``BaseModel``s: the reducer changes the state once per
event, and pydantic's validated ``__setattr__`` and constructors cost more than the
reduction itself. pydantic still owns their schema at the edges: ``STATE_ADAPTER``
validates a loaded snapshot and renders JSON.

The items (a step, a file, an approval...) are frozen: the reducer replaces an item that
changes instead of editing it, so an item that is the same object as at the last read is
the same value, and ``agentlog.processors.public_state`` renders only the ones that are not.

Collections are dicts keyed by their natural id (insertion-ordered) so the reducer
updates in O(1); ``WorkingState.public()`` renders them as lists for users.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal, get_args

from pydantic import TypeAdapter

PairStatus = Literal["ok", "error", "timeout", "cancelled", "missing", "orphan"]

ThreadStatus = Literal["active", "waiting_approval", "failing", "idle"]
"""A thread's status in ``agentlog threads`` (rules: ``agentlog.processors.thread_list``)."""
THREAD_STATUSES: tuple[str, ...] = get_args(ThreadStatus)

DEFAULT_WINDOW = "w0"
MAX_FAILURES = 20


@dataclass(frozen=True, slots=True, kw_only=True)
class Pinned:
    text: str
    event_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ConstraintItem:
    constraint_id: str
    text: str
    event_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class StepItem:
    step_id: str
    text: str | None = None
    status: str = "pending"
    event_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskItem:
    task_id: str
    text: str | None = None
    owner: str | None = None
    status: str = "pending"
    event_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class FileItem:
    path: str
    change: str
    confirmed: bool
    event_id: str
    ts: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalItem:
    approval_id: str
    action: str | None = None
    detail: str | None = None
    event_id: str
    decision: str | None = None
    decided_by: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentItem:
    agent_id: str
    role: str | None = None
    thread_id: str | None = None  # the sub-agent's own thread, when it has one
    status: Literal["active", "finished"] = "active"
    exit_status: str | None = None
    summary: str | None = None  # what it reported when it finished
    event_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingCall:
    call_id: str
    tool_name: str
    event_id: str
    ts: str
    turn_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Failure:
    event_id: str
    kind: str
    ts: str
    call_id: str | None = None
    tool_name: str | None = None
    status: str | None = None
    message: str = ""


@dataclass(slots=True, kw_only=True)
class WorkingState:
    thread_id: str
    project: str = "default"
    window_id: str = DEFAULT_WINDOW
    window_started_by: str | None = None
    """The ``window_switch`` event that opened the current window."""
    closed_windows: dict[str, str] = field(default_factory=dict)
    """Each ``window_switch`` event id with the window it closed: which window an event
    belongs to, for events read back from a topic or log that does not record it."""
    goal: Pinned | None = None
    constraints: dict[str, ConstraintItem] = field(default_factory=dict)
    plan: dict[str, StepItem] = field(default_factory=dict)
    tasks: dict[str, TaskItem] = field(default_factory=dict)
    files: dict[str, FileItem] = field(default_factory=dict)
    approvals: dict[str, ApprovalItem] = field(default_factory=dict)
    agents: dict[str, AgentItem] = field(default_factory=dict)
    pending_calls: dict[str, PendingCall] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    summary: dict[str, Any] | None = None
    summary_covers_through: str | None = None
    summary_event_id: str | None = None
    latest_user_message_id: str | None = None
    latest_user_message_ts: str | None = None
    """Its event time. ``None`` in snapshots written before it existed: the next user
    message is then the latest."""
    last_event_id: str | None = None
    last_ts: str | None = None
    """The time of the event applied last (topic order)."""
    newest_ts: str | None = None
    """The newest event time seen (a late event with an older time leaves it): the
    thread's last activity. ``None`` in snapshots written before it existed."""
    event_count: int = 0

    def public(self) -> dict[str, Any]:
        """The state as users see it (SPEC §3 field names, lists instead of keyed maps)."""
        d = STATE_ADAPTER.dump_python(self, mode="json")
        approvals = d.pop("approvals").values()
        for name in ("constraints", "plan", "tasks", "files", "agents", "pending_calls"):
            d[name] = list(d[name].values())
        d["pending_approvals"] = [
            {k: v for k, v in a.items() if k not in ("decision", "decided_by")}
            for a in approvals
            if a["decision"] is None and a["action"] is not None
        ]
        d["decided_approvals"] = [a for a in approvals if a["decision"] is not None]
        return d


@dataclass(slots=True, kw_only=True)
class ToolPair:
    """One row of the ``tool_calls`` table; a newer ``version`` supersedes an older row."""

    thread_id: str
    call_id: str
    orphan_event_id: str = ""
    tool_name: str = ""
    status: PairStatus
    synthetic: bool = False
    latency_ms: float | None = None
    output_bytes: int = 0
    call_event_id: str = ""
    result_event_id: str = ""
    call_ts: str | None = None
    result_ts: str | None = None
    window_id: str = DEFAULT_WINDOW
    turn_id: str | None = None
    project: str = "default"
    version: int = 0

    def row(self) -> dict[str, Any]:
        """The pair as a ``tool_calls`` row (``agentlog.schemas.tables.TOOL_CALLS_COLUMNS``)."""
        # Every field is a scalar: a shallow copy is ``asdict`` without its recursion,
        # which was a third of the Kafka processor's per-batch bookkeeping.
        return {name: getattr(self, name) for name in _PAIR_FIELDS}


_PAIR_FIELDS = tuple(f.name for f in fields(ToolPair))

STATE_ADAPTER: TypeAdapter[WorkingState] = TypeAdapter(WorkingState)
"""pydantic's schema of the working state: validates snapshots, renders JSON."""


__all__ = [
    "AgentItem", "ApprovalItem", "ConstraintItem", "DEFAULT_WINDOW", "Failure", "FileItem",
    "MAX_FAILURES", "PairStatus", "PendingCall", "Pinned", "STATE_ADAPTER", "StepItem", "TaskItem",
    "THREAD_STATUSES", "ThreadStatus", "ToolPair", "WorkingState",
]  # fmt: skip
