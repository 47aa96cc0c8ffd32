"""Issue 14, compaction as a stream step: the processor folds the raw window into the
handoff record, deterministically; a context request writes nothing and changes nothing."""

from __future__ import annotations

import random
import re
import tempfile
from pathlib import Path

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentlog.processors.context import BudgetTooSmall
from agentlog.processors.fold import HARD_ENTRIES, digest
from agentlog.processors.pipeline import MemorySeen, Pipeline, Record
from agentlog.processors.thread import PairingConfig, ThreadProcessor
from agentlog.schemas.snapshot import ThreadSnapshot
from agentlog.streams.api.context import WINDOW_RECORDS, context_for
from agentlog.streams.config import Settings
from agentlog.streams.embedded.service import EmbeddedService
from tests.helpers import raw

SMALL = 400
"""A small fold budget, so short generated sessions fold several times."""


@st.composite
def sessions(draw: st.DrawFn) -> list[bytes]:
    out = [raw("g", "goal", {"text": "ship the release"}, 0),
           raw("k1", "constraint", {"constraint_id": "k1", "text": "never push to main"}, 1)]  # fmt: skip
    t = 2.0
    for i in range(draw(st.integers(1, 40))):
        t += 3
        choice = draw(st.sampled_from(["user", "assistant", "pair", "pair", "open", "orphan", "late", "file"]))
        if choice in ("user", "assistant"):
            words = draw(st.integers(1, 80))
            out.append(raw(f"m{i}", "message", {"role": choice, "text": f"{choice} {i} " + "word " * words}, t))
        elif choice == "pair":
            out.append(raw(f"c{i}", "tool_call", {"call_id": f"c{i}", "tool_name": "bash", "arguments": {"i": i}}, t))
            size = draw(st.integers(0, 600))
            status = draw(st.sampled_from(["ok", "error"]))
            out.append(raw(f"r{i}", "tool_result", {"call_id": f"c{i}", "status": status,
                                                     "output": f"out {i}\n" + "x " * size}, t + 1))  # fmt: skip
        elif choice == "open":
            out.append(raw(f"c{i}", "tool_call", {"call_id": f"c{i}", "tool_name": "build"}, t))
        elif choice == "orphan":
            out.append(raw(f"o{i}", "tool_result", {"call_id": f"nobody{i}", "output": f"nobody asked for this {i}"}, t))
        elif choice == "late":  # the result first, its call after
            out.append(raw(f"r{i}", "tool_result", {"call_id": f"c{i}", "output": f"early {i}"}, t))
            out.append(raw(f"c{i}", "tool_call", {"call_id": f"c{i}", "tool_name": "fetch"}, t + 1))
        else:
            out.append(raw(f"f{i}", "file_change", {"path": f"src/f{i}.py", "change": "modified"}, t))
    if draw(st.booleans()):
        out.append(raw("last-user", "message", {"role": "user", "text": "what next?"}, t + 5))
    return out


PROPS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def processed(records: list[bytes], window_tokens: int = SMALL, cuts: list[int] | None = None) -> ThreadProcessor:
    """The records through the pipeline; at each of ``cuts`` the thread is persisted as
    JSON and restored, as a restart does."""
    config = PairingConfig(compact_window_tokens=window_tokens)
    snapshot: ThreadSnapshot | None = None
    start = 0
    for end in [*(cuts or []), len(records)]:
        saved = snapshot
        pipeline = Pipeline(MemorySeen(), lambda _t, s=saved: s, config)
        pipeline.process([Record(0, i, r) for i, r in enumerate(records[start:end], start)])
        snapshot = ThreadSnapshot.model_validate_json(pipeline.thread("t1").snapshot().model_dump_json())
        start = end
    assert snapshot is not None
    return ThreadProcessor.restore(snapshot, config)


def service_with(records: list[bytes], root: Path, window_tokens: int = SMALL) -> EmbeddedService:
    service = EmbeddedService(Settings(data_dir=root, compact_window_tokens=window_tokens))
    service.publish(b"\n".join(records))
    service.catch_up()
    return service


