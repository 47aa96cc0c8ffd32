"""Building events in the wire format: each one gets its ``event_id`` and ``ts`` when it is
created and is encoded to bytes at once, so a retry sends the very same bytes (the
processors drop an exact copy of an id already accepted: a retry never duplicates).

Nothing is validated here: the deployment validates every record when it is published
(``agentlog.streams.publish_check``), and a rejection comes back in the publish report.
"""

from __future__ import annotations

import itertools
import os
import time
from typing import Any


from agentlog.processors.fitting import dumps, fit
from agentlog.schemas.events import Envelope

_second: list[Any] = [None, ""]  # the last whole second formatted, and its text


def now_ts() -> str:
    """The current time as RFC 3339 UTC with microseconds (what the log keeps). The date
    and time of day are formatted once a second: this runs once per event."""
    now = time.time()
    second = int(now)
    if _second[0] != second:
        _second[1] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        _second[0] = second
    return f"{_second[1]}.{int((now - second) * 1_000_000):06d}Z"


class EventIds:
    """Event ids unique across processes without a round trip: a random prefix per client
    and a counter (cheaper than a UUID per event, and still in the id alphabet)."""

    def __init__(self, prefix: str | None = None) -> None:
        self.prefix = prefix or os.urandom(6).hex()
        self._counter = itertools.count(1)  # ``next`` on it is atomic: threads may share a client

    def next(self) -> str:
        return f"{self.prefix}-{next(self._counter)}"


def envelope(**fields: Any) -> dict[str, Any]:
    """The optional envelope fields an event carries (``project``, ``agent_id``,
    ``turn_id``, ``window_id``, ...), those left ``None`` out."""
    return {key: value for key, value in fields.items() if value is not None}


def encode(event_id: str, thread_id: str, kind: str, payload: dict[str, Any], fields: dict[str, Any],
           ts: str | None = None) -> bytes:  # fmt: skip
    """One event as a JSON line's bytes (without the newline); ``fields``: an ``envelope``.
    A payload plain JSON cannot hold (bytes, sets, objects, ...) is made JSON first
    (``agentlog.processors.fitting.jsonable``): what an agent hands a tool is never a
    reason to lose the event."""
    return dumps({"event_id": event_id, "thread_id": thread_id, "kind": kind, "ts": ts or now_ts(),
                  "payload": payload, **fields})  # fmt: skip


def fitted(event_id: str, thread_id: str, kind: str, payload: dict[str, Any], fields: dict[str, Any],
           limit: int) -> bytes:  # fmt: skip
    """``encode``, the payload's biggest fields cut until the event fits in ``limit`` bytes
    (``agentlog.processors.fitting.fit``): the deployment rejects a bigger event whole, and
    a tool call would then lose its result."""
    return fit({"event_id": event_id, "thread_id": thread_id, "kind": kind, "ts": now_ts(), "payload": payload,
                **fields}, limit, "agentlog client")  # fmt: skip


__all__ = ["EventIds", "encode", "envelope", "fitted", "now_ts"]


HISTORY_FORMATS = ("openai", "openai_responses", "anthropic")
"""What ``Thread.history`` imports: Chat Completions messages, Responses input items,
Anthropic Messages."""


def history_events(items: Any, format: str, thread_id: str, project: str, system: str | None,  # noqa: A002
                   agent_id: str, at: str | None = None) -> list[Envelope]:  # fmt: skip
    """A provider's history as envelopes of ``thread_id`` (``agentlog.processors.formats``)."""
    from agentlog.processors.formats import anthropic, openai_chat, openai_responses  # noqa: PLC0415 - on use

    common: dict[str, Any] = {"at": at, "agent_id": agent_id}
    if format == "openai":
        return openai_chat.to_events(items, thread_id, project, **common)
    if format == "openai_responses":
        return openai_responses.to_events(items, thread_id, project, **common)
    if format == "anthropic":
        return anthropic.to_events(items, thread_id, project, system=system, **common)
    raise ValueError(f"history format must be one of {', '.join(HISTORY_FORMATS)}, not {format!r}")

