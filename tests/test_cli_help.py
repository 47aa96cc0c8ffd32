"""A newcomer learns the command line from ``--help``: every argument of every command says
what it takes, and every command that answers a query can answer as JSON."""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

from agentlog.streams.cli.parser import build_parser

QUERY_COMMANDS = ("state", "threads", "context", "search", "read", "sql", "memory", "publish", "run",
                  "rebuild")


def _commands() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_every_argument_of_every_command_has_a_help_text() -> None:
    silent = [f"{name} {action.dest}" for name, command in _commands().items() for action in command._actions
              if action.help is None]  # fmt: skip
    assert silent == []


def test_every_query_command_takes_json() -> None:
    commands = _commands()
    assert set(QUERY_COMMANDS) <= set(commands)
    for name in QUERY_COMMANDS:
        assert commands[name].parse_args(["--json", *_required(name)]).json is True, name


def _required(name: str) -> list[str]:
    return {"state": ["t"], "context": ["t", "--budget", "1"], "search": ["q"], "read": ["e"],
            "sql": ["SELECT 1"], "memory": ["status"], "publish": ["-"]}.get(name, [])  # fmt: skip


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTLOG_")}
    env["AGENTLOG_DATA_DIR"] = str(tmp_path / "data")
    return subprocess.run([sys.executable, "-m", "agentlog", *args], env=env, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip


def test_an_unknown_thread_says_where_the_thread_ids_are_listed(tmp_path: Path) -> None:
    for args in (["state", "no-such-thread"], ["context", "no-such-thread", "--budget", "500"]):
        done = _cli(tmp_path, *args)
        assert done.returncode == 1
        assert "no-such-thread" in done.stderr and "`agentlog threads` lists the threads" in done.stderr


def test_an_empty_memory_view_says_how_facts_get_there(tmp_path: Path) -> None:
    done = _cli(tmp_path, "memory", "show")
    assert done.returncode == 0, done.stderr
    assert "agentlog memory extract" in done.stdout and "agentlog memory consolidate" in done.stdout


def test_version_prints_the_installed_package_version(tmp_path: Path) -> None:
    done = _cli(tmp_path, "--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"agentlog {importlib.metadata.version('agentlog')}"


def test_memory_job_options_out_of_range_are_usage_errors_as_over_http(capsys) -> None:  # noqa: ANN001
    # A pool of 100,000 processes hung; a negative lease failed every claim, exit 0; NaN
    # reached SQLite as a NOT NULL failure with advice to check the database.
    import pytest  # noqa: PLC0415

    for argv in (["--workers", "100000"], ["--workers", "0"], ["--lease-seconds", "-1"], ["--lease-seconds", "0"],
                 ["--lease-seconds", "nan"], ["--lease-seconds", "inf"], ["--lease-seconds", "86401"]):  # fmt: skip
        with pytest.raises(SystemExit) as refused:
            build_parser().parse_args(["memory", "extract", *argv])
        assert refused.value.code == 2
        assert argv[0] in capsys.readouterr().err
    args = build_parser().parse_args(["memory", "consolidate", "--lease-seconds", "86400", "--workers", "64"])
    assert (args.lease_seconds, args.workers) == (86400.0, 64)


def test_a_memory_option_the_action_does_not_take_is_refused_naming_the_actions_that_do() -> None:
    import pytest  # noqa: PLC0415

    from agentlog.streams.cli.commands import UsageError, _check_memory_options  # noqa: PLC0415

    for argv, said in ((["show", "--reason", "x"], "--reason is for `memory revoke`"),
                       (["status", "--workers", "8"], "--workers is for `memory extract`"),
                       (["show", "e1"], "EVENT_ID is for `memory revoke`"),
                       (["consolidate", "--project", "p"], "--project is for `memory show`"),
                       (["show", "--lease-seconds", "5"], "--lease-seconds is for `memory consolidate` and `memory extract`")):  # fmt: skip
        with pytest.raises(UsageError, match=said.replace("`", ".")):
            _check_memory_options(build_parser().parse_args(["memory", *argv]))
    for argv in (["show", "--project", "p", "--key", "k"], ["revoke", "e1", "--reason", "r"],
                 ["extract", "--workers", "4", "--lease-seconds", "9"], ["consolidate", "--high-risk", "a.*"]):  # fmt: skip
        _check_memory_options(build_parser().parse_args(["memory", *argv]))


def test_an_id_the_contract_cannot_hold_is_a_usage_error_as_over_http(capsys) -> None:  # noqa: ANN001
    # Without a server, `context bad/id` answered that the thread had no events, and
    # `search x --after ../etc` was taken; the HTTP API refuses both ids (400).
    import pytest  # noqa: PLC0415

    for argv in (["context", "bad/id", "--budget", "100"], ["state", "a" * 129], ["read", "../etc"],
                 ["search", "x", "--after", "../etc"], ["memory", "revoke", "x y"], ["state", ""]):  # fmt: skip
        with pytest.raises(SystemExit) as refused:
            build_parser().parse_args(argv)
        assert refused.value.code == 2
        assert "not an id" in capsys.readouterr().err
    assert build_parser().parse_args(["state", "run-1.a:b_c"]).thread == "run-1.a:b_c"