def contexts(service: EmbeddedService, budgets: list[int]) -> list[bytes]:
    out = []
    for budget in budgets:
        try:
            out.append(orjson.dumps(context_for(service, "t1", budget)))
        except BudgetTooSmall as err:
            out.append(str(err).encode())
    return out


@PROPS
@given(sessions(), st.lists(st.integers(1, 9000), min_size=1, max_size=6))
def test_any_sequence_of_context_requests_with_any_budgets_leaves_every_later_context_byte_identical(
    records: list[bytes], budgets: list[int]
) -> None:
    probes = [60, 300, 1500, 8000]
    with tempfile.TemporaryDirectory() as root:
        service = service_with(records, Path(root))
        try:
            state, before = service.state("t1"), contexts(service, probes)
            contexts(service, budgets)  # any requests, any budgets
            service.catch_up()
            assert contexts(service, probes) == before
            assert service.state("t1") == state
            assert service.sql("SELECT count() FROM events WHERE kind = 'compaction'").rows[0][0] == 0
        finally:
            service.close()


@PROPS
@given(sessions(), st.randoms(use_true_random=False))
def test_live_state_summary_included_equals_a_replay_for_random_sessions(records: list[bytes], rnd: random.Random) -> None:
    live = processed(records)
    cuts = sorted(rnd.sample(range(1, len(records)), min(3, len(records) - 1)))
    replayed = processed(records, cuts=cuts)  # restarts from persisted snapshots in between
    assert replayed.state.public() == live.state.public()
    assert replayed.snapshot() == live.snapshot()


def test_live_state_summary_included_equals_rebuild(tmp_path: Path) -> None:
    rnd = random.Random(14)
    records = [raw("g", "goal", {"text": "g"}, 0)]
    for i in range(150):
        records.append(raw(f"u{i}", "message", {"role": "user", "text": f"turn {i} " + "w " * rnd.randint(1, 90)}, 1 + 3 * i))
        records.append(raw(f"c{i}", "tool_call", {"call_id": f"c{i}", "tool_name": "bash"}, 2 + 3 * i))
        records.append(raw(f"r{i}", "tool_result", {"call_id": f"c{i}", "output": "y " * rnd.randint(0, 400)}, 3 + 3 * i))
    service = service_with(records, tmp_path / "d")
    try:
        live = service.state("t1")
        assert live["summary"] is not None
        service.rebuild()
        assert service.state("t1") == live
    finally:
        service.close()


@PROPS
@given(sessions(), st.integers(0, 4000))
def test_no_context_holds_an_unpaired_call_or_an_orphan_and_the_newest_user_message_is_present_and_last(
    records: list[bytes], extra: int
) -> None:
    with tempfile.TemporaryDirectory() as root:
        service = service_with(records, Path(root))
        try:
            state = service.state("t1")
            try:
                context_for(service, "t1", 1)
            except BudgetTooSmall as err:
                needed = err.needed
            ctx = context_for(service, "t1", needed + extra)
            messages = ctx["messages"]
            calls = [c["id"] for m in messages for c in m.get("tool_calls", [])]
            assert calls == [m["tool_call_id"] for m in messages if m["role"] == "tool"]
            text = orjson.dumps(messages).decode()
            assert "nobody asked for this" not in text  # not in the window, not in the summary
            assert "nobody asked" not in orjson.dumps(state["summary"]).decode()
            order = [orjson.loads(r)["event_id"] for r in records]
            recent = next(s for s in ctx["sections"] if s["name"] == "recent")["event_ids"]  # recall may follow it
            firsts = [i for i in recent if not i.startswith(("r", "o"))]  # results follow their calls
            assert firsts == sorted(firsts, key=order.index)  # event order within the raw window
            latest = state["latest_user_message_id"]
            conversation = [m for m in messages if m["role"] != "system"]
            if latest is not None:
                users = [m for m in conversation if m["role"] == "user"]
                latest_text = next(orjson.loads(r)["payload"]["text"] for r in records
                                   if orjson.loads(r)["event_id"] == latest)  # fmt: skip
                assert users and users[-1]["content"] == latest_text
                after = recent[recent.index(latest) + 1:]
                assert all(order.index(i) > order.index(latest) for i in after)
        finally:
            service.close()


