"""The distributed processors: a faust-streaming app over Apache Kafka.

Two agents, each a few lines around the same pure core as the embedded driver:

- ``process`` consumes ``agent.events`` one event at a time (faust tables are written
  inside stream iteration): dedup against the ``agentlog-seen`` table, pairing and
  reduction with the thread's snapshot from the ``agentlog-state`` table (both backed
  by changelog topics), rejects to ``agent.events.dlq``, and every applied event with
  its pair rows to ``agentlog.accepted``;
- ``sink`` consumes ``agentlog.accepted`` in batches and writes the log (ClickHouse or
  chDB), the pairs and the search index before the batch's offsets are committed; the
  writes are idempotent (events already logged are skipped by id, documents are
  upserted, pair rows are versioned), so at-least-once delivery gives one row per event.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from typing import Any

import faust
import faust.web
import orjson

from processors.pipeline import Applied, Pipeline, Record
from processors.records import sink_records
from processors.thread import ThreadSnapshot
from processors.validation import validate
from schemas.events import Envelope
from schemas.search import SearchFilters
from sinks.base import StoreError
from sinks.clickhouse import rejected_row
from streams.config import Settings
from streams.kafka_topics import ACCEPTED, DLQ, EVENTS, ensure_topics, topic
from streams.wiring import open_log_store, open_search_index

log = logging.getLogger("agentlog.faust")



class TableSeen:
    """``SeenIds`` over a faust table (its changelog makes dedup survive restarts)."""

    def __init__(self, table: Any) -> None:
        self.table = table

    def unseen(self, ids: Sequence[str]) -> set[str]:
        return {i for i in ids if self.table.get(i) is None}

    def add(self, ids: Iterable[str]) -> None:
        for i in ids:
            self.table[i] = b"1"


def create_app(settings: Settings) -> faust.App:
    ns = settings.kafka_namespace
    app = faust.App(
        f"agentlog-{ns}" if ns else "agentlog",
        broker=f"kafka://{settings.kafka_bootstrap}",
        store=settings.faust_store,
        topic_partitions=settings.partitions,
        datadir=str(settings.path("faust")),
        web_host=settings.http_host,
        web_port=settings.worker_port,
        consumer_auto_offset_reset="earliest",
        autodiscover=False,
    )
    events = app.topic(topic(EVENTS, ns), key_serializer="raw", value_serializer="raw", partitions=settings.partitions)
    dlq = app.topic(topic(DLQ, ns), key_serializer="raw", value_serializer="raw")
    accepted = app.topic(topic(ACCEPTED, ns), key_serializer="raw", value_serializer="raw",
                         partitions=settings.partitions)  # fmt: skip
    written = {"events": 0, "rejected": 0}
    states = app.Table("agentlog-state", default=None, key_type=str, value_type=bytes,
                       partitions=settings.partitions)  # fmt: skip
    seen = app.Table("agentlog-seen", default=None, key_type=str, value_type=bytes,
                     partitions=settings.partitions)  # fmt: skip

    def load(thread_id: str) -> ThreadSnapshot | None:
        raw = states.get(thread_id)
        return None if raw is None else ThreadSnapshot.model_validate_json(raw)

    # Parsed thread processors stay in memory between events (the table holds the durable
    # copy); a rebalance may hand a thread to another worker, so it empties the cache.
    pipeline = Pipeline(TableSeen(seen), load, settings.pairing, settings.max_event_bytes)

    @app.on_partitions_revoked.connect
    async def forget(_app: Any, revoked: Any, **_kwargs: Any) -> None:
        pipeline.threads.clear()

    @app.agent(events)
    async def process(stream: faust.StreamT) -> None:
        async for event in stream.events():
            record = Record(event.message.partition, event.message.offset, event.value)
            result = pipeline.process([record])
            for thread_id in result.touched:
                states[thread_id] = pipeline.threads[thread_id].snapshot().model_dump_json().encode()
            for bad, why in result.rejected:
                await dlq.send(value=bad.value, headers=[("reason", why.reason.encode())])
            pairs = [p.row() for p in result.pairs]
            for a in result.applied:
                await accepted.send(key=a.event.thread_id.encode(), value=orjson.dumps({
                    "raw": a.record.value.decode(), "partition": a.record.partition, "offset": a.record.offset,
                    "window_id": a.window_id, "tool_name": a.tool_name, "pairs": pairs,
                }))  # fmt: skip
                pairs = []

    log_store = open_log_store(settings)
    index = open_search_index(settings)

    @app.agent(accepted)
    async def sink(stream: faust.StreamT) -> None:
        async for batch in stream.take(2000, within=0.5):
            written["events"] += write_batch(log_store, index, [orjson.loads(v) for v in batch])

    @app.agent(dlq)
    async def dead_letters(stream: faust.StreamT) -> None:
        async for event in stream.events():
            reason = dict(event.headers or {}).get("reason", b"unknown").decode()
            m = event.message
            log_store.append_rejected([rejected_row(event.value, reason, m.partition, m.offset, m.timestamp or 0)])
            written["rejected"] += 1

    @app.page("/search")
    async def search(web: Any, request: Any) -> Any:
        q = request.query
        filters = SearchFilters(q.get("thread"), q.get("window"), q.get("kind"), q.get("tool"), q.get("project"))
        hits = await asyncio.to_thread(index.search, q.get("q", ""), filters, int(q.get("limit", "10")))
        return web.json({"query": q.get("q", ""), "hits": [asdict(h) for h in hits]})

    @app.page("/events/{event_id}")
    async def read(web: Any, request: Any, event_id: str) -> Any:
        logged = await asyncio.to_thread(log_store.get, event_id)
        if logged is None:
            return web.json({"error": f"event {event_id!r} is not in the log (yet)"}, status=404)
        return web.json({"event": orjson.loads(logged.raw), "source": "log", "offset": logged.offset})

    @app.page("/sql")
    class Sql(faust.web.View):
        async def post(self, request: Any) -> Any:
            body = orjson.loads(await request.read())
            try:
                result = await asyncio.to_thread(log_store.query, body["sql"], True)
            except StoreError as error:
                return self.json({"error": str(error)}, status=400)
            body = {"columns": result.columns, "rows": [list(r) for r in result.rows]}
            return self.bytes(orjson.dumps(body, default=str), content_type="application/json")

    @app.page("/healthz")
    async def healthz(web: Any, request: Any) -> Any:
        return web.json({"status": "ok", "deployment": "kafka", "written": written})

    @app.page("/threads/{thread_id}/state")
    @app.table_route(table=states, match_info="thread_id")
    async def thread_state(web: Any, request: Any, thread_id: str) -> Any:
        snapshot = load(thread_id)
        if snapshot is None:
            return web.json({"error": f"no events for thread {thread_id!r}"}, status=404)
        return web.json(snapshot.state.public())

    app.conf.agentlog_log_store = log_store  # type: ignore[attr-defined]
    return app


def write_batch(log_store: Any, index: Any, items: list[dict[str, Any]]) -> int:
    """Write one batch of accepted events: log rows (skipping ids already logged), pair
    rows and search documents. Runs before the batch's offsets are committed."""
    applied = []
    for item in items:
        raw = item["raw"].encode()
        event = validate(raw)
        if isinstance(event, Envelope):
            record = Record(item["partition"], item["offset"], raw)
            applied.append(Applied(event, record, item["window_id"], item["tool_name"]))
    # Skip what the log holds, and a second copy within the batch: after a crash the
    # processor may forward an event again before its dedup table recovered the first.
    seen = set(log_store.existing([a.event.event_id for a in applied])) if applied else set()

    def logged(a: Applied) -> bool:
        known = a.event.event_id in seen
        seen.add(a.event.event_id)
        return known

    rows, docs = sink_records(applied, logged)
    log_store.append_events(rows)
    log_store.upsert_pairs([p for item in items for p in item["pairs"]])
    index.add(docs)
    return len(rows)


def run_worker(settings: Settings, loglevel: str = "warn") -> int:
    """``agentlog run`` in the distributed deployment: one faust worker."""
    ensure_topics(settings.kafka_bootstrap, settings.partitions, settings.kafka_namespace)  # type: ignore[arg-type]
    app = create_app(settings)
    worker = faust.Worker(app, loglevel=loglevel, quiet=True)
    worker.execute_from_commandline()
    return 0


__all__ = ["TableSeen", "create_app", "run_worker", "write_batch"]
