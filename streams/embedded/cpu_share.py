"""Which CPUs ``agentlog run``'s sink process runs on.

While the sink stage keeps up (an agent's steps: a few events per group commit), it runs
on every CPU but ``AGENTLOG_SINK_SPARE_CPUS`` of them: a group commit's threads (chDB's
insert and merge pools, tantivy's) then never take every core while a request waits, which
set the agent step's p99 over HTTP. While it catches up on a backlog (a million events
published before the server started), it may use them all, as the processor waits for
nothing then. Linux only (elsewhere nothing is restricted).
"""

from __future__ import annotations

import os

CATCH_UP_EVENTS = 20_000
"""Applied events waiting for the sinks from which the sink process takes every CPU."""
KEPT_UP_EVENTS = 2_000
"""Back under this many, it leaves the spare CPUs again."""


class CpuShare:
    """The sink process's CPUs, following its backlog (with hysteresis)."""

    def __init__(self, spare: int) -> None:
        everything = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        self.all: list[int] = everything
        self.kept: list[int] | None = everything[spare:] if 0 < spare < len(everything) else None
        self.catching_up = False
        if self.kept is not None:
            _run_on(self.kept)

    def follow(self, backlog: int) -> None:
        """Take every CPU past ``CATCH_UP_EVENTS`` waiting events, leave the spare ones
        under ``KEPT_UP_EVENTS``."""
        if self.kept is None:
            return
        if not self.catching_up and backlog >= CATCH_UP_EVENTS:
            self.catching_up = True
            _run_on(self.all)
        elif self.catching_up and backlog <= KEPT_UP_EVENTS:
            self.catching_up = False
            _run_on(self.kept)


def _run_on(cpus: list[int]) -> None:
    """Every thread of this process on ``cpus`` (a thread started later inherits its
    starter's: chDB's and tantivy's pools follow)."""
    try:
        tasks = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        tasks = [0]
    for task in tasks:
        try:
            os.sched_setaffinity(task, cpus)
        except OSError:  # a thread that ended meanwhile
            pass


__all__ = ["CATCH_UP_EVENTS", "KEPT_UP_EVENTS", "CpuShare"]
