"""The same ``event_id`` twice: an exact copy is a duplicate (a no-op, SPEC §2); a copy
with different content is a conflict, rejected as ``conflicting_duplicate`` so that it is
seen rather than silently dropped."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable

import orjson
from pydantic_core import from_json

from agentlog.processors.pipeline import Record
from agentlog.schemas.events import Envelope


def canonical(raw: bytes) -> bytes:
    """The content of a (valid) record independent of key order and whitespace.

    orjson writes ``true`` and ``1``, ``1`` and ``1.0`` differently: content that differs
    in type is not the same content.
    """
    return orjson.dumps(from_json(raw), option=orjson.OPT_SORT_KEYS)


def same_content(first: bytes, again: bytes) -> bool:
    if first == again:
        return True
    try:
        return canonical(first) == canonical(again)
    except (ValueError, TypeError, orjson.JSONEncodeError):
        return False


def conflict_reason(event_id: str, first: bytes) -> str:
    digest = hashlib.sha256(first).hexdigest()[:16]
    return (
        f"conflicting_duplicate: event_id {event_id} was already accepted with different content "
        f"(first copy sha256 {digest}...); the first copy stands"
    )


def conflicts(
    duplicates: Iterable[tuple[Record, Envelope]], first_copy: Callable[[str], bytes | None]
) -> list[tuple[Record, str]]:
    """The duplicates whose content differs from their id's first copy, with the reason
    to dead-letter them under (``first_copy``: the first accepted bytes of an id)."""
    found: list[tuple[Record, str]] = []
    for record, event in duplicates:
        first = first_copy(event.event_id)
        if first is not None and not same_content(first, record.value):
            found.append((record, conflict_reason(event.event_id, first)))
    return found


__all__ = ["canonical", "conflict_reason", "conflicts", "same_content"]
