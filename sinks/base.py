"""The small interfaces the rest of agentlog sees of its stores."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

from agentlog.processors.thread import ThreadSnapshot
from agentlog.schemas.search import Hit, SearchFilters


class StoreError(RuntimeError):
    """A store refused or failed an operation; the message says what to do."""


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


class LogStore(Protocol):
    """The immutable log (ClickHouse or chDB): events, tool-call pairs, rejections."""

    def append_events(self, rows: Sequence[dict[str, Any]]) -> None: ...
    def upsert_pairs(self, rows: Sequence[dict[str, Any]]) -> None: ...
    def append_rejected(self, rows: Sequence[dict[str, Any]]) -> None: ...
    def high_water(self, table: str) -> dict[int, int]:
        """Highest offset written per partition for ``events`` or ``rejected_events``."""

    def get(self, event_id: str) -> LoggedEvent | None: ...
    def existing(self, event_ids: Sequence[str]) -> list[str]:
        """The ids of ``event_ids`` the log already holds (a sink's redelivery check)."""

    def thread_tail(self, thread_id: str, after: int, limit: int) -> list[LoggedEvent]:
        """A thread's newest ``limit`` logged events after offset ``after``, oldest first."""

    def replay(self, thread_id: str | None = None) -> Iterator[LoggedEvent]:
        """Accepted events in processing order: per thread, by partition and offset."""

    def count_events(self) -> int: ...
    def thread_summaries(self) -> list[tuple[str, str, int, str]]:
        """Every logged thread's (thread_id, project, event count, newest event time)."""

    def append_memory(self, candidates: Sequence[dict[str, Any]], facts: Sequence[dict[str, Any]]) -> None: ...
    def memory_high_water(self) -> tuple[int, int]: ...
    def query(self, sql: str) -> QueryResult:
        """One analyst statement through the SQL sandbox (read-only, bounded)."""

    def truncate_derived(self) -> None:
        """Empty the derived ``tool_calls`` table (``events`` is never touched)."""

    def close(self) -> None: ...


class SearchIndex(Protocol):
    """An eventually consistent full-text index: writes become visible at ``refresh``."""

    def add(self, docs: Sequence[dict[str, Any]], new: bool = False) -> None:
        """Upsert by ``event_id``; ``new``: none of them is in the index (skip the delete)."""

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


def redact_url(url: str) -> str:
    """``url`` without its password, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


__all__ = [
    "LogStore", "LoggedEvent", "QueryResult", "SearchIndex", "StateStore", "StoreError", "redact_url",
]  # fmt: skip
