"""The embedded driver: the same processors as the faust app, driven in-process.

One step reads a batch from the topic, runs ``agentlog.processors.pipeline`` (the events
are then visible to ``state`` and ``context``) and appends what the sinks need to the
``accepted`` queue (``agentlog.streams.embedded.accepted``), which the sink stage writes
off the read path (``agentlog.streams.embedded.sink_stage``). A checkpoint (every
``checkpoint_s``; while a backlog is applied, spaced by its own cost: ``CHECKPOINT_SHARE``)
commits thread snapshots, applied ids and the position together; the queue's rows for a batch are committed before the position moves past it, so a crash
replays from the checkpoint into the same rows (the sinks take them again idempotently).
A checkpoint is taken (encoded) and written in two steps: ``agentlog run``'s loop writes
it without the processor's lock, in the order checkpoints were taken.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from agentlog.processors.duplicates import conflicts
from agentlog.processors.pipeline import BatchResult, Pipeline, Record
from agentlog.processors.thread import PairingConfig
from agentlog.schemas.events import MAX_EVENT_BYTES, Envelope
from agentlog.sinks.base import StateStore, Topic
from agentlog.streams.embedded.accepted import AcceptedQueue
from agentlog.streams.metrics import METRICS
from agentlog.streams.sink_guard import StoreUnavailable

log = logging.getLogger("agentlog.driver")

CHECKPOINT_SHARE = 0.1
"""While a backlog is applied, checkpoints take about this share of the processor's time at
most: the next is due once ``checkpoint_s`` and ten times the last one's duration have
passed. A checkpoint writes every thread a batch touched, so a catch-up across 1,000 long
threads spent 35% of the processor's time in checkpoints taken every 2 s. A crash then
replays a little more of the topic (the source of truth): nothing accepted is lost."""


class CheckpointedSeen:
    """Applied ids: those of the last checkpoint written (in the state store), those of
    checkpoints taken and not written yet, and those since."""

    def __init__(self, store: StateStore) -> None:
        self.store = store
        self.since_checkpoint: set[str] = set()
        # Replaced, never changed in place: a read on another thread sees one whole tuple.
        self.writing: tuple[frozenset[str], ...] = ()

    def unseen(self, ids: Sequence[str]) -> set[str]:
        writing = self.writing
        fresh = {i for i in ids if i not in self.since_checkpoint and not any(i in w for w in writing)}
        # Checked here before the store: an id leaves ``writing`` only once the store has it.
        return self.store.unseen(list(fresh)) if fresh else fresh

    def add(self, ids: Iterable[str]) -> None:
        self.since_checkpoint.update(ids)

    def take(self) -> frozenset[str]:
        """The ids since the last checkpoint, now being written."""
        taken = frozenset(self.since_checkpoint)
        self.since_checkpoint = set()
        self.writing = (*self.writing, taken)
        return taken

    def written(self, taken: frozenset[str]) -> None:
        self.writing = tuple(w for w in self.writing if w is not taken)


@dataclass(slots=True, frozen=True)
class TakenCheckpoint:
    """A checkpoint as the state was when it was taken (under the processor's lock), to be
    written after: the snapshots' JSON, the applied ids, the position."""

    seq: int
    rows: list[tuple[str, str]]
    seen: frozenset[str]
    offsets: dict[str, int]


@dataclass(slots=True)
class Progress:
    processed: int = 0


class EmbeddedDriver:
    """The processor of the embedded deployment: topic -> state in memory -> accepted queue."""

    def __init__(
        self,
        bus: Topic,
        queue: AcceptedQueue,
        states: StateStore,
        pairing: PairingConfig = PairingConfig(),
        batch_size: int = 5000,
        checkpoint_s: float = 2.0,
        max_event_bytes: int = MAX_EVENT_BYTES,
    ) -> None:
        self.bus, self.queue, self.states = bus, queue, states
        self.batch_size = batch_size
        self.checkpoint_s = checkpoint_s
        self.max_event_bytes = max_event_bytes
        self.seen = CheckpointedSeen(states)
        self.pipeline = Pipeline(self.seen, states.load, pairing, max_event_bytes)
        self.events_pos = states.offsets().get("events", 0)
        self._checkpointed = self.events_pos
        self.dirty: set[str] = set()
        self._last_checkpoint = time.monotonic()
        self._checkpoint_cost = 0.0  # seconds the last checkpoint that wrote took
        # Checkpoints are written in the order they were taken (``write_checkpoint``).
        self._turn = threading.Condition()
        self._taken = self._written = 0
        self._failed: BaseException | None = None

    # -- one step ---------------------------------------------------------------------

    def step(self) -> int:
        """Apply one batch of the topic; returns how many records were read."""
        n = self.apply_at_most(self.batch_size)
        self.maybe_checkpoint(catching_up=n == self.batch_size)
        return n

    def step_taking(self) -> tuple[int, TakenCheckpoint | None]:
        """``step``, a checkpoint that falls due taken but not written (``write_checkpoint``)."""
        n = self.apply_at_most(self.batch_size)
        return n, self.take_checkpoint() if self.checkpoint_due(catching_up=n == self.batch_size) else None

    def apply_at_most(self, most: int) -> int:
        """Apply the next ``most`` records at most, without a checkpoint."""
        records = self.bus.read(self.events_pos, most)
        self._apply_records(records)
        return len(records)

    def apply_few(self, most: int) -> bool:
        """Apply what the topic holds if that is ``most`` records at most (one read, no
        checkpoint: a read answered on the HTTP event loop applies an agent step's records
        and nothing more); ``False``, having applied nothing, when more are waiting."""
        records = self.bus.read(self.events_pos, most + 1)
        if len(records) > most:
            return False
        self._apply_records(records)
        return True

    def _apply_records(self, records: list[Record]) -> None:
        if not records:
            return
        t0 = time.perf_counter()
        result = self.pipeline.process(records)
        self._hand_off(result)
        self.events_pos = records[-1].offset
        METRICS.batch_seconds.observe(time.perf_counter() - t0)

    def _hand_off(self, result: BatchResult) -> None:
        """The batch to the accepted queue (before the position moves past it), its
        rejections and conflicting duplicates to the dead letters."""
        try:
            self.queue.append(result)
        except Exception as error:  # noqa: BLE001 - state.db refused: retried from the checkpoint
            raise StoreUnavailable("state", error) from error
        letters = [(r.value, why.reason) for r, why in result.rejected]  # bypassed publish checks
        letters += self._conflicts(result.duplicates)
        if letters:
            self.bus.append((), letters)
        self.dirty |= result.touched
        METRICS.processed(result)
        if log.isEnabledFor(logging.DEBUG):
            for a in result.applied:
                log.debug("applied thread=%s event=%s kind=%s", a.event.thread_id, a.event.event_id, a.event.kind)
        for record, event in result.duplicates:
            log.info("duplicate thread=%s event=%s offset=%d ignored", event.thread_id, event.event_id, record.offset)

    def apply_pending(self, checkpoint: bool = True) -> int:
        """Apply everything the topic holds now (what a read does first: no sink is
        written here, so this costs the processing alone); ``checkpoint=False``: leave a
        checkpoint that falls due to the loop that takes them (``agentlog run``'s)."""
        applied = 0
        while True:
            n = self.step() if checkpoint else self.apply_at_most(self.batch_size)
            applied += n
            # Fewer than a batch: the read saw the whole topic (what it holds now), and a
            # second read, one more query on every agent step, would find nothing.
            if n == 0 or n < self.batch_size:
                return applied

    def _conflicts(self, duplicates: Sequence[tuple[Record, Envelope]]) -> list[tuple[bytes, str]]:
        """Duplicates whose content differs from the first copy (publishers racing past
        the publish-time check): dead letters, not silent drops."""
        if not duplicates:
            return []
        return [(r.value, why) for r, why in conflicts(duplicates, self._first_copy)]

    def _first_copy(self, event_id: str) -> bytes | None:
        first = self.bus.find(event_id)
        return None if first is None else first.value

    def maybe_checkpoint(self, catching_up: bool = False) -> None:
        if self.checkpoint_due(catching_up):
            self.checkpoint()

    def checkpoint_due(self, catching_up: bool = False) -> bool:
        """Every ``checkpoint_s``; while ``catching_up`` (the last read filled a batch),
        not before the last checkpoint's cost is ``CHECKPOINT_SHARE`` of the time since."""
        every = self.checkpoint_s
        if catching_up:
            every = max(every, self._checkpoint_cost / CHECKPOINT_SHARE)
        return time.monotonic() - self._last_checkpoint >= every

    # -- durability -------------------------------------------------------------------

    def checkpoint(self) -> None:
        """Take a checkpoint and write it, after every one taken before it (the caller
        holds the processor's lock)."""
        taken = self.take_checkpoint()
        if taken is not None:
            self.write_checkpoint(taken)
        else:  # nothing new; what was taken before is written before this returns
            self.wait_written()

    def wait_written(self) -> None:
        """Until every checkpoint taken so far is written (or its write failed)."""
        with self._turn:
            self._turn.wait_for(lambda: self._written == self._taken)

    def take_checkpoint(self) -> TakenCheckpoint | None:
        """A checkpoint of the state as it is now, its snapshots encoded (the caller holds
        the processor's lock, so nothing changes them meanwhile); ``None``: nothing is new
        since the last one. Its write (``write_checkpoint``) needs no lock of the caller's:
        the processor's loop writes it after letting the lock go, so a request that comes
        meanwhile waits for the encoding only, not for the store."""
        if not self.dirty and not self.seen.since_checkpoint and self.events_pos == self._checkpointed:
            self._last_checkpoint = time.monotonic()
            return None  # nothing new: reads that catch up first cost no write
        t0 = time.monotonic()
        rows = self.states.encode([self.pipeline.threads[t].snapshot() for t in self.dirty])
        self._taken += 1
        taken = TakenCheckpoint(self._taken, rows, self.seen.take(), {"events": self.events_pos})
        self._checkpointed = self.events_pos
        self.dirty.clear()
        self._last_checkpoint = time.monotonic()
        self._checkpoint_cost = self._last_checkpoint - t0
        return taken

    def write_checkpoint(self, taken: TakenCheckpoint) -> None:
        """Write ``taken`` once every checkpoint taken before it is written: a later one
        holds only the threads changed since the earlier, so it must never land first.
        After a failed write no later one is written (each would build on what is not
        there): the processor starts again from the last one written."""
        with self._turn:
            self._turn.wait_for(lambda: self._written == taken.seq - 1)
            try:
                if self._failed is not None:
                    raise StoreUnavailable("state", self._failed)
                t0 = time.monotonic()
                self.states.write(taken.rows, list(taken.seen), taken.offsets)
                self._checkpoint_cost += time.monotonic() - t0
                self.seen.written(taken.seen)
            except BaseException as error:
                self._failed = self._failed or error
                raise
            finally:
                self._written = taken.seq
                self._turn.notify_all()

    def pending(self) -> int:
        return max(0, self.bus.end_offsets()[0] - self.events_pos)

    def run_until_idle(self, on_progress: Callable[[int, int], None] | None = None) -> Progress:
        """Apply everything pending and checkpoint (the sinks are the sink stage's)."""
        progress = Progress()
        total = self.pending()
        while n := self.step():
            progress.processed += n
            if on_progress:
                on_progress(progress.processed, max(total, progress.processed))
        self.checkpoint()
        return progress


__all__ = ["CHECKPOINT_SHARE", "CheckpointedSeen", "EmbeddedDriver", "Progress", "TakenCheckpoint"]
