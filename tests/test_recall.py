"""Issue 14, item 4: automatic, pair-aware recall (exact identifiers first, whole units,
nothing twice, the thread family but never another project)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tantivy
from hypothesis import given, settings
from hypothesis import strategies as st

from agentlog.processors.context import assemble
from agentlog.processors.pipeline import Pipeline, Record
from agentlog.processors.recall import held_ids, hit_class, needs_event, recall_query
from agentlog.processors.records import active_hits, search_doc
from agentlog.processors.textsearch import hit_of, identifiers, tokenize
from agentlog.processors.tokens import counter
from agentlog.schemas.search import SearchFilters
from agentlog.streams.api.context import context_for
from agentlog.streams.config import Settings
from agentlog.streams.embedded.service import EmbeddedService
from agentlog.streams.api import recall as recall_adapter
from tests.helpers import ev, raw

LOOSE = [f"the cache had a miss, err {i}: cache miss cache miss err" for i in range(12)]


def _publish(service: EmbeddedService, lines: list[bytes]) -> None:
    service.publish(b"\n".join(lines))
    service.catch_up()


def _switch_then_ask(question: str, t: float, thread: str = "t1", **extra: Any) -> list[bytes]:
    """A window switch (what came before is out of the raw window: only recall brings it
    back) and the user's question."""
    return [raw(f"{thread}-ws", "window_switch", {"new_window_id": "w2"}, t, thread=thread, **extra),
            raw(f"{thread}-ask", "message", {"role": "user", "text": question}, t + 1, thread=thread, **extra)]  # fmt: skip


def _recall(ctx: dict[str, Any]) -> tuple[list[str], str]:
    section = next((s for s in ctx["sections"] if s["name"] == "recall"), {"hits": []})
    text = next((m["content"] for m in ctx["messages"] if (m.get("content") or "").startswith("Recalled")), "")
    return section["hits"], text


def _text(ctx: dict[str, Any]) -> str:
    return "\n".join(m.get("content") or "" for m in ctx["messages"])


def test_automatic_recall_uses_the_latest_user_message_as_the_query(service: EmbeddedService) -> None:
    lines = [raw("g", "goal", {"text": "ship the release"}, 0),
             raw("m1", "message", {"role": "user", "text": "the deploy target is the eu-west cluster"}, 1),
             raw("m2", "message", {"role": "assistant", "text": "noted, unrelated chatter"}, 2),
             *_switch_then_ask("which deploy target did I give you?", 10)]  # fmt: skip
    _publish(service, lines)
    hits, text = _recall(context_for(service, "t1", 4000))  # no query given
    assert hits and hits[0] == "m1"
    assert "eu-west cluster" in text
    assert "m2" not in hits  # matched nothing the user asked about


def test_recall_is_pair_aware_a_result_is_recalled_with_its_call(service: EmbeddedService) -> None:
    lines = [raw("g", "goal", {"text": "make the build green"}, 0),
             raw("c1", "tool_call", {"call_id": "k1", "tool_name": "pytest", "arguments": {"args": "-q"}}, 1),
             raw("r1", "tool_result", {"call_id": "k1", "output": "3 failed, 9 passed: test_login broke"}, 2),
             *_switch_then_ask("what did pytest say?", 10)]  # fmt: skip
    _publish(service, lines)
    ctx = context_for(service, "t1", 4000)
    hits, text = _recall(ctx)
    assert hits == ["c1"]
    assert "pytest" in text and "r1" in text and "3 failed, 9 passed" in text  # the result, not only the call
    # And from the other side: a query matching only the output brings the call along.
    hits, text = _recall(context_for(service, "t1", 4000, query="test_login broke"))
    assert hits == ["c1"] and "call pytest" in text and "3 failed" in text


def test_a_result_whose_call_is_nowhere_is_never_recalled_alone(service: EmbeddedService) -> None:
    lines = [raw("g", "goal", {"text": "ship"}, 0),
             raw("r9", "tool_result", {"call_id": "nobody", "output": "narwhal output nobody asked for"}, 1),
             *_switch_then_ask("anything about the narwhal?", 40)]  # fmt: skip
    _publish(service, lines)
    assert "r9" in [h["event_id"] for h in service.search("narwhal")["hits"]]
    hits, text = _recall(context_for(service, "t1", 4000))
    assert hits == [] and "narwhal output" not in _text(context_for(service, "t1", 4000))


