"""A newcomer learns the command line from ``--help``: every argument of every command says
what it takes, and every command that answers a query can answer as JSON."""

from __future__ import annotations

import argparse

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
