"""``agentlog run --role sinks``: the sinks of the Kafka deployment as a process of their own.

A sink process reads ``agentlog.accepted`` as a member of the sinks' consumer groups
(``{app}-log-sink`` and ``{app}-index-sink``, the same groups a worker that runs everything
commits to), so N sink processes share the partitions and each record is written by one
of them; it commits a batch's offsets only after writing it, and the writers are
idempotent (the log skips ids it holds, the index upserts), as in the all-in-one worker.
It also writes the dead-letter topic into ``rejected_events`` (group
``{app}-rejected-sink``). The processors (``--role processor``) learn how far the log
got from the log group's committed offsets (``agentlog.streams.kafka.sink_progress``).

It serves the same HTTP app as the other roles over ``SinkService``: ``/healthz`` (with
each sink's lag per partition), ``/metrics``, ``sql``, ``read`` and ``search`` from the
stores it writes; a thread's state and context are the processors'. With chDB as the
log, a processor reads the log through ``/sinks/log/...`` here (``RemoteLog``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import uvicorn
from aiokafka import AIOKafkaProducer
from fastapi import FastAPI
from prometheus_client import Gauge

from agentlog.processors.validation import bounded_letter
from agentlog.schemas.requests import DEFAULT_THREAD_LIMIT
from agentlog.schemas.tables import rejected_row
from agentlog.sinks.base import QueryResult
from agentlog.streams.api.guard import Policy
from agentlog.streams.api.http import build_app
from agentlog.streams.api.http_parser import BoundedHttpToolsProtocol
from agentlog.streams.api.service import NotServedHere, Progress
from agentlog.streams.config import Settings
from agentlog.streams.kafka.remote_log import event_row
from agentlog.streams.kafka.service import StoreQueries, Unlogged
from agentlog.streams.kafka.sink_feed import SinkFeed
from agentlog.streams.kafka.sink_writes import SinkWriters
from agentlog.streams.kafka.topics import ACCEPTED, DLQ, MAX_MESSAGE_BYTES, ready_to_serve, topic, worker_group
from agentlog.streams.metrics import METRICS
from agentlog.streams.wiring import open_log_store, open_search_index

log = logging.getLogger("agentlog.sinks")

SINK_LAG = Gauge("agentlog_sink_lag_records", "Records of agentlog.accepted a sink process has not written yet",
                 ["sink", "partition"], registry=METRICS.registry)  # fmt: skip
THREADS_ELSEWHERE = ("a sink process does not hold the threads' state: ask a processor "
                     "(`agentlog run` or `agentlog run --role processor`, at AGENTLOG_WORKER_PORT)")  # fmt: skip


class SinkWorker:
    """The log and index sinks and the dead-letter writer, each on its own group feed."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        ns, bootstrap = settings.kafka_namespace, settings.kafka_bootstrap or ""
        group, security = worker_group(ns), settings.kafka_security
        self.feeds = {name: SinkFeed(bootstrap, topic(ACCEPTED, ns), f"{group}-{name}-sink", security=security,
                                     group_managed=True)
                      for name in ("log", "index")}  # fmt: skip
        self.letters = SinkFeed(bootstrap, topic(DLQ, ns), f"{group}-rejected-sink", max_records=500,
                                security=security, group_managed=True, whole_records=True)  # fmt: skip
        self.dlq = topic(DLQ, ns)
        self.producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
                                         max_request_size=MAX_MESSAGE_BYTES, **security.aiokafka())  # fmt: skip
        self.log_store = open_log_store(settings)
        self.index = open_search_index(settings)
        self.written = {"events": 0, "indexed": 0, "rejected": 0}

    def health(self) -> dict[str, Any]:
        lag = {name: feed.lag() for name, feed in self.feeds.items()}
        for name, partitions in lag.items():
            for p, n in partitions.items():
                SINK_LAG.labels(name, str(p)).set(n)
        failing = {name: f.last_error for name, f in {**self.feeds, "rejected": self.letters}.items() if f.last_error}
        assigned = {name: feed.partitions() for name, feed in self.feeds.items()}
        return {"status": "degraded" if failing else "ok", "failing": failing, "deployment": "kafka",
                "role": "sinks", "written": {**self.written, "index_retries": self.feeds["index"].retries},
                "partitions": assigned,
                "lag": {name: {str(p): n for p, n in partitions.items()} for name, partitions in lag.items()}}  # fmt: skip

    async def dead_letter(self, letters: list[tuple[bytes, str]]) -> None:
        """Records a store refused (retrying cannot help): to the dead-letter topic."""
        if letters:
            sends = [await self.producer.send(self.dlq, raw, headers=[("reason", why.encode())]) for raw, why in letters]
            await asyncio.gather(*sends)

    async def write_rejected(self, batch: list[Any]) -> None:
        """Dead letters (records, with their headers) into ``rejected_events``, bounded."""
        rows = [rejected_row(*letter) for letter in batch_letters(batch, self.settings.max_event_bytes)]
        await asyncio.to_thread(self.log_store.append_rejected, rows)
        self.written["rejected"] += len(rows)
        METRICS.rejected.inc(len(rows))

    async def run(self) -> None:
        await self.producer.start()
        writers = SinkWriters(self.log_store, self.index, self.dead_letter, self.written)
        feeds = [(self.feeds["log"], writers.log), (self.feeds["index"], writers.index),
                 (self.letters, self.write_rejected)]  # fmt: skip
        tasks = [asyncio.create_task(_feed_loop(feed, write)) for feed, write in feeds]
        try:
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.producer.stop()

    def close(self) -> None:
        self.index.close()
        self.log_store.close()


