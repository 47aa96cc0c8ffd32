"""The embedded driver: the same processors as the faust app, driven in-process.

One step reads a batch from the topic, runs ``agentlog.processors.pipeline`` (the events
are then visible to ``state`` and ``context``) and appends what the sinks need to the
``accepted`` queue (``agentlog.streams.embedded.accepted``), which the sink stage writes
off the read path (``agentlog.streams.embedded.sink_stage``). A checkpoint (every
``checkpoint_s``; while a backlog is applied, spaced by its own cost: ``CHECKPOINT_SHARE``)
commits thread snapshots, applied ids and the position together; the queue's rows for a batch are committed before the position moves past it, so a crash
replays from the checkpoint into the same rows (the sinks take them again idempotently).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from agentlog.processors.duplicates import conflicts
from agentlog.processors.pipeline import BatchResult, Pipeline, Record
from agentlog.processors.thread import PairingConfig
from agentlog.schemas.events import MAX_EVENT_BYTES, Envelope
from agentlog.sinks.base import StateStore, Topic
from agentlog.streams.embedded.accepted import AcceptedQueue
from agentlog.streams.batch_log import log_batch
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
    """Applied ids: those of the last checkpoint (in the state store) plus those since."""

    def __init__(self, store: StateStore) -> None:
        self.store = store
        self.since_checkpoint: set[str] = set()

    def unseen(self, ids: Sequence[str]) -> set[str]:
        fresh = {i for i in ids if i not in self.since_checkpoint}
        return self.store.unseen(list(fresh)) if fresh else fresh

    def add(self, ids: Iterable[str]) -> None:
        self.since_checkpoint.update(ids)


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

    # -- one step ---------------------------------------------------------------------

    def step(self) -> int:
        """Apply one batch of the topic; returns how many records were read."""
        n = self.apply_at_most(self.batch_size)
        self.maybe_checkpoint(catching_up=n == self.batch_size)
        return n

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
        log_batch(result)

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
        if not self.dirty and not self.seen.since_checkpoint and self.events_pos == self._checkpointed:
            self._last_checkpoint = time.monotonic()
            return  # nothing new: reads that catch up first cost no write
        t0 = time.monotonic()
        snapshots = [self.pipeline.threads[t].snapshot() for t in self.dirty]
        self.states.checkpoint(snapshots, list(self.seen.since_checkpoint), {"events": self.events_pos})
        self._checkpointed = self.events_pos
        self.seen.since_checkpoint.clear()
        self.dirty.clear()
        self._last_checkpoint = time.monotonic()
        self._checkpoint_cost = self._last_checkpoint - t0

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


__all__ = ["CHECKPOINT_SHARE", "CheckpointedSeen", "EmbeddedDriver", "Progress"]
