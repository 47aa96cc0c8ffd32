"""OpenAI Chat Completions: a ``messages`` list in as events, a context out as ``messages``.

In: system and developer messages, user messages (text parts; an image part becomes
``[image omitted]``), assistant messages (text, refusal, ``tool_calls``, the legacy
``function_call``), ``tool`` messages (and the legacy ``function`` ones) as tool results.
Out: system, user and assistant messages; each assistant message with ``tool_calls`` is
followed by one ``tool`` message per call id, as the API requires. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from agentlog.processors.formats.common import History, as_at, content_text, content_texts
from agentlog.processors.formats.paired import Calls, Text, turns
from agentlog.schemas.events import Envelope

FORMAT = "openai"


def to_events(messages: Iterable[Mapping[str, Any]], thread_id: str, project: str = "default", *,
              at: datetime | str | None = None, step_ms: int = 1, start: int = 0,
              agent_id: str = "main") -> list[Envelope]:  # fmt: skip
    """The events of a Chat Completions history, oldest first (see ``History`` for ids and times)."""
    h = History("oai", thread_id, project, agent_id, as_at(at), step_ms, start)
    legacy: list[str] = []  # legacy function calls waiting for their ``function`` message
    for i, m in enumerate(messages):
        role = m.get("role")
        if role in ("system", "developer", "user"):
            h.message(i, str(role), content_texts(m.get("content")))
        elif role == "assistant":
            texts = content_texts(m.get("content"))
            if m.get("refusal"):
                texts.append(f"[refusal] {m['refusal']}")
            h.message(i, "assistant", texts)
            for call in m.get("tool_calls") or ():
                fn = call.get("function") or call.get("custom") or {}
                h.call(i, str(call["id"]), str(fn.get("name")), fn.get("arguments", fn.get("input")))
            if m.get("function_call"):
                legacy.append(call_id := f"{h.fmt}-function-{h.start + i}")
                h.call(i, call_id, str(m["function_call"]["name"]), m["function_call"].get("arguments"))
        elif role == "tool":
            h.result(i, str(m["tool_call_id"]), content_text(m.get("content")))
        elif role == "function":
            call_id = legacy.pop(0) if legacy else f"{h.fmt}-function-{h.start + i}"
            h.result(i, call_id, content_text(m.get("content")))
        else:
            raise ValueError(f"message {i}: role {role!r} is not a Chat Completions role")
    return h.events


def render(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An assembled context's ``messages`` as Chat Completions ``messages``."""
    out: list[dict[str, Any]] = []
    for turn in turns(messages):
        if isinstance(turn, Text):
            out.append({"role": turn.role, "content": turn.text})
            continue
        assert isinstance(turn, Calls)
        out.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": c.call_id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in turn.calls
        ]})  # fmt: skip
        out += [{"role": "tool", "tool_call_id": c.call_id, "content": c.output} for c in turn.calls]
    return out


__all__ = ["FORMAT", "render", "to_events"]
