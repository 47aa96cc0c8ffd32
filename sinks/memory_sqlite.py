"""Memory coordination and storage for the embedded deployment, in SQLite.

Leases and fencing need an atomic compare-and-set, which ClickHouse does not offer; a
SQLite ``BEGIN IMMEDIATE`` transaction is one, across processes on this machine. Each
operation below is one such transaction, so a claim, a commit of extracted candidates
with its watermark, and the publication of a view (pointer move + token check) are
each all-or-nothing. Time is passed in (``now``) so tests can pause a worker past its
lease without sleeping.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any

import orjson

from agentlog.processors.memory import Candidate, CommitSighting, Fact, FileTouch, Refusal, Revocation
from agentlog.sinks import sqlite_db
from agentlog.sinks.base import MemoryStore, StaleToken

_SCHEMA = """
CREATE TABLE IF NOT EXISTS extraction (
    thread_id TEXT PRIMARY KEY,
    watermark INTEGER NOT NULL DEFAULT 0,
    owner TEXT, lease_until REAL NOT NULL DEFAULT 0,
    attempts INTEGER NOT NULL DEFAULT 0, retry_at REAL NOT NULL DEFAULT 0,
    last_error TEXT, runs INTEGER NOT NULL DEFAULT 0
);
-- Keyed by the candidate's id: its source event (a ``fact`` event), or source event and
-- key (raw events, one candidate per key). Bodies are JSON, so a data directory written
-- before a field existed reads on with that field's default.
-- Where each thread's last extraction stopped (the offset it parsed through) and the few
-- records the next one needs instead of the thread's start (the calls later results
-- answer, the requests decisions answer, the last message, what set the commit).
CREATE TABLE IF NOT EXISTS extraction_context (thread_id TEXT PRIMARY KEY, upto INTEGER NOT NULL, records BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS candidates (
    source_event_id TEXT PRIMARY KEY, body TEXT NOT NULL, extracted_by TEXT NOT NULL,
    extracted_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS revocations (target_event_id TEXT PRIMARY KEY, body TEXT NOT NULL);
-- Revocations with the project they may withdraw sources of (``revocations`` holds those
-- stored before scoping): keyed by both, so one thread cannot pre-empt another project's.
CREATE TABLE IF NOT EXISTS scoped_revocations (
    target_event_id TEXT NOT NULL, project TEXT NOT NULL, body TEXT NOT NULL,
    PRIMARY KEY (target_event_id, project)
);
CREATE TABLE IF NOT EXISTS refused (event_id TEXT PRIMARY KEY, body TEXT NOT NULL);
-- The code version each project was seen at, from each change on (commit-range rechecks).
CREATE TABLE IF NOT EXISTS commit_sightings (
    project TEXT, commit_id TEXT, at_ms REAL, PRIMARY KEY (project, commit_id, at_ms)
);
CREATE TABLE IF NOT EXISTS file_touches (project TEXT, path TEXT, at_ms REAL, PRIMARY KEY (project, path, at_ms));
CREATE TABLE IF NOT EXISTS lease (
    name TEXT PRIMARY KEY, owner TEXT, token INTEGER NOT NULL, expires_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS views (
    version INTEGER PRIMARY KEY, token INTEGER NOT NULL, owner TEXT NOT NULL,
    facts TEXT NOT NULL, built_at REAL NOT NULL, published_at REAL
);
CREATE TABLE IF NOT EXISTS pointer (name TEXT PRIMARY KEY, version INTEGER NOT NULL, token INTEGER NOT NULL);
-- The runs of each phase, by whoever ran them (a command, `agentlog run`, a worker), for
-- `memory status` and /metrics: the last outcome, and failures (fenced ones apart).
CREATE TABLE IF NOT EXISTS runs (
    phase TEXT PRIMARY KEY, runs INTEGER NOT NULL DEFAULT 0, failures INTEGER NOT NULL DEFAULT 0,
    fenced INTEGER NOT NULL DEFAULT 0, running_since REAL, last_run REAL, last_ok REAL, last_error TEXT
);
"""

GLOBAL = "consolidation"


class SqliteMemoryStore(MemoryStore):
    def __init__(self, path: str) -> None:
        self._db = sqlite_db.connect(path, timeout=60)
        self._db.executescript(_SCHEMA)
        self._lock = threading.Lock()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    # -- phase 1: per-thread claims -----------------------------------------------------

    def claim(self, thread_id: str, owner: str, latest: int, now: float, lease_s: float) -> int | None:
        """Claim a thread's extraction; returns its watermark, or ``None`` if there is
        nothing new, another owner's lease is live, or a retry is not due yet."""
        with self._tx() as db:
            db.execute("INSERT OR IGNORE INTO extraction (thread_id) VALUES (?)", (thread_id,))
            watermark, holder, until, retry_at = db.execute(
                "SELECT watermark, owner, lease_until, retry_at FROM extraction WHERE thread_id = ?",
                (thread_id,),
            ).fetchone()
            if watermark >= latest or (holder and holder != owner and until > now) or retry_at > now:
                return None
            db.execute(
                "UPDATE extraction SET owner = ?, lease_until = ? WHERE thread_id = ?",
                (owner, now + lease_s, thread_id),
            )
            return int(watermark)

    def commit_extraction(
        self, thread_id: str, owner: str, watermark: int, candidates: Sequence[Candidate],
        revocations: Sequence[Revocation], touches: Sequence[FileTouch], now: float,
        refused: Sequence[Refusal] = (), commits: Sequence[CommitSighting] = (),
        context: Sequence[bytes] | None = None,
    ) -> bool:  # fmt: skip
        """Store what was extracted and move the watermark, if ``owner`` still holds the
        claim. Candidates are keyed by source event, so a repeat adds nothing."""
        with self._tx() as db:
            row = db.execute(
                "SELECT owner, lease_until FROM extraction WHERE thread_id = ?", (thread_id,)
            ).fetchone()
            if row is None or row[0] != owner or row[1] < now:
                return False
            db.executemany(
                "INSERT OR IGNORE INTO candidates VALUES (?, ?, ?, ?)",
                ((c.candidate_id, orjson.dumps(asdict(c)).decode(), owner, now) for c in candidates),
            )
            self._add_revocations(db, revocations)
            db.executemany(
                "INSERT OR IGNORE INTO refused VALUES (?, ?)",
                ((r.event_id, orjson.dumps(asdict(r)).decode()) for r in refused),
            )
            db.executemany(
                "INSERT OR IGNORE INTO file_touches VALUES (?, ?, ?)",
                ((t.project, t.path, t.at_ms) for t in touches),
            )
            db.executemany(
                "INSERT OR IGNORE INTO commit_sightings VALUES (?, ?, ?)",
                ((s.project, s.commit, s.at_ms) for s in commits),
            )
            db.execute(
                "UPDATE extraction SET watermark = max(watermark, ?), owner = NULL, lease_until = 0, "
                "attempts = 0, retry_at = 0, last_error = NULL, runs = runs + 1 WHERE thread_id = ?",
                (watermark, thread_id),
            )
            if context is not None:
                db.execute("INSERT OR REPLACE INTO extraction_context VALUES (?, ?, ?)",
                           (thread_id, watermark, orjson.dumps([r.decode() for r in context])))  # fmt: skip
            return True

    def resume(self, thread_id: str) -> tuple[int, list[bytes]] | None:
        with self._lock:
            row = self._db.execute("SELECT upto, records FROM extraction_context WHERE thread_id = ?",
                                   (thread_id,)).fetchone()  # fmt: skip
        return None if row is None else (int(row[0]), [r.encode() for r in orjson.loads(row[1])])

    def rewrite_contexts(self, rewrite: Callable[[bytes], bytes], version: int) -> int:
        """``MemoryStore.rewrite_contexts``; the version is the database's ``user_version``,
        moved in the same transaction as the rows. What the rows held before is overwritten
        on disk too (``secure_delete``, then the write-ahead log emptied): a redaction that
        left the old bytes in a free page would hold the secret still."""
        with self._lock:
            if self._db.execute("PRAGMA user_version").fetchone()[0] >= version:
                return 0
            self._db.execute("PRAGMA secure_delete = ON")
        try:
            with self._tx() as db:
                rows = db.execute("SELECT thread_id, records FROM extraction_context").fetchall()
                for thread_id, records in rows:
                    try:
                        kept = [rewrite(r.encode()).decode() for r in orjson.loads(records)]
                    except (ValueError, TypeError, AttributeError):
                        # Not a context this store wrote (a damaged or edited file): dropped,
                        # never kept in clear, and no other thread's extraction waits on it.
                        db.execute("DELETE FROM extraction_context WHERE thread_id = ?", (thread_id,))
                        continue
                    db.execute("UPDATE extraction_context SET records = ? WHERE thread_id = ?",
                               (orjson.dumps(kept), thread_id))  # fmt: skip
                db.execute(f"PRAGMA user_version = {int(version)}")
            with self._lock:
                self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            with self._lock:
                self._db.execute("PRAGMA secure_delete = OFF")
        return len(rows)

    def fail_extraction(self, thread_id: str, owner: str, error: str, now: float,
                        base_s: float = 1.0, max_attempts: int = 5) -> int:  # fmt: skip
        """Release a failed claim with exponential backoff; returns the attempt count."""
        with self._tx() as db:
            (attempts,) = db.execute(
                "SELECT attempts FROM extraction WHERE thread_id = ?", (thread_id,)
            ).fetchone()
            attempts += 1
            delay = float("inf") if attempts >= max_attempts else base_s * 2 ** (attempts - 1)
            db.execute(
                "UPDATE extraction SET owner = NULL, lease_until = 0, attempts = ?, retry_at = ?, "
                "last_error = ? WHERE thread_id = ? AND owner = ?",
                (attempts, now + delay, error[:500], thread_id, owner),
            )
            return int(attempts)

    def extraction_rows(self) -> list[dict[str, Any]]:
        with self._lock:
            cur = self._db.execute(
                "SELECT thread_id, watermark, owner, lease_until, attempts, retry_at, last_error, runs "
                "FROM extraction ORDER BY thread_id"
            )
            names = [d[0] for d in cur.description]
            return [dict(zip(names, r)) for r in cur.fetchall()]

    # -- phase 2: the global lease and publication ------------------------------------

    def acquire(self, owner: str, now: float, lease_s: float) -> int | None:
        """Take the consolidation lease; returns a fencing token larger than any before."""
        with self._tx() as db:
            row = db.execute("SELECT owner, token, expires_at FROM lease WHERE name = ?", (GLOBAL,)).fetchone()
            if row is not None and row[0] and row[0] != owner and row[2] > now:
                return None
            token = (row[1] if row else 0) + 1
            db.execute(
                "INSERT OR REPLACE INTO lease VALUES (?, ?, ?, ?)", (GLOBAL, owner, token, now + lease_s)
            )
            return token

    def heartbeat(self, owner: str, token: int, now: float, lease_s: float) -> bool:
        with self._tx() as db:
            cur = db.execute(
                "UPDATE lease SET expires_at = ? WHERE name = ? AND owner = ? AND token = ? AND expires_at >= ?",
                (now + lease_s, GLOBAL, owner, token, now),
            )
            return cur.rowcount == 1

    def release(self, owner: str, token: int) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE lease SET owner = NULL, expires_at = 0 WHERE name = ? AND owner = ? AND token = ?",
                (GLOBAL, owner, token),
            )

    def _check_token(self, db: sqlite3.Connection, owner: str, token: int, now: float) -> None:
        row = db.execute("SELECT owner, token, expires_at FROM lease WHERE name = ?", (GLOBAL,)).fetchone()
        if row is None or row[1] != token or row[0] != owner or row[2] < now:
            current = None if row is None else row[1]
            raise StaleToken(
                f"fencing token {token} of {owner} is stale (current token {current}, "
                f"lease {'expired' if row is not None and row[2] < now else 'taken over'}): not publishing"
            )

    def build(self, facts: dict[str, Fact] | dict[str, dict[str, Any]], owner: str, token: int, now: float) -> int:
        """Write a built (not yet published) view version; returns its number."""
        with self._tx() as db:
            self._check_token(db, owner, token, now)
            (last,) = db.execute("SELECT coalesce(max(version), 0) FROM views").fetchone()
            # Facts, or a view already published elsewhere (adopted from the Kafka memory topic).
            body = orjson.dumps({k: f.as_dict() if isinstance(f, Fact) else f for k, f in facts.items()}).decode()
            db.execute("INSERT INTO views VALUES (?, ?, ?, ?, ?, NULL)", (last + 1, token, owner, body, now))
            return int(last + 1)

    def publish(self, version: int, owner: str, token: int, now: float) -> None:
        """Move the view pointer to ``version``: one atomic step that checks the token."""
        with self._tx() as db:
            self._check_token(db, owner, token, now)
            current = db.execute("SELECT token FROM pointer WHERE name = ?", (GLOBAL,)).fetchone()
            if current is not None and current[0] > token:
                raise StaleToken(f"a view was published with token {current[0]} > {token}")
            db.execute("INSERT OR REPLACE INTO pointer VALUES (?, ?, ?)", (GLOBAL, version, token))
            db.execute("UPDATE views SET published_at = ? WHERE version = ?", (now, version))

    # -- runs of the phases ------------------------------------------------------------

    def run_started(self, phase: str, now: float) -> None:
        with self._tx() as db:
            db.execute("INSERT OR IGNORE INTO runs (phase) VALUES (?)", (phase,))
            db.execute("UPDATE runs SET running_since = ? WHERE phase = ?", (now, phase))

    def run_finished(self, phase: str, now: float, error: str | None = None, fenced: bool = False) -> None:
        """The end of a run: ``error`` set, a failure (``fenced``: refused by the fence)."""
        with self._tx() as db:
            db.execute("INSERT OR IGNORE INTO runs (phase) VALUES (?)", (phase,))
            db.execute(
                "UPDATE runs SET runs = runs + 1, failures = failures + ?, fenced = fenced + ?, running_since = NULL, "
                "last_run = ?, last_ok = CASE WHEN ? IS NULL THEN ? ELSE last_ok END, last_error = coalesce(?, last_error) "
                "WHERE phase = ?",
                (int(error is not None), int(fenced), now, error, now, None if error is None else error[:500], phase),
            )

    def run_rows(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            cur = self._db.execute("SELECT * FROM runs ORDER BY phase")
            names = [d[0] for d in cur.description]
            return {r[0]: dict(zip(names, r)) for r in cur.fetchall()}

    # -- reads --------------------------------------------------------------------------

    def candidates(self) -> list[Candidate]:
        with self._lock:
            rows = self._db.execute("SELECT body FROM candidates ORDER BY source_event_id").fetchall()
        return [Candidate(**orjson.loads(b)) for (b,) in rows]

    @staticmethod
    def _add_revocations(db: sqlite3.Connection, revocations: Sequence[Revocation]) -> None:
        db.executemany(
            "INSERT OR IGNORE INTO scoped_revocations VALUES (?, ?, ?)",
            ((r.target_event_id, r.project or "", orjson.dumps(asdict(r)).decode()) for r in revocations),
        )

    def revocations(self) -> list[Revocation]:
        with self._lock:
            rows = self._db.execute(
                "SELECT body FROM revocations UNION ALL SELECT body FROM scoped_revocations ORDER BY 1"
            ).fetchall()
        return [Revocation(**orjson.loads(b)) for (b,) in rows]

    def refused(self) -> list[Refusal]:
        """Fact and revoke events memory ignored, with the reason (``memory status``)."""
        with self._lock:
            rows = self._db.execute("SELECT body FROM refused ORDER BY rowid").fetchall()
        return [Refusal(**orjson.loads(b)) for (b,) in rows]

    def file_touches(self) -> list[FileTouch]:
        with self._lock:
            rows = self._db.execute("SELECT project, path, at_ms FROM file_touches").fetchall()
        return [FileTouch(*r) for r in rows]

    def commit_sightings(self) -> list[CommitSighting]:
        with self._lock:
            rows = self._db.execute("SELECT project, commit_id, at_ms FROM commit_sightings").fetchall()
        return [CommitSighting(*r) for r in rows]

    def add_revocation(self, revocation: Revocation) -> None:
        with self._tx() as db:
            self._add_revocations(db, [revocation])

    def published(self) -> tuple[int, dict[str, dict[str, Any]]]:
        """The current view: (version, facts); (0, {}) before the first publication."""
        with self._lock:
            row = self._db.execute(
                "SELECT v.version, v.facts FROM pointer p JOIN views v ON v.version = p.version "
                "WHERE p.name = ?", (GLOBAL,),
            ).fetchone()  # fmt: skip
        return (0, {}) if row is None else (int(row[0]), orjson.loads(row[1]))

    def unpublished(self) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute(
                "SELECT version, token, owner, built_at FROM views WHERE published_at IS NULL ORDER BY version"
            ).fetchall()
        return [dict(zip(("version", "token", "owner", "built_at"), r)) for r in rows]

    def lease_row(self) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute("SELECT owner, token, expires_at FROM lease WHERE name = ?", (GLOBAL,)).fetchone()
        return None if row is None else dict(zip(("owner", "token", "expires_at"), row))

    def candidates_after(self, seq: int) -> list[tuple[int, Candidate]]:
        """Candidates stored after ``seq`` (SQLite rowid order), for mirroring."""
        with self._lock:
            rows = self._db.execute(
                "SELECT rowid, body FROM candidates WHERE rowid > ? ORDER BY rowid", (seq,)
            ).fetchall()
        return [(int(r), Candidate(**orjson.loads(b))) for r, b in rows]

    def published_after(self, version: int) -> list[tuple[int, dict[str, dict[str, Any]]]]:
        """Published view versions after ``version``, oldest first, for mirroring."""
        with self._lock:
            rows = self._db.execute(
                "SELECT version, facts FROM views WHERE version > ? AND published_at IS NOT NULL ORDER BY version",
                (version,),
            ).fetchall()
        return [(int(v), orjson.loads(f)) for v, f in rows]

    def candidate_count(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM candidates").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()


__all__ = ["GLOBAL", "SqliteMemoryStore"]
