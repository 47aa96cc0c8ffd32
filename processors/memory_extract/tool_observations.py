"""Observations a tool result confirms, read against the call that produced it: a
version from a version command (``java -version`` -> ``openjdk version "21.0.2"``), a
file's existence from a directory listing, a test run's status from its exit and summary.
A result that failed, or a call that is not one of these, observes nothing."""

from __future__ import annotations

import posixpath
import re
import shlex
from dataclasses import dataclass
from typing import Any

from agentlog.processors.memory_extract.text import is_hostile


@dataclass(frozen=True, slots=True)
class Observation:
    key: str
    value: str


_COMMAND_ARGS = ("command", "cmd", "cmdline", "script", "shell_command", "args", "argv", "input")
_VERSION_CMD = re.compile(
    r"^\s*(?:\S*/)?(?P<tool>java|javac|python3?|node|npm|pnpm|yarn|go|rustc|cargo|ruby|gcc|g\+\+|clang|mvn|gradle|"
    r"pip3?|docker|kubectl|git|dotnet|php|perl|psql|terraform|deno|bun|swift|kotlin|scala|helm|make|cmake|uv|poetry)"
    r"(?:\s+|$)(?P<flag>-version|--version|-v|-V|version|--short)\b",
)  # fmt: skip
_VERSION = re.compile(r'(?<![\w.])v?(?:go)?(?P<v>\d+(?:\.\d+){1,3}(?:[-+][0-9A-Za-z.]+)?)(?![\w.])|"(?P<q>\d+)"')
"""A dotted version (``3.11.4``, ``v20.11.0``, ``go1.22.1``), or a quoted bare one (a GA
JDK prints ``openjdk version "17"``)."""
_TOOL_KEY = {"python3": "python", "pip3": "pip", "g++": "gcc", "javac": "java"}
_LIST_CMD = re.compile(r"^\s*(?:ls|dir|tree\s+-L\s*1|find\s+\S+\s+-maxdepth\s+1)\b(?P<args>.*)$")
_LIST_TOOLS = re.compile(r"^(?:list_?dir(?:ectory)?|list_?files|ls|glob|read_?dir)$", re.IGNORECASE)
_MODE = re.compile(r"^[-dlcbps][rwxsStT-]{9}[.+@]?$")
"""The mode column that opens an ``ls -l`` row (``-rw-r--r--``)."""
_FILE_LINE = re.compile(r"^[\w@+,.\-/]+/?$")
LISTING_SHARE = 0.8
"""At least this share of an output's lines must name files for it to be a listing."""
MAX_LISTED = 20
"""A listing names at most this many files as memory: a listing is evidence, not an inventory."""
_TEST_CMD = re.compile(
    r"^\s*(?:\S*/)?(?P<runner>pytest|py\.test|python3?\s+-m\s+pytest|npm\s+(?:run\s+)?test|pnpm\s+test|yarn\s+test|"
    r"go\s+test|cargo\s+test|mvn\s+(?:-\S+\s+)*test|gradle\s+test|\./gradlew\s+test|jest|vitest|tox|make\s+test|dotnet\s+test)"
    r"(?P<args>.*)$",
)  # fmt: skip
_FAILED = re.compile(r"\b(?:\d+\s+failed|FAILED|FAIL\b|failures?:\s*[1-9]|errors?:\s*[1-9]|\d+\s+errors?\b)", re.IGNORECASE)
_PASSED = re.compile(r"\b(?:\d+\s+passed|^ok\s|PASS\b|tests?\s+passed|all\s+tests\s+passed|BUILD SUCCESS|OK\s*\(|\bok\b)",
                     re.IGNORECASE | re.MULTILINE)  # fmt: skip


def command_of(arguments: dict[str, Any] | str) -> str:
    """The shell command a call ran, if its arguments name one."""
    if isinstance(arguments, str):
        return arguments
    for name in _COMMAND_ARGS:
        value = arguments.get(name)
        if isinstance(value, str):
            return value
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return shlex.join(value)
    return ""


def version(command: str, output: str) -> list[Observation]:
    m = _VERSION_CMD.match(command)
    found = _VERSION.search(output) if m else None
    if m is None or found is None:
        return []
    tool = _TOOL_KEY.get(m["tool"], m["tool"])
    return [Observation(f"{tool}.version", found["v"] or found["q"])]


def _listed_dir(command: str, arguments: dict[str, Any] | str) -> str:
    if isinstance(arguments, dict) and isinstance(arguments.get("path"), str):
        return arguments["path"]
    m = _LIST_CMD.match(command)
    paths = [a for a in shlex.split(m["args"]) if not a.startswith("-")] if m else []
    return paths[0] if len(paths) == 1 else "."


def listing(command: str, tool: str, arguments: dict[str, Any] | str, output: str) -> list[Observation]:
    """Files a directory listing shows exist (plain names, one per line; ``ls -l`` rows too).
    An output that is mostly something else (a log that happens to follow an ``ls``) is
    no listing: nothing from it."""
    if not (_LIST_TOOLS.match(tool) or _LIST_CMD.match(command)) or is_hostile(output):
        return []
    try:
        base = _listed_dir(command, arguments)
    except ValueError:  # unbalanced quotes: not a command we understand
        return []
    lines = [line for line in output.splitlines() if line.strip() and not line.startswith("total ")]
    names = [n for n in map(_listed_name, lines) if n]
    if len(names) < LISTING_SHARE * len(lines):
        return []
    return [Observation(f"file.{posixpath.normpath(posixpath.join(base, n.rstrip('/')))}", "exists")
            for n in names[:MAX_LISTED]]  # fmt: skip


def _listed_name(line: str) -> str | None:
    """The file a listing's line names (a plain name, or the last column of an ``ls -l`` row)."""
    parts = line.split()
    name = parts[-1] if len(parts) >= 9 and _MODE.match(parts[0]) else line.strip()
    return name if name not in (".", "..") and _FILE_LINE.match(name) else None


def test_status(command: str, output: str, ok: bool, exit_code: int | None = None) -> list[Observation]:
    """A test run's status: failed on a failure summary or exit code 1 (the runners'
    "tests failed"); passed only when the call succeeded with a passing summary and no
    failure in it. A runner that could not run (not found, a usage error) says nothing."""
    m = _TEST_CMD.match(command)
    if m is None:
        return []
    runner = re.sub(r"\W+", "_", m["runner"].split()[-1] if "-m" in m["runner"] else m["runner"]).strip("_")
    targets = [a for a in m["args"].split() if not a.startswith("-") and re.match(r"^[\w./:\-]+$", a)]
    key = f"tests.{runner}" + (f".{targets[0]}" if len(targets) == 1 else "")
    if _FAILED.search(output) or exit_code == 1:
        return [Observation(key, "failed")]
    return [Observation(key, "passed")] if ok and _PASSED.search(output) else []


def observations(tool: str, arguments: dict[str, Any] | str, output: str, ok: bool,
                 exit_code: int | None = None) -> list[Observation]:  # fmt: skip
    """What one call's result confirms (``ok``: the call succeeded, exit code 0 or none)."""
    command = command_of(arguments).strip()
    found = test_status(command, output, ok, exit_code)
    if found or not ok:
        return found
    return version(command, output) or listing(command, tool, arguments, output)


__all__ = ["MAX_LISTED", "Observation", "command_of", "listing", "observations", "test_status", "version"]
