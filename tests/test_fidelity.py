"""Issue 14, item 6 and the first line of its bar: the fidelity benchmark's own measurement
(``agentlog.bench.fidelity``, the code behind ``agentlog bench --only fidelity``) on its
generated sessions, failing below the bar. Measured on the assembled messages only."""

from __future__ import annotations

from typing import Any

import pytest

from agentlog.bench.fidelity import BUDGETS, Positions, decision_shown, order_violations, run_fidelity, text_of
from agentlog.processors.context import MEMORY_HEADER

MAX_EVENTS = 3_000
"""The benchmark's own sessions: 20, of 300 to 3,000 events each."""


@pytest.fixture(scope="module")
def figures() -> dict[str, Any]:
    return run_fidelity(n_sessions=20, min_events=300, max_events=MAX_EVENTS)


def _budget(figures: dict[str, Any], budget: int) -> dict[str, Any]:
    return figures["budgets"][str(budget)]


def test_the_questions_are_about_folded_away_content_of_twenty_long_sessions(figures: dict[str, Any]) -> None:
    assert figures["sessions"] >= 20
    assert min(figures["main_thread_events"]) >= 300 and max(figures["main_thread_events"]) >= MAX_EVENTS
    assert figures["questions"] >= 80 and figures["questions_not_folded"] == 0
    for b in BUDGETS:
        assert _budget(figures, b)["key_fact_questions"] >= 40 and _budget(figures, b)["error_code_questions"] >= 40


def test_constraint_and_decision_retention_is_100_percent_at_every_budget(figures: dict[str, Any]) -> None:
    for b in BUDGETS:
        t = _budget(figures, b)
        assert (b, t["constraint_retention"], t["decision_retention"]) == (b, 1.0, 1.0), t["missed"]


def test_key_facts_and_error_codes_are_kept_95_percent_at_1500_tokens_and_all_at_8000(figures: dict[str, Any]) -> None:
    tight, roomy = _budget(figures, 1_500), _budget(figures, 8_000)
    assert tight["key_fact_retention"] >= 0.95 and tight["error_code_retention"] >= 0.95, tight["missed"]
    assert roomy["key_fact_retention"] == 1.0 and roomy["error_code_retention"] == 1.0, roomy["missed"]


def test_no_orphan_output_reaches_the_messages(figures: dict[str, Any]) -> None:
    assert [_budget(figures, b)["orphan_leakage"] for b in BUDGETS] == [0, 0, 0]


def test_nothing_of_another_thread_or_project_is_recalled(figures: dict[str, Any]) -> None:
    assert [(_budget(figures, b)["cross_thread_false_recall"], _budget(figures, b)["cross_project_false_recall"])
            for b in BUDGETS] == [(0, 0)] * 3  # fmt: skip


def test_no_message_is_out_of_order_no_call_unpaired_and_the_question_comes_last(figures: dict[str, Any]) -> None:
    for b in BUDGETS:
        assert _budget(figures, b)["order_violations"] == 0, _budget(figures, b)["violations"]


def test_a_context_request_changes_no_later_one(figures: dict[str, Any]) -> None:
    assert figures["reads_compared"] >= 100 and figures["changes_caused_by_reads"] == 0


# The checks themselves: each one catches what it is there to catch.


def _positions() -> Positions:
    p = Positions()
    for i, e in enumerate([
        {"kind": "message", "payload": {"text": "first"}},
        {"kind": "tool_call", "payload": {"call_id": "c1"}},
        {"kind": "tool_result", "payload": {"call_id": "c1"}},
        {"kind": "message", "payload": {"text": "question?"}},
    ]):  # fmt: skip
        p.add(e, i)
    return p


CALL = {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "function": {"name": "bash", "arguments": "{}"}}]}
RESULT = {"role": "tool", "tool_call_id": "c1", "content": "ok"}


def test_the_order_check_catches_a_reordering_an_unpaired_call_and_a_question_not_last() -> None:
    sys = {"role": "system", "content": "Goal: x"}
    first, question = {"role": "user", "content": "first"}, {"role": "user", "content": "question?"}
    assert order_violations([sys, first, CALL, RESULT, question], _positions(), "question?") == []
    assert order_violations([sys, CALL, RESULT, first, question], _positions(), "question?") != []
    assert order_violations([sys, first, CALL, question], _positions(), "question?") != []
    assert order_violations([sys, first, RESULT, question], _positions(), "question?") != []
    assert order_violations([sys, question, first], _positions(), "question?") != []
    memory = {"role": "user", "content": MEMORY_HEADER + " [..]"}
    assert order_violations([sys, memory, first, question], _positions(), "question?") == []


def test_a_decision_counts_only_under_its_own_heading() -> None:
    text = "Permissions granted:\n- rotate the key (ab12) [approval a1]\nDenied actions (do not do these):\n- drop it (cd34)"
    assert decision_shown(text, "rotate the key (ab12)", "approved")
    assert decision_shown(text, "drop it (cd34)", "denied")
    assert not decision_shown(text, "drop it (cd34)", "approved")
    assert not decision_shown(text, "scale to zero (ef56)", "denied")


def test_the_measured_text_holds_contents_and_tool_calls_only() -> None:
    text = text_of([CALL, RESULT, {"role": "user", "content": "hi"}])
    assert "bash {}" in text and "ok" in text and "hi" in text
