"""Read-your-writes names each event's window as the index does (found by the
cross-deployment contract test: after a window switch, events not yet indexed all said
the thread's current window)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agentlog.processors.pipeline import Pipeline, Record
from agentlog.processors.records import active_hits, windows_of
from agentlog.processors.textsearch import tokenize
from agentlog.schemas.search import SearchFilters
from tests.helpers import raw

# One step of a thread: a note, a note naming its own window, or a switch to a window.
STEP = st.one_of(
    st.just(("note", None)),
    st.sampled_from(["x1", "x2"]).map(lambda w: ("own", w)),
    st.sampled_from(["w1", "w2", "w3"]).map(lambda w: ("switch", w)),
)


def _records(steps: list[tuple[str, str | None]]) -> list[Record]:
    out = []
    for i, (what, window) in enumerate(steps):
        if what == "switch":
            data = raw(f"e{i}", "window_switch", {"new_window_id": window}, i)
        else:
            extra = {"window_id": window} if what == "own" else {}
            data = raw(f"e{i}", "message", {"role": "user", "text": f"needle {i}"}, i, **extra)
        out.append(Record(0, i, data))
    return out


@settings(max_examples=200, deadline=None)
@given(steps=st.lists(STEP, min_size=1, max_size=25), cut=st.integers(min_value=0, max_value=25))
def test_every_not_yet_indexed_event_is_named_the_window_it_was_applied_in(steps, cut) -> None:
    records = _records(steps)
    pipeline = Pipeline()
    applied = pipeline.process(records).applied
    state = pipeline.threads["t1"].state
    tail = applied[min(cut, len(applied) - 1):]  # any suffix: what the index cannot see yet
    got = windows_of([a.event for a in tail], state.window_id, state.closed_windows)
    assert got == [a.window_id for a in tail]


def test_a_search_of_a_just_written_thread_finds_events_in_the_window_before_a_switch() -> None:
    records = _records([("note", None), ("note", None), ("switch", "w1"), ("note", None)])
    pipeline = Pipeline()
    applied = pipeline.process(records).applied
    state = pipeline.threads["t1"].state
    events = [(a.event, a.record.offset) for a in applied] + [(applied[0].event, 0)]  # with a redelivery
    hits = active_hits(events, tokenize("needle"), SearchFilters("t1", "w0"), state.window_id, set(),
                       state.closed_windows)  # fmt: skip
    assert sorted(h.event_id for h in hits) == ["e0", "e1"]
