"""Issue 18's bar: memory extraction over generated en/ja/zh sessions with facts planted
by users and tools among decoys (assistant guesses, hypotheticals, questions, injected
instructions, fetched pages, forged memory lines): precision >= 0.95, recall >= 0.9."""

from __future__ import annotations

import subprocess
import sys

import orjson

from agentlog.bench import memory as bench
from agentlog.processors import memory


def test_agentlog_bench_only_memory_meets_the_precision_and_recall_bar_per_origin_and_language(tmp_path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "agentlog", "bench", "--only", "memory", "--json", "--memory-sessions", "90",
         "--memory-facts", "300", "--threads", "10"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    r = orjson.loads(out.stdout)["extraction"]
    assert r["sessions"] == 90 and r["meets_bar"] is True
    assert r["overall"]["precision"] >= bench.PRECISION_BAR
    for origin in ("user", "tool"):
        assert r["by_origin"][origin]["planted"] > 100
        assert r["by_origin"][origin]["recall"] >= bench.RECALL_BAR, origin
    for origin in ("user", "tool", "assistant", "external"):
        assert r["by_origin"][origin]["precision"] >= bench.PRECISION_BAR, origin
    for lang in ("en", "ja", "zh"):
        assert r["by_language"][lang]["recall"] >= bench.RECALL_BAR, lang
        assert r["by_language"][lang]["precision"] >= bench.PRECISION_BAR, lang
    assert r["steering_not_from_user"] == []


def test_the_benchmark_counts_a_remembered_guess_or_a_missed_fact_against_the_extractor() -> None:
    data = bench.sessions(6)
    s = data[0]
    guess = next(eid for eid, o in s.origin.items() if o == "assistant")  # a call or an assistant message
    planted = sorted(s.planted)

    def candidate(eid: str, key: str, value: str) -> memory.Candidate:
        return memory.Candidate(eid, s.thread_id, "bench", "", key, value, "user_confirmed", "2026-11-02T09:00:00Z",
                                0.0, origin="user_statement")  # fmt: skip

    perfect = bench.score(data, [candidate(*p) for d in data for p in sorted(d.planted)])
    assert perfect["overall"]["precision"] == 1.0 and perfect["overall"]["recall"] == 1.0
    worse = bench.score(data, [candidate(*p) for d in data for p in sorted(d.planted) if p != planted[0]]
                        + [candidate(guess, "deploy.branch", "release-0")])  # fmt: skip
    assert worse["overall"]["recall"] < 1.0 and worse["by_origin"]["assistant"]["precision"] == 0.0
    assert worse["false_positives"][0]["event"] == guess
