"""What the provider converters share: event ids, event times, markers, and the events
themselves. Pure: the caller gives the time of the history's first item."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import orjson

from agentlog.schemas.events import EVENT_ADAPTER, Envelope

EPOCH = datetime(2000, 1, 1, tzinfo=timezone.utc)
"""Event time of a history's first item when the caller names none."""

IMAGE_MARKER = "[image omitted]"
"""What stands in a message for an image block: agentlog stores text, and a model reading the
context must still see that the user showed something."""


def marker(what: str) -> str:
    """The visible stand-in for a part that is not imported (a file, audio, a built-in tool)."""
    return f"[{what} omitted]"


@dataclass
class History:
    """Events made from one provider history: which thread, from what time, and the ids.

    An event's id is a digest of the thread, the item's position in the history (``start``
    is the position of the first item given), its part within the item and its payload: the
    same history imported twice gives the same events (exact duplicates, a no-op), and
    the history with turns appended gives the earlier events the same ids again. Event ``n``
    of the import is ``at`` plus ``n * step_ms``: the times are the caller's, never the clock's."""

    fmt: str
    thread_id: str
    project: str = "default"
    agent_id: str = "main"
    at: datetime = EPOCH
    step_ms: int = 1
    start: int = 0
    events: list[Envelope] = field(default_factory=list)
    _parts: dict[int, int] = field(default_factory=dict)

    def add(self, index: int, kind: str, payload: dict[str, Any]) -> None:
        """One event for the history's item ``index`` (0-based in the list given)."""
        position = self.start + index
        part = self._parts[position] = self._parts.get(position, -1) + 1  # an item's events keep their order
        key = orjson.dumps([self.thread_id, self.fmt, position, part, kind, payload], option=orjson.OPT_SORT_KEYS)
        digest = hashlib.sha256(key).hexdigest()[:24]
        ts = self.at + timedelta(milliseconds=self.step_ms * len(self.events))
        record = {
            "event_id": f"{self.fmt}-{position}.{part}-{digest}", "thread_id": self.thread_id, "kind": kind,
            "ts": _rfc3339(ts), "payload": payload, "agent_id": self.agent_id, "project": self.project,
        }  # fmt: skip
        self.events.append(EVENT_ADAPTER.validate_python(record))

    def message(self, index: int, role: str, texts: list[str]) -> None:
        text = "\n\n".join(t for t in texts if t)
        if text:  # an item with nothing to say (tool calls only) gives no message event
            self.add(index, "message", {"role": role, "text": text})

    def call(self, index: int, call_id: str, name: str, arguments: Any) -> None:
        self.add(index, "tool_call", {"call_id": call_id, "tool_name": name, "arguments": parse_arguments(arguments)})

    def result(self, index: int, call_id: str, output: str, status: str = "ok") -> None:
        # No tool name: pairing takes the call's, and a result stays the same event whether
        # or not its call is in the same import (``start``).
        self.add(index, "tool_result", {"call_id": call_id, "output": output, "status": status})


def _rfc3339(ts: datetime) -> str:
    return ts.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def parse_arguments(arguments: Any) -> dict[str, Any] | str:
    """A call's arguments as agentlog keeps them: an object, else the provider's text."""
    if isinstance(arguments, dict):
        return arguments
    if isinstance(arguments, str):
        try:
            value = orjson.loads(arguments)
        except orjson.JSONDecodeError:
            return arguments
        return value if isinstance(value, dict) else arguments
    return orjson.dumps(arguments).decode() if arguments is not None else {}


def as_at(at: datetime | str | None) -> datetime:
    """The history's first event time: a datetime, an RFC 3339 string, or the fixed default."""
    if at is None:
        return EPOCH
    if isinstance(at, str):
        at = datetime.fromisoformat(at.replace("Z", "+00:00").replace("z", "+00:00"))
    if at.tzinfo is None:
        raise ValueError("the history's time must carry a time zone (e.g. 2026-12-01T09:00:00Z)")
    return at





_TEXT_PARTS = ("text", "input_text", "output_text")
_IMAGE_PARTS = ("image", "image_url", "input_image")


def part_text(part: Any) -> str:
    """One content part of any of the three formats as text: text as it is, a refusal
    labelled, an image or anything else not text as a visible marker."""
    if isinstance(part, str):
        return part
    kind = part.get("type") if isinstance(part, dict) else None
    if kind is None:  # not a content part (a shell call's output, say): its JSON
        return orjson.dumps(part).decode()
    if kind in _TEXT_PARTS:
        return str(part.get("text") or "")
    if kind == "refusal":
        return f"[refusal] {part.get('refusal') or ''}"
    if kind in _IMAGE_PARTS:
        return IMAGE_MARKER
    return marker(str(kind).replace("_", " "))


def content_texts(content: Any) -> list[str]:
    """A message's content (a string, a list of parts, or none) as its texts, in order."""
    if content is None:
        return []
    if isinstance(content, str):
        return [content]
    if isinstance(content, dict):
        return [part_text(content)]
    return [part_text(p) for p in content]


def content_text(content: Any) -> str:
    """A tool output (a string, parts, or any JSON value) as one text."""
    if content is None or isinstance(content, (str, list, tuple)):
        return "\n\n".join(t for t in content_texts(content) if t)
    if isinstance(content, dict) and "type" in content:
        return part_text(content)
    return orjson.dumps(content).decode()


__all__ = ["EPOCH", "IMAGE_MARKER", "History", "as_at", "content_text", "content_texts", "marker", "parse_arguments",
           "part_text"]
