"""The Kafka deployment's queries while no worker runs, answered from the stores.

The log is the source of truth (SPEC §3: the state rebuilt from the log is the live
state), so a thread's state here is its logged events replayed through the pure
pipeline: what a worker serves once its sinks have caught up, which
``agentlog run --until-idle`` ensures. Search reads the index, ``read`` and ``sql`` the
log. Events still waiting in Kafka are not seen until a worker processes them, as with
the embedded default's stores before ``run``. ``thread_list`` replays the whole log (a
rebuild that writes nothing): correct, and as slow as the log is long.
"""

from __future__ import annotations

import time
from typing import Any

from agentlog.processors.pipeline import Pipeline, Record
from agentlog.processors.thread_list import select_rows, thread_row
from agentlog.schemas.snapshot import ThreadSnapshot
from agentlog.schemas.requests import DEFAULT_THREAD_LIMIT, thread_list_query
from agentlog.streams.api.service import NotServedHere, Progress
from agentlog.streams.config import Settings
from agentlog.streams.memory.jobs import MemoryOperations
from agentlog.streams.rebuild import REPLAY_BATCH
from agentlog.streams.wiring import open_log_store, open_search_index
from agentlog.streams.kafka.service import StoreQueries, Unlogged


class OfflineService(StoreQueries, MemoryOperations):
    """The ``Service`` of a Kafka deployment with no worker answering. Nothing is processed
    here, so ``catch_up`` and ``rebuild`` say which command does it; the memory jobs run
    here as ``agentlog memory`` runs them (they read the events topic themselves)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings, self._replayed, open_log_store(settings), open_search_index(settings), Unlogged())
        self._snapshots: dict[str, ThreadSnapshot | None] = {}

    def _replayed(self, thread_id: str) -> ThreadSnapshot | None:
        if thread_id not in self._snapshots:  # one replay per thread per command
            records = [Record(e.partition, e.offset, e.raw) for e in self.log.replay(thread_id)]
            pipeline = Pipeline(config=self.settings.pairing)
            pipeline.process(records)
            processor = pipeline.threads.get(thread_id)
            self._snapshots[thread_id] = processor.snapshot() if processor is not None else None
        return self._snapshots[thread_id]

    def thread_list(self, project: str | None = None, status: str | None = None,
                    limit: int = DEFAULT_THREAD_LIMIT) -> dict[str, Any]:  # fmt: skip
        q = thread_list_query(project, status, limit)
        pipeline = Pipeline(config=self.settings.pairing)
        batch: list[Record] = []
        for logged in self.log.replay():  # paged: memory grows with threads, not events
            batch.append(Record(logged.partition, logged.offset, logged.raw))
            if len(batch) >= REPLAY_BATCH:
                pipeline.process(batch)
                batch.clear()
        pipeline.process(batch)
        now_ms = time.time() * 1000.0
        rows = (thread_row(tp.state, now_ms, self.settings.redact) for tp in pipeline.threads.values())
        return {**select_rows(rows, q.project, q.status, q.limit), "partial": False, "warnings": []}

    def catch_up(self, on_progress: Progress | None = None) -> dict[str, Any]:
        raise NotServedHere("no worker is running to process pending events: `agentlog run --until-idle` "
                            "starts one, drains the topic, and stops it")  # fmt: skip

    def rebuild(self, on_progress: Progress | None = None) -> dict[str, Any]:
        raise NotServedHere("`agentlog rebuild` rebuilds a Kafka deployment's state (with the workers stopped)")

    def health(self) -> dict[str, Any]:
        return {"status": "ok", "failing": {}, "deployment": "kafka", "worker": None,
                "log": self.log.description}  # fmt: skip


__all__ = ["OfflineService"]
