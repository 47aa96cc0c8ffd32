"""The small interfaces the rest of agentlog sees of its stores."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit, urlunsplit

import orjson

from agentlog.schemas.search import Hit, SearchFilters
from agentlog.schemas.snapshot import ThreadSnapshot

if TYPE_CHECKING:  # named in signatures only: the interfaces need not load the core
    from agentlog.processors.memory import Candidate, CommitSighting, Fact, FileTouch, Refusal, Revocation
    from agentlog.processors.pipeline import Record


class StoreError(RuntimeError):
    """A store refused or failed an operation; the message says what to do."""


class OutdatedStore(StoreError):
    """A derived store made by an older version in a form this one cannot use (another
    schema, another word rule): nothing is wrong with it, it is made again from the topic."""


class StaleToken(RuntimeError):
    """The caller's lease expired or a newer fencing token exists: it may not publish."""


@dataclass(frozen=True, slots=True)
class QueryResult:
    columns: list[str]
    rows: list[tuple[Any, ...]]


@dataclass(frozen=True, slots=True)
class LoggedEvent:
    event_id: str
    thread_id: str
    raw: bytes
    partition: int
    offset: int


class LogWriter(Protocol):
    """What the sinks write to the immutable log (ClickHouse or chDB)."""

    def append_events(self, rows: Sequence[dict[str, Any] | orjson.Fragment]) -> None:
        """``events`` rows, as dicts or as JSON already encoded (the Kafka sinks')."""
    def upsert_pairs(self, rows: Sequence[dict[str, Any]]) -> None: ...
    def append_rejected(self, rows: Sequence[dict[str, Any]]) -> None: ...
    def high_water(self, table: str) -> dict[int, int]:
        """Highest offset written per partition for ``events`` or ``rejected_events``."""

    def existing(self, event_ids: Sequence[str]) -> list[str]:
        """The ids of ``event_ids`` the log already holds (a sink's redelivery check)."""

    def append_memory(self, candidates: Sequence[dict[str, Any]], facts: Sequence[dict[str, Any]]) -> None: ...
    def memory_high_water(self) -> tuple[int, int]: ...
    def truncate_derived(self) -> None:
        """Empty the derived ``tool_calls`` table (``events`` is never touched)."""


class LogReader(Protocol):
    """What queries and replays read from the immutable log."""

    def get(self, event_id: str) -> LoggedEvent | None: ...
    def thread_tail(self, thread_id: str, after: int, limit: int) -> list[LoggedEvent]:
        """A thread's newest ``limit`` logged events after offset ``after``, oldest first."""

    def replay(self, thread_id: str | None = None) -> Iterator[LoggedEvent]:
        """Accepted events in processing order: per thread, by partition and offset."""

    def count_events(self) -> int: ...
    def thread_summaries(self) -> list[tuple[str, str, int, str]]:
        """Every logged thread's (thread_id, project, event count, newest event time)."""

    def query(self, sql: str) -> QueryResult:
        """One analyst statement through the SQL sandbox (read-only, bounded)."""


class LogStore(LogWriter, LogReader, Protocol):
    """The immutable log (ClickHouse or chDB): events, tool-call pairs, rejections."""

    def close(self) -> None: ...


class SearchIndex(Protocol):
    """An eventually consistent full-text index: writes become visible at ``refresh``."""

    def add(self, docs: Sequence[dict[str, Any]], new: bool = False) -> None:
        """Upsert by ``event_id``; ``new``: none of them is in the index (skip the delete)."""

    def add_encoded(self, docs: Sequence[tuple[str, bytes]]) -> None:
        """``add`` for documents that arrive as JSON, each with its ``event_id`` (the Kafka
        sinks get them so): an engine that takes JSON as it is does not parse them."""

    def tick(self) -> None:
        """Called every refresh interval; an engine with its own refresh does nothing."""

    def refresh(self) -> None:
        """Make everything added so far searchable now (when draining or closing)."""

    def visible_offsets(self) -> dict[int, int]:
        """Highest offset per partition that searches can see."""

    def search(self, query: str, filters: SearchFilters, limit: int) -> list[Hit]: ...
    def visible_ids(self, event_ids: Sequence[str]) -> set[str]:
        """Which of ``event_ids`` searches can see now."""

    def clear(self) -> None: ...
    def close(self) -> None: ...

    @property
    def warnings(self) -> list[str]:
        """What every search answer says of this index (an analyzer older than the word
        rule, until a rebuild): nothing, unless an engine says otherwise."""
        return []


class StateStore(Protocol):
    """Thread snapshots, applied event ids and consumer positions, committed together."""

    def load(self, thread_id: str) -> ThreadSnapshot | None: ...
    def threads(self) -> list[str]: ...
    def unseen(self, ids: Sequence[str]) -> set[str]: ...
    def offsets(self) -> dict[str, int]: ...
    def checkpoint(
        self, snapshots: Sequence[ThreadSnapshot], seen: Sequence[str], offsets: dict[str, int]
    ) -> None: ...
    def reset(self) -> None: ...
    def close(self) -> None: ...


