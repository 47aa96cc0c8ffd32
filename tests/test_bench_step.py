"""The agent-step benchmark (issue 15: `agentlog bench --only step`) runs end to end at a
small size and reports sane figures; the timing targets are the benchmark's to show, not
a unit test's."""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from pathlib import Path

import httpx
import orjson
import pytest

from agentlog.bench.step import STEPS as DEFAULT_STEPS, INSTALL_HINT, Traffic, bench_step, langgraph_available, report, to_message
from agentlog.streams.cli.parser import build_parser
from agentlog.streams.config import Settings
from agentlog.streams.embedded.service import EmbeddedService

LENGTHS = (30, 120)
STEPS = 6


@pytest.fixture(scope="module")
def result() -> dict:
    return bench_step(LENGTHS, STEPS, langgraph_seconds=5.0)


def _check(figures: dict) -> None:
    assert figures["steps"] >= 1
    assert 0 < figures["p50_ms"] <= figures["p99_ms"] <= figures["max_ms"]
    assert figures["steps_per_s"] > 0


def test_every_length_has_both_steps_in_process_and_over_http_with_sane_percentiles(result) -> None:
    for where in ("in_process", "http"):
        assert sorted(result[where]) == sorted(LENGTHS)
        for n in LENGTHS:
            assert sorted(result[where][n]) == ["context", "state"]
            for figures in result[where][n].values():
                _check(figures)
                assert figures["steps"] == STEPS


def test_the_http_series_are_measured_by_an_agent_process_of_its_own(result) -> None:
    """Not by this process, whose heap holds the in-process deployment and LangGraph's."""
    pids = {result["http_agent_pids"][n] for n in LENGTHS}
    assert os.getpid() not in pids and len(pids) == len(LENGTHS)


def test_the_benchmark_leaves_no_agentlog_run_serving(result) -> None:
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{result['http_url']}/healthz", timeout=5)


def test_langgraph_is_measured_with_both_savers_at_every_length_when_installed(result) -> None:
    lines = report(result)
    if not langgraph_available():
        assert result["langgraph"] is None
        assert any(INSTALL_HINT in line for line in lines)
        return
    assert sorted(result["langgraph"]) == sorted(LENGTHS)
    for n in LENGTHS:
        assert sorted(result["langgraph"][n]) == ["InMemorySaver", "SqliteSaver"]
        for figures in result["langgraph"][n].values():
            _check(figures)
    ratios = [line for line in lines if line.startswith("LangGraph") and "LangGraph / agentlog" in line]
    assert len(ratios) == 2 * len(LENGTHS)


def test_the_report_names_every_length_for_both_deployments(result) -> None:
    lines = report(result)
    for n in LENGTHS:
        assert any(f"in-process, thread of {n:>6,} events" in line for line in lines)
        assert any(f"over HTTP , thread of {n:>6,} events" in line for line in lines)


def test_the_prefill_is_realistic_agent_traffic_that_the_pipeline_accepts_whole() -> None:
    events = list(Traffic("t", seed=3).take(400))
    kinds = Counter(e["kind"] for e in events)
    assert kinds["message"] and kinds["plan"] and kinds["goal"] == 1
    assert kinds["tool_call"] == kinds["tool_result"] > 0
    with tempfile.TemporaryDirectory() as tmp:
        service = EmbeddedService(Settings(data_dir=Path(tmp)))
        try:
            published = service.publish(b"\n".join(orjson.dumps(e) for e in events))
            assert (published.accepted, published.rejected) == (400, 0)
            state = service.state("t")
            assert state["event_count"] == 400
            assert not state["pending_calls"]  # every call has its result
        finally:
            service.close()


@pytest.mark.skipif(not langgraph_available(), reason=f"LangGraph not installed ({INSTALL_HINT})")
def test_langgraph_gets_the_same_events_as_messages_one_per_event() -> None:
    events = list(Traffic("t", seed=3).take(60))
    messages = [to_message(e) for e in events]
    assert [m.id for m in messages] == [e["event_id"] for e in events]
    calls = {m.tool_calls[0]["id"] for m in messages if getattr(m, "tool_calls", None)}
    results = {m.tool_call_id for m in messages if m.type == "tool"}
    assert results and results <= calls  # a result answers a call made before it


def test_the_cli_picks_lengths_and_steps_for_a_quick_run() -> None:
    args = build_parser().parse_args(["bench", "--only", "step", "--step-lengths", "200,2000", "--steps", "50"])
    assert (args.only, args.step_lengths, args.steps) == ("step", (200, 2000), 50)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "--step-lengths", "0,x"])
    for bad in ("0", "-3", "x"):  # refused at parse time, before any server starts
        with pytest.raises(SystemExit):
            build_parser().parse_args(["bench", "--only", "step", "--steps", bad])


def test_a_series_measures_a_thousand_steps_unless_told_otherwise() -> None:
    # A p99 of 200 steps is their second-slowest: one stray pause of the machine sets it.
    assert build_parser().parse_args(["bench", "--only", "step"]).steps is None and DEFAULT_STEPS == 1_000


def test_the_in_process_only_flag_measures_the_in_process_series_alone() -> None:
    args = build_parser().parse_args(["bench", "--only", "step", "--in-process-only"])
    assert args.in_process_only
    result = bench_step((60,), 3, in_process_only=True)
    assert set(result["in_process"][60]) == {"state", "context"} and result["in_process"][60]["context"]["steps"] == 3
    assert result["http"] is None and result["langgraph"] is None
    assert [line.split(",")[0] for line in report(result)] == ["agentlog in-process"]