@PROPS
@given(sessions(), st.integers(60, 3000))
def test_the_fold_never_splits_a_call_from_its_result_nor_folds_an_open_call_or_the_newest_user_message(
    records: list[bytes], window_tokens: int
) -> None:
    tp = processed(records, window_tokens)
    bodies = [orjson.loads(r) for r in records]
    remaining = {e.event_id for e in tp.window.entries}
    assert remaining <= {b["event_id"] for b in bodies}
    units: dict[str, set[bool]] = {}
    for b in bodies:
        if b["kind"] in ("tool_call", "tool_result"):
            units.setdefault(b["payload"]["call_id"], set()).add(b["event_id"] in remaining)
    assert all(len(sides) == 1 for sides in units.values())  # a unit is all folded or all raw
    assert {c.event_id for c in tp.state.pending_calls.values()} <= remaining
    if tp.state.latest_user_message_id:
        assert tp.state.latest_user_message_id in remaining
    if tp.state.summary is not None:
        assert tp.state.summary["goal"] == "ship the release" and "never push to main" in tp.state.summary["constraints"]
        # The raw window is exactly what follows the cover: nothing between is lost.
        ids = [b["event_id"] for b in bodies]
        assert [e.event_id for e in tp.window.entries] == ids[ids.index(tp.state.summary_covers_through) + 1:]


def test_a_601_event_thread_s_summary_covers_from_its_first_events(tmp_path: Path) -> None:
    records = [raw("e0", "message", {"role": "user", "text": "Deploy target is prod-eu-3.\nKeep the old API."}, 0),
               raw("e1", "tool_call", {"call_id": "c1", "tool_name": "curl"}, 1),
               raw("e2", "tool_result", {"call_id": "c1", "status": "error", "exit_code": 7,
                                          "output": "START OF LOG\nconnecting\nERR_CACHE_MISS on /v1\nEND"}, 2)]  # fmt: skip
    for i in range(3, 603):
        records.append(raw(f"e{i}", "message", {"role": "assistant" if i % 2 else "user", "text": f"filler {i} " + "z " * 40}, i))
    service = service_with(records, tmp_path / "d", window_tokens=6000)
    try:
        state = service.state("t1")
        summary = orjson.dumps(state["summary"]).decode()
        assert "prod-eu-3" in summary and "Keep the old API" in summary and "ERR_CACHE_MISS" in summary
        window = service.window("t1", [state["summary_covers_through"]], 10_000)
        assert len(window) < WINDOW_RECORDS  # everything after the cover is read: nothing skipped
        assert window[-1].event_id == "e602"
    finally:
        service.close()


def test_each_observation_names_its_tool_status_exit_code_error_lines_commit_and_source_event() -> None:
    output = "START OF LOG\nstep one\nFAILED test_login - AssertionError\nstep three\nerror: ERR_CACHE_MISS\ndone in 3s"
    records = [raw("c1", "tool_call", {"call_id": "c1", "tool_name": "pytest"}, 1),
               raw("r1", "tool_result", {"call_id": "c1", "status": "error", "exit_code": 1, "output": output}, 2,
                   repo_commit="abc123"),
               raw("u1", "message", {"role": "user", "text": "go on " * 200}, 3),
               raw("u2", "message", {"role": "user", "text": "next"}, 4)]  # fmt: skip
    tp = processed(records, window_tokens=100)
    observation = next(o for o in tp.state.summary["observations"] if o["source_event_id"] == "r1")  # type: ignore[index]
    text = observation["text"]
    assert text.startswith("pytest -> error (exit 1) at commit abc123: ")
    for line in ("START OF LOG", "FAILED test_login - AssertionError", "error: ERR_CACHE_MISS", "done in 3s"):
        assert line in text
    assert "step one" not in text and "c1 ->" not in text
    assert digest("only line") == "only line"


