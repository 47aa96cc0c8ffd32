"""The persisted form of one thread's processing: its working state and its pairing
state, enough for a state store to resume the thread exactly after a restart."""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import BaseModel

from agentlog.schemas.state import DEFAULT_WINDOW, WorkingState


@dataclass(slots=True, kw_only=True)
class OpenCall:
    call_id: str
    tool_name: str
    event_id: str
    ts: str
    ms: float
    turn_id: str | None = None
    window_id: str = DEFAULT_WINDOW
    project: str = "default"
    synthetic_version: int | None = None
    """Set once a synthetic result closed the call; a real result may still replace it."""


@dataclass(slots=True, kw_only=True)
class EarlyResult:
    call_id: str
    event_id: str
    ts: str
    ms: float
    status: str
    tool_name: str | None = None
    output_bytes: int
    turn_id: str | None = None
    window_id: str = DEFAULT_WINDOW
    project: str = "default"


@dataclass(slots=True, kw_only=True)
class PairingState:
    calls: dict[str, OpenCall] = field(default_factory=dict)
    """Calls without a real result yet: open ones, and synthetic-closed ones."""
    done: dict[str, str] = field(default_factory=dict)
    """call_id -> event_id of the terminal real result that won."""
    early: dict[str, EarlyResult] = field(default_factory=dict)
    orphans: dict[str, str] = field(default_factory=dict)
    """result event_id -> call_id of results flagged as orphans."""
    watermark_ms: float = 0.0


class ThreadSnapshot(BaseModel):
    """What a state store persists for a thread: enough to resume exactly."""

    state: WorkingState
    pairing: PairingState
    # The last source offset applied, per partition: a record at or below it was already
    # applied before a crash, so a replay of it changes nothing.
    positions: dict[int, int] = {}


__all__ = ["EarlyResult", "OpenCall", "PairingState", "ThreadSnapshot"]
