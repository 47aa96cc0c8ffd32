"""The JSON Schema of an event, generated from the pydantic models of ``agentlog.schemas.events``.

``event_schema()`` is what ``agentlog schema`` prints and what ``schemas/event.schema.json``
holds (a test regenerates it and compares, so the file cannot go stale). The envelope's
fields come from ``Envelope``; each kind's payload from its payload model, chosen by
``kind`` with one ``if``/``then`` per kind (a validator then names the payload field that
is wrong, where a ``oneOf`` would only say that no branch matched).

Field meanings live here too (``ENVELOPE_NOTES``, ``PAYLOAD_NOTES``): they become the
schema's descriptions and the columns of ``docs/events.md``, and a test requires one
meaning for every field a model declares, no more, no less.

What a JSON Schema cannot say is checked by the pipeline only and named in the schema's
description: the calendar (``ts`` must be a real date in 1900..2299 UTC), JSON every store
reads the same way (no NaN or Infinity, no key twice in one object, integers within 64
bits), the size limit, and that ``1.0`` is no integer.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from agentlog.schemas.events import EVENT_CLASSES, KINDS, MAX_EVENT_BYTES, Envelope, Payload, PlanStep

DIALECT = "https://json-schema.org/draft/2020-12/schema"
_REF = "#/$defs/{model}"

ENVELOPE_NOTES: dict[str, str] = {
    "event_id": "Unique id of the event, chosen by the producer. The idempotency key: the same id "
    "again with the same content changes nothing; with other content it is rejected.",
    "thread_id": "The conversation or task the event belongs to; a thread's events are processed in order.",
    "kind": "What happened; decides the shape of `payload` (one of the kinds below).",
    "ts": "Event time, set by the producer: RFC 3339 with a `Z` or numeric offset, at most nine "
    "fraction digits, a real calendar date in 1900-01-01..2299-12-31 (UTC).",
    "payload": "The kind's own fields (below). Fields the kind does not declare are ignored, and logged.",
    "window_id": "The context window the event belongs to; unset means the thread's current window.",
    "turn_id": "The turn within the thread; a `turn_end` closes the calls of its turn.",
    "agent_id": "The agent or sub-agent that emitted the event.",
    "project": "Scope of long-term memory and tenancy: one project never sees another's facts.",
    "source": "Who produced the content; unset means derived from the kind (a user message is `user`, "
    "an assistant message `agent`, a tool result `tool`, a compaction `system`).",
    "repo_commit": "The code version the event refers to.",
    "schema_version": "Version of this format.",
}

PAYLOAD_NOTES: dict[str, dict[str, str]] = {
    "message": {
        "role": "Who speaks.",
        "text": "What was said.",
    },
    "tool_call": {
        "call_id": "Id of the call, unique within the thread; its result names the same id.",
        "tool_name": "The tool called.",
        "arguments": "The arguments, as an object or as one string.",
    },
    "tool_result": {
        "call_id": "The call this result answers.",
        "output": "What the tool returned, whole (models see head and tail of a long one).",
        "status": "How the call ended.",
        "tool_name": "The tool, if the producer repeats it here.",
        "exit_code": "The process exit code, for tools that have one.",
    },
    "tool_progress": {
        "call_id": "The running call.",
        "text": "What it reports so far; ignored once the call has its result.",
    },
    "goal": {
        "text": "The thread's goal; it replaces the previous one. Pinned: no compaction removes it.",
    },
    "constraint": {
        "constraint_id": "Id of the constraint, so a later event can remove it.",
        "text": "The rule itself; required (not empty) when adding.",
        "op": "Add the constraint or remove it.",
    },
    "plan": {
        "steps": "Steps to add or update, matched by `step_id`; steps not named stay as they are.",
    },
    "plan.steps[]": {
        "step_id": "Id of the step within the thread's plan.",
        "text": "What the step is; unset keeps the text it had.",
        "status": "Where the step stands; it never moves back.",
    },
    "task": {
        "task_id": "Id of the task within the thread.",
        "status": "Where the task stands; it never moves back.",
        "text": "What the task is.",
        "owner": "Who works on it.",
    },
    "file_change": {
        "path": "The file changed.",
        "change": "What happened to it.",
        "confirmed": "Whether the change is known to have happened; an unconfirmed one (a proposal) never "
        "overwrites a confirmed one.",
    },
    "approval_request": {
        "approval_id": "Id of the request; its decision names the same id.",
        "action": "What needs approving.",
        "detail": "More about it.",
    },
    "approval_decision": {
        "approval_id": "The request decided; only a decision takes it off the pending list.",
        "decision": "The answer.",
        "by": "Who decided.",
    },
    "agent_spawn": {
        "child_agent_id": "Id of the sub-agent started.",
        "role": "What the sub-agent is for.",
        "child_thread_id": "The sub-agent's own thread, where its events go (same alphabet as `thread_id`).",
    },
    "agent_exit": {
        "child_agent_id": "The sub-agent that finished.",
        "status": "How it ended, in the producer's words.",
        "summary": "What the sub-agent reports back.",
    },
    "turn_end": {},
    "window_switch": {
        "new_window_id": "Id of the fresh working window.",
        "reason": "Why the window was switched.",
    },
    "compaction": {
        "summary": "The structured handoff record of what was folded away (goal, constraints, "
        "observations, hypotheses, done, pending jobs, next action, unknowns, modified files). Any object "
        "is accepted and the state shows it as published; a context shows only its parts of the record's "
        "shape (an observation needs a `text` and a `source_event_id` or `source_event_ids`), and the next "
        "fold starts a fresh record from a summary of another shape.",
        "covers_through": "The `event_id` of the last event the summary covers.",
    },
    "fact": {
        "key": "What the fact is about, e.g. `preference.editor`.",
        "value": "The fact's value: any JSON value.",
        "evidence_type": "How it is known; decides which fact wins a conflict "
        "(`user_confirmed` > `tool_observed` > `model_inferred` > `external_content`).",
        "confirmed": "Only confirmed facts become memory candidates.",
        "scope": "Where the fact applies, in the producer's words.",
        "recheck_when": 'When to distrust it: `{"path": "glob"}` or `{"max_age_s": n}`.',
    },
    "revoke": {
        "target_event_id": "The event whose facts are withdrawn from memory.",
        "reason": "Why.",
    },
    "error": {
        "message": "What went wrong.",
        "code": "A code for it, string or integer.",
    },
}

_PLAN_STEP = "plan.steps[]"

# Cross-field rules of the models that a JSON Schema can state (the models' validators).
_EXTRA_RULES: dict[str, dict[str, Any]] = {
    "ConstraintPayload": {  # ConstraintPayload._added_constraint_has_text
        "if": {"properties": {"op": {"const": "remove"}}, "required": ["op"]},
        "else": {"properties": {"text": {"minLength": 1}}, "required": ["text"]},
    },
}

_DESCRIPTION = (
    "One agentlog event: an envelope and a payload whose shape depends on `kind`. "
    "The pipeline also refuses what this schema cannot express: a `ts` that is no real date or lies "
    "outside 1900..2299 UTC, NaN or Infinity, a key twice in one object, an integer outside 64 bits, "
    f"a number with a fraction where an integer is due (`1.0`), and a record over {MAX_EVENT_BYTES} bytes "
    "(the default limit)."
)


def payload_model(kind: str) -> type[Payload]:
    """The payload model of ``kind`` (``KeyError`` for an unknown kind)."""
    for cls in EVENT_CLASSES:
        if cls.model_fields["kind"].annotation.__args__[0] == kind:  # type: ignore[union-attr]
            return cls.model_fields["payload"].annotation  # type: ignore[return-value]
    raise KeyError(kind)


def _notes_key(model: type[BaseModel]) -> str:
    """Where ``PAYLOAD_NOTES`` keeps the meanings of ``model``'s fields."""
    if model is PlanStep:
        return _PLAN_STEP
    return next(k for k in KINDS if payload_model(k) is model)


