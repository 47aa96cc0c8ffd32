"""SPEC §2: what is accepted, and what is rejected with a reason."""

from __future__ import annotations

import hashlib

import orjson
import pytest

from agentlog.processors.validation import Rejection, validate
from agentlog.schemas.events import KINDS, MAX_EVENT_BYTES
from tests.helpers import raw

VALID_PAYLOADS = {
    "message": {"role": "user", "text": "hi"},
    "tool_call": {"call_id": "c1", "tool_name": "bash", "arguments": {"cmd": "ls"}},
    "tool_result": {"call_id": "c1", "output": "x"},
    "tool_progress": {"call_id": "c1", "text": "50%"},
    "goal": {"text": "ship it"},
    "constraint": {"constraint_id": "k1", "text": "read-only"},
    "plan": {"steps": [{"step_id": "s1", "text": "a", "status": "pending"}]},
    "task": {"task_id": "t1", "status": "running"},
    "file_change": {"path": "a.py", "change": "modified"},
    "approval_request": {"approval_id": "a1", "action": "deploy"},
    "approval_decision": {"approval_id": "a1", "decision": "approved"},
    "agent_spawn": {"child_agent_id": "sub1"},
    "agent_exit": {"child_agent_id": "sub1"},
    "turn_end": {},
    "window_switch": {"new_window_id": "w2"},
    "compaction": {"summary": {"goal": "g"}, "covers_through": "e1"},
    "fact": {"key": "java", "value": "17", "evidence_type": "user_confirmed", "confirmed": True},
    "revoke": {"target_event_id": "e1"},
    "error": {"message": "boom", "code": "E1"},
}


def test_every_kind_of_the_contract_is_accepted_with_its_payload() -> None:
    assert set(VALID_PAYLOADS) == set(KINDS)
    for kind, payload in VALID_PAYLOADS.items():
        assert not isinstance(validate(raw("e1", kind, payload)), Rejection), kind


def test_unknown_top_level_fields_are_kept_and_ignored() -> None:
    event = validate(raw("e1", "goal", {"text": "g"}, custom_field={"a": 1}))
    assert not isinstance(event, Rejection)
    assert event.model_extra == {"custom_field": {"a": 1}}


def test_defaults_agent_main_project_default_schema_version_1_and_source_from_kind() -> None:
    event = validate(raw("e1", "tool_result", {"call_id": "c", "output": ""}))
    assert not isinstance(event, Rejection)
    assert (event.agent_id, event.project, event.schema_version) == ("main", "default", 1)
    assert event.effective_source == "tool"
    assert event.payload.status == "ok"


@pytest.mark.parametrize(
    ("record", "category"),
    [
        (b"{not json", "invalid_json"),
        (b"[1, 2]", "not_an_object"),
        (raw("e1", "teleport", {}), "unknown_kind"),
        (raw("e 1", "goal", {"text": "g"}), "invalid_event"),
        (raw("e" * 129, "goal", {"text": "g"}), "invalid_event"),
        (raw("e1", "goal", {"text": "g"}, thread="t/1"), "invalid_event"),
        (raw("e1", "message", {"role": "robot", "text": "x"}), "invalid_payload"),
        (raw("e1", "tool_result", {"call_id": "c", "output": 5}), "invalid_payload"),
        (raw("e1", "task", {"task_id": "t", "status": "later"}), "invalid_payload"),
        (raw("e1", "file_change", {"path": "a", "change": "modified", "confirmed": "yes"}), "invalid_payload"),
        (orjson.dumps({"event_id": "e1", "thread_id": "t", "kind": "goal", "payload": {"text": "g"}}), "missing_field"),
        (orjson.dumps({"event_id": "e1", "thread_id": "t", "kind": "goal", "ts": "2026-01-01T00:00:00",
                       "payload": {"text": "g"}}), "invalid_event"),
        (orjson.dumps({"event_id": "e1", "thread_id": "t", "kind": "goal", "ts": 1767225600,
                       "payload": {"text": "g"}}), "invalid_event"),
    ],
)
def test_bad_records_are_rejected_with_a_reason_naming_the_problem(record: bytes, category: str) -> None:
    rejection = validate(record)
    assert isinstance(rejection, Rejection)
    assert rejection.reason.startswith(category), rejection.reason
    assert rejection.raw == record


def test_events_over_the_size_limit_keep_a_bounded_prefix_and_name_the_whole_by_size_and_sha256() -> None:
    # The one exception to byte for byte: a dead letter never carries more than the limit
    # (a 500 MB record once faulted the column writer), and the reason identifies the rest.
    big = raw("e1", "message", {"role": "user", "text": "x" * MAX_EVENT_BYTES})
    rejection = validate(big)
    assert isinstance(rejection, Rejection)
    assert rejection.reason.startswith("too_large")
    assert rejection.raw == big[:MAX_EVENT_BYTES]
    assert f"{len(big)} bytes" in rejection.reason
    assert hashlib.sha256(big).hexdigest() in rejection.reason


def test_a_timestamp_without_an_offset_is_refused_saying_how_to_write_one_not_quoting_a_regex() -> None:
    for ts in ("2026-12-05T07:00:00", "yesterday", "9" * 100_000):
        refused = validate(orjson.dumps({"event_id": "e1", "thread_id": "t", "kind": "goal", "ts": ts,
                                         "payload": {"text": "g"}}))  # fmt: skip
        assert isinstance(refused, Rejection)
        assert "time-zone offset" in refused.reason and "2026-11-30T10:00:00Z" in refused.reason
        assert "pattern" not in refused.reason and "^" not in refused.reason and len(refused.reason) < 300


def test_timestamps_need_an_offset_and_accept_z_and_nanoseconds() -> None:
    ok = validate(orjson.dumps({"event_id": "e1", "thread_id": "t", "kind": "goal",
                                "ts": "2026-01-01T00:00:00.123456789+02:00", "payload": {"text": "g"}}))  # fmt: skip
    assert not isinstance(ok, Rejection)
    assert ok.time.utcoffset().total_seconds() == 7200
    assert ok.time.microsecond == 123456
