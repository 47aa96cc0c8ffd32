"""The runnable example (`examples/agent_loop.py`) works end to end on the client:
publish, tool calls, context for each turn, search and an analyst query."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_agent_loop_example_fixes_the_test_from_its_contexts_then_searches_and_queries(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTLOG_")}
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "agent_loop.py"), str(tmp_path / "data")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("agent: Fixed")
    assert "files changed: ['app/login.py']" in lines
    assert "sub-agents: [('fix-login-review', 'the fix is minimal and correct')]" in lines
    assert "('tool_result', 'run_tests')" in next(line for line in lines if line.startswith("search KeyError"))
    # each step was chosen from the previous tool result, read back through the context
    assert [line for line in lines if line.startswith("sql:")] == [
        "sql: edit_file ok x1", "sql: read_file ok x1", "sql: run_tests error x1", "sql: run_tests ok x1",
    ]  # fmt: skip


def test_the_agent_loop_example_runs_against_a_server_given_its_url_and_token(
    tmp_path: Path, start_server: Callable[..., tuple[str, dict[str, str]]],
) -> None:
    url, env = start_server(AGENTLOG_API_TOKEN="example-token")
    client_env = {k: v for k, v in env.items() if not k.startswith("AGENTLOG_")}
    client_env["AGENTLOG_API_TOKEN"] = "example-token"
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "agent_loop.py"), url],
                          cwd=cwd, env=client_env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "files changed: ['app/login.py']" in done.stdout.splitlines()
    assert list(cwd.iterdir()) == []  # the URL was not taken for a data directory
