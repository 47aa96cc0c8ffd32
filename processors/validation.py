"""Bytes in, an accepted event or a rejection with its reason out (SPEC §2).

One rule for every path (embedded publish, Kafka publish, both processors): a record is
first parsed as plain JSON (by jiter, pydantic's own parser) and checked, so that what the
pipeline validates is exactly what the log stores and every store can hold it:

- NaN, Infinity and numbers that overflow a double (``1e400``) are refused
  (``invalid_json: non-finite number``): the log's JSON functions read such a row as empty;
- a key repeated in one object, at any depth, is refused (``duplicate_key: <key>``): parsers
  disagree on which copy wins (the pipeline took the last, the log the first);
- an integer outside 64 bits (below -2**63 or above 2**64-1) is refused
  (``integer_out_of_range``): the index and the log cannot store it as a number;
- invalid UTF-8, lone surrogates and nesting deeper than the parser's limit are
  ``invalid_json``.

A record over the size limit is the one rejection not kept byte for byte: its dead letter
holds the first ``max_bytes`` bytes, and the reason names the full size and its sha256.

Cost: the check adds about 3-6 us to the 3-5 us pydantic takes for a typical event (one
more parse, one walk of the tree, byte counts); the repeated-key check runs in C except
when a key is found repeated.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from pydantic_core import from_json

from agentlog.schemas.events import EVENT_ADAPTER, MAX_EVENT_BYTES, Envelope

INT_MIN = -(2**63)
INT_MAX = 2**64 - 1
"""Integers must fit in 64 bits, signed or unsigned (what every store can hold)."""

# One JSON string token (escapes included): outside strings, JSON has no quote characters.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)


@dataclass(frozen=True, slots=True)
class Rejection:
    """A record that failed validation; ``raw`` is kept byte for byte (a record over the
    size limit: its first ``max_bytes`` bytes)."""

    raw: bytes
    reason: str


def _describe(error: ValidationError) -> str:
    """One line a producer can act on: the category, then where and what."""
    parts: list[str] = []
    category = "invalid_event"
    for item in error.errors(include_url=False)[:3]:
        kind = item["type"]
        # The first element of a location is the union tag chosen (the kind): drop it.
        loc = [str(p) for p in item["loc"]]
        if loc and loc[0] not in ("payload",) and len(loc) > 1:
            loc = loc[1:]
        where = ".".join(loc) or "event"
        if kind == "json_invalid":
            category = "invalid_json"
        elif kind in ("union_tag_invalid", "union_tag_not_found"):
            category = "unknown_kind" if kind == "union_tag_invalid" else "missing_field"
            where = "kind"
        elif kind == "missing" and category == "invalid_event":
            category = "missing_field"
        elif kind in ("dict_type", "model_type") and where == "event":
            category = "not_an_object"
        elif where.startswith("payload") and category == "invalid_event":
            category = "invalid_payload"
        parts.append(f"{where}: {_said(item, where)}")
    return f"{category}: " + "; ".join(parts)


def _said(item: Any, where: str) -> str:
    """The error's message, in a producer's terms where pydantic's would quote a regex."""
    if item["type"] == "string_pattern_mismatch" and where == "ts":
        return (f"{str(item['input'])[:64]!r} is no RFC 3339 time with an offset; write it as "
                "2026-11-30T10:00:00Z (or +02:00), with a time-zone offset")
    return str(item["msg"])


def _scan(tree: Any) -> tuple[int, str | None]:
    """(strings in the parsed tree, keys and values; the first problem found or None).

    ``type(...) is`` rather than ``isinstance``: this runs on every event, and the parser
    only makes these exact types.
    """
    strings = 0
    stack = [tree]
    pop, extend = stack.pop, stack.extend
    while stack:
        node = pop()
        kind = type(node)
        if kind is str:
            strings += 1
        elif kind is dict:
            strings += len(node)
            extend(node.values())
        elif kind is list:
            extend(node)
        elif kind is int:
            if not INT_MIN <= node <= INT_MAX:
                return strings, f"integer_out_of_range: {str(node)[:40]} does not fit in 64 bits"
        elif kind is float and not math.isfinite(node):
            return strings, "invalid_json: non-finite number (NaN, Infinity or beyond a double's range)"
    return strings, None


