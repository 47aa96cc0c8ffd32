"""A small agent loop on agentlog's Python client, runnable as is (no network, no API key):
a scripted "model" fixes a failing test with tools, reading its context for each turn from
agentlog, and an analyst then searches the thread and queries the tool calls with SQL.

    python examples/agent_loop.py [DATA_DIR]     # default: a temporary directory
    python examples/agent_loop.py http://127.0.0.1:8787   # a running `agentlog run`
                                                 # (its token from AGENTLOG_API_TOKEN)

Swap ``ScriptedModel`` for a real chat API: ``context.messages`` is ready to send.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from agentlog import Client

# -- the world the agent acts on: a tiny repository in memory -------------------------------

FILES = {"app/login.py": "def login(session):\n    return session['user']\n"}


def run_tests(k: str) -> tuple[str, str, int]:
    """(output, status, exit code) of ``pytest -k k`` on ``FILES``."""
    if "session.get('user')" in FILES["app/login.py"]:
        return f"1 passed ({k})", "ok", 0
    return f"FAILED tests/test_login.py::test_{k} - KeyError: 'user'", "error", 1


def read_file(path: str) -> tuple[str, str, int]:
    return FILES[path], "ok", 0


def edit_file(path: str, old: str, new: str) -> tuple[str, str, int]:
    FILES[path] = FILES[path].replace(old, new)
    return f"edited {path}", "ok", 0


TOOLS = {"run_tests": run_tests, "read_file": read_file, "edit_file": edit_file}


# -- the model: scripted, but it decides from the context agentlog assembles -----------------


class ScriptedModel:
    """Answers like a chat model would: tool calls, or a final text. It reads the last
    tool output from the context's messages to choose its next step."""

    def __call__(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        last_tool = next((m["content"] for m in reversed(messages) if m["role"] == "tool"), "")
        if not last_tool:
            return {"tool_calls": [("run_tests", {"k": "login"})]}
        if "KeyError" in last_tool:
            return {"tool_calls": [("read_file", {"path": "app/login.py"})]}
        if "session['user']" in last_tool:
            return {"tool_calls": [("edit_file", {"path": "app/login.py", "old": "session['user']",
                                                  "new": "session.get('user')"})]}  # fmt: skip
        if last_tool.startswith("edited"):
            return {"tool_calls": [("run_tests", {"k": "login"})]}
        return {"text": "Fixed: login() read session['user'] without checking; it uses session.get now."}


def agent_loop(client: Client, model: ScriptedModel, max_steps: int = 8) -> str:
    t = client.thread("fix-login", project="billing")
    t.goal("make tests/test_login.py pass")
    t.constraint("do not change the tests", constraint_id="keep-tests")
    t.user("test_login fails with a KeyError; please fix it")
    for _step in range(max_steps):
        context = t.context(budget=4000)  # what the model sees this turn
        reply = model(context.messages)
        if "text" in reply:
            t.assistant(reply["text"])
            t.end_turn()
            return str(reply["text"])
        for name, args in reply["tool_calls"]:
            with t.tool_call(name, args) as call:  # latency measured; an exception becomes an error result
                output, status, exit_code = TOOLS[name](**args)
                call.result(output, status=status, exit_code=exit_code)
            if name == "edit_file":
                t.file_changed(args["path"])
    raise RuntimeError("the agent did not finish")


def main(target: str | Path) -> None:
    with Client(target) as client:
        answer = agent_loop(client, ScriptedModel())
        print("agent:", answer)
        reviewer = client.thread("fix-login").spawn("fix-login-review", role="reviewer")
        reviewer.user("review the change to app/login.py")
        reviewer.exit("done", summary="the fix is minimal and correct")
        state = client.state("fix-login")
        print("files changed:", [f["path"] for f in state.files])
        print("sub-agents:", [(a["agent_id"], a["summary"]) for a in state.agents])
        hits = client.search("KeyError", thread_id="fix-login").hits
        print("search KeyError:", [(h.kind, h.tool_name) for h in hits])
        rows = client.sql("SELECT tool_name, status, count() AS calls FROM tool_calls FINAL "
                          "WHERE thread_id = 'fix-login' GROUP BY tool_name, status ORDER BY tool_name, status")  # fmt: skip
        for row in rows.records():
            print(f"sql: {row['tool_name']} {row['status']} x{row['calls']}")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])  # a str: Path() would turn a server URL into a folder "http:"
    else:
        with tempfile.TemporaryDirectory(prefix="agentlog-example-") as tmp:
            main(Path(tmp))
