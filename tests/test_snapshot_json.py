"""A checkpoint writes a busy thread's snapshot from the parts its last one kept
(``agentlog.schemas.snapshot_json``): the same bytes as pydantic's, written again only
where an entry changed."""

from __future__ import annotations

import dataclasses
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
from agentlog.schemas.state import WorkingState
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


def test_a_long_thread_s_snapshot_writes_again_only_the_runs_an_event_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    pipeline = _long_thread(3_000)
    processor = pipeline.thread("long")
    assert len(processor.state.plan) > 3 * snapshot_json.CHUNK_ITEMS  # the plan alone spans runs
    encoder = SnapshotJson()
    encoder.dumps(processor.snapshot())
    made: list[int] = []
    real_run = snapshot_json._Run

    def counted(keys: list[object], values: list[object]) -> snapshot_json._Run:
        made.append(len(keys))
        return real_run(keys, values)

    monkeypatch.setattr(snapshot_json, "_Run", counted)
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
