"""Tool-call pairing (SPEC §3), one thread at a time, driven by event time only.

Invariants, each a test in ``tests/test_pairing.py``:
- a result pairs with the call of the same ``call_id``; early results wait ``grace_ms``;
- a result whose call has not come when the grace period passes or its turn ends is an
  orphan: flagged, never shown to a model;
- an open call gets a synthetic ``missing`` result at its turn's end, at a window switch,
  or after ``call_timeout_ms``; a later real result replaces the synthetic one;
- the first terminal result wins: later results change nothing.
"""

from __future__ import annotations

from agentlog.schemas.events import Envelope, ToolCallPayload, ToolResultPayload
from agentlog.schemas.snapshot import EarlyResult, OpenCall, PairingState
from agentlog.schemas.state import ToolPair

DEFAULT_GRACE_MS = 30_000.0
DEFAULT_CALL_TIMEOUT_MS = 600_000.0
_DEADLINE_SLACK_MS = 1.0  # the skip hint errs early: float rounding never skips a deadline


class Pairer:
    """Pure pairing state machine for one thread; ``on_event`` returns changed pair rows."""

    __slots__ = ("thread_id", "state", "grace_ms", "call_timeout_ms", "_next_deadline_ms")

    def __init__(
        self,
        thread_id: str,
        state: PairingState | None = None,
        grace_ms: float = DEFAULT_GRACE_MS,
        call_timeout_ms: float = DEFAULT_CALL_TIMEOUT_MS,
    ) -> None:
        self.thread_id = thread_id
        self.state = state or PairingState()
        self.grace_ms = grace_ms
        self.call_timeout_ms = call_timeout_ms
        # A lower bound on the event time at which a waiting call or early result can
        # expire, so most events skip the scan. Derived, never persisted: a restored
        # pairer starts at -inf and scans once.
        self._next_deadline_ms = float("-inf")

    def open_calls(self) -> list[OpenCall]:
        return [c for c in self.state.calls.values() if c.synthetic_version is None]

    def on_event(self, event: Envelope, version: int, window_id: str) -> list[ToolPair]:
        st = self.state
        ms = event.epoch_ms
        if ms > st.watermark_ms:
            st.watermark_ms = ms
        kind = event.kind
        out: list[ToolPair] = []
        if kind == "tool_call":
            out.extend(self._on_call(event, version, window_id))
        elif kind == "tool_result":
            out.extend(self._on_result(event, version, window_id))
        elif kind == "turn_end":
            turn = event.turn_id
            for call in self.open_calls():
                if call.turn_id is None or call.turn_id == turn:
                    out.append(self._synthesize(call, event.ts, version))
            for early in list(st.early.values()):
                if early.turn_id is None or early.turn_id == turn:
                    out.append(self._orphan(early, version))
        elif kind == "window_switch":
            for call in self.open_calls():
                out.append(self._synthesize(call, event.ts, version))
        if st.watermark_ms > self._next_deadline_ms and (st.calls or st.early):
            out.extend(self._expire(event.ts, version))
        return out

    # -- transitions ------------------------------------------------------------------

    def _on_call(self, event: Envelope, version: int, window_id: str) -> list[ToolPair]:
        p: ToolCallPayload = event.payload  # type: ignore[assignment]
        st = self.state
        if p.call_id in st.calls or p.call_id in st.done:
            return []  # a second call with a known id: the first one stands
        call = OpenCall(
            call_id=p.call_id, tool_name=p.tool_name, event_id=event.event_id, ts=event.ts,
            ms=event.epoch_ms, turn_id=event.turn_id, window_id=window_id, project=event.project,
        )  # fmt: skip
        early = st.early.pop(p.call_id, None)
        if early is None:
            st.calls[p.call_id] = call
            self._expires_at(call.ms + self.call_timeout_ms)
            return []
        st.done[p.call_id] = early.event_id
        return [self._pair(call, early, version)]

    def _on_result(self, event: Envelope, version: int, window_id: str) -> list[ToolPair]:
        p: ToolResultPayload = event.payload  # type: ignore[assignment]
        st = self.state
        if p.call_id in st.done or p.call_id in st.early:
            return []  # first terminal result wins
        result = EarlyResult(
            call_id=p.call_id, event_id=event.event_id, ts=event.ts, ms=event.epoch_ms,
            status=p.status, tool_name=p.tool_name, output_bytes=len(p.output.encode()),
            turn_id=event.turn_id, window_id=window_id, project=event.project,
        )  # fmt: skip
        call = st.calls.pop(p.call_id, None)
        if call is None:
            st.early[p.call_id] = result
            self._expires_at(result.ms + self.grace_ms)
            return []
        st.done[p.call_id] = event.event_id
        return [self._pair(call, result, version)]

    def _expires_at(self, deadline_ms: float) -> None:
        self._next_deadline_ms = min(self._next_deadline_ms, deadline_ms - _DEADLINE_SLACK_MS)

    def _expire(self, now_ts: str, version: int) -> list[ToolPair]:
        st = self.state
        out: list[ToolPair] = []
        next_deadline = float("inf")
        for call in self.open_calls():
            if st.watermark_ms - call.ms > self.call_timeout_ms:
                out.append(self._synthesize(call, now_ts, version))
            else:
                next_deadline = min(next_deadline, call.ms + self.call_timeout_ms)
        for early in list(st.early.values()):
            if st.watermark_ms - early.ms > self.grace_ms:
                out.append(self._orphan(early, version))
            else:
                next_deadline = min(next_deadline, early.ms + self.grace_ms)
        self._next_deadline_ms = next_deadline - _DEADLINE_SLACK_MS
        return out

    # -- rows -------------------------------------------------------------------------

    def _pair(self, call: OpenCall, result: EarlyResult, version: int) -> ToolPair:
        return ToolPair(
            thread_id=self.thread_id, call_id=call.call_id, tool_name=call.tool_name,
            status=result.status,  # type: ignore[arg-type]
            latency_ms=round(max(result.ms - call.ms, 0.0), 3), output_bytes=result.output_bytes,
            call_event_id=call.event_id, result_event_id=result.event_id, call_ts=call.ts,
            result_ts=result.ts, window_id=call.window_id, turn_id=call.turn_id,
            project=call.project, version=version,
        )  # fmt: skip

    def _synthesize(self, call: OpenCall, at_ts: str, version: int) -> ToolPair:
        call.synthetic_version = version
        return ToolPair(
            thread_id=self.thread_id, call_id=call.call_id, tool_name=call.tool_name, status="missing",
            synthetic=True, call_event_id=call.event_id, call_ts=call.ts, result_ts=at_ts,
            window_id=call.window_id, turn_id=call.turn_id, project=call.project,
            version=version,
        )  # fmt: skip

    def _orphan(self, early: EarlyResult, version: int) -> ToolPair:
        del self.state.early[early.call_id]
        self.state.orphans[early.event_id] = early.call_id
        return ToolPair(
            thread_id=self.thread_id, call_id=early.call_id, orphan_event_id=early.event_id,
            tool_name=early.tool_name or "", status="orphan", output_bytes=early.output_bytes,
            result_event_id=early.event_id, result_ts=early.ts, window_id=early.window_id,
            turn_id=early.turn_id, project=early.project, version=version,
        )  # fmt: skip


__all__ = ["DEFAULT_CALL_TIMEOUT_MS", "DEFAULT_GRACE_MS", "Pairer"]
