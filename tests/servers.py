"""Kafka and OpenSearch started for a test run with infra/launch.py, the way infra/up does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

LAUNCHED_LIST = "AGENTLOG_TEST_LAUNCHED"
"""The file naming the servers this test run started with infra/launch.py (not those CI's
infra/up gave through the environment, nor one already running): their JVMs must not
outlive pytest. A file, because with ``pytest -n`` the worker that starts a server may
finish before another stops using it: only the run's controller stops them, at its end."""
ROOT = Path(__file__).resolve().parent.parent


def launch(service: str) -> subprocess.CompletedProcess[str]:
    """``infra/launch.py up service`` (one launcher at a time: it locks), noting a server
    it started for the controller to stop."""
    proc = subprocess.run([sys.executable, str(ROOT / "infra" / "launch.py"), "up", service],
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    if proc.returncode == 0 and f"{service} already running" not in proc.stderr and os.environ.get(LAUNCHED_LIST):
        with open(os.environ[LAUNCHED_LIST], "a", encoding="utf-8") as listed:
            listed.write(service + "\n")
    return proc
