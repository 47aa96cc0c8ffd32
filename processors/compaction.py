"""Compaction helpers over events (SPEC §5): checks for a handoff record, a summariser
interface, and the ``compaction`` event. The fold itself is a stream step
(``agentlog.processors.fold``); these serve a summariser that runs beside the stream
(an LLM's record, published as a ``compaction`` event) and its checks. A context read
never calls them.

Safe prefix: whole interaction units only (a tool call never leaves without its result),
and it stops before any unit that holds a pending call, so open work stays in view.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

from pydantic import ValidationError

from agentlog.processors.context import Unit
from agentlog.processors.fold import guesses
from agentlog.processors.redaction import redact_value
from agentlog.processors.truncation import clip_at_word
from agentlog.schemas.events import Envelope
from agentlog.schemas.handoff import HandoffRecord, Sourced

MAX_OBSERVATIONS = 60
MAX_HYPOTHESES = 30
FIRST_LINE_CHARS = 200

Summariser = Callable[[dict[str, Any], Sequence[Envelope], HandoffRecord | None], HandoffRecord]


def fold_count(units: Sequence[Unit], window_budget: int, pending_call_ids: set[str]) -> int:
    """How many of the oldest units to fold so the rest fits in half the window budget
    (hysteresis: one compaction buys room for many turns). 0: nothing to fold."""
    total = sum(u.tokens for u in units)
    if total <= window_budget:
        return 0
    target = window_budget // 2
    folded = 0
    for n, unit in enumerate(units):
        calls = {c["id"] for m in unit.messages for c in m.get("tool_calls", ())}
        if calls & pending_call_ids or n == len(units) - 1:
            break  # open work and the newest unit stay in the raw window
        total -= unit.tokens
        folded = n + 1
        if total <= target:
            break
    return folded


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return clip_at_word(line, FIRST_LINE_CHARS)


def deterministic_summary(
    state: dict[str, Any], folded: Sequence[Envelope], previous: HandoffRecord | None
) -> HandoffRecord:
    """The default summariser: from the state and the folded events, no model involved."""
    observations = list(previous.observations) if previous else []
    hypotheses = list(previous.hypotheses) if previous else []
    unknowns = list(previous.unknowns) if previous else []
    for e in folded:
        p: Any = e.payload
        if e.kind == "tool_result":
            observations.append(Sourced(
                text=f"{p.tool_name or p.call_id} -> {p.status}: {_first_line(p.output)}",
                source_event_id=e.event_id,
            ))  # fmt: skip
        elif e.kind == "message" and p.role == "user":
            observations.append(Sourced(text=f"user said: {_first_line(p.text)}", source_event_id=e.event_id))
        elif e.kind == "message" and p.role == "assistant":
            # Only what the model phrased as a guess is a hypothesis; the rest is no fact either.
            if guess := guesses(" / ".join(p.text.splitlines())):
                hypotheses.append(Sourced(text=clip_at_word(guess, FIRST_LINE_CHARS), source_event_id=e.event_id))
        elif e.kind == "error":
            observations.append(Sourced(text=f"error {p.code or ''}: {_first_line(p.message)}".strip(),
                                        source_event_id=e.event_id))  # fmt: skip
    for failure in state.get("failures", []):
        if failure.get("status") == "missing":
            note = f"result of {failure.get('tool_name') or 'tool'} call {failure.get('call_id')} unknown (no result)"
            if note not in unknowns:
                unknowns.append(note)
    plan = state.get("plan", [])
    next_step = next((s for s in plan if s["status"] == "running"), None) or next(
        (s for s in plan if s["status"] == "pending"), None
    )
    pending = [f"call {c['call_id']} ({c['tool_name']})" for c in state.get("pending_calls", [])]
    pending += [f"task {t['task_id']}: {t.get('text') or ''}".strip() for t in state.get("tasks", [])
                if t["status"] in ("pending", "running")]  # fmt: skip
    pending += [f"approval {a['approval_id']}: {a['action']}" for a in state.get("pending_approvals", [])]
    return HandoffRecord(
        goal=(state.get("goal") or {}).get("text"),
        constraints=[c["text"] for c in state.get("constraints", [])],
        observations=observations[-MAX_OBSERVATIONS:],
        hypotheses=hypotheses[-MAX_HYPOTHESES:],
        pending_jobs=pending,
        next_action=None if next_step is None else (next_step.get("text") or next_step["step_id"]),
        unknowns=unknowns[-MAX_OBSERVATIONS:],
        modified_files=[f["path"] for f in state.get("files", []) if f["confirmed"]],
    )


FACTUAL = "a tool result, a user message or an error"


def _cited(item: Sourced) -> list[str]:
    return [item.source_event_id, *item.source_event_ids]


def verdict(record: Any, state: dict[str, Any], folded: Sequence[Envelope] = (),
            previous: HandoffRecord | None = None, orphans: Collection[str] = ()) -> tuple[HandoffRecord | None, str]:  # fmt: skip
    """(the record, "") when a summariser's ``record`` may replace the deterministic one;
    (None, why not) otherwise. Pure. Every observation cites a folded event of a factual
    kind (a tool result that is no orphan, a user message, an error) or one the previous
    record observed; nothing cites an id that is neither folded nor in the previous
    record; the goal, every constraint and every confirmed modified file survive."""
    try:
        parsed = record if isinstance(record, HandoffRecord) else HandoffRecord.model_validate(record)
    except ValidationError as err:
        return None, f"not a handoff record: {str(err).splitlines()[0]}"
    goal = (state.get("goal") or {}).get("text")
    if goal is not None and parsed.goal != goal:
        return None, f"changes the goal to {parsed.goal!r}"
    lost = next((c["text"] for c in state.get("constraints", []) if c["text"] not in parsed.constraints), None)
    if lost is not None:
        return None, f"drops the constraint {lost!r}"
    gone = next((f["path"] for f in state.get("files", []) if f["confirmed"] and f["path"] not in parsed.modified_files), None)
    if gone is not None:
        return None, f"drops the confirmed modified file {gone!r}"
    kinds = {e.event_id: _kind(e, orphans) for e in folded}
    before = previous or HandoffRecord()
    observed = {i for o in before.observations for i in _cited(o)}
    known = set(kinds) | observed | {i for k in (before.hypotheses, before.done) for item in k for i in _cited(item)}
    for name in ("observations", "hypotheses", "done"):
        for item in getattr(parsed, name):
            unknown = next((i for i in _cited(item) if i not in known), None)
            if unknown is not None:
                return None, f"{name} cite an unknown event {unknown!r}"
    for item in parsed.observations:
        for i in _cited(item):
            if i not in observed and kinds.get(i) != "fact":
                what = kinds.get(i, "an event the previous record only guessed at or listed as done")
                return None, f"an observation cites {i!r}, {what}, not {FACTUAL}"
    return parsed, ""


def _kind(e: Envelope, orphans: Collection[str]) -> str:
    """``fact`` for what an observation may cite, else what the event is."""
    p: Any = e.payload
    if e.kind == "tool_result":
        return "an orphan tool result" if e.event_id in orphans else "fact"
    if e.kind == "message":
        return "fact" if p.role == "user" else f"{'an' if p.role == 'assistant' else 'a'} {p.role} message"
    return "fact" if e.kind == "error" else f"a {e.kind} event"


def acceptable(record: Any, state: dict[str, Any], folded: Sequence[Envelope] = (),
               previous: HandoffRecord | None = None, orphans: Collection[str] = ()) -> HandoffRecord | None:  # fmt: skip
    """``verdict``'s record, or ``None`` when it is rejected (the reason is dropped)."""
    return verdict(record, state, folded, previous, orphans)[0]


