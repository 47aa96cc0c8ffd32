"""A checkpoint writes a busy thread's snapshot from the parts its last one kept
(``agentlog.schemas.snapshot_json``): the same bytes as pydantic's, written again only
where an entry changed."""

from __future__ import annotations

import dataclasses
import random
import typing

import orjson
import pytest
from hypothesis import given

import agentlog.schemas.snapshot_json as snapshot_json
from agentlog.bench.step import Traffic
from agentlog.processors.pipeline import MemorySeen, Pipeline, Record
from agentlog.processors.thread import PairingConfig
from agentlog.schemas.snapshot import PairingState, ThreadSnapshot
from agentlog.schemas.snapshot_json import KEPT_PAIRING_FIELDS, KEPT_STATE_FIELDS, SnapshotJson
from agentlog.schemas.state import PendingCall, StepItem, WorkingState
from tests.test_public_state import PROPS, sessions


@PROPS
@given(sessions())
def test_a_snapshot_s_json_from_kept_runs_is_pydantic_s_byte_for_byte_after_every_event(records: list[bytes]) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(snapshot_json, "CHUNK_ITEMS", 2)  # runs of two: adds, replacements and removals cross them
        pipeline = Pipeline(MemorySeen(), config=PairingConfig(compact_window_tokens=200))
        encoder = SnapshotJson()
        for i, record in enumerate(records):
            pipeline.process([Record(0, i, record)])
            snapshot = pipeline.thread("t1").snapshot()
            written = encoder.dumps(snapshot)
            assert written == snapshot.model_dump_json().encode()
            assert ThreadSnapshot.model_validate_json(written) == snapshot


def _long_thread(events: int) -> Pipeline:
    pipeline = Pipeline(MemorySeen())
    traffic = Traffic("long", seed=3)
    pipeline.process([Record(0, i, orjson.dumps(e)) for i, e in enumerate(traffic.take(events))])
    return pipeline


def _count_runs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the runs made from now on."""
    made: list[int] = []
    real_run = snapshot_json._Run

    def counted(keys: list[object], values: list[object]) -> snapshot_json._Run:
        made.append(len(keys))
        return real_run(keys, values)

    monkeypatch.setattr(snapshot_json, "_Run", counted)
    return made


def test_a_long_thread_s_snapshot_writes_again_only_the_runs_an_event_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    pipeline = _long_thread(3_000)
    processor = pipeline.thread("long")
    assert len(processor.state.plan) > 3 * snapshot_json.CHUNK_ITEMS  # the plan alone spans runs
    encoder = SnapshotJson()
    made = _count_runs(monkeypatch)
    encoder.dumps(processor.snapshot())
    assert made == []  # a thread's first snapshot is written whole
    encoder.dumps(processor.snapshot())
    assert len(made) > 4  # the second makes the runs
    made.clear()
    assert encoder.dumps(processor.snapshot()) == processor.snapshot().model_dump_json().encode()
    assert made == []  # nothing changed: every run kept
    traffic = Traffic("long", seed=3)
    rest = list(traffic.take(3_040))[3_000:]
    pipeline.process([Record(0, 3_000 + i, orjson.dumps(e)) for i, e in enumerate(rest)])
    snapshot = processor.snapshot()
    assert encoder.dumps(snapshot) == snapshot.model_dump_json().encode()
    assert 0 < len(made) <= 6  # the plan's and the finished calls' last runs, not the whole thread


def test_the_kept_maps_hold_values_that_never_change_in_place() -> None:
    """A run is reused while its entries are the same objects: that is only the same JSON
    if no entry changes in place. A mutable item type added to a kept map fails here."""
    for cls, kept in ((WorkingState, KEPT_STATE_FIELDS), (PairingState, KEPT_PAIRING_FIELDS)):
        hints = typing.get_type_hints(cls)
        for name in kept:
            origin, (key, value) = typing.get_origin(hints[name]), typing.get_args(hints[name])
            assert origin is dict and key is str, name
            frozen = dataclasses.is_dataclass(value) and value.__dataclass_params__.frozen  # type: ignore[attr-defined]
            assert value is str or frozen, f"{cls.__name__}.{name} holds {value}, which can change in place"


def test_an_encoder_keeps_the_runs_of_a_bounded_number_of_threads() -> None:
    encoder = SnapshotJson(threads_kept=3)
    for n in range(10):
        snapshot = ThreadSnapshot(state=WorkingState(thread_id=f"t{n}"), pairing=PairingState())
        assert encoder.dumps(snapshot) == snapshot.model_dump_json().encode()
    assert list(encoder._threads) == ["t7", "t8", "t9"]


def test_a_snapshot_orjson_cannot_write_gets_pydantic_s_own_answer() -> None:
    snapshot = ThreadSnapshot(state=WorkingState(thread_id="t\ud800"), pairing=PairingState())
    with pytest.raises(Exception) as pydantic_error:
        snapshot.model_dump_json()
    with pytest.raises(type(pydantic_error.value)):
        SnapshotJson().dumps(snapshot)


def test_a_catch_up_across_more_threads_than_are_kept_makes_no_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs cost more to make than a whole write: a thread's first snapshot, and every one of
    a rotation through more threads than are kept, is written whole."""
    made = _count_runs(monkeypatch)
    encoder = SnapshotJson(threads_kept=2)
    plan = {f"s{i}": StepItem(step_id=f"s{i}", event_id=f"e{i}") for i in range(3 * snapshot_json.CHUNK_ITEMS)}
    for _ in range(3):
        for n in range(5):
            snapshot = ThreadSnapshot(state=WorkingState(thread_id=f"t{n}", plan=dict(plan)), pairing=PairingState())
            assert encoder.dumps(snapshot) == snapshot.model_dump_json().encode()
    assert made == []


