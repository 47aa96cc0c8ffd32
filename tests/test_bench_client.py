"""The client benchmark (`agentlog bench --only client`) runs at a small size and prints
both sides' throughput and per-event cost; the 1.2x bar is the benchmark's to show on a
quiet machine, not a unit test's."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path


def test_the_client_benchmark_prints_events_per_second_and_per_event_cost_of_both_sides(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTLOG_")}
    done = subprocess.run([sys.executable, "-m", "agentlog", "bench", "--only", "client", "--client-events", "600"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    figures = {}
    for side in ("JSON lines by hand", "agentlog.Client"):
        line = next(line for line in done.stdout.splitlines() if line.startswith(side))
        found = re.search(r": ([\d,]+) events in [\d.]+ s: ([\d,]+) events/s, ([\d.]+) µs/event", line)
        assert found, line
        figures[side] = [float(g.replace(",", "")) for g in found.groups()]
    assert all(events == 600 and rate > 0 and cost > 0 for events, rate, cost in figures.values()), figures
    assert re.search(r"client cost per event: [\d.]+x the JSON lines'", done.stdout)