def test_an_exact_identifier_ranks_first_ahead_of_loosely_related_hits_in_the_embedded_index(
    service: EmbeddedService,
) -> None:
    lines = [raw(f"l{i}", "message", {"role": "assistant", "text": t}, i) for i, t in enumerate(LOOSE[:6])]
    lines.append(raw("x", "tool_result", {"call_id": "k", "output": "fetch failed: ERR_CACHE_MISS", "status": "error"}, 7))
    lines += [raw(f"m{i}", "message", {"role": "assistant", "text": t}, 8 + i) for i, t in enumerate(LOOSE[6:])]
    _publish(service, lines)
    hits = service.search("ERR_CACHE_MISS", limit=20)["hits"]
    assert len(hits) > 1 and hits[0]["event_id"] == "x" and hits[0]["source"] == "index"
    _publish(service, [raw("p", "file_change", {"path": "src/app/main.py", "change": "modified"}, 30),
                       *[raw(f"pl{i}", "message", {"role": "user", "text": "main app: src main py app main src"}, 31 + i)
                         for i in range(6)]])  # fmt: skip
    assert service.search("src/app/main.py", limit=20)["hits"][0]["event_id"] == "p"


def test_read_your_writes_matches_an_exact_identifier_as_the_index_does() -> None:
    texts = [*LOOSE[:5], "fetch failed: ERR_CACHE_MISS", *LOOSE[5:]]
    records = [Record(0, i, raw(f"e{i}", "message", {"role": "user", "text": t}, i)) for i, t in enumerate(texts)]
    pipeline = Pipeline()
    applied = pipeline.process(records).applied
    state = pipeline.threads["t1"].state
    query = "ERR_CACHE_MISS"
    hits = active_hits([(a.event, a.record.offset) for a in applied], tokenize(query), SearchFilters("t1"),
                       state.window_id, set(), state.closed_windows, identifiers(query))  # fmt: skip
    assert max(hits, key=lambda h: h.score).event_id == "e5"


SHA = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
"""An identifier too long to be a word of the index (over 40 characters)."""


def test_a_query_of_one_long_identifier_finds_only_the_events_that_hold_it(service: EmbeddedService) -> None:
    # It was a query of no words, which matched every event at score 1.0.
    _publish(service, [raw("a", "message", {"role": "user", "text": "deploy the build"}, 0),
                       raw("b", "tool_result", {"call_id": "k", "output": f"sha256 {SHA} ok"}, 1),
                       raw("c", "message", {"role": "assistant", "text": "all good"}, 2)])  # fmt: skip
    assert [h["event_id"] for h in service.search(SHA)["hits"]] == ["b"]
    service.publish(raw("d", "message", {"role": "user", "text": f"is {SHA} the right one?"}, 3))
    found = service.search(SHA, thread_id="t1", drain=False)["hits"]  # "d" is not indexed: read-your-writes
    assert {(h["event_id"], h["source"]) for h in found} == {("b", "index"), ("d", "active")}


def test_read_your_writes_answers_a_query_of_identifiers_alone_as_the_index_does() -> None:
    texts = ["deploy the build", f"sha256 {SHA} ok", "all good"]
    records = [Record(0, i, raw(f"e{i}", "message", {"role": "user", "text": t}, i)) for i, t in enumerate(texts)]
    pipeline = Pipeline()
    applied = pipeline.process(records).applied
    state = pipeline.threads["t1"].state
    hits = active_hits([(a.event, a.record.offset) for a in applied], tokenize(SHA), SearchFilters("t1"),
                       state.window_id, set(), state.closed_windows, identifiers(SHA))  # fmt: skip
    assert [h.event_id for h in hits] == ["e1"]
    everything = active_hits([(a.event, a.record.offset) for a in applied], tokenize("?!"), SearchFilters("t1"),
                             state.window_id, set(), state.closed_windows, identifiers("?!"))  # fmt: skip
    assert len(everything) == 3  # no word and no identifier: as an empty query, everything


def test_recall_puts_the_exact_identifier_first(service: EmbeddedService) -> None:
    lines = [raw("g", "goal", {"text": "fix the cache"}, 0)]
    lines += [raw(f"l{i}", "message", {"role": "assistant", "text": t}, 1 + i) for i, t in enumerate(LOOSE)]
    lines.append(raw("x", "error", {"message": "lookup failed", "code": "ERR_CACHE_MISS"}, 20))
    lines += _switch_then_ask("why the ERR_CACHE_MISS?", 30)
    _publish(service, lines)
    hits, _text_ = _recall(context_for(service, "t1", 8000))
    assert hits[0] == "x"


