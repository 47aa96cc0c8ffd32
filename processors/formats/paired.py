"""An assembled context's messages as turns a provider payload is made from: text turns,
and groups of tool calls each with its result. Pure.

The context builder already keeps every call next to its result (a call without one gets
a synthetic result). A list from elsewhere may not: here a call whose result is missing
becomes a text turn that says so, and a result whose call is missing a user text turn
(tool output is data, never the system's word), so no payload ever holds a dangling call."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson


@dataclass(frozen=True)
class Text:
    role: str  # system, user or assistant
    text: str


@dataclass(frozen=True)
class Call:
    call_id: str
    name: str
    arguments: str  # as the context shows them: JSON text, or the producer's own text
    output: str


@dataclass(frozen=True)
class Calls:
    """One assistant turn of tool calls, each answered by the results that follow it."""

    calls: tuple[Call, ...]


Turn = Text | Calls


_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def api_name(name: str) -> str:
    """A tool name as both APIs accept one (letters, digits, ``_``, ``-``, at most 64):
    as it is when it already is (a name you define a tool with always is), else with the
    other characters replaced (an MCP tool's ``server.tool``, say)."""
    return name if _NAME.match(name) else (re.sub(r"[^A-Za-z0-9_-]", "_", name)[:64] or "tool")


def no_result_text(call: dict[str, Any]) -> str:
    fn = call.get("function") or {}
    return f"[tool call {call.get('id')} {fn.get('name')}({fn.get('arguments') or ''}) has no result in this context]"


def orphan_result_text(call_id: str, output: str) -> str:
    return f"[tool result of call {call_id}, whose call is not in this context]: {output}"


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # parts, as a caller's own list may have them
        return "\n\n".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    return orjson.dumps(content).decode()


def turns(messages: list[dict[str, Any]]) -> list[Turn]:
    """``messages`` (generic chat messages) as turns, in order. A call's result is the first
    ``tool`` message with its id after it; a result used once is not used again."""
    results: dict[str, list[int]] = {}
    for i, m in enumerate(messages):
        if m.get("role") == "tool":
            results.setdefault(str(m.get("tool_call_id")), []).append(i)
    used: set[int] = set()
    out: list[Turn] = []
    for i, m in enumerate(messages):
        role = m.get("role")
        if role == "tool":
            if i not in used:
                out.append(Text("user", orphan_result_text(str(m.get("tool_call_id")), _text(m.get("content")))))
            continue
        text = _text(m.get("content"))
        if text:
            out.append(Text("system" if role in ("system", "developer") else str(role), text))
        calls: list[Call] = []
        for call in m.get("tool_calls") or ():
            found = next((j for j in results.get(str(call.get("id")), ()) if j > i and j not in used), None)
            if found is None:
                out.append(Text("assistant", no_result_text(call)))
                continue
            used.add(found)
            fn = call.get("function") or {}
            calls.append(Call(str(call["id"]), api_name(str(fn.get("name"))), _text(fn.get("arguments")),
                              _text(messages[found].get("content"))))  # fmt: skip
        if calls:
            out.append(Calls(tuple(calls)))
    return out


__all__ = ["Call", "Calls", "Text", "Turn", "api_name", "no_result_text", "orphan_result_text", "turns"]