def test_orphans_and_synthetic_results_never_appear_as_facts_in_the_handoff_record() -> None:
    records = [raw("o1", "tool_result", {"call_id": "ghost", "output": "nobody asked for this"}, 0),
               raw("c1", "tool_call", {"call_id": "c1", "tool_name": "build"}, 1)]  # fmt: skip
    # Long after the grace period and the call timeout: the orphan is flagged, the call closed by a synthetic result.
    records += [raw(f"m{i}", "message", {"role": "assistant", "text": "thinking " * 30}, 5000 + i) for i in range(20)]
    records.append(raw("u", "message", {"role": "user", "text": "status?"}, 6000))
    tp = processed(records, window_tokens=100)
    summary = tp.state.summary
    assert summary is not None and tp.state.summary_covers_through is not None
    assert "o1" in tp.pairer.state.orphans
    text = orjson.dumps(summary).decode()
    assert "nobody asked" not in text
    assert all(o["source_event_id"] not in ("o1", "c1") for o in summary["observations"])
    assert any("build call c1 unknown" in u for u in summary["unknowns"])  # an unknown, not a fact


def test_repeated_identical_observations_fold_into_one_with_a_count_and_all_their_ids() -> None:
    records = []
    for i in range(3):
        records.append(raw(f"c{i}", "tool_call", {"call_id": f"c{i}", "tool_name": "curl"}, 10 * i))
        records.append(raw(f"r{i}", "tool_result", {"call_id": f"c{i}", "status": "error", "exit_code": 7,
                                                    "output": "curl: (7) Failed to connect"}, 10 * i + 1))  # fmt: skip
        records.append(raw(f"a{i}", "message", {"role": "assistant", "text": "retrying " * 60}, 10 * i + 2))
    records.append(raw("u", "message", {"role": "user", "text": "stop"}, 100))
    tp = processed(records, window_tokens=60)
    curls = [o for o in tp.state.summary["observations"] if o["text"].startswith("curl")]  # type: ignore[index]
    assert len(curls) == 1
    assert curls[0]["count"] == 3 and curls[0]["source_event_ids"] == ["r0", "r1", "r2"]


def test_a_published_compaction_event_is_still_applied_as_is_and_the_fold_continues_after_it() -> None:
    record = {"goal": "g", "observations": [{"text": "a user's note", "source_event_id": "m1"}]}
    records = [raw("m0", "message", {"role": "user", "text": "hello"}, 0),
               raw("m1", "message", {"role": "assistant", "text": "hi"}, 1),
               raw("cx", "compaction", {"summary": record, "covers_through": "m1"}, 2),
               raw("m2", "message", {"role": "user", "text": "more"}, 3)]  # fmt: skip
    tp = processed(records, window_tokens=6000)
    assert tp.state.summary == record and tp.state.summary_covers_through == "m1"
    assert [e.event_id for e in tp.window.entries] == ["cx", "m2"]


def test_a_context_read_at_a_tiny_budget_never_folds_the_newest_user_turn(tmp_path: Path) -> None:
    records = [raw("b-011", "message", {"role": "user", "text": "earlier"}, 0),
               raw("b-012", "message", {"role": "user", "text": "which port does it use?"}, 1),
               raw("c5", "tool_call", {"call_id": "c5", "tool_name": "grep"}, 2),
               raw("r5", "tool_result", {"call_id": "c5", "output": "port 8080"}, 3),
               raw("m5", "message", {"role": "assistant", "text": "It uses port 8080."}, 4)]  # fmt: skip
    service = service_with(records, tmp_path / "d")
    try:
        big = context_for(service, "t1", 8000)
        try:
            context_for(service, "t1", 60)
        except BudgetTooSmall:
            pass
        service.catch_up()
        again = context_for(service, "t1", 8000)
        assert again == big
        assert again["sections"][-1]["event_ids"] == ["b-011", "b-012", "c5", "r5", "m5"]
    finally:
        service.close()


def test_a_long_autonomous_run_after_the_newest_user_message_keeps_the_window_bounded_and_the_message_in_context(
    tmp_path: Path,
) -> None:
    records = [raw("g", "goal", {"text": "g"}, 0), raw("ask", "message", {"role": "user", "text": "refactor it all"}, 1)]
    records += [raw(f"n{i}", "plan", {"steps": [{"step_id": f"s{i}", "text": "x", "status": "done"}]}, 2 + i)
                for i in range(HARD_ENTRIES + 50)]  # fmt: skip
    records.append(raw("last", "message", {"role": "assistant", "text": "done"}, 5000))
    tp = processed(records, window_tokens=6000)
    assert len(tp.window.entries) <= HARD_ENTRIES
    service = service_with(records, tmp_path / "d", window_tokens=6000)
    try:
        ctx = context_for(service, "t1", 4000)
        conversation = [m for m in ctx["messages"] if m["role"] != "system"]
        assert conversation[0] == {"role": "user", "content": "refactor it all"}  # before the newer events
        assert conversation[-1]["content"] == "done"
    finally:
        service.close()