def _tidy(node: Any) -> Any:
    """Without pydantic's generated titles: noise next to the descriptions."""
    if isinstance(node, dict):
        return {k: _tidy(v) for k, v in node.items() if not (k == "title" and isinstance(v, str))}
    if isinstance(node, list):
        return [_tidy(v) for v in node]
    return node


def _describe(schema: dict[str, Any], notes: dict[str, str]) -> dict[str, Any]:
    # A field without a meaning yet gets none here (a test names it) rather than breaking
    # the schema, the command and every test that uses them.
    for name, prop in schema.get("properties", {}).items():
        if name in notes:
            prop["description"] = notes[name]
    return schema


def _payload_defs() -> dict[str, dict[str, Any]]:
    models = [payload_model(kind) for kind in KINDS]
    _, top = models_json_schema([(m, "validation") for m in models], ref_template=_REF)
    defs: dict[str, dict[str, Any]] = _tidy(top["$defs"])
    # PlanStep is the one model nested in a payload; a new one must be added here (KeyError).
    by_name = {m.__name__: m for m in (*models, PlanStep)}
    for name, schema in defs.items():
        key = _notes_key(by_name[name])
        _describe(schema, PAYLOAD_NOTES[key])
        schema["description"] = f"The payload of `{key}`." if key in KINDS else "One step of a plan."
        schema.update(_EXTRA_RULES.get(name, {}))
    return defs


