"""Search requests and hits: the shapes every search path (index or active) speaks."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from dataclasses import dataclass, fields

from agentlog.schemas.events import RFC3339_PATTERN, epoch_ms_of

_RFC3339 = re.compile(RFC3339_PATTERN)


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
    """One search hit, with stable identifiers and where it came from (``index``/``active``).
    ``role``: a message's; ``status`` and ``exit_code``: a tool result's (empty, ``None``
    for other kinds, and for a hit from an index built before they were kept)."""

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
    role: str = ""
    status: str = ""
    exit_code: int | None = None

    def as_dict(self) -> dict[str, object]:
        """``dataclasses.asdict`` without its deep copy (every field is a scalar)."""
        return {name: getattr(self, name) for name in HIT_FIELDS}

    def copy(self) -> Hit:
        """``dataclasses.replace(self)``, field by field (``replace`` checks every field
        first: several times slower, for the 16 hits a remembered answer hands out)."""
        return Hit(self.event_id, self.thread_id, self.window_id, self.kind, self.tool_name, self.ts,
                   self.repo_commit, self.score, self.snippet, self.source, self.offset,
                   self.role, self.status, self.exit_code)  # fmt: skip


HIT_FIELDS = tuple(f.name for f in fields(Hit))
"""A hit's fields, in order: what an answer's hit holds (a client keeps only these)."""


def kind_said(hit: Mapping[str, Any]) -> str:
    """A hit's kind as a person reads it: with a message's role or a result's status and
    exit code when the hit says them (``message(user)``, ``tool_result(error, exit 2)``)."""
    said = [str(hit.get("role") or ""), str(hit.get("status") or "")]
    if hit.get("exit_code") is not None:
        said.append(f"exit {hit['exit_code']}")
    said = [s for s in said if s]
    return f"{hit['kind']}({', '.join(said)})" if said else str(hit["kind"])


def exit_code_of(text: str | None) -> int | None:
    """A stored ``exit_code`` (decimal text, empty for none) as the event gave it."""
    try:
        return int(text) if text else None
    except ValueError:  # not written by this version: as if it were not kept
        return None


def time_bound_ms(value: str | None) -> int | None:
    """A search time bound given as RFC 3339 (``2026-11-30T10:00:00Z``) or epoch milliseconds."""
    if value is None or value == "":
        return None
    if value.isdigit():
        return int(value)
    if _RFC3339.match(value):
        try:
            return int(epoch_ms_of(value))
        except ValueError:
            pass
    raise ValueError(f"time bound {value!r} is neither an RFC 3339 time with offset "
                     "(e.g. 2026-11-30T10:00:00Z) nor epoch milliseconds")  # fmt: skip


def time_bounds(params: Mapping[str, str]) -> tuple[int | None, int | None]:
    """``since``/``until`` of an HTTP query (``since_ms``/``until_ms`` also accepted)."""
    return (time_bound_ms(params.get("since") or params.get("since_ms")),
            time_bound_ms(params.get("until") or params.get("until_ms")))  # fmt: skip


__all__ = ["HIT_FIELDS", "Hit", "SearchFilters", "exit_code_of", "kind_said", "time_bound_ms", "time_bounds"]