def test_no_cross_project_recall(service: EmbeddedService) -> None:
    lines = [raw("o1", "message", {"role": "user", "text": "the gizmo password rotation runbook"}, 0,
                 thread="other", project="p2"),
             # A child link naming a thread of another project is not followed either.
             raw("s", "agent_spawn", {"child_agent_id": "a1", "child_thread_id": "other"}, 1, project="p1"),
             raw("own", "message", {"role": "user", "text": "an old gizmo note"}, 2, project="p1"),
             *_switch_then_ask("where is the gizmo runbook?", 10, project="p1")]  # fmt: skip
    _publish(service, lines)
    hits, text = _recall(context_for(service, "t1", 4000))
    assert hits == ["own"]
    assert "o1" not in _text(context_for(service, "t1", 4000, query="gizmo password rotation runbook"))


def test_child_thread_recall_lets_the_parent_say_what_a_child_found(service: EmbeddedService) -> None:
    lines = [raw("g", "goal", {"text": "find the memory leak"}, 0),
             raw("s", "agent_spawn", {"child_agent_id": "a1", "role": "investigator", "child_thread_id": "t1-kid"}, 1),
             raw("kc", "tool_call", {"call_id": "q1", "tool_name": "grep", "arguments": {"pattern": "alloc"}}, 2,
                 thread="t1-kid", agent_id="a1"),
             raw("kr", "tool_result", {"call_id": "q1", "output": "leak found in src/pool.py: buffers never freed"}, 3,
                 thread="t1-kid", agent_id="a1"),
             raw("sib", "message", {"role": "user", "text": "src/pool.py leak elsewhere"}, 4, thread="stranger"),
             *_switch_then_ask("what did the child find in src/pool.py?", 10)]  # fmt: skip
    _publish(service, lines)
    hits, text = _recall(context_for(service, "t1", 4000))
    assert hits[0] == "kc" and "buffers never freed" in text and "call grep" in text
    assert "sib" not in hits  # a thread outside the family is not searched


def test_recall_never_repeats_what_the_window_already_holds(service: EmbeddedService) -> None:
    lines = [raw("g", "goal", {"text": "ship"}, 0),
             raw("old", "message", {"role": "user", "text": "the pelican flag must stay off"}, 1),
             raw("ws", "window_switch", {"new_window_id": "w2"}, 2),
             raw("c1", "tool_call", {"call_id": "k1", "tool_name": "bash", "arguments": {"cmd": "pelican --status"}}, 3),
             raw("r1", "tool_result", {"call_id": "k1", "output": "pelican: off"}, 4),
             raw("ask", "message", {"role": "user", "text": "is the pelican flag still off?"}, 5)]  # fmt: skip
    _publish(service, lines)
    ctx = context_for(service, "t1", 8000)
    hits, _rtext = _recall(ctx)
    assert hits == ["old"]  # c1/r1 and the question itself are in the window already
    assert _text(ctx).count("pelican: off") == 1


def test_recall_does_not_repeat_what_the_summary_cites() -> None:
    state = {"thread_id": "t1", "project": "default", "latest_user_message_id": "u9",
             "goal": {"text": "g", "event_id": "g"}, "constraints": [{"event_id": "k", "text": "x"}],
             "summary": {"observations": [{"text": "pytest failed", "source_event_id": "r1"}], "hypotheses": []}}  # fmt: skip
    assert held_ids(state, ["w1"]) == {"w1", "u9", "g", "k"}
    hit = {"event_id": "r1", "kind": "message", "ts": "2026-11-30T09:00:00Z", "snippet": "pytest failed loudly",
           "event_ids": ["r1"]}  # fmt: skip
    shown = assemble(state, [], counter(), 4000, recall=[hit]).as_dict()
    assert "[r1]" in _joined(shown) and "pytest failed loudly" not in _joined(shown)


