"""The embedded event topic: a durable on-disk log in SQLite (WAL), Kafka's role on one
machine. Two topics, as in the distributed deployment: ``events`` (Kafka
``agent.events``) and the dead letters ``dlq`` (``agent.events.dlq``). Records get increasing offsets; consumers keep their
own positions (``agentlog.sinks.sqlite_state``), so the log is read as Kafka is read.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from agentlog.processors.pipeline import Record
from agentlog.sinks import sqlite_db
from agentlog.sinks.base import DeadLetter, Topic

_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    offset INTEGER PRIMARY KEY AUTOINCREMENT,
    thread_id TEXT NOT NULL,
    event_id TEXT NOT NULL,
    value BLOB NOT NULL,
    appended_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_id ON events (event_id);
CREATE INDEX IF NOT EXISTS events_by_thread ON events (thread_id, offset);
CREATE TABLE IF NOT EXISTS dlq (
    offset INTEGER PRIMARY KEY AUTOINCREMENT,
    value BLOB NOT NULL,
    reason TEXT NOT NULL,
    appended_at REAL NOT NULL
);
"""
_RECORDS = "SELECT offset, value FROM events "


class SqliteEventBus(Topic):
    """Append and read the embedded topics. Several processes may append at once."""

    def __init__(self, path: str, cache_kib: int = sqlite_db.CACHE_KIB) -> None:
        """``cache_kib``: ``sqlite_db.READ_CACHE_KIB`` for a consumer that only reads (and
        appends the odd dead letter); the default suits publishers (random-key index inserts)."""
        self.path = path
        self._db = sqlite_db.connect(path, timeout=60, cache_kib=cache_kib)
        self._db.executescript(_SCHEMA)
        self._db.execute("SELECT max(offset) FROM events").fetchone()  # a corrupt file fails on open
        self._lock = threading.Lock()

    def append(
        self, accepted: Sequence[tuple[str, str, bytes]], rejected: Sequence[tuple[bytes, str]] = ()
    ) -> int:
        """Append (thread_id, event_id, bytes) records and dead letters in one transaction.

        Returns the offset of the last accepted record (0 if none).
        """
        now = time.time()
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany(
                    "INSERT INTO events (thread_id, event_id, value, appended_at) VALUES (?,?,?,?)",
                    ((t, e, v, now) for t, e, v in accepted),
                )
                self._db.executemany(
                    "INSERT INTO dlq (value, reason, appended_at) VALUES (?,?,?)",
                    ((v, r, now) for v, r in rejected),
                )
                last = self._db.execute("SELECT max(offset) FROM events").fetchone()[0] or 0
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return int(last)

    def _records(self, sql: str, *params: object) -> list[Record]:
        """``(offset, value)`` rows of ``events`` as records (one partition: 0)."""
        with self._lock:
            rows = self._db.execute(sql, params).fetchall()
        return [Record(0, o, v) for o, v in rows]

    def read(self, after: int, limit: int) -> list[Record]:
        return self._records(_RECORDS + "WHERE offset > ? ORDER BY offset LIMIT ?", after, limit)

    def read_dlq(self, after: int, limit: int) -> list[DeadLetter]:
        with self._lock:
            rows = self._db.execute(
                "SELECT offset, value, reason, appended_at FROM dlq WHERE offset > ? "
                "ORDER BY offset LIMIT ?",
                (after, limit),
            ).fetchall()
        return [DeadLetter(*r) for r in rows]

    def end_offsets(self) -> tuple[int, int]:
        """Highest offsets of (events, dlq)."""
        with self._lock:
            e = self._db.execute("SELECT max(offset) FROM events").fetchone()[0] or 0
            d = self._db.execute("SELECT max(offset) FROM dlq").fetchone()[0] or 0
        return int(e), int(d)

    def find(self, event_id: str) -> Record | None:
        found = self._records(_RECORDS + "WHERE event_id = ? ORDER BY offset LIMIT 1", event_id)
        return found[0] if found else None

    def first_copies(self, event_ids: Sequence[str]) -> dict[str, bytes]:
        """The first record of each of these event ids that the topic holds."""
        found: dict[str, bytes] = {}
        unique = list(dict.fromkeys(event_ids))
        with self._lock:
            for i in range(0, len(unique), 500):  # SQLite's bound on host parameters
                chunk = unique[i : i + 500]
                rows = self._db.execute(
                    "SELECT event_id, value FROM events WHERE event_id IN "
                    f"({','.join('?' * len(chunk))}) ORDER BY offset DESC",
                    chunk,
                ).fetchall()
                found.update(rows)  # descending offsets: the first copy is written last
        return found

    def thread_tail(self, thread_id: str, after: int, limit: int = 1000) -> list[Record]:
        """A thread's records after ``after``, oldest first (the newest ``limit`` of them)."""
        return self._records(
            f"SELECT * FROM ({_RECORDS} WHERE thread_id = ? AND offset > ? ORDER BY offset DESC LIMIT ?) "
            "ORDER BY offset", thread_id, after, limit,
        )  # fmt: skip

    def thread_ends(self) -> dict[str, int]:
        """Every thread with the offset of its newest record."""
        with self._lock:
            return dict(self._db.execute("SELECT thread_id, max(offset) FROM events GROUP BY thread_id"))

    def first_record(self, thread_id: str) -> Record | None:
        """A thread's first record (its project is the thread's, for memory's scope)."""
        found = self._records(_RECORDS + "WHERE thread_id = ? ORDER BY offset LIMIT 1", thread_id)
        return found[0] if found else None

    def thread_records(self, thread_id: str, after: int, upto: int) -> list[Record]:
        """A thread's records with ``after < offset <= upto``, oldest first."""
        return self._records(
            _RECORDS + "WHERE thread_id = ? AND offset > ? AND offset <= ? ORDER BY offset",
            thread_id, after, upto,
        )  # fmt: skip

    def seen_before(self, thread_id: str, event_ids: Sequence[str], upto: int) -> set[str]:
        """Which of ``event_ids`` the thread already holds at an offset up to ``upto``."""
        unique, seen = list(dict.fromkeys(event_ids)), set()
        with self._lock:
            for i in range(0, len(unique), 500):  # SQLite's bound on host parameters
                chunk = unique[i : i + 500]
                seen |= {row[0] for row in self._db.execute(
                    "SELECT DISTINCT event_id FROM events WHERE event_id IN (" + ",".join("?" * len(chunk)) +
                    ") AND thread_id = ? AND offset <= ?", (*chunk, thread_id, upto))}  # fmt: skip
        return seen

    def close(self) -> None:
        with self._lock:
            self._db.close()


__all__ = ["SqliteEventBus"]
