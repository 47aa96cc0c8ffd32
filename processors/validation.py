"""Bytes in, an accepted event or a rejection with its reason out (SPEC §2)."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ValidationError

from schemas.events import EVENT_ADAPTER, MAX_EVENT_BYTES, Envelope


@dataclass(frozen=True, slots=True)
class Rejection:
    """A record that failed validation; ``raw`` is kept byte for byte."""

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
        parts.append(f"{where}: {item['msg']}")
    return f"{category}: " + "; ".join(parts)


def validate(raw: bytes, max_bytes: int = MAX_EVENT_BYTES) -> Envelope | Rejection:
    """Parse and validate one wire record. Never raises on bad input."""
    if len(raw) > max_bytes:
        return Rejection(raw, f"too_large: {len(raw)} bytes exceeds the limit of {max_bytes}")
    try:
        return EVENT_ADAPTER.validate_json(raw)
    except ValidationError as error:
        return Rejection(raw, _describe(error))
    except (ValueError, RecursionError) as error:  # e.g. nesting too deep for the parser
        return Rejection(raw, f"invalid_json: {error}")


__all__ = ["Rejection", "validate"]
