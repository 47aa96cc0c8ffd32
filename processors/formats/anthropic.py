"""Anthropic Messages: a ``messages`` list (and ``system``) in as events, a context out as
``system`` and ``messages``. Pure.

In: text blocks as messages, an image block as ``[image omitted]`` (a document, audio or
other block as its own marker), ``tool_use`` as tool calls, ``tool_result`` as results
(``is_error`` as status ``error``); thinking blocks are the model's private reasoning and
are skipped. Out: the leading system messages as ``system``; then user and assistant
turns alternating (consecutive same-role turns merged, the first one the user's), each
assistant ``tool_use`` answered by its ``tool_result`` at the start of the next user turn."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import orjson

from agentlog.processors.formats.common import History, as_at, content_text, part_text
from agentlog.processors.formats.paired import Calls, Text, turns
from agentlog.schemas.events import Envelope

FORMAT = "anthropic"
SKIPPED = frozenset({"thinking", "redacted_thinking"})
EARLIER = "[earlier conversation omitted]"
"""The first user turn when the context starts with the assistant's (the API wants a user turn first)."""
NOTHING = "[no conversation yet]"
"""The one user turn of a context with no conversation (the API wants at least one)."""
_ERROR = re.compile(r"^\[(status: (?!ok\])[a-z]+|no result: [^\]]*)\]")
_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


def to_events(messages: Iterable[Mapping[str, Any]], thread_id: str, project: str = "default", *,
              system: str | Iterable[Mapping[str, Any]] | None = None, at: datetime | str | None = None,
              step_ms: int = 1, start: int = 0, agent_id: str = "main") -> list[Envelope]:  # fmt: skip
    """The events of a Messages history, oldest first; ``system`` (the request's system
    prompt) is a system message before them (see ``History`` for ids and times)."""
    h = History("ant", thread_id, project, agent_id, as_at(at), step_ms, start)
    if system:
        # Position -1: the system prompt, so the messages keep their own positions.
        h.message(-1 - h.start, "system", [system] if isinstance(system, str) else [part_text(b) for b in system])
    for i, m in enumerate(messages):
        role, content = str(m["role"]), m.get("content")
        if isinstance(content, str):
            h.message(i, role, [content])
            continue
        texts: list[str] = []
        for block in content or ():
            kind = block.get("type")
            if kind in ("tool_use", "tool_result") and texts:  # text keeps its place between calls
                h.message(i, role, texts)
                texts = []
            if kind == "tool_use":
                h.call(i, str(block["id"]), str(block["name"]), block.get("input"))
            elif kind == "tool_result":
                status = "error" if block.get("is_error") else "ok"
                h.result(i, str(block["tool_use_id"]), content_text(block.get("content")), status)
            elif kind not in SKIPPED:
                texts.append(part_text(block))
        h.message(i, role, texts)
    return h.events


def tool_id(call_id: str) -> str:
    """A call id as the API accepts one (letters, digits, ``_`` and ``-``): as it is when it
    already is, else its characters replaced and a digest added so two never meet."""
    if _ID.match(call_id):
        return call_id
    digest = hashlib.sha256(call_id.encode()).hexdigest()[:12]
    return f"{re.sub(r'[^A-Za-z0-9_-]', '_', call_id)[:100]}_{digest}"


def _input(arguments: str) -> dict[str, Any]:
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        value = None
    return value if isinstance(value, dict) else {"arguments": arguments}


def _result(call_id: str, output: str) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_id(call_id)}
    if output.strip():
        block["content"] = output
    if _ERROR.match(output):  # the context marks an error, timeout or missing result so
        block["is_error"] = True
    return block


def render(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """An assembled context's ``messages`` as a Messages request's ``system`` and ``messages``."""
    system: list[str] = []
    blocks: list[tuple[str, dict[str, Any]]] = []  # (role, block) in order
    for turn in turns(messages):
        if isinstance(turn, Text):
            if turn.role == "system" and not blocks:
                system.append(turn.text)
            elif turn.text.strip():  # the API refuses an empty text block
                # A system message inside the conversation has no place of its own here.
                text = f"[system] {turn.text}" if turn.role == "system" else turn.text
                blocks.append(("assistant" if turn.role == "assistant" else "user", {"type": "text", "text": text}))
            continue
        assert isinstance(turn, Calls)
        blocks += [("assistant", {"type": "tool_use", "id": tool_id(c.call_id), "name": c.name,
                                  "input": _input(c.arguments)}) for c in turn.calls]  # fmt: skip
        blocks += [("user", _result(c.call_id, c.output)) for c in turn.calls]
    if not blocks or blocks[0][0] == "assistant":
        blocks.insert(0, ("user", {"type": "text", "text": EARLIER if blocks else NOTHING}))
    out: list[dict[str, Any]] = []
    for role, block in blocks:
        if out and out[-1]["role"] == role:
            out[-1]["content"].append(block)
        else:
            out.append({"role": role, "content": [block]})
    return {"system": "\n\n".join(system), "messages": out}


__all__ = ["EARLIER", "FORMAT", "NOTHING", "SKIPPED", "render", "to_events", "tool_id"]
