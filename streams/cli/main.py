"""The ``agentlog`` command (SPEC §7). Every query command takes ``--json``.

``parser`` declares the commands, ``commands`` runs each over the deployment's ``Service``
(chosen by ``backend``), ``render`` shows the answers; here, an error becomes its message
on stderr and an exit status."""

from __future__ import annotations

import argparse
import logging
import os
import sqlite3
import sys

from agentlog.processors.context import BudgetTooSmall
from agentlog.sinks.base import OutdatedStore, StaleToken, StoreError
from agentlog.streams.api.service import NotFound, NotServedHere, Unavailable
from agentlog.streams.cli.commands import UsageError
from agentlog.streams.cli.parser import build_parser
from agentlog.streams.cli.render import terminal_safe
from agentlog.streams.config import Settings
from agentlog.streams.embedded.datadir import diagnose
from agentlog.streams.runtime import tune_gc


def _text_arguments(args: argparse.Namespace) -> None:
    """A query given in bytes that are not UTF-8 (Python reads them as surrogates) is read
    as the HTTP API reads such a query, each bad byte as U+FFFD: the same answer with a
    server as without (the client could not send the surrogates at all)."""
    query = getattr(args, "query", None)
    if isinstance(query, str) and not query.isascii():
        try:
            raw = query.encode("utf-8", "surrogateescape")  # the bytes as given
        except UnicodeEncodeError:  # a surrogate no byte decodes to (a caller's own string)
            raw = query.encode("utf-8", "replace")
        args.query = raw.decode("utf-8", "replace")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _text_arguments(args)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s %(message)s", stream=sys.stderr,
    )  # fmt: skip
    tune_gc()
    settings: Settings | None = None
    try:
        settings = Settings.from_env()
        code = int(args.fn(args, settings))
        sys.stdout.flush()  # here, so a closed pipe is seen below rather than at exit
        return code
    except NotFound as error:
        # a mistyped thread id is the usual cause: say where the right ones are
        hint = " (`agentlog threads` lists the threads)" if args.command in ("state", "context") else ""
        print(terminal_safe(f"agentlog: not found: {error}{hint}"), file=sys.stderr)
        return 1
    except BudgetTooSmall as error:
        print(terminal_safe(f"agentlog: {error}"), file=sys.stderr)
        return 2
    except StaleToken as error:
        print(terminal_safe(f"agentlog: refused: {error}"), file=sys.stderr)
        return 3
    except BrokenPipeError:
        # The reader went away (`agentlog sql ... | head`): nothing more to say. Python's
        # documented recipe: point stdout at devnull so the exit flush cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except sqlite3.DatabaseError as error:  # a store went bad while in use
        print(terminal_safe(f"agentlog: error: {diagnose(settings, error) if settings else error}"), file=sys.stderr)
        return 1
    except OutdatedStore as error:  # a Kafka deployment's tantivy index (the embedded one heals itself)
        print(f"agentlog: error: {error}: stop the workers and run `agentlog rebuild`, which makes it again "
              "from the log", file=sys.stderr)  # fmt: skip
        return 1
    except (StoreError, Unavailable, NotServedHere, UsageError, OSError, ValueError) as error:
        print(terminal_safe(f"agentlog: error: {error}"), file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
