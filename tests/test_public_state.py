"""A state read renders only what changed since the last one, and answers exactly what a
whole render would (``agentlog.processors.public_state``)."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import random

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentlog.processors.pipeline import MemorySeen, Pipeline, Record
from agentlog.processors.public_state import PublicView
from agentlog.processors import redaction
from agentlog.processors.read_only import ReadOnlyDict, ReadOnlyList, read_only
from agentlog.processors.redaction import redact_if, redact_reusing
from agentlog.processors.thread import PairingConfig
from agentlog.schemas.state import StepItem
from tests.helpers import raw

IDS = ["a", "b", "c", "d"]
SECRET = "AKIAIOSFODNN7EXAMPLE"  # redaction must hide it wherever it sits in the state
TEXTS = ["fix the build", f"use key {SECRET}", "password=hunter2 in the env", None]


@st.composite
def sessions(draw: st.DrawFn) -> list[bytes]:
    """Every kind that changes the state, with secrets in its text, ids that repeat (so
    items are replaced), window switches and failures, under a window small enough to fold."""
    out: list[bytes] = []
    for i in range(draw(st.integers(1, 60))):
        eid, key, t = f"e{i}", draw(st.sampled_from(IDS)), float(i)
        text = draw(st.sampled_from(TEXTS))
        kind = draw(st.sampled_from(["goal", "constraint", "unconstraint", "plan", "task", "file", "approval",
                                     "decision", "spawn", "exit", "call", "result", "error", "message",
                                     "switch"]))  # fmt: skip
        status = draw(st.sampled_from(["pending", "running", "done", "failed"]))
        payload: dict[str, object]
        if kind == "goal":
            kind, payload = "goal", {"text": text or "ship it"}
        elif kind in ("constraint", "unconstraint"):
            payload = {"constraint_id": key, "text": text or "no writes"}
            payload |= {"op": "remove"} if kind == "unconstraint" else {}
            kind = "constraint"
        elif kind == "plan":
            payload = {"steps": [{"step_id": key, "status": status, **({"text": text} if text else {})}]}
        elif kind == "task":
            payload = {"task_id": key, "status": status, **({"text": text} if text else {})}
        elif kind == "file":
            kind, payload = "file_change", {"path": f"{key}.py", "change": "modified", "confirmed": draw(st.booleans())}
        elif kind == "approval":
            kind, payload = "approval_request", {"approval_id": key, "action": text or "deploy", "detail": text}
        elif kind == "decision":
            kind, payload = "approval_decision", {"approval_id": key, "decision": draw(st.sampled_from(["approved", "denied"]))}
        elif kind == "spawn":
            kind, payload = "agent_spawn", {"child_agent_id": key, "child_thread_id": f"t1.{key}", "role": "helper"}
        elif kind == "exit":
            kind, payload = "agent_exit", {"child_agent_id": key, "status": "ok", "summary": text}
        elif kind == "call":
            kind, payload = "tool_call", {"call_id": key, "tool_name": "bash", "arguments": {"cmd": text}}
        elif kind == "result":
            kind, payload = "tool_result", {"call_id": key, "output": text or "ok " * 40,
                                            "status": draw(st.sampled_from(["ok", "error"]))}  # fmt: skip
        elif kind == "error":
            payload = {"message": text or "boom", "code": draw(st.sampled_from([None, 502]))}
        elif kind == "message":
            payload = {"role": draw(st.sampled_from(["user", "assistant"])), "text": text or "hello " * 30}
        else:
            kind, payload = "window_switch", {"new_window_id": f"w{i}"}
        out.append(raw(eid, kind, payload, t))
    return out


PROPS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPS
@given(sessions(), st.booleans())
def test_a_read_after_every_event_answers_what_a_whole_render_of_the_state_would(records: list[bytes],
                                                                                  redact: bool) -> None:  # fmt: skip
    pipeline = Pipeline(MemorySeen(), config=PairingConfig(compact_window_tokens=200))
    view = PublicView()
    for i, record in enumerate(records):
        pipeline.process([Record(0, i, record)])
        state = pipeline.thread("t1").state
        got = view.render(state, redact)
        want = redact_if(redact, state.public())
        assert orjson.dumps(got) == orjson.dumps(want)  # the same value, key order included


@PROPS
@given(sessions(), st.booleans(), st.lists(st.booleans(), min_size=1))
def test_a_view_told_which_sections_each_event_touched_answers_what_a_whole_render_would(
        records: list[bytes], redact: bool, reads: list[bool]) -> None:  # fmt: skip
    """The thread processor's own view skips every section the reducer did not report: a
    section it forgot to report would be answered stale here. Reads are skipped at random,
    so touches pile up between two reads."""
    pipeline = Pipeline(MemorySeen(), config=PairingConfig(compact_window_tokens=200))
    for i, record in enumerate(records):
        pipeline.process([Record(0, i, record)])
        tp = pipeline.thread("t1")
        if reads[i % len(reads)] or i == len(records) - 1:
            assert orjson.dumps(tp.view.render(tp.state, redact)) == orjson.dumps(redact_if(redact, tp.state.public()))
            assert orjson.dumps(tp.view.render_json(tp.state, redact)) == orjson.dumps(redact_if(redact, tp.state.public()))


class _CountedPlan(dict):  # type: ignore[type-arg]
    """A plan whose items' walks are counted (``values()`` iterated)."""

    walks = 0

    def values(self):  # type: ignore[no-untyped-def,override]
        plan = self

        class Values:
            def __len__(self) -> int:
                return len(plan)

            def __iter__(self):  # type: ignore[no-untyped-def]
                _CountedPlan.walks += 1
                return iter(dict.values(plan))

        return Values()


