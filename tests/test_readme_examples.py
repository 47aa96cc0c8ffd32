"""The README's Python examples run as written (in a fresh directory, with no server)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_python_block_of_the_readme_runs_and_prints_what_its_comments_say(tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text("utf-8"), re.S)
    assert blocks, "the README shows the Python API"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTLOG_")}
    for block in blocks:
        done = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=300)  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        promised = re.findall(r"print\(.*\)\s+# (.+)", block)
        assert done.stdout.split() == [p.strip() for p in promised]


def test_the_first_usage_section_publishes_a_tool_call_and_gets_a_context_with_the_client(tmp_path: Path) -> None:
    usage = (ROOT / "README.md").read_text("utf-8").split("\n## Usage\n", 1)[1].split("\n## ", 1)[0]
    snippet = re.findall(r"```python\n(.*?)```", usage, re.S)[0]
    assert "Client(" in snippet and "tool_call(" in snippet and ".context(" in snippet
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTLOG_")}
    done = subprocess.run([sys.executable, "-c", snippet], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == re.findall(r"print\(.*\)\s+# (.+)", snippet)
    from agentlog import Client, Settings  # what the snippet left in its data directory, read back

    with Client(tmp_path / "agent-data", settings=Settings(data_dir=tmp_path / "agent-data")) as client:
        assert client.sql("SELECT tool_name, status FROM tool_calls FINAL").rows == [["pytest", "error"]]
        assert client.sql("SELECT count() FROM events WHERE thread_id = 't1'").scalar() == 3
