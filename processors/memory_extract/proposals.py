"""Checking an LLM's proposed memories against the events they cite, before any counts.

A proposal is ``{"key", "value", "source_event_id"}``. It counts only when the cited event
is one of the thread's, is a user's message or a tool's result (an assistant's words are
inferred, content fetched from outside is no observation), its text holds the value
verbatim in a sentence that is neither a guess nor a question, the text is not hostile,
and the key names nothing that steers an agent. Its evidence type comes from the cited
event's origin, never from the model. Pure: the same answer gives the same findings."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentlog.processors.memory_extract import origin, tool_observations
from agentlog.processors.memory_extract.text import is_hedged, is_hostile, names_steering, sentences
from agentlog.processors.memory_extract.thread import Finding, scan
from agentlog.schemas.events import Envelope

MAX_VALUE_CHARS = 160


@dataclass(frozen=True, slots=True)
class Rejected:
    """A proposal that does not count, and why (``memory extract`` reports them)."""

    source_event_id: str
    key: str
    reason: str


def _norm(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def _key(raw: str) -> str:
    return re.sub(r"[^\w.\-/]+", "_", raw.strip().lower()).strip("._")[:80]


def proposals(answer: Any) -> list[dict[str, str]]:
    """The well-formed proposals of an answer ``{"facts": [...]}``; anything else is none."""
    facts = answer.get("facts") if isinstance(answer, dict) else None
    if not isinstance(facts, list):
        return []
    fields = ("key", "value", "source_event_id")
    return [{f: p[f] for f in fields} for p in facts
            if isinstance(p, dict) and all(isinstance(p.get(f), str) and p[f].strip() for f in fields)]  # fmt: skip


def _cited_text(e: Envelope, calls: dict[str, tuple[str, Any]]) -> tuple[str, str | None]:
    """The cited event's text and why it cannot back a fact (``None``: it can)."""
    p: Any = e.payload
    if e.kind == "message":
        evidence = origin.message_evidence(e)
        return p.text, None if evidence == "user_confirmed" else f"cites {evidence} ({p.role}'s words)"
    if e.kind == "tool_result":
        tool, arguments = calls.get(p.call_id, (p.tool_name or "", {}))
        evidence = origin.result_evidence(e, tool, tool_observations.command_of(arguments))
        if p.status != "ok" or p.exit_code not in (None, 0):
            return p.output, "cites a failed call"
        return p.output, None if evidence == "tool_observed" else f"cites {evidence}"
    return "", f"cites a {e.kind} event, neither a user's message nor a tool's result"


def _check(p: dict[str, str], e: Envelope | None, calls: dict[str, tuple[str, Any]]) -> str | None:
    """Why a proposal does not count, or ``None``."""
    key, value = _key(p["key"]), p["value"].strip()
    if e is None:
        return "cites an event not in this thread"
    text, unfit = _cited_text(e, calls)
    if unfit:
        return unfit
    if not key or names_steering(key):
        return f"key {p['key']!r} names what steers an agent" if key else "empty key"
    if len(value) > MAX_VALUE_CHARS or is_hostile(text) or is_hostile(value):
        return "hostile or oversized text"
    holding = [s for s in sentences(text) if _norm(value) in _norm(s)]
    if not holding:
        return "the cited event does not contain the value"
    if e.kind == "message" and all(is_hedged(s) for s in holding):
        return "the cited words are a guess or a question"
    return None


def validate(answer: Any, events: Sequence[Envelope], start: int = 0) -> tuple[list[Finding], list[Rejected]]:
    """The proposals of ``answer`` that count, as findings of origin ``llm``, and the rest."""
    by_id = {e.event_id: e for e in events[start:]}
    calls = {e.payload.call_id: (e.payload.tool_name, e.payload.arguments)  # type: ignore[attr-defined]
             for e in events if e.kind == "tool_call"}  # fmt: skip
    commit_at = scan(events, start).commit_at
    found: list[Finding] = []
    rejected: list[Rejected] = []
    seen: set[tuple[str, str]] = set()
    for p in proposals(answer):
        e = by_id.get(p["source_event_id"])
        why = _check(p, e, calls)
        if why is not None or e is None:
            rejected.append(Rejected(p["source_event_id"], p["key"], why or "no event"))
            continue
        key = _key(p["key"])
        if (e.event_id, key) in seen:
            continue
        seen.add((e.event_id, key))
        evidence = "user_confirmed" if e.kind == "message" else "tool_observed"
        found.append(Finding(e, key, p["value"].strip(), evidence, "llm", commit_at.get(e.event_id)))
    return found, rejected


__all__ = ["MAX_VALUE_CHARS", "Rejected", "proposals", "validate"]
