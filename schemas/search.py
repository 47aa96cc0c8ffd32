"""Search requests and hits: the shapes every search path (index or active) speaks."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SearchFilters:
    thread_id: str | None = None
    window_id: str | None = None
    kind: str | None = None
    tool_name: str | None = None
    project: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None


@dataclass(slots=True)
class Hit:
    """One search hit, with stable identifiers and where it came from (``index``/``active``)."""

    event_id: str
    thread_id: str
    window_id: str
    kind: str
    tool_name: str
    ts: str
    repo_commit: str
    score: float
    snippet: str
    source: str = "index"
    offset: int = 0


__all__ = ["Hit", "SearchFilters"]
