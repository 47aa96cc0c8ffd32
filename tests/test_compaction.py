"""SPEC §4 and §5: assembly guarantees over random sessions, compaction into a handoff
record, pluggable summarisers, window switching."""

from __future__ import annotations

import http.server
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentlog.processors.compaction import acceptable, deterministic_summary, fold_count, safe_cut, verdict
from agentlog.processors.context import BudgetTooSmall, assemble, build_units, message_tokens
from agentlog.processors.pipeline import MemorySeen, Pipeline, Record
from agentlog.processors.tokens import counter
from agentlog.processors.validation import validate
from agentlog.schemas.handoff import HandoffRecord
from agentlog.streams.config import Settings
from agentlog.streams.api.context import context_for
from agentlog.streams.embedded.service import EmbeddedService
from agentlog.streams.metrics import METRICS
from agentlog.streams.summary_job import SummaryJob
from tests.helpers import ev, raw

TOKENS = counter()


@st.composite
def sessions(draw: st.DrawFn) -> list[bytes]:
    out = [raw("g", "goal", {"text": "ship the release"}, 0),
           raw("k1", "constraint", {"constraint_id": "k1", "text": "never push to main"}, 1)]  # fmt: skip
    t = 2.0
    for i in range(draw(st.integers(1, 30))):
        t += 3
        choice = draw(st.sampled_from(["user", "assistant", "pair", "open", "file", "constraint"]))
        if choice in ("user", "assistant"):
            words = draw(st.integers(1, 60))
            out.append(raw(f"m{i}", "message", {"role": choice, "text": " ".join(["word"] * words)}, t))
        elif choice == "pair":
            out.append(raw(f"c{i}", "tool_call", {"call_id": f"c{i}", "tool_name": "bash", "arguments": {"i": i}}, t))
            size = draw(st.integers(0, 3000))
            out.append(raw(f"r{i}", "tool_result", {"call_id": f"c{i}", "output": "x " * size}, t + 1))
        elif choice == "open":
            out.append(raw(f"c{i}", "tool_call", {"call_id": f"c{i}", "tool_name": "build"}, t))
        elif choice == "file":
            out.append(raw(f"f{i}", "file_change", {"path": f"src/f{i}.py", "change": "modified"}, t))
        else:
            out.append(raw(f"k{i}x", "constraint", {"constraint_id": f"k{i}", "text": f"rule {i}"}, t))
    if draw(st.booleans()):
        out.append(raw("last-user", "message", {"role": "user", "text": "what next?"}, t + 5))
    return out


def reduce(records: list[bytes]) -> tuple[dict, list, set]:
    pipeline = Pipeline(MemorySeen())
    pipeline.process([Record(0, i, r) for i, r in enumerate(records)])
    tp = pipeline.threads["t1"]
    events = [validate(r) for r in records]
    return tp.state.public(), events, set(tp.pairer.state.orphans)


PROPS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPS
@given(sessions(), st.integers(0, 3000))
def test_for_every_budget_from_just_enough_up_the_context_fits_keeps_pairs_pinned_and_latest_user(
    records: list[bytes], extra: int
) -> None:
    state, events, orphans = reduce(records)
    with pytest.raises(BudgetTooSmall) as err:
        assemble(state, events, TOKENS, 1, orphans=orphans)
    budget = err.value.needed + extra
    ctx = assemble(state, events, TOKENS, budget, orphans=orphans)
    assert sum(message_tokens(TOKENS, m) for m in ctx.messages) <= budget
    calls = [c["id"] for m in ctx.messages for c in m.get("tool_calls", [])]
    assert calls == [m["tool_call_id"] for m in ctx.messages if m["role"] == "tool"]
    text = "\n".join(m.get("content") or "" for m in ctx.messages)
    assert "ship the release" in text and all(c["text"] in text for c in state["constraints"])
    if state["latest_user_message_id"]:
        assert state["latest_user_message_id"] in ctx.sections[-1]["event_ids"]
    # A subsequence of the thread's events: the window keeps stream order.
    order = {e.event_id: i for i, e in enumerate(events)}
    kept = ctx.sections[-1]["event_ids"]
    calls_and_messages = [i for i in kept if not i.startswith("r")]
    assert calls_and_messages == sorted(calls_and_messages, key=order.__getitem__)


