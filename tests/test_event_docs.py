"""Issue 13, item 5: the event format documented inside the repository, generated from the
models, so that neither the JSON Schema file nor docs/events.md can drift from what the
pipeline accepts.

The `jsonschema` package is not installed here, so the schema is evaluated by
``_check`` below: the few keywords the generated schema uses, and an error on any other
keyword (a schema that grew a new keyword fails loudly instead of passing unchecked).
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from agentlog.processors.validation import Rejection, validate
from agentlog.schemas.event_docs import BEGIN, END, EXAMPLES, KIND_NOTES, REJECTIONS, reference
from agentlog.schemas.event_schema import (
    ENVELOPE_NOTES, PAYLOAD_NOTES, event_schema, payload_model, payload_schema, schema_text,
)  # fmt: skip
from agentlog.schemas.events import KINDS, Envelope, PlanStep
from agentlog.streams.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_FILE = ROOT / "schemas" / "event.schema.json"
DOC = ROOT / "docs" / "events.md"

# -- a JSON Schema evaluator for the keywords the generated schema uses ----------------

_ANNOTATIONS = {"$schema", "title", "description", "default", "$defs"}
_TYPES = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "null": lambda v: v is None,
}


def _check(value: Any, schema: dict[str, Any], root: dict[str, Any]) -> bool:
    """Whether ``value`` is valid under ``schema`` (draft 2020-12, the keywords used here)."""
    for key, rule in schema.items():
        if key in _ANNOTATIONS or key in ("then", "else"):
            continue
        if key == "$ref":
            ok = _check(value, root["$defs"][rule.rsplit("/", 1)[-1]], root)
        elif key == "type":
            ok = _TYPES[rule](value)
        elif key == "enum":
            ok = any(value == v and type(value) is type(v) for v in rule)
        elif key == "const":
            ok = value == rule and type(value) is type(rule)
        elif key == "pattern":
            ok = not isinstance(value, str) or re.search(rule, value) is not None
        elif key == "minLength":
            ok = not isinstance(value, str) or len(value) >= rule
        elif key == "required":
            ok = not isinstance(value, dict) or all(name in value for name in rule)
        elif key == "properties":
            ok = not isinstance(value, dict) or all(
                _check(value[name], sub, root) for name, sub in rule.items() if name in value
            )
        elif key == "additionalProperties":
            ok = rule is True
        elif key == "items":
            ok = not isinstance(value, list) or all(_check(item, rule, root) for item in value)
        elif key == "anyOf":
            ok = any(_check(value, sub, root) for sub in rule)
        elif key == "allOf":
            ok = all(_check(value, sub, root) for sub in rule)
        elif key == "if":
            branch = schema.get("then" if _check(value, rule, root) else "else", {})
            ok = _check(value, branch, root)
        else:
            raise AssertionError(f"the test's evaluator does not know the keyword {key!r}")
        if not ok:
            return False
    return True


def _event(kind: str, payload: Any, **envelope: Any) -> dict[str, Any]:
    return {"event_id": "e1", "thread_id": "t1", "kind": kind, "ts": "2026-11-30T09:00:00Z",
            "payload": payload, **envelope}  # fmt: skip


def _pipeline_accepts(event: Any) -> bool:
    return not isinstance(validate(json.dumps(event).encode()), Rejection)


def _schema_accepts(event: Any) -> bool:
    schema = event_schema()
    return _check(event, schema, schema)


# -- the JSON Schema ---------------------------------------------------------------------


def test_the_committed_json_schema_file_is_what_the_models_generate_now() -> None:
    assert SCHEMA_FILE.read_text(encoding="utf-8") == schema_text(), (
        "schemas/event.schema.json is stale: regenerate it with `agentlog schema > schemas/event.schema.json`"
    )


def test_the_schema_declares_every_kind_with_exactly_its_models_payload_fields() -> None:
    schema = event_schema()
    assert schema["properties"]["kind"]["enum"] == list(KINDS)
    assert set(schema["properties"]) == set(Envelope.model_fields)
    chosen = {rule["if"]["properties"]["kind"]["const"]: rule["then"]["properties"]["payload"]["$ref"]
              for rule in schema["allOf"]}  # fmt: skip
    assert list(chosen) == list(KINDS)
    for kind, ref in chosen.items():
        model = payload_model(kind)
        payload = schema["$defs"][ref.rsplit("/", 1)[-1]]
        assert set(payload["properties"]) == set(model.model_fields), kind
        required = {name for name, field in model.model_fields.items() if field.is_required()}
        assert set(payload.get("required", [])) == required, kind
    assert set(schema["$defs"]["PlanStep"]["properties"]) == set(PlanStep.model_fields)


def test_the_schema_accepts_an_example_of_every_kind_as_the_pipeline_does() -> None:
    assert set(EXAMPLES) == set(KINDS)
    for kind, payload in EXAMPLES.items():
        event = _event(kind, payload)
        assert _pipeline_accepts(event), kind
        assert _schema_accepts(event), kind


# Values of every JSON type, put in place of each field in turn.
_PROBES: tuple[Any, ...] = (None, "", "x", "e 1", 0, 3, -1, True, False, 2.5, {}, {"a": 1}, [], ["x"],
                            [{"step_id": "s"}], "approved", "remove", "done", "user")  # fmt: skip


def _mutations(event: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The event with one field dropped or replaced, envelope and payload alike."""
    out: list[tuple[str, dict[str, Any]]] = []
    for name in [*event, *(f"payload.{k}" for k in event["payload"])]:
        for probe in (KeyError, *_PROBES):
            mutated = copy.deepcopy(event)
            holder, key = (mutated["payload"], name[8:]) if name.startswith("payload.") else (mutated, name)
            if probe is KeyError:
                del holder[key]
            else:
                holder[key] = probe
            out.append((f"{name}={probe!r}", mutated))
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_the_schema_refuses_exactly_what_the_pipeline_refuses_field_by_field(kind: str) -> None:
    event = _event(kind, EXAMPLES[kind], turn_id="T1", source="agent")
    disagreements = [
        (label, _pipeline_accepts(mutated)) for label, mutated in _mutations(event)
        if _pipeline_accepts(mutated) != _schema_accepts(mutated)
    ]  # fmt: skip
    assert disagreements == [], "(mutation, pipeline accepts) where the schema says otherwise"


