"""SPEC §4 basics: the assembled context fits the budget, keeps pairs whole and pinned items."""

from __future__ import annotations

import time

import orjson
import pytest

from agentlog.processors.context import BudgetTooSmall, message_tokens
from agentlog.processors.tokens import counter
from agentlog.streams.api.context import context_for
from agentlog.streams.embedded.service import EmbeddedService
from tests.helpers import raw


def publish_session(service: EmbeddedService) -> None:
    lines = [raw("g", "goal", {"text": "make the build green"}, 0),
             raw("k", "constraint", {"constraint_id": "k", "text": "never touch prod"}, 1)]  # fmt: skip
    for i in range(40):
        lines.append(raw(f"u{i}", "message", {"role": "user", "text": f"request number {i} about the build"}, 10 + 3 * i))
        lines.append(raw(f"c{i}", "tool_call", {"call_id": f"c{i}", "tool_name": "bash", "arguments": {"cmd": "make"}}, 11 + 3 * i))
        lines.append(raw(f"r{i}", "tool_result", {"call_id": f"c{i}", "output": "log line\n" * (5 + i * 20)}, 12 + 3 * i))
    service.publish(b"\n".join(lines))
    service.catch_up()


@pytest.mark.parametrize("budget", [120, 300, 800, 2000, 8000])
def test_the_context_never_exceeds_the_budget_and_never_splits_a_pair(service: EmbeddedService, budget: int) -> None:
    publish_session(service)
    ctx = context_for(service, "t1", budget)
    tokens = counter()
    assert sum(message_tokens(tokens, m) for m in ctx["messages"]) <= budget
    assert ctx["meta"]["used_tokens"] <= budget
    calls = [c["id"] for m in ctx["messages"] for c in m.get("tool_calls", [])]
    results = [m["tool_call_id"] for m in ctx["messages"] if m["role"] == "tool"]
    assert calls == results
    text = "\n".join(m.get("content") or "" for m in ctx["messages"])
    assert "make the build green" in text and "never touch prod" in text
    assert "request number 39 about the build" in text


def test_a_budget_that_cannot_hold_the_pinned_items_fails_saying_how_many_tokens_they_need(service: EmbeddedService) -> None:
    publish_session(service)
    with pytest.raises(BudgetTooSmall) as err:
        context_for(service, "t1", 10)
    assert err.value.needed > 10 and str(err.value.needed) in str(err.value)


@pytest.mark.parametrize(("model", "encoding", "noted"), [
    (None, "o200k_base", False), ("gpt-4o-mini", "o200k_base", False), ("gpt-4-turbo", "cl100k_base", False),
    ("claude-3-5-sonnet", "o200k_base", True), ("llama-3-70b", "o200k_base", True),
])  # fmt: skip
def test_a_model_whose_tokenizer_is_not_known_is_counted_as_o200k_base_and_the_answer_says_so(
    service: EmbeddedService, model: str | None, encoding: str, noted: bool
) -> None:
    publish_session(service)
    meta = context_for(service, "t1", 2000, model=model)["meta"]
    assert meta["encoding"] == encoding
    assert ("encoding_note" in meta) == noted
    if noted:
        assert repr(model) in meta["encoding_note"] and "estimate" in meta["encoding_note"]


def test_large_outputs_are_shown_head_and_tail_with_the_event_id_that_holds_them(service: EmbeddedService) -> None:
    publish_session(service)
    ctx = context_for(service, "t1", 8000)
    tool_texts = [m["content"] for m in ctx["messages"] if m["role"] == "tool"]
    assert any("cut; full output: read r39" in t for t in tool_texts)


def test_a_redelivered_event_appears_in_the_context_once(service: EmbeddedService) -> None:
    first = raw("u1", "message", {"role": "user", "text": "please fix the flaky test"}, 1)
    service.publish(b"\n".join([raw("g", "goal", {"text": "green build"}, 0), first,
                                raw("a1", "message", {"role": "assistant", "text": "looking"}, 2), first]))  # fmt: skip
    service.catch_up()
    ctx = context_for(service, "t1", 4000)
    assert [m["content"] for m in ctx["messages"]].count("please fix the flaky test") == 1


