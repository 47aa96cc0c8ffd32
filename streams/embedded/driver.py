"""The embedded driver: the same processors as the faust app, driven in-process.

One step reads a batch from the topic, runs ``agentlog.processors.pipeline`` and writes the
sinks; a checkpoint (every ``checkpoint_s`` and when idle) commits thread snapshots,
applied ids and positions together. Sinks are written before the checkpoint and are
idempotent on replay (the log skips offsets below its high-water mark, the index upserts
by ``event_id``, pair rows are versioned), so a crash loses and doubles nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from agentlog.processors.duplicates import conflicts
from agentlog.processors.pipeline import Applied, BatchResult, Pipeline, Record
from agentlog.processors.records import log_rows, search_docs
from agentlog.processors.thread import PairingConfig
from agentlog.processors.validation import bounded_letter
from agentlog.schemas.events import MAX_EVENT_BYTES, Envelope
from agentlog.sinks.base import LogWriter, SearchIndex, StateStore, Topic
from agentlog.schemas.tables import rejected_row
from agentlog.streams.metrics import METRICS
from agentlog.streams.sink_guard import StoreUnavailable, write_isolating

log = logging.getLogger("agentlog.driver")


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
    def __init__(
        self,
        bus: Topic,
        log_store: LogWriter,
        index: SearchIndex,
        states: StateStore,
        pairing: PairingConfig = PairingConfig(),
        batch_size: int = 5000,
        checkpoint_s: float = 2.0,
        refresh_s: float = 1.0,
        max_event_bytes: int = MAX_EVENT_BYTES,
    ) -> None:
        self.bus, self.log, self.index, self.states = bus, log_store, index, states
        self.batch_size = batch_size
        self.checkpoint_s = checkpoint_s
        self.refresh_s = refresh_s
        self.max_event_bytes = max_event_bytes
        self.seen = CheckpointedSeen(states)
        self.pipeline = Pipeline(self.seen, states.load, pairing, max_event_bytes)
        positions = states.offsets()
        self.events_pos = positions.get("events", 0)
        self.dlq_pos = positions.get("dlq", 0)
        self._checkpointed = {"events": self.events_pos, "dlq": self.dlq_pos}
        # Offsets at or below these are already in the log (written before a crash).
        self.log_events_hw = log_store.high_water("events").get(0, 0)
        self.log_rejected_hw = log_store.high_water("rejected_events").get(0, 0)
        self.dirty: set[str] = set()
        self._last_checkpoint = self._last_refresh = time.monotonic()

    # -- one step ---------------------------------------------------------------------

    def step(self) -> int:
        """Process one batch of each topic; returns how many records were read."""
        t0 = time.perf_counter()
        records = self.bus.read(self.events_pos, self.batch_size)
        if records:
            result = self.pipeline.process(records)
            self._write(result)
            self.events_pos = records[-1].offset
            METRICS.batch_seconds.observe(time.perf_counter() - t0)
        letters = self.bus.read_dlq(self.dlq_pos, self.batch_size)
        if letters:
            rows = [
                rejected_row(*bounded_letter(d.value, d.reason, self.max_event_bytes), 0, d.offset, d.appended_at)
                for d in letters
                if d.offset > self.log_rejected_hw
            ]
            self._write_rejected(rows)
            METRICS.rejected.inc(len(letters))
            self.dlq_pos = letters[-1].offset
        self.maybe_flush()
        return len(records) + len(letters)

    def _write(self, result: BatchResult) -> None:
        # Offsets at or below the log's high-water mark were written before a crash.
        letters = write_isolating(
            "log", lambda xs: self.log.append_events(log_rows(xs, lambda a: a.record.offset <= self.log_events_hw)),
            result.applied, _raw_of,
        )  # fmt: skip
        try:
            self.log.upsert_pairs([p.row() for p in result.pairs])
        except Exception as error:  # noqa: BLE001 - pair rows are derived, never poison
            raise StoreUnavailable("log", error) from error
        refused = {raw for raw, _ in letters}  # what the log refused is not indexed either
        logged = [a for a in result.applied if a.record.value not in refused] if refused else result.applied
        letters += write_isolating("index", lambda xs: self.index.add(search_docs(xs)), logged, _raw_of)
        letters += [(r.value, why.reason) for r, why in result.rejected]  # bypassed publish checks
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

    def _write_rejected(self, rows: list[dict[str, Any]]) -> None:
        """Dead letters into the log; one the log refuses is kept by its reason alone
        (the topic's ``dlq`` still holds its bytes)."""
        refused = write_isolating("log", self.log.append_rejected, rows, lambda r: r["raw"])
        if refused:
            by_raw = {raw: why for raw, why in refused}
            kept = [{**r, "raw": b"", "reason": f"{r['reason']}; bytes not stored: {by_raw[r['raw']]}"}
                    for r in rows if r["raw"] in by_raw]  # fmt: skip
            try:
                self.log.append_rejected(kept)
            except Exception as error:  # noqa: BLE001
                raise StoreUnavailable("log", error) from error

    def _conflicts(self, duplicates: Sequence[tuple[Record, Envelope]]) -> list[tuple[bytes, str]]:
        """Duplicates whose content differs from the first copy (publishers racing past
        the publish-time check): dead letters, not silent drops."""
        if not duplicates:
            return []
        return [(r.value, why) for r, why in conflicts(duplicates, self._first_copy)]

    def _first_copy(self, event_id: str) -> bytes | None:
        first = self.bus.find(event_id)
        return None if first is None else first.value

    def maybe_flush(self) -> None:
        now = time.monotonic()
        if now - self._last_refresh >= self.refresh_s:
            self.index.tick()
            self._observe_refresh()
        if now - self._last_checkpoint >= self.checkpoint_s:
            self.checkpoint()

    # -- durability and visibility ----------------------------------------------------

    def refresh(self) -> None:
        self.index.refresh()
        self._observe_refresh()

    def _observe_refresh(self) -> None:
        self._last_refresh = time.monotonic()
        visible = self.index.visible_offsets().get(0, 0)
        METRICS.index_lag.set(max(0, self.events_pos - visible))

    def checkpoint(self) -> None:
        positions = {"events": self.events_pos, "dlq": self.dlq_pos}
        if not self.dirty and not self.seen.since_checkpoint and positions == self._checkpointed:
            self._last_checkpoint = time.monotonic()
            return  # nothing new: queries that catch up first cost no write
        # The index commits first: positions past documents a crash could still lose
        # would never add them again (the log and pairs are written synchronously).
        self.refresh()
        snapshots = [self.pipeline.threads[t].snapshot() for t in self.dirty]
        self.states.checkpoint(snapshots, list(self.seen.since_checkpoint), positions)
        self._checkpointed = positions
        self.seen.since_checkpoint.clear()
        self.dirty.clear()
        self._last_checkpoint = time.monotonic()

    def pending(self) -> int:
        end_events, end_dlq = self.bus.end_offsets()
        return max(0, end_events - self.events_pos) + max(0, end_dlq - self.dlq_pos)

    def run_until_idle(self, on_progress: Callable[[int, int], None] | None = None) -> Progress:
        """Drain everything pending, flush every sink and the index, checkpoint, return."""
        progress = Progress()
        total = self.pending()
        while True:
            n = self.step()
            if n == 0:
                break
            progress.processed += n
            if on_progress:
                on_progress(progress.processed, max(total, progress.processed))
        self.refresh()
        self.checkpoint()
        return progress


def _raw_of(applied: Applied) -> bytes:
    return applied.record.value


__all__ = ["CheckpointedSeen", "EmbeddedDriver", "Progress"]
