"""The crowd benchmark (`agentlog bench --only crowd`) runs end to end at a small size: it
mixes the threads' events in one data directory and times only the steps that publish a
new user question; what the figures show is the benchmark's to print, not a unit test's."""

from __future__ import annotations

from agentlog.bench.crowd import _interleaved, crowd_series, report
from agentlog.bench.step import Traffic
from agentlog.streams.cli.parser import build_parser


def test_the_threads_events_are_mixed_round_robin_each_thread_in_its_own_order() -> None:
    events = list(_interleaved([Traffic("a", seed=1), Traffic("b", seed=2)], 3))
    assert [e["thread_id"] for e in events] == ["a", "b"] * 3
    assert [e["event_id"] for e in events if e["thread_id"] == "a"] == ["a.0", "a.1", "a.2"]


def test_only_new_question_steps_are_timed_and_the_index_holds_every_thread() -> None:
    row = crowd_series(others=2, length=40, questions=3)
    assert (row["others"], row["thread_events"], row["steps"]) == (2, 40, 3)
    assert row["index_docs"] > 3 * 40  # every thread's fill, and the measured thread's steps
    assert 0 < row["p50_ms"] <= row["p99_ms"] <= row["max_ms"]
    alone = {**row, "others": 0, "p50_ms": row["p50_ms"] / 2}
    lines = report([alone, row])
    assert "among   2 other threads" in lines[1] and "2.0x the thread alone" in lines[1]
    assert "x the thread alone" not in lines[0]


def test_bench_accepts_the_crowd_section() -> None:
    assert build_parser().parse_args(["bench", "--only", "crowd"]).only == "crowd"