def test_recall_brings_what_a_tight_budget_left_out_of_the_summary(service: EmbeddedService) -> None:
    """The summary shows only what its share of a tight budget holds: an event it cites but
    left out is not "already held", recall brings it back."""
    notes = [{"text": f"user said: routine note {i} " + "filler " * 30, "source_event_id": f"n{i}"} for i in range(40)]
    summary = {"observations": [{"text": "user said: the deploy target is eu-west-3", "source_event_id": "m1"},
                                *notes]}  # fmt: skip
    lines = [raw("g", "goal", {"text": "ship the release"}, 0),
             raw("m1", "message", {"role": "user", "text": "the deploy target is eu-west-3"}, 1),
             *[raw(f"n{i}", "message", {"role": "user", "text": f"routine note {i}"}, 2 + i) for i in range(40)],
             raw("s", "compaction", {"summary": summary, "covers_through": "n39"}, 50),
             raw("ask", "message", {"role": "user", "text": "which deploy target did I give you?"}, 51)]  # fmt: skip
    _publish(service, lines)
    ctx = context_for(service, "t1", 1500)
    assert "[m1]" not in next(s["content"] for s in ctx["sections"] if s["name"] == "summary")
    hits, text = _recall(ctx)
    assert "m1" in hits and "eu-west-3" in text
    roomy = context_for(service, "t1", 60_000)  # the summary shows it: recall does not repeat it
    assert "[m1]" in _joined(roomy) and "m1" not in _recall(roomy)[0]


def _joined(ctx: dict[str, Any]) -> str:
    return "\n".join(m.get("content") or "" for m in ctx["messages"])


def test_the_automatic_query_drops_stop_words_and_keeps_identifiers_whole() -> None:
    state = {"thread_id": "t1", "goal": {"text": "fix src/app/main.py"}}
    q = recall_query(state, "what did pytest say about ERR_CACHE_MISS?", None)
    assert q.split()[:2] == ["ERR_CACHE_MISS", "src/app/main.py"]
    assert "pytest" in q.split() and "what" not in q.split() and "did" not in q.split()
    assert recall_query(state, "anything", "my own query") == "my own query"


