"""Working state of the embedded deployment: thread snapshots, applied event ids and
consumer positions in one SQLite database, so a checkpoint commits them atomically.

A crash between checkpoints replays from the last committed position; the snapshots
and the applied ids of that same checkpoint make the replay land on the same state.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from agentlog.schemas.snapshot import ThreadSnapshot
from agentlog.schemas.snapshot_json import SnapshotJson
from agentlog.sinks import sqlite_db
from agentlog.sinks.base import StateStore

_SCHEMA = """
CREATE TABLE IF NOT EXISTS thread_state (thread_id TEXT PRIMARY KEY, snapshot BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS applied (event_id TEXT PRIMARY KEY) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS positions (name TEXT PRIMARY KEY, next_offset INTEGER NOT NULL);
"""

_CHUNK = 900  # below SQLite's bound-parameter limit


class SqliteStateStore(StateStore):
    """``StateStore`` in ``state.db``. Safe to share between threads."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._db = sqlite_db.connect(path, timeout=30)
        self._db.executescript(_SCHEMA)
        # Read what every start needs now: a corrupt file fails on open, where the data
        # directory's check moves it aside and rebuilds it (``agentlog.streams.embedded.datadir``).
        self._db.execute("SELECT * FROM positions").fetchall()
        self._db.execute("SELECT event_id FROM applied LIMIT 1").fetchall()
        self._lock = threading.Lock()
        # A busy thread's snapshot is written again every checkpoint: its unchanged parts
        # are kept from the last one (``agentlog.schemas.snapshot_json``).
        self._json = SnapshotJson()

    def applied_count(self) -> int:
        """How many events the last checkpoint had applied (reads every id: not per query)."""
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM applied").fetchone()[0])

    def load(self, thread_id: str) -> ThreadSnapshot | None:
        with self._lock:
            row = self._db.execute(
                "SELECT snapshot FROM thread_state WHERE thread_id = ?", (thread_id,)
            ).fetchone()
        return None if row is None else ThreadSnapshot.model_validate_json(row[0])

    def threads(self) -> list[str]:
        with self._lock:
            return [r[0] for r in self._db.execute("SELECT thread_id FROM thread_state ORDER BY 1")]

    def unseen(self, ids: Sequence[str]) -> set[str]:
        remaining = set(ids)
        unique = list(remaining)
        with self._lock:
            for i in range(0, len(unique), _CHUNK):
                chunk = unique[i : i + _CHUNK]
                marks = ",".join("?" * len(chunk))
                for (found,) in self._db.execute(
                    f"SELECT event_id FROM applied WHERE event_id IN ({marks})", chunk
                ):
                    remaining.discard(found)
        return remaining

    def offsets(self) -> dict[str, int]:
        with self._lock:
            return dict(self._db.execute("SELECT name, next_offset FROM positions"))

    def checkpoint(
        self, snapshots: Sequence[ThreadSnapshot], seen: Sequence[str], offsets: dict[str, int]
    ) -> None:
        with self._lock, sqlite_db.transaction(self._db) as db:
            rows = [(s.state.thread_id, self._json.dumps(s).decode()) for s in snapshots]
            db.executemany("INSERT OR REPLACE INTO thread_state VALUES (?, ?)", rows)
            db.executemany("INSERT OR IGNORE INTO applied VALUES (?)", ((i,) for i in seen))
            db.executemany("INSERT OR REPLACE INTO positions VALUES (?, ?)", offsets.items())

    def reset(self) -> None:
        with self._lock:
            self._json.forget()
            self._db.executescript(
                "DELETE FROM thread_state; DELETE FROM applied; DELETE FROM positions;"
            )

    def close(self) -> None:
        with self._lock:
            self._db.close()


__all__ = ["SqliteStateStore"]
