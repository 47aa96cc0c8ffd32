"""The sink stage's encoding: each applied record's ``events`` row and search document as
JSON, as a Kafka processor puts them on the accepted topic (``sink_item``).

Encoding is most of the sink stage's work: parsing the record again, building its search
document, dumping both (about 40 us an event, against 15 us to write them). At the end of
a catch-up the processor is done and one core would sit idle while the sink stage works
through its backlog: there a group's encoding is started on helper processes while the
group before it is written (``start``, then ``items``), and this process encodes a small
share itself. Otherwise (an agent's steps, or a catch-up the processor is still working
through, which has the other core) it is encoded here when it is written.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from agentlog.processors.pipeline import Applied, Record
from agentlog.schemas.events import EVENT_ADAPTER
from agentlog.streams.embedded import parent_death
from agentlog.streams.kafka.accepted import Item, sink_item

log = logging.getLogger("agentlog.sinks")

Wanted = tuple[Record, str, "str | None"]
"""An applied record with what only the processor knew of it: its window and tool name."""

MINE = 0.3
"""The share of a group this process encodes beside its helpers: it also writes every
group, so it takes what balances its encoding and writing against theirs."""
TASK_EVENTS = 1000
"""At most this many events go to a helper at once: a helper's peak memory follows what
it holds at once (the share, its parsed events, rows and documents, both pickles), and a
group's whole share (14,000 events) took it from 52 to 250 MiB."""


def encode(wanted: Sequence[Wanted]) -> list[Item]:
    """Each record's row and document. The processor applied it, so its bytes passed every
    check: parsing is enough (about 40% of the cost of ``validate``)."""
    return [sink_item(Applied(EVENT_ADAPTER.validate_json(r.value), r, w, t)) for r, w, t in wanted]


def _encode_share(share: list[tuple[int, int, bytes, str, str | None]]) -> list[tuple[str, bytes, bytes]]:
    """A helper's share, as plain tuples (pickled both ways)."""
    return [(i.event_id, i.row, i.doc) for i in encode([(Record(p, o, v), w, t) for p, o, v, w, t in share])]


def _helper_start(parent: int) -> None:
    """A helper ends with the sink process that started it (even by SIGKILL,
    ``parent_death``), leaves ^C to the server, and may run on every core: it only works
    while the processor is idle and the sink process has taken them all (``cpu_share``);
    it keeps the sink process's lower priority."""
    if not parent_death.die_with(parent):
        os._exit(0)  # the sink process died before the signal was armed
    parent_death.watch(parent, lambda: os._exit(0))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        os.sched_setaffinity(0, range(os.cpu_count() or 1))
    except (AttributeError, OSError, ValueError):  # not Linux, or a narrower cpuset: as inherited
        pass


def helpers_for(cpus: int) -> int:
    """Helper processes on a machine with ``cpus`` cores: one fewer (this one encodes too)."""
    return max(0, cpus - 1)


def default_helpers() -> int:
    """For this machine: its cores, not this process's affinity (which ``cpu_share`` narrows
    while the sink stage keeps up)."""
    return helpers_for(os.cpu_count() or 1)


class Encoding:
    """One group's encoding under way: the helpers' shares started, this process's share
    encoded when the items are asked for."""

    def __init__(self, encoder: Encoder, mine: list[Wanted], shares: list[list[Wanted]],
                 futures: list[Future]) -> None:  # fmt: skip
        self._encoder, self._mine, self._shares, self._futures = encoder, mine, shares, futures
        self.records = [r for r, _, _ in mine] + [r for s in shares for r, _, _ in s]
        """The records, in the order of ``items``: the group's order."""

    def items(self) -> list[Item]:
        items = encode(self._mine)
        for share, future in zip(self._shares, self._futures):
            try:
                items += [Item(*i) for i in future.result()]
            except BrokenProcessPool:
                log.warning("a sink encoding helper died; its share is encoded here and another starts")
                self._encoder.drop_pool()
                items += encode(share)
        return items


class Encoder:
    """Starts groups' encodings: on ``helpers`` processes and this one when asked to share,
    else here. The helpers start with the first shared group and stay; one that dies is
    replaced at the next group, its share encoded here meanwhile."""

    def __init__(self, helpers: int) -> None:
        self.helpers = helpers
        self._pool: ProcessPoolExecutor | None = None

    def start(self, wanted: Sequence[Wanted], share: bool) -> Encoding:
        if not share or self.helpers == 0 or not wanted:
            return Encoding(self, list(wanted), [], [])
        mine = int(len(wanted) * MINE)
        rest = list(wanted[mine:])
        shares = _chunks(rest, min(TASK_EVENTS, -(-len(rest) // self.helpers)))
        try:
            pool = self._ensure_pool()
            futures = [pool.submit(_encode_share, [(r.partition, r.offset, r.value, w, t) for r, w, t in s])
                       for s in shares]  # fmt: skip
        except BrokenProcessPool:  # a helper died after the last group
            self.drop_pool()
            return Encoding(self, list(wanted), [], [])
        return Encoding(self, list(wanted[:mine]), shares, futures)

    def _ensure_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                self.helpers, initializer=_helper_start, initargs=(os.getpid(),),
                mp_context=parent_death.spawn_context(),  # spawned: never fork a process holding chDB's threads
            )  # fmt: skip
        return self._pool

    def helper_pids(self) -> list[int]:
        processes = getattr(self._pool, "_processes", None) or {}
        return [p.pid for p in processes.values() if p.pid is not None]

    def drop_pool(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


def _chunks(items: list[Wanted], size: int) -> list[list[Wanted]]:
    """``items`` in runs of ``size`` (the last shorter), in order."""
    return [items[i : i + size] for i in range(0, len(items), max(1, size))]


__all__ = ["MINE", "TASK_EVENTS", "Encoder", "Encoding", "Wanted", "default_helpers", "encode", "helpers_for"]
