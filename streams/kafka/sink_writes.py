"""The writers of ``agentlog.accepted`` batches: the log (with the pairs) and the search
index. Shared by a worker that runs its own sinks (``agentlog run``) and a sink process
(``agentlog run --role sinks``); each hands them to its ``SinkFeed``, which commits a
batch's offsets only after its writer returns."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable

from agentlog.sinks.base import LogWriter, SearchIndex
from agentlog.streams.kafka.accepted import index_guarded, read_messages, write_log_guarded

DeadLetters = Callable[[list[tuple[bytes, str]]], Awaitable[None]]


class SinkWriters:
    """``log`` and ``index``, each a feed's writer; the counts go to ``written``
    (``events``, ``indexed``), the ids the log took to ``logged``."""

    def __init__(self, log_store: LogWriter, index: SearchIndex, dead_letter: DeadLetters, written: dict[str, int],
                 logged: Callable[[Iterable[str]], None] = lambda _ids: None) -> None:  # fmt: skip
        self.log_store, self.search_index = log_store, index
        self.dead_letter = dead_letter  # records a store refuses (retrying cannot help)
        self.written = written
        self.logged = logged

    async def log(self, batch: list[bytes]) -> None:
        items, pairs = await asyncio.to_thread(read_messages, batch)
        count, refused = await asyncio.to_thread(write_log_guarded, self.log_store, items, pairs)
        await self.dead_letter(refused)
        self.logged(item.event_id for item in items)
        self.written["events"] += count

    async def index(self, batch: list[bytes]) -> None:
        # An unreachable index raises StoreUnavailable; the feed retries the batch with
        # back-off (counted in its retries) while the log and the state carry on.
        items, _pairs = await asyncio.to_thread(read_messages, batch)
        refused = await asyncio.to_thread(index_guarded, self.search_index, items)
        await self.dead_letter(refused)
        self.written["indexed"] += len(items) - len(refused)


__all__ = ["DeadLetters", "SinkWriters"]