def test_a_map_that_shrinks_below_a_run_lets_its_kept_runs_and_their_items_go() -> None:
    state = WorkingState(thread_id="t")
    state.pending_calls = {f"c{i}": PendingCall(call_id=f"c{i}", tool_name="t", event_id=f"e{i}", ts="x")
                           for i in range(3 * snapshot_json.CHUNK_ITEMS)}  # fmt: skip
    encoder = SnapshotJson()
    for _ in range(2):
        encoder.dumps(ThreadSnapshot(state=state, pairing=PairingState()))
    assert len(encoder._threads["t"].runs["state.pending_calls"]) == 3
    del state.pending_calls["c0"]  # one fewer: the last run shrinks, none is left over
    encoder.dumps(ThreadSnapshot(state=state, pairing=PairingState()))
    assert sorted(encoder._threads["t"].runs["state.pending_calls"]) == [0, 64, 128]
    state.pending_calls = dict(list(state.pending_calls.items())[:70])
    encoder.dumps(ThreadSnapshot(state=state, pairing=PairingState()))
    assert sorted(encoder._threads["t"].runs["state.pending_calls"]) == [0, 64]
    state.pending_calls.clear()  # every call got its result
    snapshot = ThreadSnapshot(state=state, pairing=PairingState())
    assert encoder.dumps(snapshot) == snapshot.model_dump_json().encode()
    assert "state.pending_calls" not in encoder._threads["t"].runs


@pytest.mark.parametrize("size", [63, 64, 65, 129, 1000])
def test_maps_that_grow_shrink_reorder_and_are_replaced_by_equal_items_are_written_as_pydantic_writes_them(
    size: int,
) -> None:
    rng = random.Random(size)
    state = WorkingState(thread_id="t\u2028\U0001f600\x00\"\\")
    encoder = SnapshotJson()
    for step in range(60):
        op = rng.random()
        if op < 0.4 or not state.plan:
            for _ in range(rng.randint(1, size)):
                key = f"s{rng.randint(0, 2 * size)}\u00e9"
                state.plan[key] = StepItem(step_id=key, text=rng.choice([None, "x", "\ud7ff"]), event_id="e")
        elif op < 0.6:
            for key in rng.sample(list(state.plan), k=min(len(state.plan), rng.randint(1, size))):
                del state.plan[key]
        elif op < 0.8:  # the same items in another order
            items = list(state.plan.items())
            rng.shuffle(items)
            state.plan = dict(items)
        else:  # equal items that are other objects
            state.plan = {k: dataclasses.replace(v) for k, v in state.plan.items()}
        snapshot = ThreadSnapshot(state=state, pairing=PairingState(watermark_ms=float("nan")))
        assert encoder.dumps(snapshot) == snapshot.model_dump_json().encode(), step