def test_an_orphan_found_by_the_query_is_never_recalled_into_the_context(service: EmbeddedService) -> None:
    lines = [raw("g", "goal", {"text": "ship it"}, 0),
             raw("o1", "tool_result", {"call_id": "ghost", "output": "zebracorn stray output"}, 1),
             raw("m1", "message", {"role": "assistant", "text": "zebracorn noted"}, 2)]  # fmt: skip
    lines += [raw(f"u{i}", "message", {"role": "user", "text": f"filler {i}"}, 60 + i) for i in range(3)]
    # Out of the raw window, so only recall could bring them back.
    lines += [raw("w", "window_switch", {"new_window_id": "w2"}, 70), raw("u9", "message", {"role": "user", "text": "go on"}, 71)]
    service.publish(b"\n".join(lines))
    service.catch_up()
    assert service.orphans("t1") == {"o1"}
    assert "o1" in [h["event_id"] for h in service.search("zebracorn")["hits"]]  # searchable, in the log
    ctx = context_for(service, "t1", 4000, query="zebracorn")
    text = "\n".join(m.get("content") or "" for m in ctx["messages"])
    assert "zebracorn stray output" not in text and "o1" not in text
    assert "zebracorn noted" in text


def test_sections_come_in_the_contracts_order_pinned_state_summary_recent_then_recall(service: EmbeddedService) -> None:
    lines = [raw("g", "goal", {"text": "ship it"}, 0),
             raw("p", "plan", {"steps": [{"step_id": "s1", "text": "build", "status": "running"}]}, 1),
             raw("m1", "message", {"role": "assistant", "text": "the okapi cache is cold"}, 2),
             raw("w", "window_switch", {"new_window_id": "w2"}, 3),
             raw("u1", "message", {"role": "user", "text": "go on"}, 4)]  # fmt: skip
    service.publish(b"\n".join(lines))
    service.catch_up()
    names = [s["name"] for s in context_for(service, "t1", 4000, query="okapi")["sections"]]
    order = ["pinned", "state", "summary", "recent", "recall"]
    assert {"pinned", "state", "recent", "recall"} <= set(names)
    assert [n for n in order if n in names] == [n for n in names if n in order]


SPECIAL_TOKENS = ["<|endoftext|>", "<|endofprompt|>", "<|fim_prefix|>", "<|im_start|>"]


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
def test_a_text_holding_a_tokenizers_special_token_is_counted_as_the_ordinary_text_a_model_is_sent(encoding: str) -> None:
    tokens = counter(encoding)
    for special in SPECIAL_TOKENS:
        text = f"what does {special} mean?"
        assert tokens.count(text) > tokens.count("what does  mean?")
        assert tokens.count_new(text * 40) == tokens.count(text * 40) > 0


def test_an_event_quoting_a_special_token_never_stops_the_threads_context(service: EmbeddedService) -> None:
    """A model is sent the characters an event holds; ``<|endoftext|>`` among them is text."""
    quoted = " ".join(SPECIAL_TOKENS)
    service.publish(b"\n".join([
        raw("g", "goal", {"text": f"explain {quoted}"}, 0),
        raw("u1", "message", {"role": "user", "text": f"why does the log end with {quoted}?"}, 1),
        raw("c1", "tool_call", {"call_id": "c1", "tool_name": "grep", "arguments": {"pattern": quoted}}, 2),
        raw("r1", "tool_result", {"call_id": "c1", "output": f"{quoted}\n" * 200}, 3),
    ]))  # fmt: skip
    service.catch_up()
    for budget in (300, 8000):
        ctx = context_for(service, "t1", budget)
        assert ctx["meta"]["used_tokens"] <= budget
        assert "<|endoftext|>" in "\n".join(m.get("content") or "" for m in ctx["messages"])


