"""The embedded ``accepted`` queue: what the processor applied, for the sink stage to write.

Kafka's ``agentlog.accepted`` topic on one machine: a table in ``state.db``. The processor
appends one row per batch it applied (the applied records' topic offsets with what only
it knows of them, window and tool name, plus the batch's pair rows) before its position
moves past them; the sink stage reads rows after its own committed position, writes the
log, pairs and index, and commits that position once the index has committed too.

Being in ``state.db`` ties the queue's fate to the processor's checkpoint: a ``state.db``
that is lost takes both, and the data directory rebuilds everything from the topic. A
processor that crashes between checkpoints applies the same records again from its last
checkpoint and appends the same items again; the sinks take them again idempotently (the
log skips offsets below its high-water mark, the index upserts by ``event_id``, pair rows
are versioned).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from agentlog.processors.pipeline import BatchResult
from agentlog.sinks import sqlite_db

_SCHEMA = """
CREATE TABLE IF NOT EXISTS accepted (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    events INTEGER NOT NULL,
    body BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS sink_positions (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""


@dataclass(frozen=True, slots=True)
class AcceptedBatch:
    """One processor batch as the sinks need it: ``applied`` holds ``(offset, window_id,
    tool_name)`` of each applied record, in order; ``pairs`` the batch's pair rows."""

    seq: int
    applied: list[tuple[int, str, str | None]]
    pairs: list[dict[str, Any]]


def batch_body(result: BatchResult) -> bytes | None:
    """The queue row of a processed batch, or None when it applied nothing and paired nothing."""
    if not result.applied and not result.pairs:
        return None
    return orjson.dumps({
        "a": [(a.record.offset, a.window_id, a.tool_name) for a in result.applied],
        "p": [p.row() for p in result.pairs],
    })  # fmt: skip


class AcceptedQueue:
    """The ``accepted`` table and the sink stage's positions. Each user (the processor, the
    sink stage) opens its own instance; several processes may share the file."""

    def __init__(self, path: str) -> None:
        self.path = path
        # Appended and read in order: a small page cache is enough.
        self._db = sqlite_db.connect(path, timeout=60, cache_kib=sqlite_db.READ_CACHE_KIB)
        self._db.executescript(_SCHEMA)
        self._lock = threading.Lock()

    def append(self, result: BatchResult) -> None:
        body = batch_body(result)
        if body is None:
            return
        with self._lock:
            self._db.execute("INSERT INTO accepted (events, body) VALUES (?, ?)", (len(result.applied), body))

    def read(self, after: int, max_events: int, through: int | None = None) -> list[AcceptedBatch]:
        """Rows after ``after`` (and up to ``through``) in order, up to about ``max_events``
        applied records (at least one row)."""
        last = (1 << 63) - 1 if through is None else through
        with self._lock:
            rows = self._db.execute(
                "SELECT seq, events, body FROM accepted WHERE seq > ? AND seq <= ? ORDER BY seq LIMIT 1000",
                (after, last),
            ).fetchall()
        out: list[AcceptedBatch] = []
        total = 0
        for seq, events, body in rows:
            if out and total + events > max_events:
                break
            parsed = orjson.loads(body)
            out.append(AcceptedBatch(seq, [tuple(a) for a in parsed["a"]], parsed["p"]))  # type: ignore[misc]
            total += events
        return out

    def newest_offset(self) -> int:
        """The topic offset of the last record the processor queued (-1 if none is queued)."""
        with self._lock:
            row = self._db.execute("SELECT body FROM accepted ORDER BY seq DESC LIMIT 1").fetchone()
        applied = orjson.loads(row[0])["a"] if row is not None else []
        return applied[-1][0] if applied else -1

    def backlog(self, after: int) -> tuple[int, int]:
        """(rows, applied records) after ``after``: what the sinks have not written yet."""
        with self._lock:
            rows, events = self._db.execute(
                "SELECT count(*), coalesce(sum(events), 0) FROM accepted WHERE seq > ?", (after,)
            ).fetchone()
        return int(rows), int(events)

    def end(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT coalesce(max(seq), 0) FROM accepted").fetchone()[0])

    def positions(self) -> dict[str, int]:
        """The sink stage's committed positions: ``accepted`` (a seq), ``dlq`` (a topic offset)
        and ``logged`` (the log's events high-water mark when they were committed)."""
        with self._lock:
            return dict(self._db.execute("SELECT name, value FROM sink_positions"))

    def commit(self, positions: dict[str, int]) -> None:
        """Commit the sink stage's positions and drop the rows they cover, in one transaction."""
        with self._lock, sqlite_db.transaction(self._db) as db:
            db.executemany("INSERT OR REPLACE INTO sink_positions VALUES (?, ?)", positions.items())
            db.execute("DELETE FROM accepted WHERE seq <= ?", (positions["accepted"],))

    def reset(self) -> None:
        """Forget every row and position (a rebuild from the topic refills the queue)."""
        with self._lock:
            self._db.executescript("DELETE FROM accepted; DELETE FROM sink_positions;")

    def close(self) -> None:
        with self._lock:
            self._db.close()


def applied_offsets(batches: Sequence[AcceptedBatch]) -> list[tuple[int, str, str | None]]:
    """The applied records of ``batches``, each offset once: a processor that crashed
    between its hand-off and its checkpoint hands the same records over again, and both
    copies may land in one group, where the log's high-water mark does not tell them apart."""
    seen: set[int] = set()
    out: list[tuple[int, str, str | None]] = []
    for b in batches:
        for a in b.applied:
            if a[0] not in seen:
                seen.add(a[0])
                out.append(a)
    return out


__all__ = ["AcceptedBatch", "AcceptedQueue", "applied_offsets", "batch_body"]
