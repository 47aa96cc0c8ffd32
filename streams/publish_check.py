"""What a publish checks before anything reaches a topic, on both deployments (the
embedded ``publish_to`` and the Kafka publisher call the same ``check_records``):
splitting a body into records, validation, and conflicting duplicates."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from pydantic_core import from_json

from agentlog.processors.duplicates import conflict_reason, same_content
from agentlog.processors.validation import Rejection, bounded_letter, validate

_JSON_SPACE = " \t\n\r"


def _array_items(body: bytes) -> list[bytes] | None:
    """The items of a body that is one JSON array, each as the bytes received (not
    re-serialised: the log keeps what the producer sent), or None if it is not one."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return None
    decoder = json.JSONDecoder()  # only to find where each item ends; validation is later
    items: list[bytes] = []
    i = 1
    try:
        while True:
            while text[i] in _JSON_SPACE:
                i += 1
            if text[i] == "]" and not items:
                return [] if i == len(text) - 1 else None
            _item, end = decoder.raw_decode(text, i)
            items.append(text[i:end].encode("utf-8"))  # UTF-8 round-trips byte for byte
            while text[end] in _JSON_SPACE:
                end += 1
            if text[end] == "]":
                return items if end == len(text) - 1 else None
            if text[end] != ",":
                return None
            i = end + 1
    except (ValueError, IndexError, RecursionError):
        return None


def split_records(data: bytes) -> list[bytes]:
    """JSON lines (blank lines skipped); a body that is one JSON array gives its items, and
    one object spread over several lines (pretty-printed) is one record."""
    stripped = data.strip()
    if stripped.startswith(b"{") and b"\n" in stripped:
        try:
            from_json(stripped, allow_inf_nan=True)  # what validation parses (NaN refused there)
            return [stripped]
        except ValueError:
            pass  # JSON lines: the first object ends at its line
    if stripped.startswith(b"[") and stripped.endswith(b"]"):
        items = _array_items(stripped)
        if items is not None:
            return items
    lines = data.split(b"\n")
    return [line[:-1] if line.endswith(b"\r") else line for line in lines if line.strip()]


@dataclass
class PublishReport:
    accepted: int = 0
    rejected: int = 0
    last_event_id: str | None = None
    last_offset: int = 0
    rejections: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class Publisher(Protocol):
    """Where ``agentlog publish`` sends a body: the embedded topic file or Kafka."""

    def publish(self, data: bytes, dead_letters: Sequence[tuple[bytes, str]] = ()) -> PublishReport:
        """Check every record, send the accepted ones and dead-letter the rest (and
        ``dead_letters``, records a caller refused itself, with their reasons)."""

    def close(self) -> None: ...


FirstCopies = Callable[[Sequence[str]], dict[str, bytes]]
"""The first accepted bytes of each of these event ids that a topic already holds."""


def check_records(
    records: list[bytes], max_bytes: int, first_copies: FirstCopies | None = None
) -> tuple[list[tuple[str, str, bytes]], list[tuple[bytes, str]], PublishReport]:
    """Validate before send: accepted (thread, id, bytes), dead letters (bytes, reason).

    The one publish check of both deployments. An event id seen before with different
    content (earlier in ``records``, or in the topic when ``first_copies`` can tell) is a
    ``conflicting_duplicate`` dead letter; an exact copy passes (the processors drop it).
    """
    valid: list[tuple[int, str, str, bytes]] = []
    rejected: list[tuple[int, bytes, str]] = []
    for n, raw in enumerate(records, start=1):
        result = validate(raw, max_bytes)
        if isinstance(result, Rejection):
            rejected.append((n, result.raw, result.reason))  # a bounded prefix if too large
        else:
            valid.append((n, result.thread_id, result.event_id, raw))
    first = dict(first_copies([e for _, _, e, _ in valid])) if first_copies and valid else {}
    accepted: list[tuple[str, str, bytes]] = []
    for n, thread_id, event_id, raw in valid:
        earlier = first.setdefault(event_id, raw)
        if earlier is not raw and not same_content(earlier, raw):
            rejected.append((n, raw, conflict_reason(event_id, earlier)))
        else:
            accepted.append((thread_id, event_id, raw))
    rejected.sort(key=lambda r: r[0])
    report = PublishReport(accepted=len(accepted), rejected=len(rejected))
    report.last_event_id = accepted[-1][1] if accepted else None
    report.rejections = [{"record": n, "reason": why} for n, _, why in rejected[:100]]
    return accepted, [(raw, why) for _, raw, why in rejected], report


def with_letters(rejected: list[tuple[bytes, str]], report: PublishReport,
                 dead_letters: Sequence[tuple[bytes, str]], max_bytes: int) -> list[tuple[bytes, str]]:  # fmt: skip
    """The checked rejections and a caller's own ``dead_letters`` (each bounded to
    ``max_bytes``, as an oversized record is), all to dead-letter; the report counts the
    latter (it lists by record number only records of the body)."""
    report.rejected += len(dead_letters)
    return [*rejected, *(bounded_letter(raw, why, max_bytes) for raw, why in dead_letters)]


__all__ = ["FirstCopies", "with_letters", "PublishReport", "Publisher", "check_records", "split_records"]
