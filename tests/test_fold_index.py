"""Issue 15, the state step at 20,000 events: a fold's work is bounded by what it folds, not
by the thread's length. The plan steps and tasks a fold reports as finished, and the next
step, come from an index kept with each event (``processors/work_index.py``) instead of a
scan of the whole plan; every answer and every summary stays what the scans gave."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from agentlog.processors.thread import PairingConfig, ThreadProcessor
from agentlog.processors.validation import validate
from agentlog.processors.work_index import WorkIndex
from agentlog.schemas.events import Envelope
from agentlog.schemas.handoff import HandoffRecord
from agentlog.schemas.snapshot import ThreadSnapshot
from agentlog.schemas.state import StepItem, WorkingState
from tests.helpers import call, ev, raw, result

STATUSES = ["pending", "running", "done", "failed", "cancelled"]
SMALL = 120
"""A fold budget small enough that a generated thread folds many times."""
PROPS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def threads(draw: st.DrawFn) -> list[bytes]:
    """Plan updates (steps added, advanced, re-sent, finished, several in one event, the
    same step twice in one event), task updates, and the messages and tool calls that make
    the window fold."""
    out = [raw("g", "goal", {"text": "ship it"}, 0)]
    for i in range(draw(st.integers(1, 70))):
        t = 2.0 * i + 1
        choice = draw(st.sampled_from(["plan", "plan", "plan", "task", "user", "assistant", "pair", "pair", "open"]))
        if choice == "plan":
            steps = [{"step_id": f"s{draw(st.integers(0, 9))}", "status": draw(st.sampled_from(STATUSES)),
                      **({"text": f"step text {i}"} if draw(st.booleans()) else {})}
                     for _ in range(draw(st.integers(1, 4)))]  # fmt: skip
            out.append(raw(f"p{i}", "plan", {"steps": steps}, t))
        elif choice == "task":
            out.append(raw(f"k{i}", "task", {"task_id": f"t{draw(st.integers(0, 3))}",
                                             "status": draw(st.sampled_from(STATUSES)), "text": f"task {i}"}, t))  # fmt: skip
        elif choice in ("user", "assistant"):
            text = f"{choice} {i} " + "probably the cache " * draw(st.integers(1, 20))
            out.append(raw(f"m{i}", "message", {"role": choice, "text": text}, t))
        elif choice == "pair":
            out.append(raw(f"c{i}", "tool_call", {"call_id": f"c{i}", "tool_name": "bash"}, t))
            out.append(raw(f"r{i}", "tool_result", {"call_id": f"c{i}", "output": "y " * draw(st.integers(0, 300))}, t + 1))
        else:
            out.append(raw(f"o{i}", "tool_call", {"call_id": f"o{i}", "tool_name": "build"}, t))
    return out


def parsed(record: bytes) -> Envelope:
    event = validate(record)
    assert isinstance(event, Envelope)
    return event


def restored(tp: ThreadProcessor, config: PairingConfig) -> ThreadProcessor:
    """The thread as a restart finds it: its snapshot persisted as JSON and loaded again."""
    return ThreadProcessor.restore(ThreadSnapshot.model_validate_json(tp.snapshot().model_dump_json()), config)


def scanned(items: Iterable[Any], event_ids: set[str]) -> list[Any]:
    """From scratch: the items, in order, whose last change came with one of ``event_ids``."""
    return [item for item in items if item.event_id in event_ids]


def scanned_next(state: WorkingState) -> StepItem | None:
    """From scratch: the first running step, else the first pending one."""
    for status in ("running", "pending"):
        for step in state.plan.values():
            if step.status == status:
                return step
    return None


class Scans:
    """A ``SectionIndex`` that scans the whole section for every answer: the fold as it was."""

    def update(self, items: dict[str, Any], keys: Iterable[str]) -> None:
        pass

    def changed_by(self, items: dict[str, Any], event_ids: Iterable[str]) -> list[Any]:
        return scanned(items.values(), set(event_ids))

    def open_items(self, items: dict[str, Any]) -> list[Any]:
        return [item for item in items.values() if item.status in ("pending", "running")]

    def first(self, items: dict[str, Any], status: str) -> Any:
        return next((item for item in items.values() if item.status == status), None)


def assert_agrees(work: WorkIndex, state: WorkingState, asked: list[set[str]]) -> None:
    for ids in asked:
        assert work.plan.changed_by(state.plan, ids) == scanned(state.plan.values(), ids)
        assert work.tasks.changed_by(state.tasks, ids) == scanned(state.tasks.values(), ids)
    assert work.next_step(state) == scanned_next(state)
    for section, items in ((work.plan, state.plan), (work.tasks, state.tasks)):
        assert section.open_items(items) == [item for item in items.values() if item.status in ("pending", "running")]
    assert work.next_step(state) is scanned_next(state)


@PROPS
@given(threads(), st.data())
def test_the_index_kept_with_each_event_answers_every_lookup_as_a_scan_of_the_whole_plan_and_tasks(
    records: list[bytes], data: st.DataObject
) -> None:
    config = PairingConfig(compact_window_tokens=SMALL)
    tp = ThreadProcessor.new("t1", config)
    tp.memo.work = WorkIndex.of(tp.state)
    restarts = set(data.draw(st.lists(st.integers(0, len(records) - 1), max_size=3)))
    applied: list[str] = []
    for i, record in enumerate(records):
        if i in restarts:  # a replay from a checkpoint: the index is built again from the state
            tp = restored(tp, config)
            tp.memo.work = WorkIndex.of(tp.state)
        event = parsed(record)
        tp.apply(event)
        applied.append(event.event_id)
        some = set(data.draw(st.lists(st.sampled_from(applied), max_size=5)))
        asked = [{event.event_id}, set(applied), some, {"nobody"}]
        assert_agrees(tp.memo.work, tp.state, asked)
        assert_agrees(WorkIndex.of(tp.state), tp.state, asked)


@PROPS
@given(threads(), st.data())
def test_every_fold_lands_on_the_same_summary_and_snapshot_as_the_whole_plan_scans_with_restarts_anywhere(
    records: list[bytes], data: st.DataObject
) -> None:
    config = PairingConfig(compact_window_tokens=SMALL)
    indexed, scans = ThreadProcessor.new("t1", config), ThreadProcessor.new("t1", config)
    scans.memo.work = WorkIndex(Scans(), Scans())  # type: ignore[arg-type]
    restarts = set(data.draw(st.lists(st.integers(0, len(records) - 1), max_size=4)))
    for i, record in enumerate(records):
        if i in restarts:  # the live thread restarts from its checkpoint, with no index
            indexed = restored(indexed, config)
            assert indexed.memo.work is None
        parsed_event = parsed(record)
        last, last_json = indexed.state.summary, orjson.dumps(indexed.state.summary)
        indexed.apply(parsed_event)
        scans.apply(parsed_event)
        assert orjson.dumps(last) == last_json  # a fold shares the last record's entries, never edits them
        assert orjson.dumps(indexed.state.summary) == orjson.dumps(scans.state.summary)
        assert indexed.snapshot() == scans.snapshot()
        if indexed.state.summary is not None:  # what a HandoffRecord dumps, key order included
            canonical = HandoffRecord.model_validate(indexed.state.summary).model_dump(mode="json")
            assert orjson.dumps(indexed.state.summary) == orjson.dumps(canonical)
    summary = indexed.state.summary or {"done": []}
    event(f"finished steps in the record: {any(d['kind'] == 'step' for d in summary['done'])}")  # about half


def test_a_step_finished_by_a_folded_event_is_done_in_the_record_and_the_next_step_is_the_first_running() -> None:
    tp = ThreadProcessor.new("t1", PairingConfig(compact_window_tokens=SMALL))
    tp.apply(ev("p1", "plan", {"steps": [{"step_id": "a", "text": "build"}, {"step_id": "b", "text": "test"},
                                         {"step_id": "c", "status": "running", "text": "ship"}]}, 1))  # fmt: skip
    tp.apply(ev("p2", "plan", {"steps": [{"step_id": "b", "status": "running"}, {"step_id": "a", "status": "done"}]}, 2))
    for i in range(12):  # enough output to fold the plan events away
        tp.apply(call(f"c{i}", f"c{i}", 3 + i))
        tp.apply(result(f"r{i}", f"c{i}", 3.5 + i, output="z " * 200))
    summary = tp.state.summary
    assert summary is not None
    assert [d["text"] for d in summary["done"] if d["kind"] == "step"] == ["step a: build"]
    assert summary["next_action"] == "test"  # b is running and comes before c in the plan


class NoScan(dict[str, Any]):
    """A plan (or tasks) that refuses to be walked: only lookups by key are allowed."""

    def __iter__(self) -> Any:
        raise AssertionError("the section was scanned")

    def values(self) -> Any:
        raise AssertionError("the section was scanned")

    def items(self) -> Any:
        raise AssertionError("the section was scanned")

    def keys(self) -> Any:
        raise AssertionError("the section was scanned")


def work_step(i: int) -> list[Envelope]:
    """Step ``i`` starts, the one before it is done, a task starts or is done, and a call
    and its result."""
    return [ev(f"p{i}", "plan", {"steps": [{"step_id": f"s{i}", "status": "running"},
                                           {"step_id": f"s{i - 1}", "status": "done"}]}, i),
            ev(f"k{i}", "task", {"task_id": f"t{i // 2}", "status": "running" if i % 2 else "done"}, i + 0.1),
            call(f"c{i}", f"c{i}", i + 0.2), result(f"r{i}", f"c{i}", i + 0.5, output="z " * 80)]  # fmt: skip


def test_a_fold_in_a_thread_of_thousands_of_plan_steps_and_tasks_never_walks_them() -> None:
    config = PairingConfig(compact_window_tokens=SMALL)
    tp, scans = ThreadProcessor.new("t1", config), ThreadProcessor.new("t1", config)
    scans.memo.work = WorkIndex(Scans(), Scans())  # type: ignore[arg-type]
    for i in range(2000):
        for e in work_step(i):
            tp.apply(e)
            scans.apply(e)
    assert tp.memo.work is not None
    tp.state.plan, tp.state.tasks = NoScan(tp.state.plan), NoScan(tp.state.tasks)
    folded_before = tp.state.summary_covers_through
    for i in range(2000, 2010):
        for e in work_step(i):
            tp.apply(e)
            scans.apply(e)
    assert tp.state.summary_covers_through != folded_before  # it folded, without walking plan or tasks
    summary = tp.state.summary
    assert summary is not None and summary["next_action"] in ("s2008", "s2009")  # the one running: its id
    assert summary == scans.state.summary


def test_an_index_built_from_a_restored_checkpoint_continues_exactly_as_the_live_one() -> None:
    config = PairingConfig(compact_window_tokens=SMALL)
    live = ThreadProcessor.new("t1", config)
    events = []
    for i in range(60):
        events.append(ev(f"p{i}", "plan", {"steps": [{"step_id": f"s{i % 7}", "status": STATUSES[i % 5]},
                                                     {"step_id": f"s{(i + 3) % 7}", "status": "done"}]}, 3 * i))  # fmt: skip
        events.append(ev(f"k{i}", "task", {"task_id": f"t{i % 3}", "status": STATUSES[(i + 1) % 5]}, 3 * i + 1))
        events.append(ev(f"m{i}", "message", {"role": "assistant", "text": "maybe " * 40}, 3 * i + 2))
    for e in events[:90]:
        live.apply(e)
    assert live.memo.work is not None
    later = restored(live, config)
    for e in events[90:]:
        live.apply(e)
        later.apply(e)
        assert later.snapshot() == live.snapshot()
    assert later.memo.work is not None

