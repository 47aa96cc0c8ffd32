"""Property-based tests (hypothesis) of the promises of SPEC §3 over random sessions."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentlog.processors.context import build_units
from agentlog.processors.pipeline import MemorySeen, Pipeline, Record
from tests.helpers import raw

CALL_IDS = ["c1", "c2", "c3", "c4"]
TURNS = [None, "T1", "T2"]


@st.composite
def sessions(draw: st.DrawFn, max_size: int = 40) -> list[bytes]:
    n = draw(st.integers(1, max_size))
    out: list[bytes] = []
    t = 0.0
    for i in range(n):
        t += draw(st.sampled_from([0.5, 5.0, 40.0, 700.0]))
        turn = draw(st.sampled_from(TURNS))
        extra = {"turn_id": turn} if turn else {}
        kind = draw(st.sampled_from(["call", "result", "message", "turn_end", "plan", "task", "file",
                                     "approval", "decision", "switch", "progress"]))  # fmt: skip
        cid = draw(st.sampled_from(CALL_IDS))
        eid = f"e{i}"
        if kind == "call":
            out.append(raw(eid, "tool_call", {"call_id": cid, "tool_name": "bash"}, t, **extra))
        elif kind == "result":
            status = draw(st.sampled_from(["ok", "error", "timeout"]))
            out.append(raw(eid, "tool_result", {"call_id": cid, "output": "o", "status": status}, t, **extra))
        elif kind == "progress":
            out.append(raw(eid, "tool_progress", {"call_id": cid, "text": "p"}, t, **extra))
        elif kind == "message":
            out.append(raw(eid, "message", {"role": draw(st.sampled_from(["user", "assistant"])), "text": "m"}, t, **extra))
        elif kind == "turn_end":
            out.append(raw(eid, "turn_end", {}, t, **extra))
        elif kind == "switch":
            out.append(raw(eid, "window_switch", {"new_window_id": f"w{i}"}, t))
        elif kind in ("plan", "task"):
            status = draw(st.sampled_from(["pending", "running", "done", "failed"]))
            if kind == "plan":
                out.append(raw(eid, "plan", {"steps": [{"step_id": cid, "status": status}]}, t))
            else:
                out.append(raw(eid, "task", {"task_id": cid, "status": status}, t))
        elif kind == "file":
            out.append(raw(eid, "file_change", {"path": f"{cid}.py", "change": "modified",
                                                "confirmed": draw(st.booleans())}, t))  # fmt: skip
        elif kind == "approval":
            out.append(raw(eid, "approval_request", {"approval_id": cid, "action": "x"}, t))
        else:
            out.append(raw(eid, "approval_decision", {"approval_id": cid, "decision": "approved"}, t))
    return out


def process(records: list[bytes]) -> Pipeline:
    pipeline = Pipeline(MemorySeen())
    pipeline.process([Record(0, i, r) for i, r in enumerate(records)])
    return pipeline


def content(pipeline: Pipeline) -> tuple:
    """A thread's state and pairing, without the source positions it was built from."""
    snapshot = pipeline.thread("t1").snapshot()
    return snapshot.state, snapshot.pairing


PROPS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPS
@given(sessions())
def test_any_event_sequence_applied_twice_gives_the_same_state_as_once(records: list[bytes]) -> None:
    once = process(records)
    twice = Pipeline(MemorySeen())
    twice.process([Record(0, i, r) for i, r in enumerate(records)])
    twice.process([Record(0, i, r) for i, r in enumerate(records)])
    assert twice.threads["t1"].snapshot() == once.threads["t1"].snapshot()


@PROPS
@given(sessions(), st.data())
def test_duplicates_interleaved_anywhere_change_nothing(records: list[bytes], data: st.DataObject) -> None:
    dup = data.draw(st.sampled_from(records))
    pos = data.draw(st.integers(records.index(dup) + 1, len(records)))
    with_dup = records[:pos] + [dup] + records[pos:]
    assert content(process(with_dup)) == content(process(records))


