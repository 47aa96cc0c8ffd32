"""A handoff record as assembly shows it, whatever a published ``compaction`` holds.

The records the pipeline folds are ``HandoffRecord``s. A ``compaction`` an agent
publishes carries any JSON object (``CompactionPayload.summary``), which the state keeps
as it came ("a published record wins as is"): an item without its text, a count that is
a word, a list that is a string. Assembly shows the parts that have the record's shape and
leaves the others out, so such a record can never fail a thread's contexts (the state
still shows it whole). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from agentlog.schemas.handoff import HandoffRecord

SOURCED = ("observations", "done", "hypotheses")
"""The record's lists of items, each a text with the events it comes from."""
TEXTS = ("pending_jobs", "unknowns", "modified_files")
"""The record's lists of plain texts."""


def shown_record(summary: Mapping[str, Any]) -> Mapping[str, Any]:
    """``summary`` itself when it is a handoff record (the pipeline's own records: nothing
    is copied), else a record of its parts that have the record's shape."""
    if _well_formed(summary):
        return summary
    record = {key: value for key, value in summary.items() if key not in (*SOURCED, *TEXTS, "next_action")}
    next_action = summary.get("next_action")
    if isinstance(next_action, str):
        record["next_action"] = next_action
    for key in TEXTS:
        record[key] = [text for text in _items(summary.get(key)) if isinstance(text, str)]
    for key in SOURCED:
        record[key] = [item for item in map(_sourced, _items(summary.get(key))) if item is not None]
    return record


def _well_formed(summary: Mapping[str, Any]) -> bool:
    """Whether ``summary`` is a ``HandoffRecord`` as it stands (strictly: a count that is
    the text "2" is not one): every record the pipeline folds is."""
    try:
        HandoffRecord.model_validate(summary, strict=True)
    except ValidationError:
        return False
    return True


def _items(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _sourced(item: Any) -> dict[str, Any] | None:
    """An item as the record has it: its text, its first source event and every one, its
    count when above one; ``None`` for one without a text or a source event to cite."""
    if not isinstance(item, Mapping) or not isinstance(item.get("text"), str):
        return None
    ids = [i for i in _items(item.get("source_event_ids")) if isinstance(i, str)]
    first = item.get("source_event_id")
    if not isinstance(first, str):
        if not ids:
            return None
        first = ids[0]
    shown: dict[str, Any] = {"text": item["text"], "source_event_id": first}
    if ids:
        shown["source_event_ids"] = ids
    count = item.get("count", 1)
    if type(count) is int and count > 1:
        shown["count"] = count
    return shown


__all__ = ["SOURCED", "TEXTS", "shown_record"]
