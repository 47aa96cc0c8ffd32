"""The README's first command: ``agentlog demo`` runs the sample workload through the whole
pipeline and reports what it shows; a second run into the same directory is refused
rather than reporting duplicates and old rejections as new."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from agentlog.streams.cli.demo import sample_session


def _demo(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTLOG_")}
    return subprocess.run([sys.executable, "-m", "agentlog", "demo", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300, check=False)  # fmt: skip


def test_the_demo_publishes_the_sample_and_a_second_run_into_its_directory_is_refused(tmp_path: Path) -> None:
    lines, info = sample_session()
    first = _demo(tmp_path, "--json", "--data-dir", "demo-data")
    assert first.returncode == 0, first.stderr[-2000:]
    shown = json.loads(first.stdout)
    published = shown["published"]
    assert published["accepted"] + published["rejected"] == len(lines)
    assert len(shown["rejected"]) == published["rejected"] > 0  # the malformed lines, each once
    assert shown["log_counts"]["distinct_ids"] == info["distinct_events"]

    again = _demo(tmp_path, "--data-dir", "demo-data")
    assert again.returncode == 1
    assert "is not empty" in again.stderr and "remove it or name another" in again.stderr
