"""The embedded sink stage: the ``accepted`` queue into the chDB log, pair rows and the index.

Off the read path: the processor applies an event in memory and appends it to the queue;
this stage writes the sinks in groups (group commit: when ``AGENTLOG_SINK_FLUSH_ROWS``
applied records are waiting, or the oldest has waited ``AGENTLOG_SINK_FLUSH_MS``), commits
the index every ``AGENTLOG_REFRESH_SECONDS`` and then its own positions. It also copies the
topic's dead letters into ``rejected_events``.

The queue holds offsets, not copies: the stage reads each applied record's bytes from
the topic and encodes its log row and search document as a Kafka processor does
(``agentlog.streams.embedded.encoding``: parsed again, without the hostile-input checks
the processor already made; at a catch-up's end on helper processes too), so the
processor does not pay for rows and documents.

Every write is idempotent, so a crash between a write and the commit of the position
that covers it only writes the same rows again: the log skips offsets at or below its
high-water mark, the index upserts by ``event_id``, pair rows are versioned.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from orjson import Fragment

from agentlog.processors.pipeline import Record
from agentlog.processors.validation import bounded_letter
from agentlog.schemas.events import MAX_EVENT_BYTES
from agentlog.schemas.tables import rejected_row
from agentlog.sinks.base import LogWriter, SearchIndex, StateStore, Topic
from agentlog.streams.embedded.accepted import AcceptedBatch, AcceptedQueue, applied_offsets
from agentlog.streams.embedded.encoding import Encoder, Encoding, Wanted
from agentlog.streams.kafka.accepted import Item
from agentlog.streams.metrics import METRICS
from agentlog.streams.sink_guard import StoreUnavailable, write_isolating

log = logging.getLogger("agentlog.sinks")


CATCH_UP_REFRESH_S = 15.0
"""How often the index is committed while a backlog of more than a group waits."""

CATCH_UP_GROUP = 2
"""While a backlog of more than a group waits, groups are this many times larger: each
group is a part of the chDB log that its merges rewrite later. Over 300,000 events, groups
of 20,000 instead of 5,000 cut chDB's merge threads from 2.5-3.0 to 1.0-1.1 s of CPU; but
two groups are in memory at once (one written, the next encoded), and over a million
events the sink process peaked at 980-1,050 MiB with groups of 20,000, 770 with 10,000 and
680 with 5,000, at the same throughput (served run, side by side): twice is the balance."""


@dataclass(frozen=True, slots=True)
class FlushPolicy:
    """When the sink stage writes (group commit) and commits the index."""

    rows: int = 5000
    seconds: float = 0.2
    refresh_s: float = 1.0
    max_event_bytes: int = MAX_EVENT_BYTES


class SinkStage:
    def __init__(self, queue: AcceptedQueue, bus: Topic, log_store: LogWriter, index: SearchIndex,
                 policy: FlushPolicy = FlushPolicy(), legacy: StateStore | None = None,
                 encoder: Encoder | None = None) -> None:  # fmt: skip
        self.queue, self.bus, self.log, self.index, self.policy = queue, bus, log_store, index, policy
        self.encoder = encoder or Encoder(helpers=0)  # every group encoded here unless given helpers
        committed = queue.positions()
        # A data directory from before the queue kept the dead-letter position with the processor's.
        legacy_dlq = legacy.offsets().get("dlq", 0) if legacy is not None and "dlq" not in committed else 0
        self.pos = committed.get("accepted", 0)
        self.dlq_pos = committed.get("dlq", legacy_dlq)
        self._committed = {"accepted": self.pos, "dlq": self.dlq_pos}
        self._read_high_water()
        self.letters_read = 0  # dead letters copied to the log by this instance
        self.groups_written = 0  # group commits by this instance
        self.backlog = 0  # applied events waiting, as last counted
        self._waiting_since: float | None = None
        self._last_refresh = time.monotonic()

    def _read_high_water(self) -> None:
        # Offsets at or below these are already in the log (written before a crash).
        self.logged = self.log.high_water("events").get(0, 0)
        self.rejected_hw = self.log.high_water("rejected_events").get(0, 0)

    # -- one round ----------------------------------------------------------------------

    def step(self, force: bool = False) -> int:
        """Write what is due (everything queued when ``force``), commit when the refresh
        interval has passed; returns the records written."""
        # A commit writes what waits first: an event waits for at most one refresh interval
        # to be searchable, whatever the group commit's own cadence.
        refresh_due = self._refresh_due()
        n = self._write_due(force or refresh_due) + self._write_dead_letters()
        if self._refresh_due():
            self.commit()  # unless the write committed already
        return n

    def _refresh_due(self) -> bool:
        """Whether the index is due a commit: every refresh interval, or every
        ``CATCH_UP_REFRESH_S`` while a backlog of more than a group waits (each commit
        makes a segment that tantivy merges later: one a second cost a million-event catch-up
        12% of its throughput, side by side)."""
        catching_up = self.backlog >= self.policy.rows
        every = max(self.policy.refresh_s, CATCH_UP_REFRESH_S) if catching_up else self.policy.refresh_s
        return time.monotonic() - self._last_refresh >= every

    def _write_due(self, force: bool) -> int:
        rows, events = self.queue.backlog(self.pos)
        self.backlog = events
        if rows == 0:
            self._waiting_since = None
            return 0
        now = time.monotonic()
        if self._waiting_since is None:
            self._waiting_since = now
        due = force or events >= self.policy.rows or now - self._waiting_since >= self.policy.seconds
        if not due:
            return 0
        # This group is what is queued now. Rows that arrive while it is written wait for
        # a group of their own (by size or time): under steady traffic a loop that read on
        # until the queue was empty wrote a few events at a time back to back, one core
        # busy for good, and never reached the index commit below while the traffic lasted.
        through = self.queue.end()
        catching_up = events > self.policy.rows
        group = self.policy.rows * (CATCH_UP_GROUP if catching_up else 1)
        written = 0
        ahead = self._start_group(self.pos, group, through, catching_up)
        while ahead is not None:
            batches, encoding = ahead
            ahead = self._start_group(batches[-1].seq, group, through, catching_up)
            written += self._write(batches, encoding)
            self.pos = batches[-1].seq
            if self._refresh_due():
                self.commit()  # a long backlog becomes searchable as it is written, on cadence
        self._waiting_since = None
        return written

    def _start_group(self, after: int, group: int, through: int,
                     catching_up: bool) -> tuple[list[AcceptedBatch], Encoding] | None:  # fmt: skip
        """The queue rows of the group after ``after``, their encoding started. At a
        catch-up's end the processor is done: helpers encode the group while the one
        before it is written, and the second core is not left idle."""
        batches = self.queue.read(after, group, through) if after < through else []
        if not batches:
            return None
        share = catching_up and self.encoder.helpers > 0 and self._processor_done()
        return batches, self.encoder.start(self._wanted(batches), share)

    def _processor_done(self) -> bool:
        """Whether the processor has applied about everything the topic holds (what it
        queued last is within a group of the topic's end)."""
        return self.bus.end_offsets()[0] - self.queue.newest_offset() <= self.policy.rows

    def _write(self, batches: list[AcceptedBatch], encoding: Encoding) -> int:
        t0 = time.perf_counter()
        encoded = list(zip(encoding.records, encoding.items()))
        try:
            letters = write_isolating(
                "log", lambda xs: self.log.append_events([Fragment(i.row) for r, i in xs if r.offset > self.logged]),
                encoded, _raw_of,
            )  # fmt: skip
            try:
                self.log.upsert_pairs([p for b in batches for p in b.pairs])
            except Exception as error:  # noqa: BLE001 - pair rows are derived, never poison
                raise StoreUnavailable("log", error) from error
        except BaseException:
            self._read_high_water()  # part of the group may be in the log already
            raise
        if encoded:
            self.logged = max(self.logged, max(r.offset for r, _ in encoded))
        refused = {raw for raw, _ in letters}  # what the log refused is not indexed either
        indexed = [e for e in encoded if e[0].value not in refused] if refused else encoded
        letters += write_isolating(
            "index", lambda xs: self.index.add_encoded([(i.event_id, i.doc) for _, i in xs]), indexed, _raw_of
        )
        if letters:
            self.bus.append((), letters)
        METRICS.sink_seconds.observe(time.perf_counter() - t0)
        self.groups_written += 1
        return len(encoded)

    def _wanted(self, batches: list[AcceptedBatch]) -> list[Wanted]:
        """The applied records of these queue rows, read back from the topic, with their
        window and tool name."""
        wanted = applied_offsets(batches)
        if not wanted:
            return []
        first, last = min(o for o, _, _ in wanted), max(o for o, _, _ in wanted)
        records = {r.offset: r for r in self._read_span(first, last)}
        return [(records[offset], window_id, tool_name) for offset, window_id, tool_name in wanted]

    def _read_span(self, first: int, last: int) -> list[Record]:
        out: list[Record] = []
        after = first - 1
        while after < last:
            chunk = self.bus.read(after, min(last - after, 20_000))
            if not chunk:
                break
            out += chunk
            after = chunk[-1].offset
        return out

    def _write_dead_letters(self) -> int:
        letters = self.bus.read_dlq(self.dlq_pos, self.policy.rows)
        if not letters:
            return 0
        rows = [
            rejected_row(*bounded_letter(d.value, d.reason, self.policy.max_event_bytes), 0, d.offset, d.appended_at)
            for d in letters
            if d.offset > self.rejected_hw
        ]
        self._write_rejected(rows)
        METRICS.rejected.inc(len(letters))
        self.dlq_pos = letters[-1].offset
        self.letters_read += len(letters)
        return len(letters)

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
        if rows:
            self.rejected_hw = max(self.rejected_hw, max(r["offset"] for r in rows))

    # -- durability and visibility ------------------------------------------------------

    def commit(self) -> None:
        """Commit the index, then the positions it covers (never positions past documents a
        crash could still lose)."""
        self.index.refresh()
        self._last_refresh = time.monotonic()
        positions = {"accepted": self.pos, "dlq": self.dlq_pos}
        if positions != self._committed:
            self.queue.commit({**positions, "logged": self.logged})
            self._committed = positions
        METRICS.sink_lag.set(self.lag())

    def drain(self) -> int:
        """Write everything queued and every dead letter, commit the index and positions."""
        written = 0
        while n := self._write_due(True) + self._write_dead_letters():
            written += n
        self.commit()
        return written

    def written(self) -> tuple[int, int]:
        """The (accepted, dlq) positions written so far (searchable at the next commit)."""
        return self.pos, self.dlq_pos

    def committed(self) -> tuple[int, int]:
        """The (accepted, dlq) positions committed so far: written and searchable."""
        return self._committed["accepted"], self._committed["dlq"]

    def lag(self) -> int:
        """Applied records not written yet."""
        return self.queue.backlog(self.pos)[1]

    def pending(self) -> int:
        return self.lag() + max(0, self.bus.end_offsets()[1] - self.dlq_pos)


def _raw_of(encoded: tuple[Record, Item]) -> bytes:
    return encoded[0].value


__all__ = ["CATCH_UP_GROUP", "CATCH_UP_REFRESH_S", "FlushPolicy", "SinkStage"]