def test_a_read_after_an_event_that_touched_no_plan_step_does_not_walk_the_plan() -> None:
    """The agent's step on a long thread: its cost is what the event changed, not the
    plan's length."""
    steps = [{"step_id": f"s{i}", "text": f"step {i}", "status": "running"} for i in range(2_000)]
    pipeline = Pipeline(MemorySeen())
    pipeline.process([Record(0, 0, raw("e0", "plan", {"steps": steps}))])
    tp = pipeline.thread("t1")
    tp.state.plan = _CountedPlan(tp.state.plan)
    tp.view.touched({"plan"})  # the plan's dict was replaced behind the reducer's back
    first = tp.view.render(tp.state, True)
    _CountedPlan.walks = 0
    pipeline.process([Record(0, 1, raw("e1", "message", {"role": "user", "text": "go on"}, 1.0)),
                      Record(0, 2, raw("e2", "file_change", {"path": "a.py", "change": "modified"}, 2.0))])  # fmt: skip
    second = tp.view.render(tp.state, True)
    assert _CountedPlan.walks == 0 and second["plan"] is first["plan"]
    assert second["files"][0]["path"] == "a.py" and second["latest_user_message_id"] == "e1"
    pipeline.process([Record(0, 3, raw("e3", "plan", {"steps": [{"step_id": "s7", "status": "done"}]}, 3.0))])
    third = tp.view.render(tp.state, True)
    assert _CountedPlan.walks >= 1 and third["plan"][7]["status"] == "done" and third["plan"] is not first["plan"]


@PROPS
@given(sessions(), st.booleans(), st.lists(st.booleans(), min_size=1))
def test_the_state_s_json_after_every_event_is_the_whole_render_s_serialisation_byte_for_byte(
        records: list[bytes], redact: bool, reads: list[bool]) -> None:  # fmt: skip
    """``render_json`` splices each section's kept JSON; reads of dicts in between (one view
    serves both) must not make it stale."""
    pipeline = Pipeline(MemorySeen(), config=PairingConfig(compact_window_tokens=200))
    view = PublicView()
    for i, record in enumerate(records):
        pipeline.process([Record(0, i, record)])
        state = pipeline.thread("t1").state
        if reads[i % len(reads)]:
            view.render(state, redact)
        assert orjson.dumps(view.render_json(state, redact)) == orjson.dumps(redact_if(redact, state.public()))


