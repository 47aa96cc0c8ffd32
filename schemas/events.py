"""The event wire format of SPEC §2: one envelope, one payload model per kind.

Each kind is its own envelope class with a literal ``kind`` so that pydantic can
validate a whole event (JSON parsing included) in one pass through a tagged union.
Models are strict: ``"3"`` is not an integer and ``1`` is not a boolean.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from functools import cached_property, lru_cache
from typing import Annotated, Any, Literal, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    model_validator,
)

MAX_EVENT_BYTES = 1024 * 1024
"""Default size limit of one event on the wire (SPEC §2)."""

ID_PATTERN = r"^[A-Za-z0-9._:-]{1,128}$"

Identifier = Annotated[str, StringConstraints(pattern=ID_PATTERN)]
NonEmpty = Annotated[str, StringConstraints(min_length=1)]

RFC3339_PATTERN = r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$"

# Kept as the producer's string (validated in pydantic-core, which is several times
# faster than a Python validator) and parsed once, on demand, by ``parse_ts``.
_FRACTION = re.compile(r"\.(\d{7,9})")


class once(cached_property):  # noqa: N801 - reads like the decorator it replaces
    """``cached_property`` without the per-access lock Python 3.11 takes (3.12 dropped it).

    A subclass, so pydantic still knows it is no field and leaves it out of ``==``.
    """

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        cache = instance.__dict__
        value = cache.get(self.attrname, _MISSING)
        if value is _MISSING:
            value = cache[self.attrname] = self.func(instance)  # type: ignore[misc]
        return value


_MISSING = object()


def parse_ts(value: str) -> datetime:
    """An RFC 3339 string (already validated) as an aware datetime, in microseconds."""
    try:  # the common shape (upper-case T and Z, at most microseconds) parses directly
        return datetime.fromisoformat(value)
    except ValueError:
        pass
    value = value.replace("z", "Z").replace("t", "T")
    if "." in value:  # Python keeps microseconds: drop nanosecond digits beyond them
        value = _FRACTION.sub(lambda m: "." + m.group(1)[:6], value)
    return datetime.fromisoformat(value)


@lru_cache(maxsize=16_384)
def epoch_ms_of(ts: str) -> float:
    """Milliseconds since the epoch of a (validated) RFC 3339 string.

    Cached because validation computes it for its calendar check and the processors then
    need it again for the same event, one batch later at most.
    """
    return parse_ts(ts).timestamp() * 1000.0


def utc_text(epoch_s: float | None) -> str:
    """``epoch_ms_of``'s way back, for people: epoch seconds as RFC 3339 UTC to the second
    (``2026-11-30T10:00:00Z``); ``-`` for none (0 is a time: the epoch's first second)."""
    if epoch_s is None:
        return "-"
    return datetime.fromtimestamp(epoch_s, timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


TS_MIN_MS = -2_208_988_800_000.0  # 1900-01-01T00:00:00Z
TS_MAX_MS = 10_413_792_000_000.0  # 2300-01-01T00:00:00Z (exclusive)
"""Event times the log can store (ClickHouse DateTime64 spans 1900..2299); outside it a
row's time would be clamped, and Python clients cannot read some of them back."""


def _real_date(value: str) -> str:
    # The pattern admits month 13 or February 30; the calendar does not.
    if not TS_MIN_MS <= epoch_ms_of(value) < TS_MAX_MS:
        raise ValueError("event time out of range: it must lie in 1900-01-01..2299-12-31 (UTC)")
    return value


RFC3339 = Annotated[str, StringConstraints(pattern=RFC3339_PATTERN), AfterValidator(_real_date)]


Role = Literal["user", "assistant", "system", "developer"]
ResultStatus = Literal["ok", "error", "timeout", "cancelled"]
WorkStatus = Literal["pending", "running", "done", "failed", "cancelled"]
Source = Literal["user", "agent", "tool", "system", "external"]
EvidenceType = Literal["user_confirmed", "tool_observed", "model_inferred", "external_content"]

TERMINAL_STATUSES: frozenset[str] = frozenset({"done", "failed", "cancelled"})
STATUS_RANK: dict[str, int] = {"pending": 0, "running": 1, "done": 2, "failed": 2, "cancelled": 2}


class Payload(BaseModel):
    """Payload fields outside the contract are ignored (the log keeps the raw bytes)."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


class MessagePayload(Payload):
    role: Role
    text: str


class ToolCallPayload(Payload):
    call_id: NonEmpty
    tool_name: NonEmpty
    arguments: dict[str, Any] | str = Field(default_factory=dict)


class ToolResultPayload(Payload):
    call_id: NonEmpty
    output: str
    status: ResultStatus = "ok"
    tool_name: str | None = None
    exit_code: int | None = None


class ToolProgressPayload(Payload):
    call_id: NonEmpty
    text: str


class GoalPayload(Payload):
    text: NonEmpty


class ConstraintPayload(Payload):
    constraint_id: NonEmpty
    text: str = ""
    op: Literal["add", "remove"] = "add"

    @model_validator(mode="after")
    def _added_constraint_has_text(self) -> ConstraintPayload:
        if self.op == "add" and not self.text:
            raise ValueError("an added constraint needs a non-empty text")
        return self


class PlanStep(Payload):
    step_id: NonEmpty
    text: str | None = None
    status: WorkStatus = "pending"


class PlanPayload(Payload):
    steps: list[PlanStep]


class TaskPayload(Payload):
    task_id: NonEmpty
    status: WorkStatus
    text: str | None = None
    owner: str | None = None


class FileChangePayload(Payload):
    path: NonEmpty
    change: Literal["created", "modified", "deleted"]
    confirmed: bool = True


class ApprovalRequestPayload(Payload):
    approval_id: NonEmpty
    action: NonEmpty
    detail: str | None = None


class ApprovalDecisionPayload(Payload):
    approval_id: NonEmpty
    decision: Literal["approved", "denied"]
    by: str | None = None


class AgentSpawnPayload(Payload):
    child_agent_id: NonEmpty
    role: str | None = None
    child_thread_id: Identifier | None = None


class AgentExitPayload(Payload):
    child_agent_id: NonEmpty
    status: str | None = None
    summary: str | None = None


class TurnEndPayload(Payload):
    pass


class WindowSwitchPayload(Payload):
    new_window_id: NonEmpty
    reason: str | None = None


class CompactionPayload(Payload):
    summary: dict[str, Any]
    covers_through: Identifier


class FactPayload(Payload):
    key: NonEmpty
    value: Any
    evidence_type: EvidenceType
    confirmed: bool
    scope: str | None = None
    recheck_when: Any = None


class RevokePayload(Payload):
    target_event_id: Identifier
    reason: str | None = None


class ErrorPayload(Payload):
    message: str
    code: str | int | None = None


def _source_for(kind: str, payload: Payload) -> Source:
    if isinstance(payload, MessagePayload):
        return {"user": "user", "assistant": "agent"}.get(payload.role, "system")  # type: ignore[return-value]
    if kind in ("tool_result", "tool_progress"):
        return "tool"
    if kind in ("compaction", "window_switch"):
        return "system"
    return "agent"


class Envelope(BaseModel):
    """Fields every event carries. Unknown top-level fields are kept, and ignored."""

    model_config = ConfigDict(strict=True, extra="allow", frozen=True, ignored_types=(once,))

    event_id: Identifier
    thread_id: Identifier
    kind: str
    ts: RFC3339
    payload: Payload
    window_id: str | None = None
    turn_id: str | None = None
    agent_id: str = "main"
    project: str = "default"
    source: Source | None = None
    repo_commit: str | None = None
    schema_version: int = 1

    @property
    def effective_source(self) -> Source:
        return self.source or _source_for(self.kind, self.payload)

    @once
    def time(self) -> datetime:
        """Event time as an aware datetime."""
        return parse_ts(self.ts)

    @once
    def epoch_ms(self) -> float:
        """Event time in milliseconds since the epoch: what grace periods and timeouts use."""
        return epoch_ms_of(self.ts)


class MessageEvent(Envelope):
    kind: Literal["message"]
    payload: MessagePayload


class ToolCallEvent(Envelope):
    kind: Literal["tool_call"]
    payload: ToolCallPayload


class ToolResultEvent(Envelope):
    kind: Literal["tool_result"]
    payload: ToolResultPayload


class ToolProgressEvent(Envelope):
    kind: Literal["tool_progress"]
    payload: ToolProgressPayload


class GoalEvent(Envelope):
    kind: Literal["goal"]
    payload: GoalPayload


class ConstraintEvent(Envelope):
    kind: Literal["constraint"]
    payload: ConstraintPayload


class PlanEvent(Envelope):
    kind: Literal["plan"]
    payload: PlanPayload


class TaskEvent(Envelope):
    kind: Literal["task"]
    payload: TaskPayload


class FileChangeEvent(Envelope):
    kind: Literal["file_change"]
    payload: FileChangePayload


class ApprovalRequestEvent(Envelope):
    kind: Literal["approval_request"]
    payload: ApprovalRequestPayload


class ApprovalDecisionEvent(Envelope):
    kind: Literal["approval_decision"]
    payload: ApprovalDecisionPayload


class AgentSpawnEvent(Envelope):
    kind: Literal["agent_spawn"]
    payload: AgentSpawnPayload


class AgentExitEvent(Envelope):
    kind: Literal["agent_exit"]
    payload: AgentExitPayload


class TurnEndEvent(Envelope):
    kind: Literal["turn_end"]
    payload: TurnEndPayload


class WindowSwitchEvent(Envelope):
    kind: Literal["window_switch"]
    payload: WindowSwitchPayload


class CompactionEvent(Envelope):
    kind: Literal["compaction"]
    payload: CompactionPayload


class FactEvent(Envelope):
    kind: Literal["fact"]
    payload: FactPayload


class RevokeEvent(Envelope):
    kind: Literal["revoke"]
    payload: RevokePayload


class ErrorEvent(Envelope):
    kind: Literal["error"]
    payload: ErrorPayload


EVENT_CLASSES: tuple[type[Envelope], ...] = (
    MessageEvent, ToolCallEvent, ToolResultEvent, ToolProgressEvent, GoalEvent,
    ConstraintEvent, PlanEvent, TaskEvent, FileChangeEvent, ApprovalRequestEvent,
    ApprovalDecisionEvent, AgentSpawnEvent, AgentExitEvent, TurnEndEvent,
    WindowSwitchEvent, CompactionEvent, FactEvent, RevokeEvent, ErrorEvent,
)  # fmt: skip

KINDS: tuple[str, ...] = tuple(
    cls.model_fields["kind"].annotation.__args__[0] for cls in EVENT_CLASSES  # type: ignore[union-attr]
)

Event = Annotated[Union[EVENT_CLASSES], Field(discriminator="kind")]  # type: ignore[valid-type]
"""Any valid event; ``EVENT_ADAPTER.validate_json(raw)`` parses and validates in one pass."""

EVENT_ADAPTER: TypeAdapter[Envelope] = TypeAdapter(Event)

__all__ = [
    "EVENT_ADAPTER", "EVENT_CLASSES", "Envelope", "Event", "EvidenceType", "ID_PATTERN",
    "KINDS", "MAX_EVENT_BYTES", "STATUS_RANK", "TERMINAL_STATUSES", "WorkStatus", "utc_text",
    *(cls.__name__ for cls in EVENT_CLASSES),
]  # fmt: skip