def test_the_schema_refuses_unknown_kinds_missing_fields_and_an_added_constraint_without_text() -> None:
    refused = [
        _event("thought", {}),
        _event("tool_call", {"call_id": "c1"}),
        _event("plan", {"steps": [{"text": "no id"}]}),
        _event("constraint", {"constraint_id": "k1"}),
        _event("constraint", {"constraint_id": "k1", "op": "add", "text": ""}),
        {"event_id": "e1", "thread_id": "t1", "kind": "turn_end", "payload": {}},
    ]
    for event in refused:
        assert not _pipeline_accepts(event), event
        assert not _schema_accepts(event), event
    removal = _event("constraint", {"constraint_id": "k1", "op": "remove"})
    assert _pipeline_accepts(removal) and _schema_accepts(removal)
    extra = _event("goal", {"text": "g", "mine": 1}, custom_field=[1])  # unknown fields are kept, ignored
    assert _pipeline_accepts(extra) and _schema_accepts(extra)


def test_one_kinds_payload_schema_stands_alone_with_the_definitions_it_refers_to() -> None:
    plan = payload_schema("plan")
    assert set(plan["$defs"]) == {"PlanStep"}
    assert _check({"steps": [{"step_id": "s1", "status": "done"}]}, plan, plan)
    assert not _check({"steps": [{"step_id": "s1", "status": "finished"}]}, plan, plan)
    assert "$defs" not in payload_schema("goal")


# -- the command -------------------------------------------------------------------------


def test_agentlog_schema_prints_the_committed_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema"]) == 0
    assert capsys.readouterr().out == SCHEMA_FILE.read_text(encoding="utf-8")


def test_agentlog_schema_kind_prints_that_kinds_payload_and_refuses_an_unknown_kind(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["schema", "--kind", "tool_call"]) == 0
    assert json.loads(capsys.readouterr().out) == payload_schema("tool_call")
    assert main(["schema", "--kind", "thought"]) == 1
    assert "unknown kind 'thought'" in capsys.readouterr().err


