"""OpenAI Responses: an ``input`` item list in as events. Pure.

Messages (``{"role": ..., "content": ...}``, with or without ``"type": "message"``) become
messages, an image part ``[image omitted]``. ``function_call`` / ``function_call_output``
(and ``custom_tool_call`` / ``custom_tool_call_output``) become tool calls and results; so
does every other ``*_call`` item that has a ``call_id`` (``shell_call``, ``computer_call``:
the tool is named after the item type) with its ``*_output``, and ``mcp_call`` (result and
error inline). Reasoning, item references and compaction items carry nothing a later
context can use and are skipped; any other item (a built-in tool's own call) becomes a
visible ``[... omitted]`` marker in an assistant message."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from agentlog.processors.formats.common import History, as_at, content_text, content_texts, marker
from agentlog.schemas.events import Envelope

SKIPPED = frozenset({"reasoning", "item_reference", "compaction", "compaction_trigger"})
_CALL_FIELDS = ("type", "id", "call_id", "status", "caller", "name")


def to_events(items: Iterable[Mapping[str, Any]], thread_id: str, project: str = "default", *,
              at: datetime | str | None = None, step_ms: int = 1, start: int = 0,
              agent_id: str = "main") -> list[Envelope]:  # fmt: skip
    """The events of a Responses input item list, oldest first (see ``History``)."""
    h = History("oair", thread_id, project, agent_id, as_at(at), step_ms, start)
    for i, item in enumerate(items):
        kind = str(item.get("type") or "message")
        if kind == "message":
            h.message(i, str(item["role"]), content_texts(item.get("content")))
        elif kind == "function_call":
            h.call(i, str(item["call_id"]), str(item["name"]), item.get("arguments"))
        elif kind == "custom_tool_call":
            h.call(i, str(item["call_id"]), str(item["name"]), item.get("input"))
        elif kind == "mcp_call":
            call_id = str(item["id"])
            h.call(i, call_id, str(item["name"]), item.get("arguments"))
            if item.get("error"):
                h.result(i, call_id, content_text(item["error"]), "error")
            elif item.get("output") is not None:
                h.result(i, call_id, content_text(item["output"]))
        elif kind.endswith("_output") and item.get("call_id"):
            h.result(i, str(item["call_id"]), content_text(item.get("output")), _status(item))
        elif kind.endswith("_call") and item.get("call_id"):
            arguments = {k: v for k, v in item.items() if k not in _CALL_FIELDS}
            h.call(i, str(item["call_id"]), kind.removesuffix("_call"), arguments)
        elif kind not in SKIPPED:
            h.message(i, "assistant", [marker(kind.replace("_", " "))])
    return h.events


def _status(item: Mapping[str, Any]) -> str:
    # An output item's own status says whether the tool ran (``incomplete``: it did not finish).
    return "error" if item.get("status") in ("incomplete", "failed") else "ok"

__all__ = ["SKIPPED", "to_events"]