@PROPS
@given(sessions(), st.integers(1, 6))
def test_after_any_number_of_compactions_no_constraint_or_confirmed_file_is_missing(
    records: list[bytes], rounds: int
) -> None:
    state, events, orphans = reduce(records)
    summary: HandoffRecord | None = None
    window = events
    for _ in range(rounds):
        units = build_units(window, orphans, 4000)
        for u in units:
            u.tokens = sum(message_tokens(TOKENS, m) for m in u.messages)
        cut = safe_cut(window, units, fold_count(units, 200, {c["call_id"] for c in state["pending_calls"]}))
        if cut == 0:
            break
        summary = deterministic_summary(state, window[:cut], summary)
        window = window[cut:]
    if summary is not None:
        held = set(summary.constraints) | {c["text"] for c in state["constraints"]}
        assert {c["text"] for c in state["constraints"]} <= set(summary.constraints) <= held
        assert {f["path"] for f in state["files"] if f["confirmed"]} <= set(summary.modified_files)
        assert summary.goal == "ship the release"


def test_compaction_never_cuts_a_pair_and_keeps_pending_calls_in_the_window() -> None:
    events = [ev("c1", "tool_call", {"call_id": "c1", "tool_name": "a"}, 0),
              ev("m1", "message", {"role": "user", "text": "hi " * 300}, 1),
              ev("r1", "tool_result", {"call_id": "c1", "output": "y " * 300}, 2),
              ev("c2", "tool_call", {"call_id": "c2", "tool_name": "slow"}, 3),
              ev("m2", "message", {"role": "user", "text": "more " * 300}, 4)]  # fmt: skip
    units = build_units(events, set(), 4000)
    for u in units:
        u.tokens = sum(message_tokens(TOKENS, m) for m in u.messages)
    n = fold_count(units, 100, pending_call_ids={"c2"})
    cut = safe_cut(events, units, n)
    folded = {e.event_id for e in events[:cut]}
    assert "c1" not in folded or "r1" in folded  # a call leaves only with its result
    assert "c2" not in folded  # a pending call stays in view


def test_the_deterministic_summary_keeps_observations_with_sources_apart_from_hypotheses() -> None:
    state = {"goal": {"text": "g"}, "constraints": [{"text": "read-only"}],
             "files": [{"path": "a.py", "confirmed": True}, {"path": "b.py", "confirmed": False}],
             "plan": [{"step_id": "s1", "text": "run tests", "status": "running"}],
             "failures": [{"status": "missing", "call_id": "c9", "tool_name": "build"}],
             "pending_calls": [], "tasks": [], "pending_approvals": [{"approval_id": "ap", "action": "deploy"}]}  # fmt: skip
    folded = [ev("r1", "tool_result", {"call_id": "c1", "output": "3 tests failed\nmore", "tool_name": "pytest", "status": "error"}, 0),
              ev("a1", "message", {"role": "assistant", "text": "Probably the cache is stale."}, 1),
              ev("a2", "message", {"role": "assistant", "text": "The build is green."}, 2)]  # fmt: skip
    record = deterministic_summary(state, folded, None)
    assert record.observations[0].model_dump(include={"text", "source_event_id"}) == {
        "text": "pytest -> error: 3 tests failed", "source_event_id": "r1"}
    assert [h.text for h in record.hypotheses] == ["Probably the cache is stale."]
    assert record.modified_files == ["a.py"] and record.constraints == ["read-only"]
    assert record.next_action == "run tests" and "approval ap: deploy" in record.pending_jobs
    assert record.unknowns == ["result of build call c9 unknown (no result)"]


def test_a_summary_that_loses_a_pinned_constraint_or_confirmed_file_is_rejected() -> None:
    state = {"goal": {"text": "g"}, "constraints": [{"text": "read-only"}], "files": [{"path": "a.py", "confirmed": True}]}
    good = {"goal": "g", "constraints": ["read-only"], "modified_files": ["a.py"]}
    assert acceptable(good, state) is not None
    assert acceptable({**good, "constraints": []}, state) is None
    assert acceptable({**good, "modified_files": []}, state) is None
    assert acceptable({**good, "observations": [{"text": "no source"}]}, state) is None