def test_the_state_s_json_serialises_again_only_the_sections_that_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    steps = [{"step_id": f"s{i}", "text": f"step {i}", "status": "running"} for i in range(50)]
    pipeline = Pipeline(MemorySeen())
    pipeline.process([Record(0, 0, raw("e0", "plan", {"steps": steps})), Record(0, 1, raw("e1", "goal", {"text": "x"}, 1.0))])
    view, state = PublicView(), pipeline.thread("t1").state
    view.render_json(state, True)
    file_change = Record(0, 2, raw("e2", "file_change", {"path": "a.py", "change": "modified"}, 2.0))
    serialised: list[object] = []
    original = orjson.dumps

    def counting(value: object, *args: object) -> bytes:
        serialised.append(value)
        return original(value, *args)

    monkeypatch.setattr(orjson, "dumps", counting)
    pipeline.process([file_change])
    out = original(view.render_json(state, True))
    assert orjson.loads(out)["files"][0]["path"] == "a.py"
    assert [type(v) for v in serialised] == [list] and serialised[0][0]["path"] == "a.py"  # the files only


def test_a_caller_cannot_change_what_it_read_in_place_and_its_copies_are_its_own() -> None:
    pipeline = Pipeline(MemorySeen(), config=PairingConfig(compact_window_tokens=200))
    records = [raw("e0", "goal", {"text": "ship"}), raw("e1", "plan", {"steps": [{"step_id": "s", "text": "x"}]})]
    records += [raw(f"m{i}", "message", {"role": "user", "text": f"note {i} " * 40}, float(i + 2)) for i in range(30)]
    pipeline.process([Record(0, i, r) for i, r in enumerate(records)])
    view, state = PublicView(), pipeline.thread("t1").state
    first = view.render(state, True)
    assert first["summary"], "the window folded into a summary"
    attempts = [lambda: first["plan"][0].__setitem__("status", "tampered"), lambda: first["goal"].update(text="x"),
                lambda: first["plan"].append({"step_id": "forged"}), lambda: first["plan"].sort(),
                lambda: first["summary"].pop("goal"), lambda: first["summary"]["observations"].clear(),
                lambda: first["summary"]["observations"][0].setdefault("x", 1),
                lambda: first["plan"].__iadd__([{}]), lambda: first["plan"][0].__ior__({"x": 1})]  # fmt: skip
    for attempt in attempts:
        with pytest.raises(TypeError, match="change a copy"):
            attempt()
    first["plan"].__init__([])  # filled when made: initialising again changes nothing
    first["goal"].__init__(text="forged")
    assert first["plan"] and first["goal"]["text"] == "ship"
    mine = copy.deepcopy(first)
    mine["plan"][0]["status"] = "mine"
    mine["summary"]["observations"].clear()
    step = dict(first["plan"][0]) | {"status": "also mine"}
    plan = first["plan"][:] + [step]
    plan.append(pickle.loads(pickle.dumps(first["plan"][0])))
    first["warnings"] = ["the top-level dict is the caller's"]
    assert [type(v) for v in (mine["plan"], mine["plan"][0], step, plan, plan[-1])] == [list, dict, dict, list, dict]
    assert view.render(state, True) == redact_if(True, state.public())
    assert orjson.dumps(view.render(state, True)) == orjson.dumps(redact_if(True, state.public()))


def test_the_state_s_items_are_frozen_so_an_item_that_is_the_same_object_is_the_same_value() -> None:
    step = StepItem(step_id="s", event_id="e")
    with pytest.raises(dataclasses.FrozenInstanceError):
        step.status = "done"  # type: ignore[misc]


def test_a_read_renders_only_the_items_that_changed_since_the_last_read(monkeypatch: pytest.MonkeyPatch) -> None:
    steps = [{"step_id": f"s{i}", "text": f"step {i}", "status": "running"} for i in range(500)]
    pipeline = Pipeline(MemorySeen())
    pipeline.process([Record(0, 0, raw("e0", "plan", {"steps": steps}))])
    view, state = PublicView(), pipeline.thread("t1").state
    view.render(state, True)
    rendered: list[object] = []
    original = PublicView._plain

    def counting(self: PublicView, value: object) -> object:
        rendered.append(value)
        return original(self, value)

    monkeypatch.setattr(PublicView, "_plain", counting)
    pipeline.process([Record(0, 1, raw("e1", "plan", {"steps": [{"step_id": "s7", "status": "done"}]}, 1.0))])
    out = view.render(state, True)
    assert out["plan"][7]["status"] == "done"
    items = [v for v in rendered if isinstance(v, dict) and "step_id" in v]
    assert [v["step_id"] for v in items] == ["s7"]  # the other 499 steps came from the last read