@PROPS
@given(sessions(), st.data())
def test_state_rebuilt_from_the_log_equals_the_live_state(records: list[bytes], data: st.DataObject) -> None:
    # Live: in batches of random sizes, as a consumer sees them; rebuild: all at once.
    live = Pipeline(MemorySeen())
    i = 0
    while i < len(records):
        size = data.draw(st.integers(1, 7))
        live.process([Record(0, j, records[j]) for j in range(i, min(i + size, len(records)))])
        i += size
    assert live.threads["t1"].snapshot() == process(records).threads["t1"].snapshot()


@PROPS
@given(st.integers(0, 20), st.sampled_from(["ok", "error"]), st.floats(0.0, 29.0))
def test_a_result_before_its_call_within_grace_pairs_as_if_in_order(
    gap: int, status: str, early_by: float
) -> None:
    call_b = raw("e1", "tool_call", {"call_id": "c1", "tool_name": "bash"}, 100.0)
    result_b = raw("e2", "tool_result", {"call_id": "c1", "output": "o", "status": status}, 100.0 + gap)
    in_order = process([call_b, result_b])
    swapped = process([raw("e2", "tool_result", {"call_id": "c1", "output": "o", "status": status},
                           100.0 - early_by), call_b])  # fmt: skip
    a = in_order.threads["t1"].state
    b = swapped.threads["t1"].state
    assert a.pending_calls == b.pending_calls == {}
    assert [f.status for f in a.failures] == [f.status for f in b.failures]


@PROPS
@given(sessions())
def test_no_context_visible_unpaired_call_ever(records: list[bytes]) -> None:
    pipeline = process(records)
    tp = pipeline.threads["t1"]
    from agentlog.processors.validation import validate

    events = [validate(r) for r in records]
    seen: set[str] = set()
    unique = [e for e in events if not (e.event_id in seen or seen.add(e.event_id))]
    for unit in build_units(unique, set(tp.pairer.state.orphans), 4000):
        calls = [c["id"] for m in unit.messages for c in m.get("tool_calls", [])]
        answered = [m["tool_call_id"] for m in unit.messages if m["role"] == "tool"]
        assert sorted(calls) == sorted(answered)
        for m in unit.messages:
            assert m["role"] != "tool" or m["tool_call_id"] in calls


@PROPS
@given(sessions(), st.data())
def test_a_redelivery_after_state_was_saved_but_not_the_dedup_ids_or_the_offset_changes_nothing(
    records: list[bytes], data: st.DataObject
) -> None:
    # A worker saved thread state through offset k, then died before its dedup ids and
    # its source offset (j <= k) were saved: its successor re-reads records j.. again.
    k = data.draw(st.integers(0, len(records)))
    j = data.draw(st.integers(0, k))
    crashed = Pipeline(MemorySeen())
    crashed.process([Record(0, i, r) for i, r in enumerate(records[:k])])
    saved = {t: tp.snapshot().model_copy(deep=True) for t, tp in crashed.threads.items()}
    committed = Pipeline(MemorySeen())
    committed.process([Record(0, i, r) for i, r in enumerate(records[:j])])
    successor = Pipeline(committed.seen, saved.get)
    successor.process([Record(0, i, records[i]) for i in range(j, len(records))])
    assert content(successor) == content(process(records))


@PROPS
@given(sessions(), st.randoms(use_true_random=False))
def test_the_pairers_expiry_skip_hint_never_changes_a_pair_even_with_event_time_out_of_order(
    records: list[bytes], rng: random.Random
) -> None:
    rng.shuffle(records)  # event time now jumps back and forth
    hinted = Pipeline(MemorySeen())
    hinted_pairs = [p for i, r in enumerate(records) for p in hinted.process([Record(0, i, r)]).pairs]
    scanning = Pipeline(MemorySeen())
    scanning_pairs = []
    for i, r in enumerate(records):
        for tp in scanning.threads.values():
            tp.pairer._next_deadline_ms = float("-inf")  # the reference scans before every event
        scanning_pairs.extend(scanning.process([Record(0, i, r)]).pairs)
    assert hinted_pairs == scanning_pairs
    assert content(hinted) == content(scanning)