@pytest.mark.parametrize("run", ["A", " ", "\n", "é"])
def test_a_message_of_one_unbroken_run_gets_its_context_in_moments_at_any_budget(service: EmbeddedService, run: str) -> None:
    """A megabyte-sized "word" is accepted at publish: every context of its thread still
    answers (it took minutes, and a megabyte of spaces never finished), within its budget."""
    service.publish(b"\n".join([
        raw("g", "goal", {"text": "summarise the attachment"}, 0),
        raw("u1", "message", {"role": "user", "text": run * (900_000 // len(run.encode()))}, 1),
        raw("a1", "message", {"role": "assistant", "text": "reading it"}, 2),
    ]))  # fmt: skip
    service.catch_up()
    for budget in (50, 8000, 1_000_000):
        started = time.perf_counter()
        try:
            ctx = context_for(service, "t1", budget)
        except BudgetTooSmall as err:
            assert err.needed > budget
        else:
            assert ctx["meta"]["used_tokens"] <= budget
        assert time.perf_counter() - started < 20.0


@pytest.mark.parametrize("apart", [False, True])
def test_a_result_that_arrives_before_its_call_is_shown_with_it_once_the_call_comes(service: EmbeddedService,
                                                                                    apart: bool) -> None:  # fmt: skip
    early = raw("rA", "tool_result", {"call_id": "A", "output": "ERR_EARLY 3 tests failed", "status": "error"}, 5)
    call = raw("cA", "tool_call", {"call_id": "A", "tool_name": "pytest", "arguments": {}}, 4)
    service.publish(b"\n".join([raw("u1", "message", {"role": "user", "text": "run the tests"}, 1), early]))
    if apart:  # a context of the waiting result first: the next one's window extends it
        waiting = context_for(service, "t1", 1000)
        assert "ERR_EARLY" not in str(waiting["messages"])  # no call to show it with yet
    service.publish(call)
    ctx = context_for(service, "t1", 1000)
    tool = [m for m in ctx["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in tool] == ["[status: error] ERR_EARLY 3 tests failed"]
    assert [c["id"] for m in ctx["messages"] for c in m.get("tool_calls", [])] == ["A"]


def _sent_tokens(messages: list[dict]) -> int:
    """What a model is sent, counted here field by field: every text, every call's id, name
    and arguments, the id each result answers, and each message's overhead."""
    tokens = counter()
    total = 0
    for m in messages:
        total += 4 + tokens.count(m.get("content") or "") + tokens.count(m.get("tool_call_id") or "")
        for c in m.get("tool_calls", []):
            total += sum(tokens.count(x) for x in (c["id"], c["function"]["name"], c["function"]["arguments"]))
    return total


@pytest.mark.parametrize(("id_chars", "budget"), [(24, 2000), (3000, 200), (3000, 4000)])
def test_the_budget_counts_every_call_id_a_model_is_sent(service: EmbeddedService, id_chars: int, budget: int) -> None:
    # An agent's call ids (``call_`` and 24 random characters) are sent with the call and
    # again with its result: 200 pairs of them are thousands of tokens on their own.
    alphabet = "aZ3kQ9xW7mP2vB8nR4tY6uL1"
    lines = [raw("u", "message", {"role": "user", "text": "run them"}, 0)]
    for i in range(200 if id_chars < 100 else 5):
        call_id = f"call_{i}_" + (alphabet * (id_chars // len(alphabet) + 1))[:id_chars]
        lines.append(raw(f"c{i}", "tool_call", {"call_id": call_id, "tool_name": "bash", "arguments": {}}, 1 + i))
        lines.append(raw(f"r{i}", "tool_result", {"call_id": call_id, "output": "ok"}, 1.5 + i))
    service.publish(b"\n".join(lines))
    ctx = context_for(service, "t1", budget)
    assert _sent_tokens(ctx["messages"]) <= budget
    assert ctx["meta"]["used_tokens"] == _sent_tokens(ctx["messages"])


def test_the_window_is_in_event_time_order_newest_last_and_the_latest_user_message_is_the_newest_by_time(
    service: EmbeddedService,
) -> None:
    # Published in another order than their times: m0 (a user message) arrives last with
    # the oldest time, in another offset (09:00+02:00 is 07:00Z).
    lines = [raw("m3", "message", {"role": "assistant", "text": "third"}, 3),
             raw("m1", "message", {"role": "user", "text": "first"}, 1),
             raw("m2", "message", {"role": "assistant", "text": "second"}, 2)]  # fmt: skip
    service.publish(b"\n".join(lines))
    service.publish(orjson.dumps({"event_id": "m0", "thread_id": "t1", "kind": "message", "ts": "2025-12-31T09:00:00+02:00",
                                  "payload": {"role": "user", "text": "zeroth"}}))  # fmt: skip
    ctx = context_for(service, "t1", 1000)
    shown = [m["content"] for m in ctx["messages"] if m["content"] in ("zeroth", "first", "second", "third")]
    assert shown == ["zeroth", "first", "second", "third"]
    assert service.state("t1")["latest_user_message_id"] == "m1"
    assert ctx["meta"]["latest_user_message_id"] == "m1"


@pytest.mark.parametrize("budget", [1500, 2500, 4000])
def test_a_long_run_of_failures_never_crowds_the_plan_and_the_open_call_out_of_the_context(
        service: EmbeddedService, budget: int) -> None:  # fmt: skip
    """Failures come first among the state's sections, but they take at most what the plan,
    tasks, files, approvals, sub-agents and open calls leave of the state's share."""
    steps = [{"step_id": f"s{i}", "text": f"step {i}: move the billing cache shard {i}", "status": "pending"}
             for i in range(8)]  # fmt: skip
    lines = [raw("g", "goal", {"text": "migrate the billing cache"}, 0),
             raw("p", "plan", {"steps": steps}, 1)]  # fmt: skip
    for i in range(60):  # sixty distinct failures, each long enough to matter
        output = f"FAILED test_{i}: assertion error in module m{i} " + "x" * 200
        lines.append(raw(f"c{i}", "tool_call", {"call_id": f"c{i}", "tool_name": "pytest", "arguments": {"t": i}}, 2 + 2 * i))
        lines.append(raw(f"r{i}", "tool_result", {"call_id": f"c{i}", "output": output, "status": "error",
                                                  "exit_code": 1}, 3 + 2 * i))  # fmt: skip
    lines.append(raw("open", "tool_call", {"call_id": "open", "tool_name": "deploy", "arguments": {}}, 200))
    lines.append(raw("u", "message", {"role": "user", "text": "what next?"}, 201))
    service.publish(b"\n".join(lines))
    service.catch_up()
    ctx = context_for(service, "t1", budget)
    names = [s["name"] for s in ctx["sections"]]
    assert "failures" in names and "state" in names and "calls" in names, ctx["meta"]["dropped"]
    text = "\n".join(m.get("content") or "" for m in ctx["messages"])
    assert "step 7: move the billing cache shard 7" in text and "- open: deploy" in text
    assert ctx["meta"]["used_tokens"] <= budget


def _write_file_thread(service: EmbeddedService, content: str, answered: bool = True) -> None:
    events = [raw("g", "goal", {"text": "write the module"}, 0),
              raw("u1", "message", {"role": "user", "text": "write mod.py"}, 1),
              raw("c1", "tool_call", {"call_id": "c1", "tool_name": "write_file",
                                      "arguments": {"path": "mod.py", "content": content}}, 2)]  # fmt: skip
    if answered:
        events += [raw("r1", "tool_result", {"call_id": "c1", "output": "written"}, 3),
                   raw("a1", "message", {"role": "assistant", "text": "done writing mod.py"}, 4)]  # fmt: skip
    events.append(raw("u2", "message", {"role": "user", "text": "now run the tests"}, 5))
    service.publish(b"\n".join(events))
    service.catch_up()


def test_a_call_with_a_huge_argument_stays_in_the_context_its_argument_cut_head_and_tail(service: EmbeddedService) -> None:
    # A 240 KB write_file once made its unit 200,000 tokens: the request, the call and its
    # result were all dropped. Now the long string is cut as an output is, and stays JSON.
    from agentlog.processors.truncation import DEFAULT_OUTPUT_BUDGET_CHARS  # noqa: PLC0415

    content = "".join(f"line {i}\n" for i in range(30_000))
    _write_file_thread(service, content)
    ctx = context_for(service, "t1", 8000)
    assert ctx["meta"]["dropped"]["units"] == []
    (call,) = [c for m in ctx["messages"] for c in m.get("tool_calls", [])]
    args = orjson.loads(call["function"]["arguments"])
    assert args["path"] == "mod.py" and args["content"].startswith("line 0\n") and args["content"].endswith("line 29999\n")
    assert "full arguments: read c1" in args["content"] and len(args["content"]) < DEFAULT_OUTPUT_BUDGET_CHARS + 200
    assert [m["content"] for m in ctx["messages"] if m["role"] == "tool"] == ["written"]


def test_the_summary_never_lists_as_pending_a_call_the_thread_has_answered(service: EmbeddedService) -> None:
    _write_file_thread(service, "x = 1\n" * 40_000)  # big enough that the stream folds a summary
    state = service.state("t1")
    assert state["summary"] and "call c1 (write_file)" in state["summary"]["pending_jobs"]  # as of the fold
    text = "\n".join(m.get("content") or "" for m in context_for(service, "t1", 8000)["messages"])
    assert "Pending: call c1" not in text


def test_the_summary_still_lists_a_call_that_is_still_pending(service: EmbeddedService) -> None:
    _write_file_thread(service, "x = 1\n" * 40_000, answered=False)
    text = "\n".join(m.get("content") or "" for m in context_for(service, "t1", 8000)["messages"])
    assert "Pending: call c1 (write_file)" in text


def test_the_pending_filter_drops_only_jobs_it_can_read_that_the_state_has_closed() -> None:
    from agentlog.processors.context import _still_pending  # noqa: PLC0415

    summary = {"pending_jobs": ["call c1 (bash)", "call the DBA to approve the migration", "task review the PR with Bob",
                                "task t9: write docs", "call my id (bash)", "call c2 (x)", "approval a1: deploy",
                                "task t8:"]}  # fmt: skip
    state = {"pending_calls": [{"call_id": "c1"}, {"call_id": "my id"}], "pending_approvals": [],
             "tasks": [{"task_id": "t9", "status": "running"}, {"task_id": "t8", "status": "done"}]}  # fmt: skip
    assert _still_pending(summary, state)["pending_jobs"] == [
        "call c1 (bash)", "call the DBA to approve the migration", "task review the PR with Bob",
        "task t9: write docs", "call my id (bash)"]  # fmt: skip
