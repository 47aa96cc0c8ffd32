"""``agentlog run``'s sink process leaves a CPU to the server while it keeps up, and takes
every CPU while it catches up on a backlog (``agentlog.streams.embedded.cpu_share``)."""

from __future__ import annotations

import os
import subprocess
import sys

import orjson
import pytest

_PROBE = """
import os, threading, orjson
from agentlog.streams.embedded.cpu_share import CATCH_UP_EVENTS, KEPT_UP_EVENTS, CpuShare
share = CpuShare(1)
started_before = threading.Event(); done = threading.Event()
threading.Thread(target=lambda: (started_before.set(), done.wait()), daemon=True).start()
started_before.wait()
def cpus():
    return sorted({c for t in os.listdir("/proc/self/task") for c in os.sched_getaffinity(int(t))})
seen = {"kept": cpus()}
share.follow(CATCH_UP_EVENTS - 1); seen["short backlog"] = cpus()
share.follow(CATCH_UP_EVENTS); seen["catching up"] = cpus()
share.follow(KEPT_UP_EVENTS + 1); seen["still catching up"] = cpus()
share.follow(KEPT_UP_EVENTS); seen["kept up"] = cpus()
print(orjson.dumps(seen).decode())
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2 and not os.environ.get("CI"),
                    reason="one CPU: nothing to leave to the server (in CI it runs, and fails)")
def test_the_sink_process_leaves_a_cpu_while_it_keeps_up_and_takes_every_cpu_while_it_catches_up() -> None:
    everything = sorted(os.sched_getaffinity(0))
    done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=60, check=True)
    seen = orjson.loads(done.stdout)
    kept = everything[1:]
    assert seen == {"kept": kept, "short backlog": kept, "catching up": everything,
                    "still catching up": everything, "kept up": kept}  # fmt: skip
