"""The per-thread working state (SPEC §3) and the tool-call pair rows it produces.

Collections are dicts keyed by their natural id (insertion-ordered) so the reducer
updates in O(1); ``WorkingState.public()`` renders them as lists for users.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

PairStatus = Literal["ok", "error", "timeout", "cancelled", "missing", "orphan"]

DEFAULT_WINDOW = "w0"
MAX_FAILURES = 20


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Pinned(_Model):
    text: str
    event_id: str


class ConstraintItem(_Model):
    constraint_id: str
    text: str
    event_id: str


class StepItem(_Model):
    step_id: str
    text: str | None = None
    status: str = "pending"
    event_id: str


class TaskItem(_Model):
    task_id: str
    text: str | None = None
    owner: str | None = None
    status: str = "pending"
    event_id: str


class FileItem(_Model):
    path: str
    change: str
    confirmed: bool
    event_id: str
    ts: str


class ApprovalItem(_Model):
    approval_id: str
    action: str | None = None
    detail: str | None = None
    event_id: str
    decision: str | None = None
    decided_by: str | None = None


class AgentItem(_Model):
    agent_id: str
    role: str | None = None
    status: Literal["active", "finished"] = "active"
    exit_status: str | None = None
    event_id: str


class PendingCall(_Model):
    call_id: str
    tool_name: str
    event_id: str
    ts: str
    turn_id: str | None = None


class Failure(_Model):
    event_id: str
    kind: str
    ts: str
    call_id: str | None = None
    tool_name: str | None = None
    status: str | None = None
    message: str = ""


class WorkingState(_Model):
    thread_id: str
    project: str = "default"
    window_id: str = DEFAULT_WINDOW
    goal: Pinned | None = None
    constraints: dict[str, ConstraintItem] = Field(default_factory=dict)
    plan: dict[str, StepItem] = Field(default_factory=dict)
    tasks: dict[str, TaskItem] = Field(default_factory=dict)
    files: dict[str, FileItem] = Field(default_factory=dict)
    approvals: dict[str, ApprovalItem] = Field(default_factory=dict)
    agents: dict[str, AgentItem] = Field(default_factory=dict)
    pending_calls: dict[str, PendingCall] = Field(default_factory=dict)
    failures: list[Failure] = Field(default_factory=list)
    summary: dict[str, Any] | None = None
    summary_covers_through: str | None = None
    summary_event_id: str | None = None
    latest_user_message_id: str | None = None
    last_event_id: str | None = None
    last_ts: str | None = None
    event_count: int = 0

    def public(self) -> dict[str, Any]:
        """The state as users see it (SPEC §3 field names, lists instead of keyed maps)."""
        d = self.model_dump(mode="json", exclude={"approvals"})
        for name in ("constraints", "plan", "tasks", "files", "agents", "pending_calls"):
            d[name] = list(d[name].values())
        d["pending_approvals"] = [
            a.model_dump(mode="json", exclude={"decision", "decided_by"})
            for a in self.approvals.values()
            if a.decision is None and a.action is not None
        ]
        d["decided_approvals"] = [
            a.model_dump(mode="json") for a in self.approvals.values() if a.decision is not None
        ]
        return d


class ToolPair(_Model):
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


__all__ = [
    "AgentItem", "ApprovalItem", "ConstraintItem", "DEFAULT_WINDOW", "Failure", "FileItem",
    "MAX_FAILURES", "PairStatus", "PendingCall", "Pinned", "StepItem", "TaskItem", "ToolPair",
    "WorkingState",
]  # fmt: skip