def test_an_llm_record_that_observes_an_orphan_or_a_plan_event_is_rejected_but_may_keep_what_the_last_record_observed() -> None:
    state = {"goal": None, "constraints": [], "files": []}
    folded = [ev("o1", "tool_result", {"call_id": "ghost", "output": "nobody asked for this"}, 0),
              ev("p1", "plan", {"steps": [{"step_id": "s1", "status": "done"}]}, 1),
              ev("e1", "error", {"message": "disk full", "code": "ENOSPC"}, 2)]  # fmt: skip
    previous = HandoffRecord(observations=[{"text": "user said: deploy to eu", "source_event_id": "u0"}])
    cite = lambda *ids: {"observations": [{"text": "x", "source_event_id": i} for i in ids]}  # noqa: E731
    assert verdict(cite("e1", "u0"), state, folded, previous, {"o1"}) == (HandoffRecord.model_validate(cite("e1", "u0")), "")
    assert verdict(cite("o1"), state, folded, previous, {"o1"})[1] == (
        "an observation cites 'o1', an orphan tool result, not a tool result, a user message or an error")
    assert verdict(cite("p1"), state, folded, previous, {"o1"})[1].startswith("an observation cites 'p1', a plan event")
    assert verdict({"done": [{"text": "s1", "source_event_id": "p1"}]}, state, folded, previous)[0] is not None


def long_session(n: int = 60) -> list[bytes]:
    lines = [raw("g", "goal", {"text": "fix the flaky test"}, 0),
             raw("k", "constraint", {"constraint_id": "k", "text": "do not touch the payments schema"}, 1),
             raw("f", "file_change", {"path": "src/flaky.py", "change": "modified"}, 2)]  # fmt: skip
    for i in range(n):
        lines.append(raw(f"u{i}", "message", {"role": "user", "text": f"step {i}: look at module m{i}"}, 10 + 4 * i))
        lines.append(raw(f"c{i}", "tool_call", {"call_id": f"c{i}", "tool_name": "grep", "arguments": {"q": f"m{i}"}}, 11 + 4 * i))
        lines.append(raw(f"r{i}", "tool_result", {"call_id": f"c{i}", "output": f"found marker zebra{i} in m{i}\n" + "x " * 200}, 12 + 4 * i))
    return lines


def test_an_oversized_window_is_folded_by_the_stream_and_the_raw_events_stay_in_the_log_and_searchable(
    service: EmbeddedService,
) -> None:
    service.publish(b"\n".join(long_session()))
    service.catch_up()
    state = service.state("t1")  # folded by the processor: no context request was made
    assert state["summary_covers_through"] is not None
    assert state["summary"]["constraints"] == ["do not touch the payments schema"]
    assert state["summary"]["modified_files"] == ["src/flaky.py"]
    sources = [o["source_event_id"] for o in state["summary"]["observations"]]
    folded_results = [f"r{i}" for i in range(60) if f"r{i}" in sources]
    assert folded_results and all(o["source_event_id"] for o in state["summary"]["observations"])
    assert "r0" in sources and "u0" in sources  # from the thread's first events on
    ctx = context_for(service, "t1", 2000)
    service.catch_up()
    logged = service.sql("SELECT count() FROM events WHERE kind = 'compaction'").rows[0][0]
    assert logged == 0  # a read writes nothing
    assert service.state("t1") == state
    assert service.read("r0")["event"]["payload"]["output"].startswith("found marker zebra0")
    assert service.search("zebra0")["hits"][0]["event_id"] == "r0"
    assert "summary" in [s["name"] for s in ctx["sections"]]  # the window starts after the summary
    recent = next(s for s in ctx["sections"] if s["name"] == "recent")  # recall may follow it
    assert all(not i.startswith("r0") for i in recent["event_ids"])
    assert ctx["meta"]["summary_covers_through"] == state["summary_covers_through"]