def test_context_reads_share_the_state_s_items_and_never_change_what_the_next_state_read_answers(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from agentlog.streams.config import Settings  # noqa: PLC0415
    from agentlog.streams.embedded.service import EmbeddedService  # noqa: PLC0415

    svc = EmbeddedService(Settings(data_dir=tmp_path / "data"))
    try:
        lines = [raw("g", "goal", {"text": f"ship with key {SECRET}"}),
                 raw("p", "plan", {"steps": [{"step_id": f"s{i}", "text": f"step {i}"} for i in range(30)]}, 1.0),
                 raw("a", "approval_request", {"approval_id": "x", "action": "deploy"}, 2.0),
                 raw("f", "file_change", {"path": "a.py", "change": "modified", "confirmed": True}, 3.0),
                 raw("u", "message", {"role": "user", "text": "go on"}, 4.0)]  # fmt: skip
        svc.publish(b"\n".join(lines))
        for budget in (300, 2_000, 8_000):
            svc.context("t1", budget)
        tp = svc.driver.pipeline.thread("t1")
        assert svc.state("t1") == redact_if(True, tp.state.public())
    finally:
        svc.close()


def test_a_caller_that_changes_the_context_it_read_changes_nothing_in_the_next_state_read(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from agentlog.streams.config import Settings  # noqa: PLC0415
    from agentlog.streams.embedded.service import EmbeddedService  # noqa: PLC0415

    svc = EmbeddedService(Settings(data_dir=tmp_path / "data"))
    try:
        lines = [raw("g", "goal", {"text": "ship it"}), raw("c", "constraint", {"constraint_id": "k", "text": "no push"}, 1.0),
                 raw("a", "approval_request", {"approval_id": "x", "action": "deploy"}, 2.0),
                 raw("d", "approval_decision", {"approval_id": "x", "decision": "approved", "by": "ann"}, 3.0),
                 raw("u", "message", {"role": "user", "text": "go on"}, 4.0)]  # fmt: skip
        svc.publish(b"\n".join(lines))
        before = svc.state("t1")
        pinned = svc.context("t1", 2_000)["sections"][0]  # an in-process caller (the embedded client) gets this
        for item in [pinned["goal"], *pinned["constraints"], *pinned["decided_approvals"]]:
            item["text" if "text" in item else "action"] = "changed by the caller"
        assert svc.state("t1") == before
    finally:
        svc.close()


JSON_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(-5, 5),
                        st.sampled_from(TEXTS[:3] + ["value", "token"]))
JSON_VALUES = st.recursive(JSON_LEAVES, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(st.sampled_from(["key", "value", "name", "password", "text", "ids"]), inner, max_size=4)),
    max_leaves=20)  # fmt: skip


@PROPS
@given(JSON_VALUES, JSON_VALUES, st.booleans(), st.randoms(use_true_random=False))
def test_a_summary_shown_with_the_entries_of_the_last_one_is_the_whole_redaction(
        last: object, value: object, redact: bool, rng: random.Random) -> None:  # fmt: skip
    """Entries are reused by identity: ``value``'s lists of dicts take some of ``last``'s
    very entries, as a fold keeps the unchanged ones."""
    pool = [x for x in _dict_entries(last)]
    value = _sharing(value, pool, rng)
    memo: dict[int, tuple[object, object]] = {}
    redact_reusing(last, redact, {}, memo, read_only)
    kept: dict[int, tuple[object, object]] = {}
    got = redact_reusing(value, redact, memo, kept, read_only)
    want = redact_if(redact, value)
    assert got == want and orjson.dumps(got) == orjson.dumps(want)
    assert redact_reusing(value, redact, kept, {}, read_only) == want  # every entry from the memo this time
    _assert_read_only(got)


