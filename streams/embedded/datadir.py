"""The embedded data directory's stores, checked when they are opened.

``topic.db`` is the source of truth; everything else in the embedded deployment is
derived from it: ``state.db`` (thread snapshots and positions), ``index/`` (search) and
``log/`` (the chDB log, re-logged from the topic's deliveries and dead letters). A derived
store that is corrupt is moved aside and rebuilt; one that is missing (found empty while
events were processed) is rebuilt. A damaged topic cannot be rebuilt from anything,
so it is a clear error naming the file and what to do; so is ``memory.db``, whose views
and leases are not derived from the topic alone.

The checks are cheap enough for every command: a SQLite file's header against its size,
one probe query per database, and counts the stores keep anyway.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentlog.sinks.base import MemoryStore, OutdatedStore, StoreError
from agentlog.sinks.memory_sqlite import SqliteMemoryStore
from agentlog.sinks.sqlite_db import held_here

SQLITE_MAGIC = b"SQLite format 3\x00"


class CorruptStore(StoreError):
    """A store's files cannot be read; the message names the file and what to do."""

    def __init__(self, message: str, problem: str = "") -> None:
        super().__init__(message)
        self.problem = problem or message


def topic_help(path: Path) -> str:
    return (f"{path.name} is the event topic, the source of everything in {path.parent}, and nothing can "
            f"rebuild it: stop agentlog and restore {path} from a backup (with its -wal file, if any), "
            "or move the data directory aside and start a new one")  # fmt: skip


def memory_help(path: Path) -> str:
    return (f"long-term memory is kept only there, so it is not rebuilt silently: stop agentlog, move it "
            f"aside (mv {path} {path}.corrupt), then `agentlog memory extract` and `agentlog memory "
            "consolidate` re-extract memory from the threads' events")  # fmt: skip


def open_memory(path: Path) -> MemoryStore:
    """``memory.db``; a corrupt one is a ``CorruptStore`` saying how to re-extract memory."""
    return open_sqlite(path, SqliteMemoryStore, memory_help)


def sqlite_problem(path: Path) -> str | None:
    """Why the SQLite file at ``path`` is unusable, judged from its header and size; None
    when it looks whole or does not exist (SQLite creates it). An empty file is an empty
    database to SQLite, and is not a problem here either."""
    if held_here(path):  # SQLite took it already; reading it raw here would drop our locks
        return None
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return None
    if size == 0:
        return None
    with path.open("rb") as f:
        header = f.read(100)
    if len(header) < 100 or not header.startswith(SQLITE_MAGIC):
        return "not a SQLite database"
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    # The header's page count is only valid when its change counter matches (SQLite's
    # rule); with a WAL, pages a checkpoint cut short are still in it (not a truncation).
    wal = path.with_name(path.name + "-wal")
    in_wal = wal.exists() and wal.stat().st_size > 0
    if header[24:28] == header[92:96] and pages and size < pages * page_size and not in_wal:
        return f"truncated: {size:,} of {pages * page_size:,} bytes"
    return None


def open_sqlite(path: Path, opener: Callable[[str], Any], help_text: Callable[[Path], str]) -> Any:
    """``opener(path)``, or a ``CorruptStore`` naming the file and what to do."""
    problem = sqlite_problem(path)
    if problem is None:
        try:
            return opener(str(path))
        except sqlite3.DatabaseError as error:
            if isinstance(error, sqlite3.OperationalError) and "locked" in str(error):
                raise
            problem = str(error)
    raise CorruptStore(f"{path} is unreadable ({problem}); {help_text(path)}", problem)


