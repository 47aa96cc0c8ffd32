"""The README's Python examples run as written (in a fresh directory, with no server)."""

from __future__ import annotations

import os
import re
import shlex
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


def test_the_shell_walkthrough_on_the_sample_events_answers_what_its_comments_say(tmp_path: Path) -> None:
    usage = (ROOT / "README.md").read_text("utf-8").split("\n## Usage\n", 1)[1].split("\n## ", 1)[0]
    block = next(b for b in re.findall(r"```sh\n(.*?)```", usage, re.S) if "examples/events.jsonl" in b)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTLOG_")}
    env["AGENTLOG_DATA_DIR"] = str(tmp_path / "data")
    outputs = []
    for line in block.strip().splitlines():
        command = shlex.split(line.split("  #")[0])
        assert command[0] == "agentlog", line
        done = subprocess.run([sys.executable, "-m", "agentlog", *command[1:]], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=300)  # fmt: skip
        assert done.returncode == 0, (command, done.stderr[-2000:])
        outputs.append(done.stdout)
    published, state, search, context, sql = outputs
    assert "accepted 10, rejected 0" in published
    for shown in ("goal: fix the flaky login test", "src/auth.py modified", "pending call c3 pytest", "KeyError"):
        assert shown in state, state
    assert "login-7" in search.splitlines()[0]  # the line that reads session_ttl ranks first
    assert "Goal: fix the flaky login test" in context and "call c2: grep" in context
    # A pair is logged once its result comes (or its grace period ends): c3 is still open.
    assert [line.split() for line in sql.splitlines()[2:]] == [["c1", "|", "pytest", "|", "error"],
                                                              ["c2", "|", "grep", "|", "ok"], ["(2", "rows)"]]  # fmt: skip