def _quotes_in(tree: Any) -> int:
    """Quote characters inside the tree's strings, keys included (the rare slow path)."""
    count = 0
    stack = [tree]
    while stack:
        node = stack.pop()
        if type(node) is str:
            count += node.count('"')
        elif type(node) is dict:
            count += sum(k.count('"') for k in node)
            stack.extend(node.values())
        elif type(node) is list:
            stack.extend(node)
    return count


def _repeats_a_key(raw: bytes, tree: Any, strings: int) -> bool:
    """Whether an object of ``raw`` repeated a key (the parser kept one copy).

    Outside strings JSON has no quote bytes, so ``raw`` holds two quote bytes per string
    token plus one per quote written ``\\"`` inside one. Every token is a key or a value
    of the tree unless a repeated key was dropped (with its value), so the count matches
    the tree exactly iff no key repeats. A quote written ``\\u0022`` has no quote byte:
    then the tokens are counted by a scan instead.
    """
    if b"u0022" in raw:
        return _STRING.subn(b"", raw)[1] != strings
    escaped = _quotes_in(tree) if b'\\"' in raw else 0
    return raw.count(b'"') != 2 * strings + escaped


def _duplicate_key(raw: bytes) -> str:
    """The first key repeated in one object (the slow path: only once one is known to exist)."""
    found: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in items]
        if len(set(keys)) != len(keys) and not found:
            seen: set[str] = set()
            found.append(next(k for k in keys if k in seen or seen.add(k)))  # type: ignore[func-returns-value]
        return dict(items)

    try:
        json.loads(raw, object_pairs_hook=pairs)
    except ValueError:
        pass
    return found[0] if found else "?"


def parse_json(raw: bytes) -> Any | Rejection:
    """``raw`` parsed, if it is JSON every store reads the same way; else why not."""
    try:
        tree = from_json(raw, allow_inf_nan=True)  # NaN parsed, then refused by name
    except ValueError as error:  # bad syntax, invalid UTF-8, lone surrogate, too deep
        return Rejection(raw, f"invalid_json: {error}")
    strings, problem = _scan(tree)
    if problem is not None:
        return Rejection(raw, problem)
    if _repeats_a_key(raw, tree, strings):
        return Rejection(raw, f"duplicate_key: {_duplicate_key(raw)[:200]}")
    return tree


def check_json(raw: bytes) -> str | None:
    """Why ``raw`` is not JSON every store reads the same way, or None if it is."""
    result = parse_json(raw)
    return result.reason if isinstance(result, Rejection) else None


def _kept(raw: bytes, max_bytes: int) -> str:
    return f"kept the first {min(len(raw), max_bytes)} bytes; sha256 {hashlib.sha256(raw).hexdigest()}"


def oversize(raw: bytes, max_bytes: int) -> Rejection:
    """The dead letter of a record over the limit: a bounded prefix, the whole one named."""
    reason = f"too_large: {len(raw)} bytes exceeds the limit of {max_bytes}; {_kept(raw, max_bytes)}"
    return Rejection(raw[:max_bytes], reason)


def bounded_letter(raw: bytes, reason: str, max_bytes: int) -> tuple[bytes, str]:
    """A dead letter as stored: never more than ``max_bytes`` of it (one written whole by
    an older release, or by another producer of the dead-letter topic, is clipped here)."""
    if len(raw) <= max_bytes:
        return raw, reason
    return raw[:max_bytes], f"{reason}; {_kept(raw, max_bytes)}"


def validate(raw: bytes, max_bytes: int = MAX_EVENT_BYTES) -> Envelope | Rejection:
    """Parse and validate one wire record. Never raises on bad input."""
    if len(raw) > max_bytes:
        return oversize(raw, max_bytes)
    tree = parse_json(raw)
    if isinstance(tree, Rejection):
        return tree
    try:  # the bytes again: JSON-mode errors name the problem (validating the tree saves ~0)
        return EVENT_ADAPTER.validate_json(raw)
    except ValidationError as error:
        return Rejection(raw, _describe(error))
    except (ValueError, RecursionError) as error:  # e.g. nesting too deep for the parser
        return Rejection(raw, f"invalid_json: {error}")


__all__ = ["INT_MAX", "INT_MIN", "Rejection", "bounded_letter", "check_json", "oversize", "parse_json", "validate"]