def batch_letters(batch: list[Any], max_bytes: int) -> list[tuple[bytes, str, int, int, int]]:
    """``rejected_row`` arguments of dead-letter records (value, reason, source partition, offset, time)."""
    out = []
    for record in batch:
        headers = dict(record.headers or ())
        reason = headers.get("reason", b"unknown").decode()
        source = headers.get("source", f"{record.partition}:{record.offset}".encode())
        partition, offset = (int(x) for x in source.split(b":"))
        value, reason = bounded_letter(record.value, reason, max_bytes)
        out.append((value, reason, partition, offset, record.timestamp or 0))
    return out


async def _feed_loop(feed: SinkFeed, write: Any) -> None:
    await feed.start()
    try:
        await feed.run(write)
    finally:
        await feed.stop()


class SinkService:
    """The ``Service`` of a sink process: what its stores answer (the log, the index)."""

    def __init__(self, settings: Settings, sinks: SinkWorker) -> None:
        self.sinks = sinks
        self.stores = StoreQueries(settings, lambda _thread: None, sinks.log_store, sinks.index, Unlogged())

    def publish(self, data: bytes, dead_letters: Sequence[tuple[bytes, str]] = ()) -> Any:
        return self.stores.publish(data, dead_letters)

    def thread_list(self, project: str | None = None, status: str | None = None,
                    limit: int = DEFAULT_THREAD_LIMIT) -> dict[str, Any]:  # fmt: skip
        return self.stores.thread_list(project, status, limit)

    def state(self, thread_id: str) -> dict[str, Any]:
        raise NotServedHere(THREADS_ELSEWHERE)

    def context(self, thread_id: str, budget: int, query: str | None = None,
                model: str | None = None, format: str = "generic") -> dict[str, Any]:  # noqa: A002 # fmt: skip
        raise NotServedHere(THREADS_ELSEWHERE)

    def search(self, query: str, thread_id: str | None = None, kind: str | None = None,
               tool_name: str | None = None, window_id: str | None = None, project: str | None = None,
               after: str | None = None, since_ms: int | None = None, until_ms: int | None = None,
               limit: int = 10) -> dict[str, Any]:  # fmt: skip
        return self.stores.search(query, thread_id, kind, tool_name, window_id, project, after, since_ms,
                                  until_ms, limit)  # fmt: skip

    def read(self, event_id: str) -> dict[str, Any]:
        return self.stores.read(event_id)

    def sql(self, statement: str) -> QueryResult:
        return self.stores.sql(statement)

    def catch_up(self, on_progress: Progress | None = None) -> dict[str, Any]:
        raise NotServedHere("`agentlog run --until-idle` waits for the sink groups' committed offsets")

    def rebuild(self, on_progress: Progress | None = None) -> dict[str, Any]:
        raise NotServedHere("stop every worker and sink process, then run `agentlog rebuild`")

    def health(self) -> dict[str, Any]:
        return self.sinks.health()

    def memory_show(self, project: str | None = None, key: str | None = None) -> dict[str, Any]:
        raise NotServedHere(THREADS_ELSEWHERE)

    def memory_status(self) -> dict[str, Any]:
        raise NotServedHere(THREADS_ELSEWHERE)

    def memory_extract(self, lease_seconds: float = 60.0) -> dict[str, Any]:
        raise NotServedHere(THREADS_ELSEWHERE)

    def memory_consolidate(self, lease_seconds: float = 60.0, high_risk: list[str] | None = None) -> dict[str, Any]:
        raise NotServedHere(THREADS_ELSEWHERE)

    def memory_revoke(self, event_id: str, reason: str | None = None) -> dict[str, Any]:
        raise NotServedHere(THREADS_ELSEWHERE)

    def close(self) -> None:
        self.stores.close()


def sinks_app(settings: Settings, sinks: SinkWorker) -> FastAPI:
    """The HTTP app of a sink process, with the log reads a processor asks of it (``RemoteLog``)."""
    app = build_app(SinkService(settings, sinks), Policy.of(settings, settings.http_host))
    store = sinks.log_store

    @app.get("/sinks/log/event", include_in_schema=False)
    def logged(id: str) -> dict[str, Any]:  # noqa: A002 - the query parameter's name
        found = store.get(id)
        return {"event": None if found is None else event_row(found)}

    @app.get("/sinks/log/tail", include_in_schema=False)
    def tail(thread: str, after: int, limit: int) -> dict[str, Any]:
        return {"events": [event_row(e) for e in store.thread_tail(thread, after, limit)]}

    @app.get("/sinks/log/threads", include_in_schema=False)
    def threads() -> dict[str, Any]:
        return {"threads": [list(t) for t in store.thread_summaries()]}

    return app


async def serve_sinks(settings: Settings) -> None:
    sinks = SinkWorker(settings)
    server = uvicorn.Server(uvicorn.Config(sinks_app(settings, sinks), host=settings.http_host,
                                           port=settings.sinks_port, access_log=False, log_level="warning", proxy_headers=False,
                                           timeout_graceful_shutdown=5, http=BoundedHttpToolsProtocol))  # fmt: skip
    work = asyncio.create_task(sinks.run())
    try:
        await server.serve()  # until SIGTERM or SIGINT
    finally:
        work.cancel()
        await asyncio.gather(work, return_exceptions=True)
        sinks.close()


def run_sinks(settings: Settings, loglevel: str = "warn") -> int:
    """``agentlog run --role sinks``: write the log and the index until stopped."""
    if not ready_to_serve(settings):
        return 2
    logging.basicConfig(level=logging.INFO if loglevel == "info" else logging.WARNING)
    logging.getLogger("opensearch").setLevel(logging.ERROR)
    asyncio.run(serve_sinks(settings))
    return 0


__all__ = ["SinkService", "SinkWorker", "batch_letters", "run_sinks", "serve_sinks", "sinks_app"]
