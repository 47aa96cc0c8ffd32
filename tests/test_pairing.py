"""SPEC §3, tool-call pairing: each sentence of the contract is a test."""

from __future__ import annotations

from agentlog.processors.thread import PairingConfig, ThreadProcessor
from agentlog.schemas.state import ToolPair
from tests.helpers import call, ev, result


def run(*events, config: PairingConfig = PairingConfig()) -> tuple[ThreadProcessor, list[ToolPair]]:
    tp = ThreadProcessor.new("t1", config)
    pairs: list[ToolPair] = []
    for e in events:
        pairs.extend(tp.apply(e))
    return tp, pairs


def latest(pairs: list[ToolPair]) -> dict[tuple[str, str], ToolPair]:
    out: dict[tuple[str, str], ToolPair] = {}
    for p in pairs:
        key = (p.call_id, p.orphan_event_id)
        if key not in out or p.version >= out[key].version:
            out[key] = p
    return out


def test_a_result_is_paired_with_the_call_of_the_same_call_id_recording_status_latency_and_size() -> None:
    _, pairs = run(call("e1", "c1", 0), result("e2", "c1", 2.5, status="error", output="héllo"))
    (pair,) = pairs
    assert (pair.call_id, pair.status, pair.synthetic) == ("c1", "error", False)
    assert pair.latency_ms == 2500.0
    assert pair.output_bytes == len("héllo".encode())
    assert (pair.call_event_id, pair.result_event_id) == ("e1", "e2")


def test_a_result_that_arrives_before_its_call_waits_for_it_within_the_grace_period() -> None:
    tp, pairs = run(result("e1", "c1", 0), call("e2", "c1", 10))
    (pair,) = pairs
    assert pair.status == "ok" and not pair.synthetic
    assert tp.state.pending_calls == {}


def test_a_result_whose_call_has_not_come_when_the_grace_period_passes_is_an_orphan() -> None:
    tp, pairs = run(result("e1", "c1", 0), ev("e2", "message", {"role": "user", "text": "x"}, 31))
    (pair,) = pairs
    assert pair.status == "orphan" and pair.result_event_id == "e1"
    assert tp.is_orphan("e1")


def test_a_result_whose_call_has_not_come_when_its_turn_ends_is_an_orphan() -> None:
    _, pairs = run(result("e1", "c1", 0, turn_id="T1"), ev("e2", "turn_end", {}, 1, turn_id="T1"))
    assert [p.status for p in pairs] == ["orphan"]


def test_a_call_without_result_when_its_turn_ends_gets_a_synthetic_missing_result() -> None:
    tp, pairs = run(call("e1", "c1", 0, turn_id="T1"), ev("e2", "turn_end", {}, 1, turn_id="T1"))
    (pair,) = pairs
    assert (pair.status, pair.synthetic) == ("missing", True)
    assert tp.state.pending_calls == {}


def test_a_turn_end_of_another_turn_leaves_the_call_open() -> None:
    tp, pairs = run(call("e1", "c1", 0, turn_id="T1"), ev("e2", "turn_end", {}, 1, turn_id="T2"))
    assert pairs == [] and "c1" in tp.state.pending_calls


def test_any_turn_end_closes_calls_that_have_no_turn_id() -> None:
    _, pairs = run(call("e1", "c1", 0), ev("e2", "turn_end", {}, 1, turn_id="T9"))
    assert [(p.status, p.synthetic) for p in pairs] == [("missing", True)]


def test_a_window_switch_gives_open_calls_a_synthetic_result() -> None:
    _, pairs = run(call("e1", "c1", 0, turn_id="T1"), ev("e2", "window_switch", {"new_window_id": "w2"}, 1))
    assert [(p.status, p.synthetic) for p in pairs] == [("missing", True)]


def test_a_call_open_longer_than_the_call_timeout_gets_a_synthetic_result() -> None:
    cfg = PairingConfig(grace_ms=30_000, call_timeout_ms=600_000)
    _, early = run(call("e1", "c1", 0), ev("e2", "message", {"role": "user", "text": "x"}, 599), config=cfg)
    assert early == []
    _, pairs = run(call("e1", "c1", 0), ev("e2", "message", {"role": "user", "text": "x"}, 601), config=cfg)
    assert [(p.status, p.synthetic) for p in pairs] == [("missing", True)]


def test_a_real_result_that_arrives_later_replaces_the_synthetic_one() -> None:
    _, pairs = run(call("e1", "c1", 0, turn_id="T1"), ev("e2", "turn_end", {}, 1, turn_id="T1"),
                   result("e3", "c1", 5, turn_id="T1"))  # fmt: skip
    final = latest(pairs)[("c1", "")]
    assert (final.status, final.synthetic, final.result_event_id) == ("ok", False, "e3")
    assert pairs[1].version > pairs[0].version


def test_the_first_terminal_result_wins_and_later_duplicates_and_progress_change_nothing() -> None:
    tp, pairs = run(call("e1", "c1", 0), result("e2", "c1", 1, status="ok"),
                    result("e3", "c1", 2, status="error"),
                    ev("e4", "tool_progress", {"call_id": "c1", "text": "90%"}, 3))  # fmt: skip
    assert len(pairs) == 1 and pairs[0].result_event_id == "e2"
    assert tp.state.failures == []


def test_a_second_call_with_a_known_call_id_does_not_reopen_it() -> None:
    tp, pairs = run(call("e1", "c1", 0), result("e2", "c1", 1), call("e3", "c1", 2))
    assert len(pairs) == 1 and tp.state.pending_calls == {}


def test_pairing_is_driven_by_event_time_so_replays_agree() -> None:
    events = [result("e1", "c9", 0), call("e2", "c1", 1, turn_id="T"), ev("e3", "turn_end", {}, 2, turn_id="T"),
              ev("e4", "message", {"role": "user", "text": "x"}, 100)]  # fmt: skip
    _, first = run(*events)
    _, second = run(*events)
    assert first == second