def _dict_entries(value: object) -> list[dict[str, object]]:
    """The dicts that sit in lists of dicts, at any depth."""
    if isinstance(value, dict):
        return [e for v in value.values() for e in _dict_entries(v)]
    if isinstance(value, list):
        own = value if value and all(type(v) is dict for v in value) else []
        return [*own, *(e for v in value for e in _dict_entries(v))]
    return []


def _sharing(value: object, pool: list[dict[str, object]], rng: random.Random) -> object:
    """``value`` with some entries of its lists of dicts swapped for entries of ``pool``."""
    if isinstance(value, dict):
        return {k: _sharing(v, pool, rng) for k, v in value.items()}
    if isinstance(value, list):
        if value and pool and all(type(v) is dict for v in value):
            return [rng.choice(pool) if rng.random() < 0.5 else v for v in value]
        return [_sharing(v, pool, rng) for v in value]
    return value


def _assert_read_only(value: object) -> None:
    if isinstance(value, dict):
        assert type(value) is ReadOnlyDict
        for v in value.values():
            _assert_read_only(v)
    elif isinstance(value, list):
        assert type(value) is ReadOnlyList
        for v in value:
            _assert_read_only(v)


def _summary(observations: list[str]) -> dict[str, object]:
    return {"goal": "ship", "observations": [{"text": t, "source_event_ids": [f"e{i}" for i in range(50)], "count": 1}
                                              for t in observations], "pending_jobs": ["call c1 (bash)"]}  # fmt: skip


def test_a_fold_that_adds_a_summary_entry_redacts_that_entry_only(monkeypatch: pytest.MonkeyPatch) -> None:
    pipeline = Pipeline(MemorySeen())
    pipeline.process([Record(0, 0, raw("e0", "goal", {"text": "x"}))])
    view, state = PublicView(), pipeline.thread("t1").state
    texts = [f"bash -> ok: line {i}" for i in range(40)] + [f"grep -> error: key {SECRET}"]
    state.summary = _summary(texts)
    first = view.render(state, True)["summary"]
    walked: list[object] = []
    original = redaction._walk

    def counting(value: object, leaf: object) -> object:
        walked.append(value)
        return original(value, leaf)  # type: ignore[arg-type]

    monkeypatch.setattr(redaction, "_walk", counting)
    new = {"text": "pytest -> ok: new", "source_event_ids": ["e9"], "count": 1}
    # A fold replaces the dict and keeps the entries that did not change as the same objects.
    state.summary = {**state.summary, "observations": state.summary["observations"][1:] + [new]}  # type: ignore[index,operator]
    out = view.render(state, True)
    entries = [v for v in walked if isinstance(v, dict) and "source_event_ids" in v]
    assert [e["text"] for e in entries] == ["pytest -> ok: new"]
    assert out["summary"] == redact_if(True, state.summary)
    assert out["summary"]["observations"][0] is first["observations"][1]  # shown as it was
    assert SECRET not in orjson.dumps(out).decode()


def test_the_summary_s_memo_holds_the_entries_of_the_newest_summary_only() -> None:
    pipeline = Pipeline(MemorySeen())
    pipeline.process([Record(0, 0, raw("e0", "goal", {"text": "x"}))])
    view, state = PublicView(), pipeline.thread("t1").state
    for n in range(5):
        state.summary = _summary([f"observation {n}.{i}" for i in range(30)])
        assert view.render(state, True)["summary"] == redact_if(True, state.summary)
    state.summary = _summary(["only one"])
    view.render(state, True)
    assert len(view._summary_entries) == 1  # noqa: SLF001 - the bound is what is tested


@pytest.mark.parametrize("items", [
    [{"step_id": f"s{i}", "status": "done"} for i in range(50)],  # flat: the C loops alone
    [{"a": 1}, {"b": [1, {"c": [2, 3]}]}, {"d": {"e": {"f": []}}}, {}],  # containers in some items
    [{"a": 1}, [1, 2], {"b": 2}],  # not only dicts
    [{"a": 1}],
    [],
])  # fmt: skip
def test_read_only_of_a_list_of_dicts_is_read_only_all_the_way_down_and_the_same_value(items: list) -> None:
    got = read_only(orjson.loads(orjson.dumps(items)))
    assert got == items and orjson.dumps(got) == orjson.dumps(items)
    _assert_read_only(got)