def test_an_index_built_before_the_terms_field_is_rebuilt_from_the_topic(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data")
    service = EmbeddedService(settings)
    _publish(service, [raw("x", "message", {"role": "user", "text": "it said ERR_CACHE_MISS"}, 0),
                       *[raw(f"l{i}", "message", {"role": "user", "text": t}, 1 + i) for i, t in enumerate(LOOSE)]])  # fmt: skip
    service.close()
    index_dir = settings.path("index")
    for f in index_dir.iterdir():  # the index as an older version wrote it: no terms field
        f.unlink() if f.is_file() else None
    builder = tantivy.SchemaBuilder()
    for name in ("event_id", "thread_id", "text"):
        builder.add_text_field(name, stored=True)
    old = tantivy.Index(builder.build(), path=str(index_dir))
    writer = old.writer()
    writer.add_document(tantivy.Document(event_id="x", thread_id="t1", text="it said ERR_CACHE_MISS"))
    writer.commit()
    writer.wait_merging_threads()
    del writer, old
    service = EmbeddedService(settings)
    try:
        hits = service.search("ERR_CACHE_MISS", limit=20)["hits"]
        assert hits[0]["event_id"] == "x" and hits[0]["source"] == "index" and len(hits) == 1 + len(LOOSE)
    finally:
        service.close()


def test_read_your_writes_finds_a_call_by_its_exact_pair_term_alone() -> None:
    records = [Record(0, 0, raw("c", "tool_call", {"call_id": "r1", "tool_name": "read", "arguments": {}}, 0)),
               Record(0, 1, raw("r", "tool_result", {"call_id": "r1", "output": "nothing in common"}, 1))]  # fmt: skip
    pipeline = Pipeline()
    applied = pipeline.process(records).applied
    state = pipeline.threads["t1"].state
    query = "call:r1"  # what recall searches a hit's partner by: no word of the result's text
    hits = active_hits([(a.event, a.record.offset) for a in applied], tokenize(query),
                       SearchFilters("t1", kind="tool_result"), state.window_id, set(), state.closed_windows,
                       identifiers(query))  # fmt: skip
    assert [h.event_id for h in hits] == ["r"]


def test_what_the_user_said_is_recalled_before_the_models_own_words(service: EmbeddedService) -> None:
    lines = [raw("g", "goal", {"text": "ship the release"}, 0),
             raw("m1", "message", {"role": "user", "text": "If anything breaks, page Aiko, she is on-call this week."}, 1),
             *[raw(f"a{i}", "message", {"role": "assistant", "text": f"I'll check the on-call {i}."}, 2 + i)
               for i in range(12)],
             *_switch_then_ask("who did I say is on-call?", 30)]  # fmt: skip
    _publish(service, lines)
    hits, text = _recall(context_for(service, "t1", 4000))
    assert hits[0] == "m1" and "page Aiko" in text  # the short guesses score higher in the index


def test_a_question_about_a_failure_recalls_the_failed_log_with_its_error_line(service: EmbeddedService) -> None:
    log = "\n".join(["$ make cache-warm", *[f"[{i:04d}] warming shard {i}" for i in range(300)]])
    log = log.replace("[0150] warming shard 150", "ERROR cache warm failed: ERR_CACHE_MISS_7Q (key absent)")
    lines = [raw("g", "goal", {"text": "ship the release"}, 0),
             raw("c1", "tool_call", {"call_id": "k1", "tool_name": "bash", "arguments": {"cmd": "make cache-warm"}}, 1),
             raw("r1", "tool_result", {"call_id": "k1", "output": log, "status": "error", "exit_code": 1}, 2),
             raw("c2", "tool_call", {"call_id": "k2", "tool_name": "bash", "arguments": {"cmd": "make cache-warm"}}, 3),
             raw("r2", "tool_result", {"call_id": "k2", "output": "cache warm: 0 errors"}, 4),
             raw("m", "message", {"role": "assistant", "text": "the cache code looks fine"}, 5),
             *_switch_then_ask("what error code did the cache step fail with?", 30)]  # fmt: skip
    _publish(service, lines)
    hits, text = _recall(context_for(service, "t1", 1500))
    assert hits[0] == "c1" and "ERR_CACHE_MISS_7Q" in text


def test_a_question_about_a_failure_and_a_fact_recalls_both_ahead_of_failures_that_only_say_error(
        service: EmbeddedService) -> None:  # fmt: skip
    """Every failed result holds the word "error": found by that word alone, a failure ranks as
    the fact it is, not ahead of what the user said."""
    lines = [raw("g", "goal", {"text": "ship the release"}, 0),
             raw("m1", "message", {"role": "user", "text": "the rollout token id is ZEBRA-91"}, 1),
             raw("c1", "tool_call", {"call_id": "k1", "tool_name": "build", "arguments": {"target": "billing"}}, 2),
             raw("r1", "tool_result", {"call_id": "k1", "output": "ERROR ERR_CACHE_MISS_4471 fetching artifact\nbuild failed",
                                       "status": "error", "exit_code": 2}, 3)]  # fmt: skip
    for i in range(12):  # unrelated failures after it
        lines += [raw(f"c{i + 2}", "tool_call", {"call_id": f"k{i + 2}", "tool_name": "pytest", "arguments": {"n": i}}, 4 + 2 * i),
                  raw(f"r{i + 2}", "tool_result", {"call_id": f"k{i + 2}", "output": f"pytest failed at iteration {i}: exit 1",
                                                   "status": "error", "exit_code": 1}, 5 + 2 * i)]  # fmt: skip
    lines += _switch_then_ask("What error code did the first build fail with, and what was the rollout token id?", 60)
    _publish(service, lines)
    hits, text = _recall(context_for(service, "t1", 4000))
    assert hits[0] == "c1" and "ERR_CACHE_MISS_4471" in text
    assert "m1" in hits[:3] and "ZEBRA-91" in text


def test_a_recalled_error_event_shows_its_code(service: EmbeddedService) -> None:
    lines = [raw("g", "goal", {"text": "ship the release"}, 0),
             raw("e1", "error", {"message": "migration failed: lock not acquired", "code": "E_MIGRATION_LOCK"}, 1),
             *_switch_then_ask("which error code did the migration fail with?", 30)]  # fmt: skip
    _publish(service, lines)
    hits, text = _recall(context_for(service, "t1", 1500))
    assert hits == ["e1"] and "E_MIGRATION_LOCK" in text


def test_a_search_of_no_word_and_no_identifier_says_it_lists_everything(tmp_path: Path) -> None:
    from starlette.testclient import TestClient  # noqa: PLC0415

    from agentlog.streams.api.http import build_app  # noqa: PLC0415
    from agentlog.streams.config import Settings  # noqa: PLC0415

    service = EmbeddedService(Settings(data_dir=tmp_path))
    try:
        _publish(service, [raw("a", "message", {"role": "user", "text": "deploy the build"}, 0)])
        with TestClient(build_app(service), base_url="http://localhost") as http:
            for q in ('"', "(((", "x" * 50):
                answer = http.get("/search", params={"q": q}).json()
                assert [h["event_id"] for h in answer["hits"]] == ["a"]
                assert any("holds no word to search for" in w for w in answer["warnings"]), q
            for q in ("deploy", "", SHA):  # a word, the documented empty query, an identifier: no warning
                assert http.get("/search", params={"q": q}).json()["warnings"] == [], q
        # The service says it, so every way in does: HTTP above, the CLI, the client in-process.
        assert any("holds no word to search for" in w for w in service.search("(((")["warnings"])
    finally:
        service.close()


def test_the_cli_prints_a_search_s_warning_as_it_is_and_the_hits_on_stdout(cli_env: dict[str, str]) -> None:
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    line = raw("a", "message", {"role": "user", "text": "deploy the build"}, 0)
    subprocess.run([sys.executable, "-m", "agentlog", "publish", "-"], input=line, env=cli_env, check=True,
                   capture_output=True, timeout=120)  # fmt: skip
    proc = subprocess.run([sys.executable, "-m", "agentlog", "search", '"'], env=cli_env, capture_output=True,
                          timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 0 and b"deploy the build" in proc.stdout
    assert b"agentlog: warning: the query '\"' holds no word to search for" in proc.stderr, proc.stderr
    assert b"stale" not in proc.stderr  # no store is failing


OUTCOMES = st.one_of(
    st.sampled_from(["user", "assistant", "system", "developer"]).map(
        lambda role: ("message", {"role": role, "text": "the deploy"})),
    st.tuples(st.sampled_from(["ok", "error", "timeout", "cancelled"]), st.none() | st.integers(-2**31, 2**31 - 1)).map(
        lambda se: ("tool_result", {"call_id": "k", "output": "the deploy", "status": se[0], "exit_code": se[1]})),
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(OUTCOMES, st.booleans(), st.booleans())
def test_a_hit_ranks_by_its_own_role_and_status_exactly_as_by_its_event(
    outcome: tuple[str, dict[str, Any]], about_failure: bool, what_failed: bool
) -> None:
    kind, payload = outcome
    event = ev("e", kind, payload)
    hit = hit_of(search_doc(event, 1, "w0"), ["deploy"], 1.0).as_dict()
    older = {**hit, "role": "", "status": "", "exit_code": None}  # a hit of an index built before they were kept
    assert not needs_event(hit) and needs_event(older)
    assert hit_class(hit, None, about_failure, what_failed) == hit_class(older, event, about_failure, what_failed)


def test_a_hit_says_a_messages_role_and_a_results_status_and_exit_code_from_the_index_and_the_active_state(
    service: EmbeddedService,
) -> None:
    service.publish(b"\n".join([
        raw("m", "message", {"role": "assistant", "text": "the deploy looks fine"}, 1),
        raw("c", "tool_call", {"call_id": "k", "tool_name": "bash", "arguments": {"cmd": "deploy"}}, 2),
        raw("r", "tool_result", {"call_id": "k", "output": "deploy failed", "status": "error", "exit_code": 3}, 3),
    ]))  # fmt: skip
    expected = {"m": ("assistant", "", None), "c": ("", "", None), "r": ("", "error", 3)}
    active = service.search("deploy", thread_id="t1", drain=False)["hits"]
    service.catch_up()
    indexed = service.search("deploy", thread_id="t1")["hits"]
    for hits, source in ((active, "active"), (indexed, "index")):
        assert {h["event_id"]: (h["role"], h["status"], h["exit_code"]) for h in hits} == expected
        assert {h["source"] for h in hits} == {source}


def test_ranking_recalled_hits_reads_no_event_when_the_hits_carry_role_and_status(
    service: EmbeddedService, monkeypatch: Any
) -> None:
    reads: list[list[str]] = []
    read_all = recall_adapter._read_all
    monkeypatch.setattr(recall_adapter, "_read_all", lambda source, ids: reads.append(ids) or read_all(source, ids))
    lines = [raw("m1", "message", {"role": "user", "text": "If anything breaks, page Aiko, she is on-call."}, 1),
             *[raw(f"a{i}", "message", {"role": "assistant", "text": f"I'll check the on-call {i}."}, 2 + i)
               for i in range(12)],
             *_switch_then_ask("who did I say is on-call?", 30)]  # fmt: skip
    _publish(service, lines)
    hits, text = _recall(context_for(service, "t1", 4000))
    assert hits[0] == "m1" and "page Aiko" in text  # the user's words first: ranked by the hits' roles
    assert reads == [[]]  # and not one event read to rank them
