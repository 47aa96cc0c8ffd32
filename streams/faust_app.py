"""The distributed processors: a faust-streaming app over Apache Kafka.

Agents, each a few lines around the same pure core as the embedded driver:

- ``process`` consumes ``agent.events`` in batches: dedup, pairing and reduction with
  the threads' snapshots from the ``agentlog-state`` table, rejects to
  ``agent.events.dlq``, and every applied event with its pair rows to
  ``agentlog.accepted``;
- ``log_sink`` and ``index_sink`` read ``agentlog.accepted`` in batches through their
  own plain consumers (``streams.sink_feed``), on the partitions this worker processes,
  and write the log (ClickHouse or chDB) with the pairs, and the search index; each
  commits a batch's offsets only after writing it. The writes are idempotent (events
  already logged are skipped by id, documents are upserted, pair rows are versioned), so
  at-least-once delivery gives one row per event. An unreachable index is retried with
  back-off while the log, the state and the queries carry on.

A batch's outputs are written in three steps, each delivered before the next starts:
the accepted records, then the thread snapshots (which carry the source offset they
reflect), then the dedup ids. Whatever prefix of that a crash leaves behind, the
redelivered batch repairs it: a thread skips the records its snapshot already holds
(``processors.pipeline``), ids whose snapshot was lost are applied again, and the sink
drops what it already logged. The source offsets are committed only after all three.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from typing import Any

import faust
import faust.web
import orjson
from faust.streams import _current_event
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from processors.context import BudgetTooSmall
from processors.pipeline import Pipeline, Record
from processors.thread import ThreadSnapshot
from schemas.search import time_bounds
from sinks.base import LoggedEvent, StoreError
from sinks.clickhouse import rejected_row
from streams.accepted import by_partition, chunks, read_messages, write_log
from streams.batch_producer import BatchProducer
from streams.batch_seen import BatchSeen
from streams.config import Settings
from streams.context_api import context_for
from streams.kafka_topics import ACCEPTED, DLQ, EVENTS, MAX_MESSAGE_BYTES, ensure_topics, topic, worker_group
from streams.metrics import METRICS
from streams.offset_guard import RangeReader, missing_ranges
from streams.service import NotFound
from streams.sink_feed import SinkFeed
from streams.wiring import open_log_store, open_search_index
from streams.worker_service import Unlogged, WorkerService

log = logging.getLogger("agentlog.faust")

def declare_app(settings: Settings) -> tuple[faust.App, Any, Any]:
    """The worker's faust app and its two tables (thread snapshots, dedup ids), declared
    once for the worker and for ``agentlog rebuild`` (which writes the state changelog)."""
    app = faust.App(
        worker_group(settings.kafka_namespace),
        broker=f"kafka://{settings.kafka_bootstrap}",
        broker_credentials=settings.kafka_security.faust_credentials(),
        store=settings.faust_store,
        topic_partitions=settings.partitions,
        datadir=str(settings.path("faust")),
        web_host=settings.http_host,
        web_port=settings.worker_port,
        consumer_auto_offset_reset="earliest",
        broker_session_timeout=settings.session_timeout_seconds,
        broker_heartbeat_interval=min(3.0, settings.session_timeout_seconds / 3),
        producer_max_request_size=MAX_MESSAGE_BYTES,
        consumer_max_fetch_size=MAX_MESSAGE_BYTES,
        autodiscover=False,
    )
    # Changelogs take messages as large as the other topics (a long thread's snapshot).
    changelog_config = {"max.message.bytes": str(MAX_MESSAGE_BYTES)}
    states = app.Table("agentlog-state", default=None, key_type=str, value_type=bytes,
                       partitions=settings.partitions, extra_topic_configs=changelog_config)  # fmt: skip
    seen_table = app.Table("agentlog-seen", default=None, key_type=str, value_type=bytes,
                           partitions=settings.partitions, extra_topic_configs=changelog_config)  # fmt: skip
    return app, states, seen_table


def changelog_key(app: faust.App, table: Any, key: str) -> bytes:
    """A table key as faust encodes it in the changelog (its recovery reads them back)."""
    changelog = table.changelog_topic
    return app.serializers.dumps_key(changelog.key_type, key, serializer=changelog.key_serializer)


def create_app(settings: Settings) -> faust.App:
    ns = settings.kafka_namespace
    app, states, seen_table = declare_app(settings)
    events = app.topic(topic(EVENTS, ns), key_serializer="raw", value_serializer="raw", partitions=settings.partitions)
    dlq = app.topic(topic(DLQ, ns), key_serializer="raw", value_serializer="raw")
    accepted = app.topic(topic(ACCEPTED, ns), key_serializer="raw", value_serializer="raw",
                         partitions=settings.partitions)  # fmt: skip
    written = {"processed": 0, "events": 0, "rejected": 0, "indexed": 0}

    def load(thread_id: str) -> ThreadSnapshot | None:
        raw = states.get(thread_id)
        return None if raw is None else ThreadSnapshot.model_validate_json(raw)

    # Parsed thread processors stay in memory between batches (the table holds the
    # durable copy); a rebalance may hand a thread to another worker, so it empties them.
    seen = BatchSeen(seen_table.data, settings.dedup_horizon)
    pipeline = Pipeline(seen, load, settings.pairing, settings.max_event_bytes)
    unlogged = Unlogged()
    log_store = open_log_store(settings)
    index = open_search_index(settings)
    service = WorkerService(settings, load, log_store, index, unlogged)

    # The next source offset to process per partition (streams.offset_guard).
    expected: dict[int, int] = {}
    skipped = RangeReader(settings.kafka_bootstrap or "", events.get_topic_name(), settings.kafka_security)

    # Between an assignment and the end of its table recovery the tables are incomplete:
    # queries then answer 503 (try again), never a wrong "no events for thread".
    tables = {"restored": False}
    processed: dict[int, int] = {}  # source partition -> next offset applied here

    @app.on_partitions_revoked.connect
    async def forget(_app: Any, revoked: Any, **_kwargs: Any) -> None:
        tables["restored"] = False
        pipeline.threads.clear()
        seen.forget()
        unlogged.clear()
        expected.clear()
        processed.clear()  # another worker may apply more meanwhile: re-derived from the table

    @app.on_rebalance_complete.connect
    async def restored(_app: Any, **_kwargs: Any) -> None:
        seen.forget()  # indexed before recovery ended (a health check)? read the whole table again
        tables["restored"] = True

    async def with_skipped(records: list[Record]) -> list[Record]:
        """The batch with any records faust left out before it, read from Kafka."""
        for p in {r.partition for r in records} - expected.keys():
            last = seen.last_offset(p)
            if last is not None:
                expected[p] = last + 1
        gaps = missing_ranges(expected, records)
        if not gaps:
            return records
        for p, start, end in gaps:
            log.warning("the consumer skipped %s[%d] offsets %d..%d; reading them from Kafka",
                        events.get_topic_name(), p, start, end - 1)  # fmt: skip
            records = await skipped.read(p, start, end) + records
        return sorted(records, key=lambda r: (r.partition, r.offset))

    async def caught_up(web: Any, timeout: float = 10.0) -> Any:
        """Read-your-writes: wait until every event the broker held when this was called
        has been applied here (cheap when the processor is not behind). Returns a 503
        response instead while the tables are still being restored."""
        if not tables["restored"] or app.in_recovery:
            return web.json({"error": "this worker is restoring its state tables (after a start or a rebalance); "
                                      "try again in a few seconds"}, status=503)  # fmt: skip
        source = events.get_topic_name()
        owned = [tp for tp in app.consumer.assignment() if tp.topic == source]
        if not owned:
            return None
        ends = await app.consumer.highwaters(*owned)
        for tp in owned:  # nothing processed here since (re)start: what the dedup table holds
            if tp.partition not in processed:
                # Not the consumer's position: faust fetches ahead of what its agent has
                # applied, so that could claim a record sitting in its buffers.
                last = seen.last_offset(tp.partition)
                processed[tp.partition] = 0 if last is None else last + 1
        deadline = asyncio.get_running_loop().time() + timeout
        while any(processed.get(tp.partition, 0) < end for tp, end in ends.items() if end):
            if asyncio.get_running_loop().time() > deadline:
                log.warning("answering before the processor caught up: %s behind %s", processed, ends)
                return None
            await asyncio.sleep(0.01)
        return None

    changelogs = BatchProducer(settings.kafka_bootstrap or "", settings.kafka_security)

    async def delivered(sends: list[Any]) -> None:
        """Hand every message to the producer at once, then wait until all are acked."""
        await asyncio.gather(*await asyncio.gather(*sends))

    def owned_partitions() -> list[int]:
        source = events.get_topic_name()
        return sorted(tp.partition for tp in app.consumer.assignment() if tp.topic == source)

    @app.agent(events)
    async def process(stream: faust.StreamT) -> None:
        async for taken in stream.take_events(4000, within=0.5):
            started = time.perf_counter()
            # The take buffer survives a rebalance: records of partitions handed to
            # another worker meanwhile are its to process (from its committed offset, or
            # read back by its offset guard); applying them here too would race its
            # snapshots in the changelog.
            owned = set(owned_partitions())
            batch = [e for e in taken if e.message.partition in owned]
            if len(batch) < len(taken):
                log.warning("left %d taken records of partitions now owned elsewhere", len(taken) - len(batch))
            if not batch:
                continue
            records = await with_skipped([Record(e.message.partition, e.message.offset, e.value) for e in batch])
            result = pipeline.process(records)
            last_event = {e.message.partition: e for e in batch}
            groups = by_partition(result)
            sends = [dlq.send(value=bad.value, headers=[("reason", why.reason.encode()),
                                                        ("source", f"{bad.partition}:{bad.offset}".encode())])
                     for bad, why in result.rejected]  # fmt: skip
            for p, group in groups.items():
                for i, chunk in enumerate(chunks(group["items"])):
                    body = {"items": chunk, "pairs": group["pairs"] if i == 0 else []}
                    sends.append(accepted.send(value=orjson.dumps(body), partition=p))
            await delivered(sends)
            unlogged.add(LoggedEvent(a.event.event_id, a.event.thread_id, a.record.value, a.record.partition,
                                     a.record.offset) for a in result.applied)  # fmt: skip
            # The table stores are partitioned like the source: write each partition's
            # keys as if from one of its events (what a faust table write inside stream
            # iteration would use); the changelog gets them as one batch per partition.
            futures = []
            for p, group in groups.items():
                token = _current_event.set(weakref.ref(last_event[p]))
                try:
                    messages = []
                    for thread_id in group["threads"]:
                        value = pipeline.threads[thread_id].snapshot().model_dump_json().encode()
                        states.data[thread_id] = value
                        messages.append((changelog_key(app, states, thread_id), value))
                finally:
                    _current_event.reset(token)
                futures += await changelogs.send(states.changelog_topic.get_topic_name(), p, messages)
            await asyncio.gather(*futures)
            futures = []
            for p, event in last_event.items():  # every partition, so its last offset is known durably
                token = _current_event.set(weakref.ref(event))
                try:
                    records = seen.batch_written(p, event.message.offset, groups[p]["ids"] if p in groups else [])
                finally:
                    _current_event.reset(token)
                futures += await changelogs.send(seen_table.changelog_topic.get_topic_name(), p,
                                                 [(changelog_key(app, seen_table, k), v) for k, v in records])  # fmt: skip
            await asyncio.gather(*futures)
            written["processed"] += len(result.applied)
            METRICS.processed(result)
            METRICS.dedup_ids.set(len(seen))
            METRICS.batch_seconds.observe(time.perf_counter() - started)
            for e in batch:
                processed[e.message.partition] = max(processed.get(e.message.partition, 0), e.message.offset + 1)

    # Two sinks on the accepted topic, each with its own committed offsets, so an index
    # outage does not hold up the log.
    group = app.conf.id  # faust's own consumer group; the sinks' groups are named after it
    feeds = {name: SinkFeed(settings.kafka_bootstrap or "", accepted.get_topic_name(), f"{group}-{name}-sink",
                              security=settings.kafka_security)
             for name in ("log", "index")}  # fmt: skip

    async def write_log_batch(batch: list[bytes]) -> None:
        items, pairs = await asyncio.to_thread(read_messages, batch)
        count = await asyncio.to_thread(write_log, log_store, items, pairs)
        unlogged.logged(item["event_id"] for item in items)
        written["events"] += count

    async def write_index_batch(batch: list[bytes]) -> None:
        # An unreachable index raises StoreError; the feed retries the batch with
        # back-off (counted in its retries) while the log and the state carry on.
        items, _pairs = await asyncio.to_thread(read_messages, batch)
        docs = [item["doc"] for item in items]
        await asyncio.to_thread(index.add, docs)
        written["indexed"] += len(docs)

    @app.on_partitions_assigned.connect
    async def follow(_app: Any, assigned: Any, **_kwargs: Any) -> None:
        for feed in feeds.values():
            feed.follow(owned_partitions())

    async def run_sink(name: str, write: Any) -> None:
        feed = feeds[name]
        await feed.start()
        feed.follow(owned_partitions())
        try:
            await feed.run(write)
        finally:
            await feed.stop()

    @app.task
    async def log_sink() -> None:
        await run_sink("log", write_log_batch)

    @app.task
    async def index_sink() -> None:
        await run_sink("index", write_index_batch)

    @app.agent(dlq)
    async def dead_letters(stream: faust.StreamT) -> None:
        async for event in stream.events():
            headers = dict(event.headers or {})
            reason = headers.get("reason", b"unknown").decode()
            m = event.message
            partition, offset = (int(x) for x in headers.get("source", f"{m.partition}:{m.offset}".encode()).split(b":"))
            log_store.append_rejected([rejected_row(event.value, reason, partition, offset, m.timestamp or 0)])
            written["rejected"] += 1
            METRICS.rejected.inc()

    async def search_here(web: Any, request: Any) -> Any:
        q = request.query
        try:
            since_ms, until_ms = time_bounds(q)
        except ValueError as error:
            return web.json({"error": str(error)}, status=400)
        result = await asyncio.to_thread(
            service.search, q.get("q", ""), q.get("thread"), q.get("kind"), q.get("tool"), q.get("window"),
            q.get("project"), q.get("after"), since_ms, until_ms, int(q.get("limit", "10")),
        )  # fmt: skip
        return web.json(result)

    search_at_owner = app.table_route(table=states, query_param="thread")(search_here)

    @app.page("/search")
    async def search(web: Any, request: Any) -> Any:
        # A thread's unindexed events live on the worker that owns it (read-your-writes).
        if request.query.get("thread") or request.query.get("after"):
            if (busy := await caught_up(web)) is not None:
                return busy
        return await (search_at_owner if request.query.get("thread") else search_here)(web, request)

    @app.page("/events/{event_id}")
    async def read(web: Any, request: Any, event_id: str) -> Any:
        try:
            return web.json(await asyncio.to_thread(service.read, event_id))
        except NotFound:
            if (busy := await caught_up(web)) is not None:  # just published? then it is applied now
                return busy
        try:
            return web.json(await asyncio.to_thread(service.read, event_id))
        except NotFound as error:
            return web.json({"error": str(error)}, status=404)

    @app.page("/threads/{thread_id}/context")
    @app.table_route(table=states, match_info="thread_id")
    async def thread_context(web: Any, request: Any, thread_id: str) -> Any:
        q = request.query
        if not q.get("budget"):
            return web.json({"error": "budget is required, e.g. ?budget=4000"}, status=400)
        if (busy := await caught_up(web)) is not None:
            return busy
        try:
            result = await asyncio.to_thread(context_for, service, thread_id, int(q["budget"]), q.get("query"),
                                             q.get("model"))  # fmt: skip
        except NotFound as error:
            return web.json({"error": str(error)}, status=404)
        except BudgetTooSmall as error:
            return web.json({"error": str(error)}, status=400)
        return web.json(result)

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

    @app.page("/events")
    class Events(faust.web.View):
        async def post(self, request: Any) -> Any:
            """Publish JSON or JSON lines to the events topic, as ``agentlog publish``."""
            report = await asyncio.to_thread(service.publish, await request.read())
            return self.json(report.as_dict())

    @app.page("/metrics")
    async def metrics(web: Any, request: Any) -> Any:
        return web.bytes(generate_latest(METRICS.registry), content_type=CONTENT_TYPE_LATEST.split(";")[0])

    @app.page("/healthz")
    async def healthz(web: Any, request: Any) -> Any:
        counts = {**written, "index_retries": feeds["index"].retries}
        return web.json({"status": "ok", "deployment": "kafka", "written": counts, "partitions": owned_partitions(),
                         "dedup_ids": len(seen)})  # fmt: skip

    @app.page("/threads/{thread_id}/state")
    @app.table_route(table=states, match_info="thread_id")
    async def thread_state(web: Any, request: Any, thread_id: str) -> Any:
        if (busy := await caught_up(web)) is not None:
            return busy
        snapshot = load(thread_id)
        if snapshot is None:
            return web.json({"error": f"no events for thread {thread_id!r}"}, status=404)
        return web.json(snapshot.state.public())

    app.conf.agentlog_log_store = log_store  # type: ignore[attr-defined]
    return app


def run_worker(settings: Settings, loglevel: str = "warn") -> int:
    """``agentlog run`` in the distributed deployment: one faust worker."""
    ensure_topics(settings.kafka_bootstrap, settings.partitions, settings.kafka_namespace,  # type: ignore[arg-type]
                  settings.kafka_security)
    app = create_app(settings)
    # The index sink logs one line per failed attempt with the reason; the client's own
    # per-request warnings would repeat it for every retry of every connection.
    logging.getLogger("opensearch").setLevel(logging.ERROR)
    worker = faust.Worker(app, loglevel=loglevel, quiet=True)
    worker.execute_from_commandline()
    return 0


__all__ = ["changelog_key", "create_app", "declare_app", "run_worker"]
