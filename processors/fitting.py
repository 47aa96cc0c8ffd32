"""Events that always encode and always fit (pure: no I/O, no clock).

A producer hands over what it has: a tool's arguments may hold bytes, sets, datetimes or
objects, a tool's output may be megabytes. ``dumps`` encodes any such record (``jsonable``
makes it JSON first when ``orjson`` refuses it), and ``fit`` cuts a record's biggest
payload fields until it is within the deployment's event size limit: an event over it
would be rejected whole, and a tool call would lose its result to a few megabytes of log.
Used by the Python client, the LangChain handler and the server's OTLP ingest, which
publish on an agent's behalf.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

MAX_DEPTH = 64
"""How deep ``jsonable`` keeps a value's structure; deeper, a value is kept as its text (the
deployment's parser refuses JSON nested past its limit, about 200 levels)."""

CUT_MARK = "\n[{who}: {cut} of {total} bytes cut to fit the event size limit of {limit} bytes]"


def dumps(record: Any) -> bytes:
    """``record`` as JSON bytes, whatever its values (see ``jsonable``)."""
    try:
        return orjson.dumps(record)
    except TypeError:  # orjson.JSONEncodeError: the rare record only ``jsonable`` can encode
        return orjson.dumps(jsonable(record))


def fit(record: dict[str, Any], limit: int, who: str) -> bytes:
    """``dumps(record)``, with its payload's biggest fields cut until it fits in ``limit``
    bytes: a cut field keeps its head, as text, followed by a marker naming ``who`` cut
    how much."""
    raw = dumps(record)
    if len(raw) <= limit or not isinstance(record.get("payload"), dict) or not record["payload"]:
        return raw
    payload = dict(record["payload"])
    for _ in range(8):  # each round cuts the biggest field by what is over; escapes may need another
        if len(raw) <= limit:
            break
        name, text = max(((k, _as_text(v)) for k, v in payload.items()), key=lambda kv: len(kv[1]))
        size, encoded = len(text.encode()), len(orjson.dumps(text))  # escapes (a NUL is 6 bytes) count
        keep = (encoded - (len(raw) - limit) - len(CUT_MARK) - len(who) - 64) * size // max(encoded, 1)
        payload[name] = _cut(text, max(0, keep), limit, who)
        raw = dumps({**record, "payload": payload})
    return raw


def as_text(value: Any) -> str:
    """A tool's output as the text a ``tool_result`` holds: a string as is, nothing as
    ``""``, bytes decoded (undecodable bytes escaped), anything else as its JSON."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "backslashreplace")
    return dumps(value).decode()


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else dumps(value).decode()


def _cut(text: str, keep: int, limit: int, who: str) -> str:
    data = text.encode()
    head = data[:keep].decode("utf-8", "ignore")  # never half a character
    return head + CUT_MARK.format(who=who, cut=len(data) - len(head.encode()), total=len(data), limit=limit)


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


__all__ = ["CUT_MARK", "MAX_DEPTH", "as_text", "dumps", "fit", "jsonable"]
