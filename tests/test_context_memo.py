"""Context assembly remembers what it derived from the state's items (the working-state
lines, the failure groups and how they point at the window) and the redaction of memory
facts: after every event of generated threads the context is byte for byte the one assembly
with nothing remembered gives (``agentlog.processors.context``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

import agentlog.processors.context as context
from agentlog.processors.context import BudgetTooSmall, assemble
from agentlog.processors.pipeline import MemorySeen, Pipeline, Record
from agentlog.processors.public_state import PublicView
from agentlog.processors.thread import PairingConfig
from agentlog.processors.tokens import counter
from agentlog.processors.validation import validate
from agentlog.schemas.events import Envelope
from agentlog.streams.api.context_cache import ContextCache
from agentlog.streams.embedded.service import EmbeddedService
from tests.helpers import raw
from tests.test_public_state import PROPS, SECRET, sessions

BUDGETS = (60, 150, 400, 4000)
FACTS = [{"key": "db.password", "value": "hunter2", "status": "active", "flags": [], "evidence_type": "observed",
          "source_event_id": "e0"},
         {"key": "deploy.token", "value": f"use {SECRET}", "status": "stale", "flags": ["external_content"],
          "evidence_type": "observed", "source_event_id": "e1"}]  # fmt: skip


def _hits(window: list[Envelope]) -> list[dict[str, Any]]:
    """Recalled hits as recall gives them, a secret in some snippets."""
    return [{"event_id": e.event_id, "kind": e.kind, "ts": e.ts, "score": 1.0, "offset": i,
             "snippet": f"seen {e.event_id} with key {SECRET}" if i % 2 else f"seen {e.event_id}",
             "event_ids": [e.event_id]} for i, e in enumerate(window[:3])]  # fmt: skip


def _context(state: dict[str, Any], window: list[Envelope], orphans: set[str], budget: int,
             memos: dict[str, Any] | None) -> bytes:  # fmt: skip
    kept = memos or {}
    try:
        result = assemble(state, window, counter(), budget, None, orphans, _hits(window), memory=FACTS, state_redacted=True,
                          memo=kept.get("texts"), derived=kept.get("derived"), redaction_memo=kept.get("items"))  # fmt: skip
    except BudgetTooSmall as error:
        return f"too small: {error.needed}".encode()
    return orjson.dumps(result.as_dict())


@PROPS
@given(sessions(), st.integers(2, 12))
def test_a_context_after_every_event_is_the_one_assembly_with_nothing_remembered_gives(
        records: list[bytes], window_size: int) -> None:  # fmt: skip
    view = PublicView()  # as the service reads it: an unchanged item is the same dict
    memos: dict[str, Any] = {"texts": {}, "derived": {}, "items": {}}
    for tp, window, orphans in after_every_event(records, window_size):
        state = view.render(tp.state, True)
        for budget in BUDGETS:
            assert _context(state, window, orphans, budget, memos) == _context(state, window, orphans, budget, None)


def after_every_event(records: list[bytes], window_size: int) -> Iterator[tuple[Any, list[Envelope], set[str]]]:
    """The thread after each record (its processor's thread), its newest ``window_size``
    events and its orphans."""
    pipeline = Pipeline(MemorySeen(), config=PairingConfig(compact_window_tokens=200))
    events: list[Envelope] = []
    for i, record in enumerate(records):
        pipeline.process([Record(0, i, record)])
        event = validate(record)
        if isinstance(event, Envelope):
            events.append(event)
        tp = pipeline.thread("t1")
        yield tp, events[-window_size:], set(tp.pairer.state.orphans)


def _plan_state(steps: list[dict[str, Any]]) -> tuple[Pipeline, PublicView]:
    pipeline = Pipeline(MemorySeen())
    pipeline.process([Record(0, 0, raw("e0", "plan", {"steps": steps})), Record(0, 1, raw("e1", "goal", {"text": "x"}, 1.0))])
    return pipeline, PublicView()


def test_a_long_plan_s_lines_are_made_again_only_when_one_of_its_steps_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[int] = []
    plan_lines = context._plan_lines
    monkeypatch.setattr(context, "_plan_lines", lambda state: made.append(1) or plan_lines(state))
    steps = [{"step_id": f"s{i}", "text": f"step {i}", "status": "running"} for i in range(300)]
    pipeline, view = _plan_state(steps)
    derived: dict[Any, Any] = {}

    def lines() -> bytes:
        state = view.render(pipeline.thread("t1").state, True)
        return _context(state, [], set(), 4000, {"derived": derived})

    first, again = lines(), lines()
    assert made == [1] and again == first  # the same items: remembered
    pipeline.process([Record(0, 2, raw("e2", "plan", {"steps": [{"step_id": "s299", "status": "done"}]}, 2.0))])
    changed = lines()
    assert made == [1, 1] and changed != first and ": 1 finished," in changed.decode()


def test_a_failure_points_at_the_window_only_while_the_window_shows_its_output() -> None:
    output = "ERROR: the disk on /var is full, writes refused " * 6
    records = [raw("g", "goal", {"text": "ship"}), raw("c1", "tool_call", {"call_id": "c1", "tool_name": "bash"}, 1.0),
               raw("r1", "tool_result", {"call_id": "c1", "status": "error", "output": output}, 2.0)]  # fmt: skip
    records += [raw(f"m{i}", "message", {"role": "assistant", "text": f"note {i}"}, 3.0 + i) for i in range(4)]
    pipeline = Pipeline(MemorySeen())
    pipeline.process([Record(0, i, r) for i, r in enumerate(records)])
    state = PublicView().render(pipeline.thread("t1").state, True)
    events = [e for r in records if isinstance(e := validate(r), Envelope)]
    memos: dict[str, Any] = {"derived": {}}
    shown = []
    for window in (events[1:], events[3:], events[1:]):  # the failed output in, out, in again
        got = _context(state, window, set(), 4000, memos)
        assert got == _context(state, window, set(), 4000, None)
        shown.append("output in the conversation below (r1)" in got.decode())
    assert shown == [True, False, True]


def test_events_recall_reads_at_once_are_those_it_reads_one_by_one(service: EmbeddedService) -> None:
    lines = [raw(f"e{i}", "message", {"role": "user", "text": f"step {i}, key {SECRET}"}, float(i)) for i in range(6)]
    service.publish(b"\n".join([*lines, lines[2]]))  # a redelivery: the first copy is the event
    service.catch_up()
    ids = ["e4", "missing", "e2", "e0", "e2"]
    one_by_one = {i: service.read_event(i) for i in ids}
    assert service.read_events(ids) == one_by_one and one_by_one["missing"] is None
    cache = ContextCache()
    assert cache.read_events(service, ids) == one_by_one
    assert set(cache.events) == {"e4", "e2", "e0"}  # what was found is remembered, not the missing one
    assert cache.read_events(object(), ["e0", "e4"]) == {"e0": one_by_one["e0"], "e4": one_by_one["e4"]}
