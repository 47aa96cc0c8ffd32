"""The persisted form of one thread's processing: its working state and its pairing
state, enough for a state store to resume the thread exactly after a restart."""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import BaseModel, Field

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


@dataclass(slots=True, kw_only=True)
class WindowEntry:
    """One event of a thread's raw window (after the summary's cover), reduced to what
    the fold needs: its unit, an estimate of its context tokens, and a short digest."""

    event_id: str
    kind: str
    unit: str
    """The interaction unit it belongs to: the call id for calls and results, else its id."""
    tokens: int = 0
    role: str | None = None
    tool_name: str | None = None
    status: str | None = None
    exit_code: int | None = None
    repo_commit: str | None = None
    text: str = ""
    """A redacted digest of the text or output (bounded), not the whole of it."""


@dataclass(slots=True, kw_only=True)
class RawWindow:
    """The raw window the stream-side fold watches (``agentlog.processors.compaction``)."""

    entries: list[WindowEntry] = field(default_factory=list)
    tokens: int = 0
    retry_tokens: int = 0
    retry_entries: int = 0
    """After a fold that left the window over its limits (blocked by open work or the
    newest turn), the next try waits until the window reaches these sizes."""


class ThreadSnapshot(BaseModel):
    """What a state store persists for a thread: enough to resume exactly."""

    state: WorkingState
    pairing: PairingState
    # The last source offset applied, per partition: a record at or below it was already
    # applied before a crash, so a replay of it changes nothing.
    positions: dict[int, int] = {}
    # The raw window's digest, so a restored thread folds exactly as a live one would.
    window: RawWindow = Field(default_factory=RawWindow)


__all__ = ["EarlyResult", "OpenCall", "PairingState", "RawWindow", "ThreadSnapshot", "WindowEntry"]
