"""One thread's processing: dedup, pairing, then reduction, with a persistable snapshot
(``agentlog.schemas.snapshot``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentlog.processors.fold import (
    DEFAULT_WINDOW_TOKENS, Memo, drop_through, entry_of, fold_if_needed, is_stale, splits_open_call, track,
)
from agentlog.processors.public_state import PublicView
from agentlog.processors.pairing import DEFAULT_CALL_TIMEOUT_MS, DEFAULT_GRACE_MS, Pairer
from agentlog.processors.reducer import reduce
from agentlog.schemas.events import Envelope
from agentlog.schemas.snapshot import RawWindow, ThreadSnapshot
from agentlog.schemas.state import ToolPair, WorkingState


@dataclass(frozen=True, slots=True)
class PairingConfig:
    grace_ms: float = DEFAULT_GRACE_MS
    call_timeout_ms: float = DEFAULT_CALL_TIMEOUT_MS
    compact_window_tokens: int = DEFAULT_WINDOW_TOKENS
    """The raw window's token budget before its oldest units fold into the summary; 0: never."""


@dataclass(slots=True)
class ThreadProcessor:
    """Applies a thread's new events in order; ``apply`` returns the pair rows that changed.

    Dedup is upstream (``agentlog.processors.pipeline``): this class sees each event once.
    """

    state: WorkingState
    pairer: Pairer
    positions: dict[int, int] = field(default_factory=dict)
    window: RawWindow = field(default_factory=RawWindow)
    window_tokens: int = DEFAULT_WINDOW_TOKENS
    memo: Memo = field(default_factory=Memo, repr=False, compare=False)
    """The last fold's parsed record (a cache, not persisted)."""
    view: PublicView = field(default_factory=lambda: PublicView(told=True), repr=False, compare=False)
    """The state as last read by users, item by item (a cache, not persisted), told which
    sections each event touched."""

    @classmethod
    def new(cls, thread_id: str, config: PairingConfig = PairingConfig()) -> ThreadProcessor:
        pairer = Pairer(thread_id, None, config.grace_ms, config.call_timeout_ms)
        return cls(WorkingState(thread_id=thread_id), pairer, window_tokens=config.compact_window_tokens)

    @classmethod
    def restore(cls, snapshot: ThreadSnapshot, config: PairingConfig = PairingConfig()) -> ThreadProcessor:
        pairer = Pairer(snapshot.state.thread_id, snapshot.pairing, config.grace_ms, config.call_timeout_ms)
        return cls(snapshot.state, pairer, dict(snapshot.positions), snapshot.window, config.compact_window_tokens)

    def snapshot(self) -> ThreadSnapshot:
        return ThreadSnapshot(state=self.state, pairing=self.pairer.state, positions=self.positions,
                              window=self.window)  # fmt: skip

    def already_applied(self, partition: int, offset: int) -> bool:
        return offset <= self.positions.get(partition, -1)

    def window_of(self, event: Envelope) -> str:
        return event.window_id or self.state.window_id

    def apply(self, event: Envelope, window_id: str | None = None) -> list[ToolPair]:
        """Apply one new event; ``window_id`` is ``window_of(event)`` if the caller has it."""
        state = self.state
        if state.event_count == 0:
            state.project = event.project
        window_id = window_id or self.window_of(event)
        tool_name = self._call_tool_name(event)
        pairs = self.pairer.on_event(event, state.event_count + 1, window_id)
        opened = event.kind == "tool_call" and self._is_open(event)
        kept = self._stale_summary(event)
        self.view.touched(reduce(state, event, pairs, opened))
        if self.memo.work is not None:  # built at the first fold, then kept with each event
            self.memo.work.applied(state, event)
        if kept is not None:  # a compaction the fold went past, or that splits an open call: the summary stays
            state.summary, state.summary_covers_through, state.summary_event_id = kept
        self._fold(event, tool_name, applied=kept is None)
        return pairs

    def _call_tool_name(self, event: Envelope) -> str | None:
        if event.kind != "tool_result":
            return None
        call = self.pairer.state.calls.get(event.payload.call_id)  # type: ignore[attr-defined]
        return call.tool_name if call is not None else None

    def _stale_summary(self, event: Envelope) -> tuple[Any, str | None, str | None] | None:
        """The summary to keep when ``event`` is a stale ``compaction`` (``fold.is_stale``)."""
        if event.kind != "compaction" or self.window_tokens <= 0:
            return None
        s = self.state
        cover = event.payload.covers_through  # type: ignore[attr-defined]
        if not (is_stale(self.window, s, cover) or splits_open_call(self.window, s, cover)):
            return None
        return s.summary, s.summary_covers_through, s.summary_event_id

    def _fold(self, event: Envelope, tool_name: str | None, applied: bool = True) -> None:
        """Compaction as a stream step: the window is watched and folded here, so every
        deployment and every replay computes the same summary. ``applied``: a published
        ``compaction`` was taken (else the window keeps what it would have covered)."""
        if self.window_tokens <= 0:
            return
        if event.kind == "compaction" and applied:  # a published record (a user's, an LLM's) wins as is
            drop_through(self.window, event.payload.covers_through)  # type: ignore[attr-defined]
        track(self.window, entry_of(event, tool_name))
        fold_if_needed(self.window, self.state, self.pairer.state, self.window_tokens, self.memo)

    def _is_open(self, event: Envelope) -> bool:
        call = self.pairer.state.calls.get(event.payload.call_id)  # type: ignore[attr-defined]
        return call is not None and call.event_id == event.event_id and call.synthetic_version is None

    def is_orphan(self, result_event_id: str) -> bool:
        return result_event_id in self.pairer.state.orphans


__all__ = ["PairingConfig", "ThreadProcessor"]
