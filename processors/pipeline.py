"""A batch of wire records through validation, dedup, pairing and reduction.

The deployment supplies two ports: where thread snapshots come from (``load``) and
which event ids were already applied (``SeenIds``). Everything else is pure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from agentlog.processors.thread import PairingConfig, ThreadProcessor
from agentlog.processors.validation import Rejection, validate
from agentlog.schemas.events import MAX_EVENT_BYTES, Envelope
from agentlog.schemas.snapshot import ThreadSnapshot
from agentlog.schemas.state import ToolPair


class SeenIds(Protocol):
    def unseen(self, ids: Sequence[str]) -> set[str]:
        """The ids of ``ids`` that were never applied."""

    def add(self, ids: Iterable[str]) -> None: ...


class MemorySeen:
    """``SeenIds`` in a set: for tests, replays and the pure core."""

    def __init__(self) -> None:
        self.ids: set[str] = set()

    def unseen(self, ids: Sequence[str]) -> set[str]:
        return {i for i in ids if i not in self.ids}

    def add(self, ids: Iterable[str]) -> None:
        self.ids.update(ids)


class Record(NamedTuple):
    """One message of the event topic (a tuple: built once per event, twice as fast as a
    frozen dataclass)."""

    partition: int
    offset: int
    value: bytes


@dataclass(slots=True)
class Applied:
    event: Envelope
    record: Record
    window_id: str
    tool_name: str | None


@dataclass(slots=True)
class BatchResult:
    applied: list[Applied] = field(default_factory=list)
    pairs: list[ToolPair] = field(default_factory=list)
    rejected: list[tuple[Record, Rejection]] = field(default_factory=list)
    duplicates: list[tuple[Record, Envelope]] = field(default_factory=list)
    # Records the thread had already applied (a redelivery after a crash, when the
    # state was saved but the source offset not yet committed): nothing to do again.
    replayed: list[tuple[Record, Envelope]] = field(default_factory=list)
    touched: set[str] = field(default_factory=set)


Loader = Callable[[str], ThreadSnapshot | None]


class Pipeline:
    """Per-thread processors behind one ``process(records)`` call."""

    def __init__(
        self,
        seen: SeenIds | None = None,
        load: Loader = lambda _thread: None,
        config: PairingConfig = PairingConfig(),
        max_event_bytes: int = MAX_EVENT_BYTES,
    ) -> None:
        self.seen = seen if seen is not None else MemorySeen()
        self.load = load
        self.config = config
        self.max_event_bytes = max_event_bytes
        self.threads: dict[str, ThreadProcessor] = {}

    def thread(self, thread_id: str) -> ThreadProcessor:
        tp = self.threads.get(thread_id)
        if tp is None:
            snapshot = self.load(thread_id)
            tp = (
                ThreadProcessor.restore(snapshot, self.config)
                if snapshot is not None
                else ThreadProcessor.new(thread_id, self.config)
            )
            self.threads[thread_id] = tp
        return tp

    def process(self, records: Sequence[Record]) -> BatchResult:
        out = BatchResult()
        valid: list[tuple[Record, Envelope]] = []
        for record in records:
            result = validate(record.value, self.max_event_bytes)
            if isinstance(result, Rejection):
                out.rejected.append((record, result))
            else:
                valid.append((record, result))
        fresh = self.seen.unseen([e.event_id for _, e in valid])
        applied_ids: list[str] = []
        for record, event in valid:
            tp = self.thread(event.thread_id)
            if tp.already_applied(record.partition, record.offset):
                out.replayed.append((record, event))
                applied_ids.append(event.event_id)
                fresh.discard(event.event_id)
                continue
            if event.event_id not in fresh:
                out.duplicates.append((record, event))
                continue
            fresh.discard(event.event_id)  # a second copy in the same batch is a duplicate
            applied_ids.append(event.event_id)
            window_id = tp.window_of(event)
            tool_name = self._tool_name(tp, event)
            pairs = tp.apply(event, window_id)
            tp.positions[record.partition] = record.offset
            out.applied.append(Applied(event, record, window_id, tool_name))
            out.pairs.extend(pairs)
            out.touched.add(event.thread_id)
        self.seen.add(applied_ids)
        return out

    @staticmethod
    def _tool_name(tp: ThreadProcessor, event: Envelope) -> str | None:
        if event.kind not in ("tool_result", "tool_progress"):
            return None
        call = tp.pairer.state.calls.get(event.payload.call_id)  # type: ignore[attr-defined]
        return call.tool_name if call is not None else None


__all__ = ["Applied", "BatchResult", "MemorySeen", "Pipeline", "Record", "SeenIds"]