def test_the_handoff_record_has_a_done_list_each_with_the_event_that_finished_it() -> None:
    records = [raw("p1", "plan", {"steps": [{"step_id": "s1", "text": "reproduce the bug", "status": "running"},
                                            {"step_id": "s2", "text": "write the fix", "status": "pending"}]}, 0),
               raw("t1", "task", {"task_id": "lint", "text": "run the linter", "status": "running"}, 1),
               raw("c1", "tool_call", {"call_id": "c1", "tool_name": "build"}, 2),
               raw("pad1", "message", {"role": "user", "text": "carry on " * 120}, 3),
               raw("pad2", "message", {"role": "user", "text": "and on"}, 4),  # a first fold: c1 is a pending job
               raw("r1", "tool_result", {"call_id": "c1", "output": "build ok"}, 5),
               raw("p2", "plan", {"steps": [{"step_id": "s1", "status": "done"}]}, 6),
               raw("t2", "task", {"task_id": "lint", "status": "done"}, 7),
               raw("sp", "agent_spawn", {"child_agent_id": "scout", "role": "explorer"}, 8),
               raw("ex", "agent_exit", {"child_agent_id": "scout", "status": "ok", "summary": "found the flaky test"}, 9),
               raw("x2", "agent_exit", {"child_agent_id": "broken", "status": "failed"}, 10),
               raw("pad3", "message", {"role": "user", "text": "keep going " * 120}, 11),
               raw("last", "message", {"role": "user", "text": "what is left?"}, 12)]  # fmt: skip
    tp = processed(records, window_tokens=100)
    summary = tp.state.summary
    assert summary is not None
    done = {d["text"]: d["source_event_id"] for d in summary["done"]}
    assert done == {"call c1 (build) finished ok": "r1", "step s1: reproduce the bug": "p2",
                    "task lint: run the linter": "t2", "agent scout finished: found the flaky test": "ex"}  # fmt: skip
    assert summary["next_action"] == "write the fix"  # what is still to do is not done


def test_hypotheses_come_only_from_what_is_phrased_or_marked_as_a_guess_and_other_assistant_text_is_never_an_observation() -> None:
    records = [raw("a1", "message", {"role": "assistant", "text": "I ran the tests. Probably the cache is stale."}, 0),
               raw("a2", "message", {"role": "assistant", "text": "All 40 tests pass now."}, 1),
               raw("a3", "message", {"role": "assistant", "text": "I think the proxy drops the header"}, 2),
               raw("f1", "fact", {"key": "db.engine", "value": "postgres", "evidence_type": "model_inferred",
                                  "confirmed": False}, 3),
               raw("f2", "fact", {"key": "editor", "value": "vim", "evidence_type": "user_confirmed", "confirmed": True}, 4),
               raw("u1", "message", {"role": "user", "text": "ok " * 300}, 5),
               raw("u2", "message", {"role": "user", "text": "next"}, 6)]  # fmt: skip
    tp = processed(records, window_tokens=60)
    summary = tp.state.summary
    assert summary is not None
    hypotheses = {h["source_event_id"]: h["text"] for h in summary["hypotheses"]}
    assert hypotheses == {"a1": "Probably the cache is stale.", "a3": "I think the proxy drops the header",
                          "f1": "db.engine = postgres"}  # fmt: skip
    cited = {i for o in summary["observations"] for i in o["source_event_ids"]}
    assert cited.isdisjoint({"a1", "a2", "a3", "f1"})
    assert "40 tests pass" not in orjson.dumps(summary).decode()
    # A fact observed or confirmed is an observation: a hypothesis it settles is not left
    # standing alone in the summary.
    assert [o["text"] for o in summary["observations"] if "f2" in o["source_event_ids"]] == [
        "fact editor = vim (user confirmed)"]