class FakeLLM(http.server.BaseHTTPRequestHandler):
    """A local OpenAI-compatible endpoint: the real HTTP path of the summariser."""

    answer: dict = {}
    asked: list[dict] = []  # every request's material (the user message's JSON)

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers["Content-Length"])
        request = json.loads(self.rfile.read(length))
        type(self).asked.append(json.loads(request["messages"][-1]["content"]))
        body = json.dumps({"choices": [{"message": {"content": json.dumps(type(self).answer)}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def llm_url() -> Iterator[str]:
    FakeLLM.asked = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeLLM)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


def test_a_configured_llm_summariser_is_never_called_by_a_read_and_a_read_publishes_nothing(
    tmp_path, llm_url: str
) -> None:
    FakeLLM.answer = {"goal": "fix the flaky test", "constraints": ["do not touch the payments schema"],
                      "modified_files": ["src/flaky.py"],
                      "observations": [{"text": "llm saw it", "source_event_id": "r1"}]}  # fmt: skip
    service = EmbeddedService(Settings(data_dir=tmp_path / "d", summary_url=llm_url))
    try:
        service.publish(b"\n".join(long_session()))
        service.catch_up()
        before = service.state("t1")
        first = context_for(service, "t1", 2000)
        service.catch_up()
        assert service.sql("SELECT count() FROM events WHERE kind = 'compaction'").rows[0][0] == 0
        assert service.state("t1") == before and context_for(service, "t1", 2000) == first
        assert FakeLLM.asked == []  # neither the fold nor a read called the LLM
        summary = before["summary"]
        assert summary["constraints"] == ["do not touch the payments schema"]
        assert all(o["text"] != "llm saw it" for o in summary["observations"])
    finally:
        service.close()


def test_a_window_switch_starts_a_fresh_window_without_summary_and_the_state_carries_over(service: EmbeddedService) -> None:
    service.publish(b"\n".join([
        raw("g", "goal", {"text": "g"}, 0), raw("p", "plan", {"steps": [{"step_id": "s1", "text": "a", "status": "running"}]}, 1),
        raw("old", "message", {"role": "user", "text": "old detail about the zebra"}, 2),
        raw("ws", "window_switch", {"new_window_id": "w1"}, 3),
        raw("new", "message", {"role": "user", "text": "fresh start"}, 4, window_id="w1"),
    ]))  # fmt: skip
    service.catch_up()
    ctx = context_for(service, "t1", 4000, query="zebra")
    assert next(s for s in ctx["sections"] if s["name"] == "recent")["event_ids"] == ["new"]
    state = service.state("t1")
    assert state["summary"] is None and state["window_id"] == "w1" and state["plan"][0]["status"] == "running"
    assert "old" in [h for s in ctx["sections"] if s["name"] == "recall" for h in s["hits"]]
    assert "Plan:" in orjson.dumps(ctx["messages"]).decode()


def guessing_session() -> list[bytes]:
    """``long_session`` with the model's guesses between the turns."""
    lines = long_session()
    for i in range(0, 60, 10):
        lines.append(raw(f"a{i}", "message", {"role": "assistant", "text": f"Maybe module m{i} caches stale data."}, 13 + 4 * i))
    return sorted(lines, key=lambda r: orjson.loads(r)["ts"])


def llm_service(tmp_path: Path, llm_url: str) -> EmbeddedService:
    service = EmbeddedService(Settings(data_dir=tmp_path / "d", summary_url=llm_url))
    service.publish(b"\n".join(guessing_session()))
    service.catch_up()
    return service


def good_record(state: dict) -> dict:
    return {"goal": "fix the flaky test", "constraints": ["do not touch the payments schema"],
            "modified_files": ["src/flaky.py"], "next_action": "rerun grep on m1",
            "observations": [{"text": "grep found zebra0 in m0", "source_event_id": "r0"},
                             {"text": "the user asked about m1", "source_event_id": "u1"}],
            "hypotheses": [{"text": "m0 caches stale data", "source_event_id": "a0"}],
            "done": [{"text": "looked at m0", "source_event_id": "r0"}]}  # fmt: skip


def test_an_llm_record_that_validates_is_published_as_a_compaction_event_and_live_state_and_rebuild_hold_it(
    tmp_path: Path, llm_url: str
) -> None:
    service = llm_service(tmp_path, llm_url)
    try:
        before = service.state("t1")
        cover = before["summary_covers_through"]
        assert cover is not None and before["summary_event_id"] is None
        FakeLLM.answer = good_record(before)
        job = SummaryJob(service, service.summariser)
        assert job.run_once() == {"t1": "accepted"}
        sent = FakeLLM.asked[-1]
        assert [e["event_id"] for e in sent["events"]][:3] == ["g", "k", "f"] and sent["events"][-1]["event_id"] == cover
        assert sent["previous_summary"] == before["summary"]  # the fold's record, to improve on
        service.catch_up()
        live = service.state("t1")
        assert live["summary"] == HandoffRecord.model_validate(FakeLLM.answer).model_dump(mode="json")
        assert live["summary_event_id"] == f"compaction.{cover}" and live["summary_covers_through"] == cover
        logged = service.sql("SELECT event_id, JSONExtractString(payload, 'summariser') FROM events WHERE kind = 'compaction'")
        assert logged.rows == [[f"compaction.{cover}", "llm"]] or logged.rows == [(f"compaction.{cover}", "llm")]
        assert job.run_once() == {}  # nothing new folded: nothing asked
        service.rebuild()
        assert service.state("t1") == live
    finally:
        service.close()


@pytest.mark.parametrize(("bad", "reason"), [
    (lambda r: {**r, "observations": [{"text": "m0 caches stale data", "source_event_id": "a0"}]},
     "an observation cites 'a0', an assistant message, not a tool result, a user message or an error"),
    (lambda r: {**r, "hypotheses": [{"text": "it is flaky", "source_event_id": "nope-42"}]},
     "hypotheses cite an unknown event 'nope-42'"),
    (lambda r: {**r, "constraints": []}, "drops the constraint 'do not touch the payments schema'"),
    (lambda r: {**r, "modified_files": []}, "drops the confirmed modified file 'src/flaky.py'"),
])  # fmt: skip
def test_an_llm_record_that_cites_a_guess_as_an_observation_or_an_unknown_id_or_drops_a_constraint_is_rejected_with_its_reason_logged(
    tmp_path: Path, llm_url: str, caplog: pytest.LogCaptureFixture, bad: Callable[[dict], dict], reason: str
) -> None:
    service = llm_service(tmp_path, llm_url)
    try:
        before = service.state("t1")
        FakeLLM.answer = bad(good_record(before))
        counted = METRICS.registry.get_sample_value("agentlog_llm_summaries_total", {"outcome": "rejected"}) or 0
        with caplog.at_level(logging.WARNING, logger="agentlog.summary"):
            assert SummaryJob(service, service.summariser).run_once() == {"t1": f"rejected: {reason}"}
        assert f"thread t1: LLM summary rejected: {reason}" in caplog.text
        assert METRICS.registry.get_sample_value("agentlog_llm_summaries_total", {"outcome": "rejected"}) == counted + 1
        service.catch_up()
        assert service.state("t1") == before  # the deterministic summary stays
        assert service.sql("SELECT count() FROM events WHERE kind = 'compaction'").rows[0][0] == 0
    finally:
        service.close()


def test_agentlog_run_s_loop_runs_the_llm_summariser_beside_it_and_publishes_what_validates(
    tmp_path: Path, llm_url: str
) -> None:
    service = llm_service(tmp_path, llm_url)
    FakeLLM.answer = good_record(service.state("t1"))
    stop = threading.Event()
    loop = threading.Thread(target=service.run_forever, args=(stop,))
    loop.start()
    try:
        deadline = time.monotonic() + 20
        while service.state("t1")["summary_event_id"] is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert service.state("t1")["summary"]["done"] == [{"text": "looked at m0", "source_event_id": "r0", "count": 1,
                                                           "source_event_ids": [], "kind": None}]  # fmt: skip
    finally:
        stop.set()
        loop.join()
        service.close()


def test_an_llm_observation_citing_what_the_last_record_only_guessed_is_rejected_with_a_reason_not_an_error() -> None:
    state = {"goal": None, "constraints": [], "files": []}
    folded = [ev("e1", "error", {"message": "disk full", "code": "ENOSPC"}, 0)]
    previous = HandoffRecord(hypotheses=[{"text": "maybe the cache", "source_event_id": "h1"}])
    record, reason = verdict({"observations": [{"text": "x", "source_event_id": "h1"}]}, state, folded, previous)
    assert record is None and reason.startswith("an observation cites 'h1', an event the previous record only guessed")