def test_agentlog_schema_help_says_what_it_prints(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["schema", "--help"])
    out = capsys.readouterr().out
    assert "JSON Schema" in out and "--kind" in out and "docs/events.md" in out


# -- docs/events.md ----------------------------------------------------------------------


def _tables_after(text: str, heading: str) -> list[list[dict[str, str]]]:
    """The tables of the section under ``heading`` (up to the next heading), as rows of cells."""
    lines = text.splitlines()
    start = lines.index(heading) + 1
    tables: list[list[dict[str, str]]] = []
    header: list[str] | None = None
    for line in lines[start:]:
        if line.startswith("#"):
            break
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        if header is None:
            header = cells
            tables.append([])
        elif not set(line) <= {"|", "-"}:
            tables[-1].append(dict(zip(header, cells)))
    return tables


def _names(table: list[dict[str, str]], column: str = "field") -> list[str]:
    names = []
    for row in table:
        match = re.search(r"`([^`]+)`", row[column])
        assert match, row
        names.append(match.group(1))
    return names


def test_docs_events_lists_exactly_the_envelope_fields_the_model_declares() -> None:
    (table,) = _tables_after(DOC.read_text(encoding="utf-8"), "### The envelope")
    assert sorted(_names(table)) == sorted(Envelope.model_fields)
    for row, name in zip(table, _names(table)):
        assert row["required"] == ("yes" if Envelope.model_fields[name].is_required() else "no"), name


def test_docs_events_lists_exactly_the_kinds_and_each_kinds_payload_fields() -> None:
    text = DOC.read_text(encoding="utf-8")
    (kinds,) = _tables_after(text, "### The kinds")
    assert _names(kinds, "kind") == list(KINDS)
    for kind in KINDS:
        tables = _tables_after(text, f"#### `{kind}`")
        model = payload_model(kind)
        documented = _names(tables[0]) if model.model_fields else []
        assert sorted(documented) == sorted(model.model_fields), kind
        for row, name in zip(tables[0] if tables else [], documented):
            required = model.model_fields[name].is_required()
            assert row["required"] == ("yes" if required else "no"), (kind, name)
        if kind == "plan":
            assert sorted(_names(tables[1])) == sorted(PlanStep.model_fields)


def test_the_generated_part_of_docs_events_is_current() -> None:
    text = DOC.read_text(encoding="utf-8")
    generated = text[text.index(BEGIN): text.index(END) + len(END)] + "\n"
    assert generated == reference(), (
        "docs/events.md is stale: replace the part between its markers with `agentlog schema --markdown`"
    )


def test_every_field_has_one_meaning_and_no_meaning_is_left_from_a_removed_field() -> None:
    assert list(ENVELOPE_NOTES) == list(Envelope.model_fields)
    assert set(KIND_NOTES) == set(KINDS)
    assert set(PAYLOAD_NOTES) == {*KINDS, "plan.steps[]"}
    for kind in KINDS:
        assert set(PAYLOAD_NOTES[kind]) == set(payload_model(kind).model_fields), kind
    assert set(PAYLOAD_NOTES["plan.steps[]"]) == set(PlanStep.model_fields)


def test_every_json_example_in_docs_events_is_an_accepted_event_of_its_section() -> None:
    text = DOC.read_text(encoding="utf-8")
    blocks = re.findall(r"^#### `(\w+)`$|^```json\n(.*?)\n```$", text, flags=re.M | re.S)
    section, checked = None, 0
    for heading, body in blocks:
        if heading:
            section = heading
            continue
        result = validate(body.encode())
        assert not isinstance(result, Rejection), (body, result)
        assert section is None or result.kind == section, body
        checked += 1
    assert checked == len(KINDS) + 1  # one per kind, plus the minimal event at the top


def test_every_rejection_in_docs_events_is_rejected_with_the_reason_it_names() -> None:
    (table,) = _tables_after(DOC.read_text(encoding="utf-8"), "### What is rejected")
    assert len(table) == len(REJECTIONS)
    for row in table:
        record = row["example record"].strip("`").encode()
        reason = row["reason begins with"].strip("`")
        result = validate(record)
        assert isinstance(result, Rejection), record
        assert result.reason.startswith(reason), (record, result.reason)
