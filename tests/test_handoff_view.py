"""A published ``compaction`` may carry any JSON object as its summary (the state keeps it
as it came): a context shows the parts that have the handoff record's shape and never
fails on the others. A failure's tool name with a newline is still one line of the
failures section (``agentlog.processors.handoff_view``, ``agentlog.processors.context``)."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from agentlog.processors import context
from agentlog.processors.context import assemble, render_summary
from agentlog.processors.handoff_view import shown_record
from agentlog.processors.pipeline import MemorySeen, Pipeline, Record
from agentlog.processors.public_state import PublicView
from agentlog.processors.tokens import counter
from tests.helpers import ev, raw

LEAVES = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from(["e1", "e2", "tests pass", "", "x\ny"]))
VALUES = st.recursive(LEAVES, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(st.sampled_from(["text", "source_event_id", "source_event_ids", "count", "kind"]), inner, max_size=5)),
    max_leaves=16)  # fmt: skip
SUMMARIES = st.dictionaries(
    st.sampled_from(["observations", "done", "hypotheses", "pending_jobs", "unknowns", "modified_files",
                     "next_action", "goal", "text"]), VALUES, max_size=6)  # fmt: skip


def _state_after(summary: dict[str, Any], *failures: bytes) -> dict[str, Any]:
    pipeline = Pipeline(MemorySeen())
    records = [raw("g", "goal", {"text": "ship"}), *failures,
               raw("c", "compaction", {"summary": summary, "covers_through": "g"}, 30.0)]  # fmt: skip
    pipeline.process([Record(0, i, r) for i, r in enumerate(records)])
    return PublicView().render(pipeline.thread("t1").state, True)


def _context(state: dict[str, Any], budget: int, derived: dict[str, Any] | None) -> bytes:
    try:
        result = assemble(state, [], counter(), budget, None, set(), None, state_redacted=True, derived=derived)
    except context.BudgetTooSmall as error:
        return f"too small: {error.needed}".encode()
    return orjson.dumps(result.as_dict())


@settings(max_examples=200, deadline=None)
@given(summary=SUMMARIES, budget=st.sampled_from([40, 120, 2000]))
def test_a_published_summary_of_any_shape_never_fails_a_context_and_is_shown_the_same_remembered_or_not(
        summary: dict[str, Any], budget: int) -> None:  # fmt: skip
    state = _state_after(summary)
    derived: dict[str, Any] = {}
    assert _context(state, budget, None) == _context(state, budget, derived) == _context(state, budget, derived)
    render_summary(summary, counter(), budget)


def test_the_parts_of_the_record_s_shape_are_shown_and_the_others_left_out() -> None:
    summary = {"observations": [{"text": "tests pass", "source_event_id": "e1"}, {"text": "no source"},
                                {"source_event_id": "e9"}, "a string", {"text": "counted", "source_event_id": "e4",
                                                                        "count": "many"}],
               "done": [{"text": "ran the build", "source_event_ids": ["e2", "e3"]}],
               "pending_jobs": "not a list", "unknowns": ["why it hangs", 7], "next_action": ["not", "text"]}  # fmt: skip
    text = render_summary(summary, counter(), 2000)
    lines = text.splitlines()
    assert "- tests pass [e1]" in lines and "- counted [e4]" in lines
    assert "- ran the build [e2, e3]" in lines  # cites its events as the fold would (no source_event_id of its own)
    assert "Unknown: why it hangs" in lines
    assert "no source" not in text and "e9" not in text and "not a list" not in text and "Next action" not in text
    sections = orjson.loads(_context(_state_after(summary), 2000, {}))["sections"]
    assert any(s["name"] == "summary" and "- ran the build [e2, e3]" in s["content"] for s in sections)


def test_a_record_of_the_record_s_shape_is_shown_as_the_very_same_object() -> None:
    record = {"observations": [{"text": "t", "source_event_id": "e1", "count": 2, "source_event_ids": ["e1", "e5"]}],
              "done": [], "hypotheses": [], "pending_jobs": ["call c1 (grep)"], "next_action": None,
              "unknowns": [], "modified_files": ["a.py"], "goal": "ship", "constraints": []}  # fmt: skip
    assert shown_record(record) is record


def test_a_tool_name_with_a_newline_is_one_line_and_the_window_points_at_the_right_failure() -> None:
    failures = []
    for i, tool in enumerate(["fetch\nretry", "pytest"]):
        failures += [raw(f"c{i}", "tool_call", {"call_id": f"k{i}", "tool_name": tool, "arguments": {}}, 1.0 + 2 * i),
                     raw(f"r{i}", "tool_result", {"call_id": f"k{i}", "status": "error", "exit_code": 1,
                                                   "output": f"failure {i}: " + "the host refused the connection " * 6},
                         2.0 + 2 * i)]  # fmt: skip
    state = _state_after({}, *failures)
    window = [ev("c1", "tool_call", {"call_id": "k1", "tool_name": "pytest", "arguments": {}}, 3.0),
              ev("r1", "tool_result", {"call_id": "k1", "status": "error", "exit_code": 1,
                                       "output": "failure 1: " + "the host refused the connection " * 6}, 4.0)]  # fmt: skip
    result = assemble(state, window, counter(), 4000, None, set(), None, state_redacted=True)
    (section,) = [s for s in result.sections if s["name"] == "failures"]
    lines = section["content"].split("\n")
    assert len(lines) == 3  # the title and one line per failure
    assert lines[1].startswith("- fetch retry [error]") and "failure 0" in lines[1]
    assert lines[2].startswith("- pytest [error]") and lines[2].endswith("output in the conversation below (r1)")


def test_a_thread_whose_agent_published_a_malformed_summary_still_answers_its_contexts(tmp_path: Any) -> None:
    from agentlog.streams.config import Settings  # noqa: PLC0415
    from agentlog.streams.embedded.service import EmbeddedService  # noqa: PLC0415

    service = EmbeddedService(Settings(data_dir=tmp_path))
    try:
        service.publish(raw("g", "goal", {"text": "ship"}))
        service.publish(raw("c", "compaction", {"summary": {"observations": "all good", "done": [{"count": "x"}],
                                                            "pending_jobs": [None]}, "covers_through": "g"}, 1.0))  # fmt: skip
        service.publish(raw("u", "message", {"role": "user", "text": "what is left?"}, 2.0))
        for _ in range(2):  # the second from what the first remembered
            answer = service.context("t1", 2000)
            assert answer["meta"]["latest_user_message_id"] == "u"
        assert service.state("t1")["summary"]["observations"] == "all good"  # the state shows it as published
    finally:
        service.close()
