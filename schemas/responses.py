"""Typed answers of the HTTP API (SPEC §7), for its OpenAPI document: what ``/threads``,
``/search``, ``/sql`` and every refusal send. The services build these answers as plain
JSON-shaped dicts; ``tests/test_http_docs.py`` checks real answers against these models,
so the document cannot promise a field the server does not send.

Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from agentlog.schemas.search import Hit
from agentlog.schemas.state import ThreadStatus


class Error(BaseModel):
    """Every 4xx and 5xx answer."""

    error: str = Field(description="what went wrong and what to do")


class ThreadRow(BaseModel):
    """A thread's summary row. A Kafka worker lists threads another worker owns from the
    log alone: their state's fields are ``null``."""

    thread_id: str
    project: str | None
    event_count: int
    last_activity: str | None = Field(description="RFC 3339 time of the newest event")
    open_calls: int | None = Field(description="tool calls without a result yet")
    failures: int | None = Field(description="recent failed tool calls the state keeps (at most 20)")
    pending_approvals: int | None
    status: ThreadStatus | None
    window_id: str | None
    goal: str | None = Field(description="the goal, shortened (and redacted when redaction is on)")


class ThreadList(BaseModel):
    threads: list[ThreadRow] = Field(description="newest activity first, at most `limit`")
    total: int = Field(description="how many threads match the filters")
    partial: bool = Field(description="some rows come from the log alone (a Kafka worker's listing)")
    warnings: list[str] = Field(description="why the answer may be incomplete or stale")


class SearchAnswer(BaseModel):
    query: str
    hits: list[Hit] = Field(description="best first; `source` is `index`, or `active` for an accepted "
                                        "event the index cannot show yet (read-your-writes)")  # fmt: skip
    index_visible_offset: int | None = Field(None, description="embedded: the index's refresh point")
    stale: bool | None = Field(None, description="embedded: the index may lack recent events")
    index_error: str | None = Field(None, description="Kafka worker: the index did not answer")
    warnings: list[str] = []


class SqlAnswer(BaseModel):
    columns: list[str]
    rows: list[list[Any]] = Field(description="one list per row, in the order of `columns`")


__all__ = ["Error", "SearchAnswer", "SqlAnswer", "ThreadList", "ThreadRow"]