def _envelope() -> dict[str, Any]:
    schema = _tidy(Envelope.model_json_schema(ref_template=_REF))
    schema.pop("$defs", None)
    schema.pop("description", None)
    props = schema["properties"]
    props["kind"] = {"enum": list(KINDS), "type": "string"}
    props["payload"] = {"type": "object"}
    return _describe(schema, ENVELOPE_NOTES)


def _sorted(node: Any) -> Any:
    """Keys sorted at every depth, so the committed file diffs only where the format changed."""
    if isinstance(node, dict):
        return {k: _sorted(node[k]) for k in sorted(node)}
    if isinstance(node, list):
        return [_sorted(v) for v in node]
    return node


def event_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one event, every kind."""
    schema = _envelope()
    schema.update({
        "$schema": DIALECT,
        "title": "agentlog event",
        "description": _DESCRIPTION,
        "$defs": _payload_defs(),
        "allOf": [
            {"if": {"properties": {"kind": {"const": kind}}, "required": ["kind"]},
             "then": {"properties": {"payload": {"$ref": _REF.format(model=payload_model(kind).__name__)}}}}
            for kind in KINDS
        ],
    })  # fmt: skip
    return _sorted(schema)


def _refs(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = {node["$ref"].rsplit("/", 1)[-1]} if isinstance(node.get("$ref"), str) else set()
        return found.union(*(_refs(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(_refs(v) for v in node))
    return set()


def payload_schema(kind: str) -> dict[str, Any]:
    """The JSON Schema of one kind's payload, standalone (``KeyError`` for an unknown kind)."""
    defs = _payload_defs()
    schema = defs[payload_model(kind).__name__]  # built afresh on every call: ours to change
    used = {name: defs[name] for name in sorted(_refs(schema))}
    schema.update({"$schema": DIALECT, "title": f"agentlog {kind} payload"})
    if used:
        schema["$defs"] = used
    return _sorted(schema)


def schema_text(schema: dict[str, Any] | None = None) -> str:
    """A schema as committed and printed: two-space indents, sorted keys, UTF-8, final newline."""
    return json.dumps(event_schema() if schema is None else schema, indent=2, ensure_ascii=False) + "\n"


__all__ = [
    "DIALECT", "ENVELOPE_NOTES", "PAYLOAD_NOTES", "event_schema", "payload_model", "payload_schema", "schema_text",
]