class Topic(Protocol):
    """The embedded event topic: ``events`` with increasing offsets, and dead letters.
    Consumers keep their own positions and read after them, as Kafka is read."""

    path: str

    def append(
        self, accepted: Sequence[tuple[str, str, bytes]], rejected: Sequence[tuple[bytes, str]] = ()
    ) -> int:
        """Append (thread_id, event_id, bytes) records and (bytes, reason) dead letters
        atomically; returns the offset of the last accepted record (0 if none)."""

    def read(self, after: int, limit: int) -> list[Record]: ...
    def read_dlq(self, after: int, limit: int) -> list[DeadLetter]: ...
    def end_offsets(self) -> tuple[int, int]:
        """Highest offsets of (events, dead letters)."""

    def find(self, event_id: str) -> Record | None:
        """The first record of this event id."""

    def first_copies(self, event_ids: Sequence[str]) -> dict[str, bytes]:
        """The first record of each of these event ids that the topic holds."""

    def thread_tail(self, thread_id: str, after: int, limit: int = 1000) -> list[Record]:
        """A thread's records after ``after``, oldest first (the newest ``limit`` of them)."""

    def thread_ends(self) -> dict[str, int]:
        """Every thread with the offset of its newest record."""

    def first_record(self, thread_id: str) -> Record | None: ...
    def thread_records(self, thread_id: str, after: int, upto: int) -> list[Record]:
        """A thread's records with ``after < offset <= upto``, oldest first."""

    def seen_before(self, thread_id: str, event_ids: Sequence[str], upto: int) -> set[str]:
        """Which of ``event_ids`` the thread already holds at an offset up to ``upto``."""

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class DeadLetter:
    offset: int
    value: bytes
    reason: str
    appended_at: float


class MemoryStore(Protocol):
    """Long-term memory's store: per-thread extraction claims, the candidates and
    revocations extracted, and fenced publication of consolidated view versions."""

    def claim(self, thread_id: str, owner: str, latest: int, now: float, lease_s: float) -> int | None:
        """Claim a thread's extraction; returns its watermark, or ``None`` if there is
        nothing new, another owner's lease is live, or a retry is not due yet."""

    def commit_extraction(
        self, thread_id: str, owner: str, watermark: int, candidates: Sequence[Candidate],
        revocations: Sequence[Revocation], touches: Sequence[FileTouch], now: float,
        refused: Sequence[Refusal] = (), commits: Sequence[CommitSighting] = (),
        context: Sequence[bytes] | None = None,
    ) -> bool:  # fmt: skip
        """Store what was extracted and move the watermark, if ``owner`` still holds the claim;
        ``context``: the records the next run needs in place of the thread's first ones."""

    def resume(self, thread_id: str) -> tuple[int, list[bytes]] | None:
        """The last extraction's position in the thread (the offset it parsed through) and its
        context records, if stored."""

    def rewrite_contexts(self, rewrite: Callable[[bytes], bytes], version: int) -> int:
        """Every stored context record through ``rewrite``, once per ``version`` (a store
        already at it is left as it is): how many threads' contexts were rewritten."""

    def fail_extraction(self, thread_id: str, owner: str, error: str, now: float,
                        base_s: float = 1.0, max_attempts: int = 5) -> int:  # fmt: skip
        """Release a failed claim with exponential backoff; returns the attempt count."""

    def extraction_rows(self) -> list[dict[str, Any]]: ...
    def acquire(self, owner: str, now: float, lease_s: float) -> int | None:
        """Take the consolidation lease; returns a fencing token larger than any before."""

    def heartbeat(self, owner: str, token: int, now: float, lease_s: float) -> bool: ...
    def release(self, owner: str, token: int) -> None: ...
    def build(self, facts: dict[str, Fact] | dict[str, dict[str, Any]], owner: str, token: int, now: float) -> int:
        """Write a built (not yet published) view version; returns its number."""

    def publish(self, version: int, owner: str, token: int, now: float) -> None:
        """Move the view pointer to ``version`` if ``token`` is current (else ``StaleToken``)."""

    def candidates(self) -> list[Candidate]: ...
    def revocations(self) -> list[Revocation]: ...
    def refused(self) -> list[Refusal]: ...
    def file_touches(self) -> list[FileTouch]: ...
    def commit_sightings(self) -> list[CommitSighting]: ...
    def add_revocation(self, revocation: Revocation) -> None: ...
    def published(self) -> tuple[int, dict[str, dict[str, Any]]]:
        """The current view: (version, facts); (0, {}) before the first publication."""

    def unpublished(self) -> list[dict[str, Any]]: ...
    def lease_row(self) -> dict[str, Any] | None: ...
    def candidates_after(self, seq: int) -> list[tuple[int, Candidate]]: ...
    def published_after(self, version: int) -> list[tuple[int, dict[str, dict[str, Any]]]]: ...
    def candidate_count(self) -> int: ...
    def run_started(self, phase: str, now: float) -> None: ...
    def run_finished(self, phase: str, now: float, error: str | None = None, fenced: bool = False) -> None: ...
    def run_rows(self) -> dict[str, dict[str, Any]]: ...
    def close(self) -> None: ...


def redact_url(url: str) -> str:
    """``url`` without its password, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


__all__ = [
    "DeadLetter", "LogReader", "LogStore", "LogWriter", "LoggedEvent", "MemoryStore", "QueryResult",
    "SearchIndex", "StaleToken", "StateStore", "StoreError", "Topic", "redact_url",
]  # fmt: skip
