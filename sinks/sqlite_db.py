"""How every embedded SQLite database is opened: WAL, shared by threads, tuned for
batches of random-key inserts (event ids are random, so each batch touches most leaf
pages of their indexes).

Measured on 800k appends to the event topic in batches of 20k: the defaults take 27.9 s,
a 64 MiB page cache plus a WAL checkpointed every 50,000 pages 16.1 s.
"""

from __future__ import annotations

import os
import sqlite3
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

CACHE_KIB = 64 * 1024
READ_CACHE_KIB = 8 * 1024
"""For a connection that reads in offset order and writes in sequence (a topic reader, the
``accepted`` queue): its pages are read once, so a larger cache only holds pages already
used (64 MiB of them per connection, measured over a million events: about a sixth of
``agentlog run``'s memory)."""
WAL_CHECKPOINT_PAGES = 50_000
WAL_KEEP_BYTES = 64 * 1024 * 1024  # what a checkpointed WAL file shrinks back to


class _Connection(sqlite3.Connection):
    """A connection that can be weakly referenced, so ``held_here`` can see it."""


_HELD: dict[str, weakref.WeakSet[_Connection]] = {}


def held_here(path: str | os.PathLike[str]) -> bool:
    """Whether this process has an open connection to the database at ``path``. Then no one
    may open and close the file outside SQLite here: closing any descriptor of a file drops
    every POSIX lock the process holds on it, SQLite's included, and another process that
    closes its last connection then deletes the WAL and shared memory under ours."""
    for db in list(_HELD.get(os.path.realpath(path), ())):
        try:
            db.in_transaction  # noqa: B018 - raises once the connection is closed
            return True
        except sqlite3.ProgrammingError:
            continue
    return False


def connect(path: str, timeout: float, cache_kib: int = CACHE_KIB) -> sqlite3.Connection:
    """A connection in autocommit mode (callers open their own transactions); ``cache_kib``:
    its page cache (``CACHE_KIB`` for random-key inserts, ``READ_CACHE_KIB`` for readers)."""
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=timeout,
                         factory=_Connection)  # fmt: skip
    _HELD.setdefault(os.path.realpath(path), weakref.WeakSet()).add(db)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute(f"PRAGMA cache_size=-{cache_kib}")
    db.execute(f"PRAGMA wal_autocheckpoint={WAL_CHECKPOINT_PAGES}")
    db.execute(f"PRAGMA journal_size_limit={WAL_KEEP_BYTES}")
    return db


@contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One write transaction on an autocommit connection: committed, or rolled back on any error."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


__all__ = ["CACHE_KIB", "READ_CACHE_KIB", "connect", "transaction"]