def test_a_published_compaction_whose_cover_falls_after_an_open_call_is_not_applied_so_the_pair_stays_whole() -> None:
    records = [raw("u1", "message", {"role": "user", "text": "list the files"}, 0),
               raw("c1", "tool_call", {"call_id": "k1", "tool_name": "ls", "arguments": {}}, 1),
               raw("cx", "compaction", {"summary": {"goal": None, "observations": []}, "covers_through": "c1"}, 2),
               raw("r1", "tool_result", {"call_id": "k1", "output": "a.txt", "status": "ok"}, 3)]  # fmt: skip
    tp = processed(records, window_tokens=10_000)
    assert tp.state.summary is None and tp.state.summary_covers_through is None
    assert [e.event_id for e in tp.window.entries] == ["u1", "c1", "cx", "r1"]  # the window kept the call
    # Once the call has its result, the same cover splits nothing: it is applied.
    closed = processed([*records[:2], records[3], raw("cy", "compaction", {"summary": {"goal": None}, "covers_through": "r1"}, 4)],
                       window_tokens=10_000)  # fmt: skip
    assert closed.state.summary_covers_through == "r1" and closed.state.summary_event_id == "cy"


def test_a_compaction_for_a_cover_the_fold_has_since_passed_is_not_applied_so_nothing_folded_since_is_lost() -> None:
    records = [raw(f"u{i}", "message", {"role": "user", "text": f"fact number {i} " + "w " * 60}, i) for i in range(8)]
    tp = processed(records, window_tokens=100)
    cover = tp.state.summary_covers_through
    assert cover is not None and cover != "u0"
    llm = {"goal": None, "observations": [{"text": "user said fact 0", "source_event_id": "u0"}]}
    stale = processed([*records, raw("cx", "compaction", {"summary": llm, "covers_through": "u0"}, 9)], window_tokens=100)
    assert stale.state.summary == tp.state.summary and stale.state.summary_covers_through == cover
    assert stale.state.summary_event_id is None
    # The same record for the cover the fold holds now (what the summary job sends) is applied as is.
    fresh = processed([*records, raw("cy", "compaction", {"summary": llm, "covers_through": cover}, 9)], window_tokens=100)
    assert fresh.state.summary == llm and fresh.state.summary_event_id == "cy"


_ONE_PATTERN_HINT = re.compile(  # the digest's first rule, one case-insensitive pattern: the reference
    r"(?i:error|fail|exception|traceback|fatal|denied|refused|timed? ?out|not found|panic|abort|warning"
    r"|exit (?:code|status))|\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b|\b[A-Z]{1,4}[0-9]{3,}\b"
)


def _one_pattern_hint(scan: str, _lowered: str, pos: int) -> tuple[int, int] | None:
    found = _ONE_PATTERN_HINT.search(scan, pos)
    return None if found is None else found.span()


_HINTY = st.sampled_from(["error", "ERROR", "Failed", "eXcEpTiOn", "Traceback", "timed out", "TimeOut", "time out",
                          "Not Found", "exit code", "EXIT STATUS", "ERR_CACHE_MISS", "E1234", "ABCD12345",
                          "xERR_X", "éERR_X", "_E123", "E12", "Éerror", "ßFAIL", "faİl", "refuſed", "ok", "step", "done", "é", " ",
                          "-", "_", "1", "İ", "straße"])  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(st.lists(st.lists(st.one_of(_HINTY, st.text(max_size=6)), max_size=8).map(" ".join), min_size=1, max_size=40))
def test_an_outputs_digest_picks_the_same_lines_as_one_case_insensitive_pattern_did(lines: list[str]) -> None:
    # Letters whose Unicode case folding meets an ASCII letter of a hint word ("ſ", the
    # Kelvin sign, the Turkish dotted and dotless i) no longer count as it: the words are
    # matched in ASCII case only.
    text = "\n".join(lines)
    for letter, ascii_letter in (("ſ", "s"), ("\u212a", "k"), ("İ", "i"), ("ı", "i")):
        text = text.replace(letter, ascii_letter)
    assert digest(text) == digest(text, _one_pattern_hint)
