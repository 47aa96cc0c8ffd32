"""Building events in the wire format: each one gets its ``event_id`` and ``ts`` when it is
created and is encoded to bytes at once, so a retry sends the very same bytes (the
processors drop an exact copy of an id already accepted: a retry never duplicates).

Nothing is validated here: the deployment validates every record when it is published
(``agentlog.streams.publish_check``), and a rejection comes back in the publish report.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from typing import Any

import orjson

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
    (``jsonable``): what an agent hands a tool is never a reason to lose the event."""
    record = {"event_id": event_id, "thread_id": thread_id, "kind": kind, "ts": ts or now_ts(),
              "payload": payload, **fields}  # fmt: skip
    try:
        return orjson.dumps(record)
    except TypeError:  # orjson.JSONEncodeError: the rare payload only ``jsonable`` can encode
        return orjson.dumps(jsonable(record))


def fitted(event_id: str, thread_id: str, kind: str, payload: dict[str, Any], fields: dict[str, Any],
           limit: int) -> bytes:  # fmt: skip
    """``encode``, with the payload's biggest fields cut until the event fits in ``limit``
    bytes (the deployment rejects a bigger event whole, and a tool call would then lose its
    result): each cut field keeps its head, as text, and says how much was cut."""
    ts = now_ts()
    raw = encode(event_id, thread_id, kind, payload, fields, ts)
    if len(raw) <= limit:
        return raw
    payload = dict(payload)
    for _ in range(8):  # each round cuts the biggest field by what is over; escapes may need another
        if len(raw) <= limit:
            break
        name, text = max(((k, _as_text(v)) for k, v in payload.items()), key=lambda kv: len(kv[1]))
        size, encoded = len(text.encode()), len(orjson.dumps(text))  # escapes (a NUL is 6 bytes) count
        keep = (encoded - (len(raw) - limit) - len(CUT_MARK) - 64) * size // max(encoded, 1)
        payload[name] = _cut(text, max(0, keep), limit)
        raw = encode(event_id, thread_id, kind, payload, fields, ts)
    return raw


CUT_MARK = "\n[agentlog client: {cut} of {total} bytes cut to fit the event size limit of {limit} bytes]"


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(jsonable(value)).decode()


def _cut(text: str, keep: int, limit: int) -> str:
    data = text.encode()
    head = data[:keep].decode("utf-8", "ignore")  # never half a character
    return head + CUT_MARK.format(cut=len(data) - len(head.encode()), total=len(data), limit=limit)


MAX_DEPTH = 64
"""How deep ``jsonable`` keeps a value's structure; deeper, a value is kept as its text (the
deployment's parser refuses JSON nested past its limit, about 200 levels)."""


def jsonable(value: Any, depth: int = 0) -> Any:
    """``value`` as what JSON holds, for a record ``orjson`` refused: bytes as text (UTF-8,
    undecodable bytes escaped), sets and tuples as lists, keys as text, integers beyond 64
    bits and any other object as its ``str``, lone surrogates replaced (U+FFFD), and a
    structure nested past ``MAX_DEPTH`` as its text."""
    if isinstance(value, str):
        return _text(value)
    if value is None or isinstance(value, (bool, float)):
        return value
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**64 else str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "backslashreplace")
    if isinstance(value, (dict, list, tuple, set, frozenset)) and depth >= MAX_DEPTH:
        return _text(_shallow(value))
    if isinstance(value, dict):
        return {_text(str(k)): jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v, depth + 1) for v in value]
    if isinstance(value, (set, frozenset)):
        items = [jsonable(v, depth + 1) for v in value]
        return sorted(items, key=lambda v: orjson.dumps(v))  # a set has no order: give it a stable one
    try:
        return orjson.loads(orjson.dumps(value))  # datetimes, dataclasses, enums, UUIDs: orjson's own form
    except TypeError:
        return _text(str(value))


def _text(text: str) -> str:
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:  # lone surrogates: pairs are joined, the rest become U+FFFD
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _shallow(value: Any) -> str:
    """Text of a structure too deep to keep (``repr`` would recurse as deep as it goes)."""
    try:
        return json.dumps(value, default=str, ensure_ascii=False)
    except (RecursionError, ValueError):
        return f"<{type(value).__name__} nested deeper than {MAX_DEPTH} levels>"


__all__ = ["EventIds", "encode", "envelope", "fitted", "jsonable", "now_ts"]


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