def summarise(
    state: dict[str, Any],
    folded: Sequence[Envelope],
    previous: HandoffRecord | None,
    summariser: Summariser | None = None,
    redact_secrets: bool = True,
) -> tuple[HandoffRecord, str]:
    """(record, which summariser produced it). A configured summariser's output is
    checked; one that fails or drops pinned facts gives way to the deterministic one.
    The record is redacted (``redact_secrets``): it is written into the stream, the
    state's rolling summary and every later context."""
    record, name = None, "deterministic"
    if summariser is not None:
        try:
            record = acceptable(summariser(state, folded, previous), state, folded, previous)
        except Exception:  # noqa: BLE001 - a remote summariser may fail in any way
            record = None
        name = "deterministic" if record is None else "custom"
    if record is None:
        record = deterministic_summary(state, folded, previous)
    if redact_secrets:
        record = HandoffRecord.model_validate(redact_value(record.model_dump(mode="json")))
    return record, name


def compaction_event(thread_id: str, project: str, record: HandoffRecord, covers_through: Envelope,
                     window_id: str, summariser: str) -> dict[str, Any]:  # fmt: skip
    """The ``compaction`` event. Its id and time derive from what it covers, so the same
    compaction computed twice is one event (a duplicate collapses)."""
    return {
        "event_id": f"compaction.{covers_through.event_id}"[:128],
        "thread_id": thread_id,
        "kind": "compaction",
        "ts": covers_through.ts,
        "window_id": window_id,
        "project": project,
        "source": "system",
        "agent_id": "agentlog",
        "payload": {"summary": record.model_dump(mode="json"), "covers_through": covers_through.event_id,
                    "summariser": summariser},  # fmt: skip
    }




def safe_cut(events: Sequence[Envelope], units: Sequence[Unit], n: int) -> int:
    """How many of ``events`` (stream order) a compaction folding the first ``n`` units
    covers: a prefix holding every event of the folded units and none of the others'.
    Fewer units are folded when interleaving would otherwise split one."""
    position = {e.event_id: i for i, e in enumerate(events)}
    while n > 0:
        rest = [position[i] for u in units[n:] for i in u.event_ids if i in position]
        cut = min(rest) if rest else len(events)
        if all(position.get(i, -1) < cut for u in units[:n] for i in u.event_ids):
            return cut
        n -= 1
    return 0


__all__ = [
    "Summariser", "acceptable", "compaction_event", "deterministic_summary", "fold_count", "safe_cut",
    "summarise", "verdict",
]  # fmt: skip