def move_aside(path: Path, why: str = "corrupt") -> Path:
    """Rename a damaged (or ``why``) store, and a SQLite file's -wal and -shm, to
    ``<name>.<why>-<time>``."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    target = path.with_name(f"{path.name}.{why}-{stamp}")
    for suffix in ("-wal", "-shm", ""):  # the WAL first: never left beside a new database
        part = path.with_name(path.name + suffix)
        if part.exists():
            part.rename(target.with_name(target.name + suffix))
    return target


def store_name(path: Path) -> str:
    """How notices name a store: ``state.db``, ``index/``, ``log/``."""
    return path.name if path.suffix == ".db" else f"{path.name}/"


def open_derived(path: Path, opener: Callable[[str], Any], notes: list[str]) -> Any:
    """Open a derived store; a corrupt one is moved aside, noted, and opened afresh. A
    store busy elsewhere or a disk that refuses (an ``OSError``) is not corruption, and
    raises as it is."""
    try:
        return open_sqlite(path, opener, lambda p: "") if path.suffix == ".db" else opener(str(path))
    except (CorruptStore, StoreError, ValueError) as error:
        if isinstance(error, sqlite3.OperationalError) or "lock" in str(error).lower():
            raise
        reason = error.problem if isinstance(error, CorruptStore) else str(error).replace(str(path), store_name(path))
        reason = " ".join(reason.split())
        if isinstance(error, OutdatedStore):  # nothing wrong with it: the old copy can go
            aside = move_aside(path, "outdated")
            notes.append(f"{store_name(path)} was made by an older version ({reason[:160]}; the old copy is "
                         f"{aside.name}, safe to delete)")  # fmt: skip
        else:
            aside = move_aside(path)
            notes.append(f"{store_name(path)} was corrupt ({reason[:120]}; moved to {aside.name})")
        return opener(str(path))


def count_damage(processed: int, topic_end: int, topic: Path) -> None:
    """The topic must reach every offset already processed from it, or it lost records.
    ``processed`` is the state's own position in this topic; the log's offsets are not
    compared, since a log may have been written from another topic (Kafka workers write
    the same tables with their partitions' offsets)."""
    if processed > topic_end:
        raise CorruptStore(
            f"{topic} ends at offset {topic_end:,} but offset {processed:,} was already "
            f"processed from it: the topic lost records (a deleted or truncated {topic.name}-wal, or an "
            f"older copy of {topic.name}); {topic_help(topic)}"
        )


def derived_behind(applied: int, logged: int, indexed: int | None, processed: int, topic_end: int,
                   known: list[str]) -> list[str]:  # fmt: skip
    """Which derived stores were lost, from counts: an empty log or index while the state
    has applied events (``log/`` or ``index/`` deleted), or no state while the others hold
    events (``state.db`` deleted). ``known``: stores already reported (moved aside).

    Only a store found empty counts as lost: a record a sink could never take (dead-
    lettered with its reason, processing going on) leaves a store short of the applied
    count for good, and taking that for damage would rebuild on every start."""
    notes: list[str] = []
    if not _known("state.db", known) and processed == 0 and topic_end > 0 and (logged > 0 or (indexed or 0) > 0):
        notes.append("state.db was missing or empty")
    if logged == 0 < applied and not _known("log/", known):
        notes.append(f"log/ was missing (0 of {applied:,} events)")
    if indexed == 0 < applied and not _known("index/", known):
        notes.append(f"index/ was missing (0 of {applied:,} events)")
    return notes


def check_whole(path: Path) -> str | None:
    """A full ``PRAGMA quick_check`` of a SQLite file (slow: only once something failed)."""
    problem = sqlite_problem(path)
    if problem is not None or not path.exists():
        return problem
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            rows = db.execute("PRAGMA quick_check(3)").fetchall()
        finally:
            db.close()
    except sqlite3.DatabaseError as error:
        return str(error)
    return None if rows == [("ok",)] else "; ".join(str(r[0]) for r in rows)


def diagnose(settings: Any, error: Exception) -> str:
    """What to say when a SQLite error reached the command line: which file, and what to do."""
    data = Path(settings.data_dir)
    helps: dict[str, Callable[[Path], str]] = {
        "topic.db": topic_help,
        "state.db": lambda p: (f"it is derived from the topic: move it aside (mv {p} {p}.corrupt) and the "
                               "next command rebuilds it"),  # fmt: skip
        "memory.db": memory_help,
    }
    for name, help_text in helps.items():
        problem = check_whole(data / name)
        if problem is not None:
            return f"{data / name} is unreadable ({problem}); {help_text(data / name)}"
    return f"a database in {data} failed ({error}); `PRAGMA quick_check` finds no damage: try again"


def _known(store: str, notes: list[str]) -> bool:
    return any(n.startswith(store) for n in notes)


__all__ = [
    "CorruptStore", "check_whole", "diagnose", "count_damage", "derived_behind", "memory_help", "move_aside", "open_derived", "open_memory",
    "open_sqlite", "sqlite_problem", "store_name", "topic_help",
]  # fmt: skip
