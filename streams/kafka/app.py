"""The distributed processors: a faust-streaming app over Apache Kafka.

Tasks and agents, each a few lines around the same pure core as the embedded driver:

- ``process`` reads ``agent.events`` in batches (``agentlog.streams.kafka.event_feed``, on the
  partitions faust assigned this worker): dedup, pairing and reduction with the threads'
  snapshots from the ``agentlog-state`` table, rejects to ``agent.events.dlq``, and every
  applied event with its pair rows to ``agentlog.accepted``;
- ``log_sink`` and ``index_sink`` read ``agentlog.accepted`` in batches through their
  own plain consumers (``agentlog.streams.kafka.sink_feed``), on the partitions this worker processes,
  and write the log (ClickHouse or chDB) with the pairs, and the search index; each
  commits a batch's offsets only after writing it. The writes are idempotent (events
  already logged are skipped by id, documents are upserted, pair rows are versioned), so
  at-least-once delivery gives one row per event. An unreachable index is retried with
  back-off while the log, the state and the queries carry on.

A batch's outputs are written in three steps, each delivered before the next starts:
the accepted records, then the thread snapshots (which carry the source offset they
reflect), then the dedup ids. Whatever prefix of that a crash leaves behind, the
batch read again repairs it: a thread skips the records its snapshot already holds
(``agentlog.processors.pipeline``), ids whose snapshot was lost are applied again, and the sink
drops what it already logged. Reading resumes after the last batch the dedup table
holds, so only a batch whose three steps all landed counts as done.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import sys
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import faust
import faust.web
import orjson
from faust.streams import _current_event
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from agentlog.processors.context import BudgetTooSmall
from agentlog.processors.duplicates import conflicts
from agentlog.processors.pipeline import Pipeline, Record
from agentlog.processors.redaction import redact_if
from agentlog.schemas.snapshot import ThreadSnapshot
from agentlog.processors.validation import bounded_letter
from agentlog.schemas.requests import (ContextQuery, EventPath, SearchQuery, SqlBody, ThreadListQuery, ThreadPath,
                              parse_body, parse_path, parse_query)  # fmt: skip
from agentlog.sinks.base import LoggedEvent, StoreError
from agentlog.sinks.sql_sandbox import SqlBusy
from agentlog.schemas.tables import rejected_row
from agentlog.streams.kafka.accepted import by_partition, chunks, index_guarded, read_messages, write_log_guarded
from agentlog.streams.kafka.batch_producer import BatchProducer
from agentlog.streams.kafka.batch_seen import BatchSeen
from agentlog.streams.config import Settings
from agentlog.streams.api.context import context_for
from agentlog.streams.kafka.event_feed import EventFeed
from agentlog.streams.kafka.web_guard import body_of, guard_middleware
from agentlog.streams.api.guard import Policy, bind_refusal
from agentlog.streams.api.http import build_app
from agentlog.streams.kafka.topics import (ACCEPTED, DLQ, EVENTS, MAX_MESSAGE_BYTES, OWNERSHIP, ensure_topics, processor_group,
                                  topic, worker_group)  # fmt: skip
from agentlog.streams.metrics import METRICS
from agentlog.streams.kafka.offset_guard import Checked, OffsetGuard
from agentlog.streams.api.service import NotFound
from agentlog.streams.kafka.sink_feed import SinkFeed
from agentlog.streams.wiring import open_log_store, open_search_index
from agentlog.streams.kafka.service import Unlogged, WorkerService

log = logging.getLogger("agentlog.faust")


@contextmanager
def _writing_partition(partition: int) -> Iterator[None]:
    """Table writes in this block go to ``partition``'s store: faust's partitioned stores
    take it from the current event, which a batch read outside faust does not have."""
    mark = _PartitionMark(partition)
    token = _current_event.set(weakref.ref(mark))  # type: ignore[arg-type]
    try:
        yield
    finally:
        _current_event.reset(token)


class _PartitionMark:
    """What a store asks of the current event: ``event.message.partition``."""

    def __init__(self, partition: int) -> None:
        self.message = SimpleNamespace(partition=partition)


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
        # Listen where it is advertised (faust binds every interface by default), behind
        # the API's rules (a token beyond loopback, Host, content type, body size).
        web_bind=settings.http_host,
        web_application_options={"middlewares": [guard_middleware(Policy.of(settings, settings.http_host))],
                                 "client_max_size": settings.max_request_bytes},
        consumer_auto_offset_reset="earliest",
        broker_session_timeout=settings.session_timeout_seconds,
        broker_heartbeat_interval=min(3.0, settings.session_timeout_seconds / 3),
        producer_max_request_size=MAX_MESSAGE_BYTES,
        consumer_max_fetch_size=MAX_MESSAGE_BYTES,
        # No standby copies: when recovery of the active partitions ends, faust's memory
        # store drops every key of the other partitions, standby ones included, while the
        # standby reader goes on from its offset; promoted later, such a partition would
        # resume from there with the older keys (snapshots, dedup ids) gone. A new owner
        # reads the partition's whole changelog instead.
        table_standby_replicas=0,
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
    # faust assigns the ownership topic's partitions (never written to) and, co-partitioned
    # with them, the tables'; the event partitions of the same numbers are read by a plain
    # consumer (agentlog.streams.kafka.event_feed).
    ownership = app.topic(topic(OWNERSHIP, ns), key_serializer="raw", value_serializer="raw",
                          partitions=settings.partitions)  # fmt: skip
    event_feed = EventFeed(settings.kafka_bootstrap or "", topic(EVENTS, ns), processor_group(ns), settings.kafka_security)
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

    # From a revocation until the tables are restored nothing is applied, and queries
    # answer 503 (try again), never a wrong "no events for thread". A batch is applied
    # whole under the lock, so a revocation waits for the one in hand; each assignment is
    # a new generation, and a batch fetched under an older one is dropped.
    ready = asyncio.Event()
    applying = asyncio.Lock()
    generation = {"n": 0}
    guard = OffsetGuard()  # source partition -> next offset to apply
    processed: dict[int, int] = {}  # source partition -> next offset applied here

    def owned_partitions() -> list[int]:
        name = ownership.get_topic_name()
        return sorted(tp.partition for tp in app.consumer.assignment() if tp.topic == name)

    @app.agent(ownership)
    async def assignment(stream: faust.StreamT) -> None:
        async for _ in stream.events():  # subscribed for its partitions; nothing is sent
            pass

    @app.on_partitions_revoked.connect
    async def forget(_app: Any, revoked: Any, **_kwargs: Any) -> None:
        ready.clear()
        async with applying:
            await event_feed.follow({})
            pipeline.threads.clear()
            seen.forget()
            unlogged.clear()
            guard.reset({})
            processed.clear()

    @app.on_rebalance_complete.connect
    async def restored(_app: Any, **_kwargs: Any) -> None:
        async with applying:
            seen.forget()  # indexed before recovery ended (a health check)? read the whole table again
            positions = {}
            for p in owned_partitions():
                last = seen.last_offset(p)
                positions[p] = None if last is None else last + 1
            await event_feed.follow(positions)
            guard.reset(positions)
            processed.clear()
            processed.update({p: o or 0 for p, o in positions.items()})
            await event_feed.commit({p: o for p, o in positions.items() if o is not None})  # watchers: nothing pending
            generation["n"] += 1
            ready.set()

    def in_order(records: list[Record]) -> Checked:
        """The batch up to any gap in its partitions' offsets; the feed reads again from
        the gap (agentlog.streams.kafka.offset_guard). One consumer seeking where the table says should
        leave none: checked because a skipped record would be taken for a replay later."""
        checked = guard.check(records)
        for p, start in checked.reread.items():  # a transactional producer's markers look like this too
            log.info("offsets of %s[%d] from %d are missing; reading again from there", event_feed.topic, p, start)
            event_feed.rewind(p, start)
        for p, start in checked.recovered:
            log.error("the event feed had skipped %s[%d] from offset %d; read again", event_feed.topic, p, start)
        for p, start, end in checked.absent:
            log.info("%s[%d] offsets %d..%d are not in the topic (transaction markers, or deleted by retention); "
                     "going on from %d", event_feed.topic, p, start, end - 1, end)  # fmt: skip
        return checked

    async def caught_up(web: Any, timeout: float = 10.0, busy_when_behind: bool = False) -> Any:
        """Read-your-writes: wait until every event the broker held when this was called
        has been applied here (cheap when the processor is not behind). Returns a 503
        response instead while the tables are still being restored, and when still behind
        after ``timeout`` if ``busy_when_behind`` (else the answer goes out as it is)."""
        if not ready.is_set() or app.in_recovery:
            return web.json({"error": "this worker is restoring its state tables (after a start or a rebalance); "
                                      "try again in a few seconds"}, status=503)  # fmt: skip
        owned = owned_partitions()
        if not owned:
            return None
        ends = await event_feed.end_offsets(owned)
        deadline = asyncio.get_running_loop().time() + timeout
        while any(processed.get(p, 0) < end for p, end in ends.items() if end):
            if asyncio.get_running_loop().time() > deadline:
                if busy_when_behind:
                    return web.json({"error": "this worker has not applied every published event yet; "
                                              "try again in a few seconds"}, status=503)  # fmt: skip
                log.warning("answering before the processor caught up: %s behind %s", processed, ends)
                return None
            await asyncio.sleep(0.01)
        return None

    changelogs = BatchProducer(settings.kafka_bootstrap or "", settings.kafka_security)

    async def delivered(sends: list[Any]) -> None:
        """Hand every message to the producer at once, then wait until all are acked."""
        await asyncio.gather(*await asyncio.gather(*sends))

    def first_copy(result: Any) -> Any:
        """Where a duplicate's first copy is: this batch, accepted but not yet logged, or the log."""
        applied = {a.event.event_id: a.record.value for a in result.applied}

        def find(event_id: str) -> bytes | None:
            if event_id in applied:
                return applied[event_id]
            pending = unlogged.find(event_id)
            logged = pending if pending is not None else log_store.get(event_id)
            return None if logged is None else logged.raw

        return find

    async def apply_batch(records: list[Record], positions: dict[int, int]) -> None:
        started = time.perf_counter()
        checked = in_order(records)
        records = checked.records
        if not records:
            return
        result = pipeline.process(records)
        last_offset: dict[int, int] = {}
        for r in records:
            last_offset[r.partition] = max(last_offset.get(r.partition, -1), r.offset)
        groups = by_partition(result)
        letters = [(bad, why.reason) for bad, why in result.rejected]
        if result.duplicates:  # the same id with other content: seen, not silently dropped
            letters += await asyncio.to_thread(conflicts, result.duplicates, first_copy(result))
        sends = [dlq.send(value=bad.value, headers=[("reason", why.encode()),
                                                    ("source", f"{bad.partition}:{bad.offset}".encode())])
                 for bad, why in letters]  # fmt: skip
        for p, group in groups.items():
            for i, chunk in enumerate(chunks(group["items"])):
                body = {"items": chunk, "pairs": group["pairs"] if i == 0 else []}
                sends.append(accepted.send(value=orjson.dumps(body), partition=p))
        await delivered(sends)
        unlogged.add(LoggedEvent(a.event.event_id, a.event.thread_id, a.record.value, a.record.partition,
                                 a.record.offset) for a in result.applied)  # fmt: skip
        # The table stores are partitioned like the source: each partition's keys are
        # written as from one of its events (what a faust table write inside stream
        # iteration would use); the changelog gets them as one batch per partition.
        futures = []
        for p, group in groups.items():
            with _writing_partition(p):
                messages = []
                for thread_id in group["threads"]:
                    value = pipeline.threads[thread_id].snapshot().model_dump_json().encode()
                    states.data[thread_id] = value
                    messages.append((changelog_key(app, states, thread_id), value))
            futures += await changelogs.send(states.changelog_topic.get_topic_name(), p, messages)
        await asyncio.gather(*futures)
        futures = []
        for p, offset in last_offset.items():  # every partition, so its last offset is known durably
            with _writing_partition(p):
                entries = seen.batch_written(p, offset, groups[p]["ids"] if p in groups else [])
            futures += await changelogs.send(seen_table.changelog_topic.get_topic_name(), p,
                                             [(changelog_key(app, seen_table, k), v) for k, v in entries])  # fmt: skip
        await asyncio.gather(*futures)
        for p, offset in last_offset.items():  # markers after the last record count as applied
            processed[p] = max(processed.get(p, 0), offset + 1, positions.get(p, 0) if p not in checked.reread else 0)
        await event_feed.commit({p: processed[p] for p in last_offset})
        written["processed"] += len(result.applied)
        METRICS.processed(result)
        METRICS.dedup_ids.set(len(seen))
        METRICS.batch_seconds.observe(time.perf_counter() - started)

    @app.task
    async def process() -> None:
        await event_feed.start()
        try:
            while True:
                await ready.wait()
                fetched_in = generation["n"]
                records, positions = await event_feed.take(4000, timeout_ms=200)
                if not records:
                    continue
                async with applying:
                    if ready.is_set() and generation["n"] == fetched_in:  # else read again where the table says
                        await apply_batch(records, positions)
        finally:
            await event_feed.stop()

    # Two sinks on the accepted topic, each with its own committed offsets, so an index
    # outage does not hold up the log.
    group = app.conf.id  # faust's own consumer group; the sinks' groups are named after it
    feeds = {name: SinkFeed(settings.kafka_bootstrap or "", accepted.get_topic_name(), f"{group}-{name}-sink",
                              security=settings.kafka_security)
             for name in ("log", "index")}  # fmt: skip

    async def dead_letter(letters: list[tuple[bytes, str]]) -> None:
        """Records a sink refused (retrying cannot help): to the dead-letter topic."""
        if letters:
            await delivered([dlq.send(value=raw, headers=[("reason", why.encode())]) for raw, why in letters])

    async def write_log_batch(batch: list[bytes]) -> None:
        items, pairs = await asyncio.to_thread(read_messages, batch)
        count, refused = await asyncio.to_thread(write_log_guarded, log_store, items, pairs)
        await dead_letter(refused)
        unlogged.logged(item["event_id"] for item in items)
        written["events"] += count

    async def write_index_batch(batch: list[bytes]) -> None:
        # An unreachable index raises StoreUnavailable; the feed retries the batch with
        # back-off (counted in its retries) while the log and the state carry on.
        items, _pairs = await asyncio.to_thread(read_messages, batch)
        refused = await asyncio.to_thread(index_guarded, index, items)
        await dead_letter(refused)
        written["indexed"] += len(items) - len(refused)

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
            value, reason = bounded_letter(event.value, reason, settings.max_event_bytes)  # never whole to the column writer
            log_store.append_rejected([rejected_row(value, reason, partition, offset, m.timestamp or 0)])
            written["rejected"] += 1
            METRICS.rejected.inc()

    routing = {"known": False}

    def at_owner(**where: str) -> Any:
        """faust's ``table_route`` for the state table, once faust can tell the owner: it
        routes by its producer's metadata, which has a topic only once asked for it, and
        nothing here sends to the changelogs through that producer, so the first query
        after a start failed with a TypeError (HTTP 500)."""
        route = app.table_route(table=states, **where)

        def decorate(handler: Any) -> Any:
            routed = route(handler)

            @functools.wraps(handler)
            async def guarded(view: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
                if not routing["known"]:
                    producer = app.producer._ensure_producer()  # faust's aiokafka producer
                    await producer.partitions_for(states.changelog_topic.get_topic_name())
                    routing["known"] = True
                return await routed(view, request, *args, **kwargs)

            return guarded

        return decorate

    def checked_first(query: Any = None) -> Any:
        """Refuse a malformed thread id or query before faust routes it to the thread's
        owner (the refusal needs no owner, and no Kafka)."""

        def decorate(handler: Any) -> Any:
            @functools.wraps(handler)
            async def checked(view: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
                parse_path(ThreadPath, {"thread_id": request.match_info["thread_id"]})
                if query is not None:
                    parse_query(query, request.query.items())
                return await handler(view, request, *args, **kwargs)

            return checked

        return decorate

    async def search_here(web: Any, request: Any) -> Any:
        q = parse_query(SearchQuery, request.query.items())
        result = await asyncio.to_thread(
            service.search, q.q, q.thread, q.kind, q.tool, q.window, q.project, q.after, *q.bounds(), q.limit,
        )  # fmt: skip
        return web.json(result)

    search_at_owner = at_owner(query_param="thread")(search_here)

    @app.page("/search")
    async def search(web: Any, request: Any) -> Any:
        parse_query(SearchQuery, request.query.items())  # refused here, before any routing
        # A thread's unindexed events live on the worker that owns it (read-your-writes).
        if request.query.get("thread") or request.query.get("after"):
            if (busy := await caught_up(web)) is not None:
                return busy
        return await (search_at_owner if request.query.get("thread") else search_here)(web, request)

    @app.page("/events/{event_id}")
    async def read(web: Any, request: Any, event_id: str) -> Any:
        event_id = parse_path(EventPath, {"event_id": event_id}).event_id
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
    @checked_first(ContextQuery)
    @at_owner(match_info="thread_id")
    async def thread_context(web: Any, request: Any, thread_id: str) -> Any:
        q = parse_query(ContextQuery, request.query.items())
        if (busy := await caught_up(web)) is not None:
            return busy
        try:
            result = await asyncio.to_thread(context_for, service, thread_id, q.budget, q.query, q.model)
        except NotFound as error:
            return web.json({"error": str(error)}, status=404)
        except BudgetTooSmall as error:
            return web.json({"error": str(error)}, status=400)
        return web.json(result)

    sql_threads = ThreadPoolExecutor(max_workers=2, thread_name_prefix="analyst-sql")

    @app.page("/sql")
    class Sql(faust.web.View):
        async def post(self, request: Any) -> Any:
            sql = parse_body(SqlBody, await body_of(request, settings.max_request_bytes)).sql
            try:
                # Threads of their own, so queued analyst queries never starve the worker's.
                result = await asyncio.get_running_loop().run_in_executor(sql_threads, log_store.query, sql)
            except SqlBusy as error:
                return self.json({"error": str(error)}, status=503, headers={"Retry-After": "2"})
            except StoreError as error:
                return self.json({"error": str(error)}, status=400)
            body = {"columns": result.columns, "rows": [list(r) for r in result.rows]}
            return self.bytes(orjson.dumps(body, default=str), content_type="application/json")

    @app.page("/events")
    class Events(faust.web.View):
        async def post(self, request: Any) -> Any:
            """Publish JSON or JSON lines to the events topic, as ``agentlog publish``."""
            body = await body_of(request, settings.max_request_bytes)
            report = await asyncio.to_thread(service.publish, body)
            return self.json(report.as_dict())

    @app.page("/metrics")
    async def metrics(web: Any, request: Any) -> Any:
        return web.bytes(generate_latest(METRICS.registry), content_type=CONTENT_TYPE_LATEST.split(";")[0])

    @app.page("/healthz")
    async def healthz(web: Any, request: Any) -> Any:
        counts = {**written, "index_retries": feeds["index"].retries}
        failing = {name: feed.last_error for name, feed in feeds.items() if feed.last_error}
        return web.json({"status": "degraded" if failing else "ok", "failing": failing, "deployment": "kafka", "written": counts, "partitions": owned_partitions(),
                         "dedup_ids": len(seen)})  # fmt: skip

    @app.page("/openapi.json")
    async def openapi(web: Any, request: Any) -> Any:
        return web.json(build_app(service).openapi())  # type: ignore[arg-type]  # the routes only

    @app.page("/threads")
    async def thread_list(web: Any, request: Any) -> Any:
        q = parse_query(ThreadListQuery, request.query.items())
        if (busy := await caught_up(web)) is not None:
            return busy
        owned = list(states.data.values())  # this worker's partitions of the table, as applied
        return web.json(await asyncio.to_thread(service.thread_list, owned, q.project, q.status, q.limit))

    @app.page("/threads/{thread_id}/state")
    @checked_first()
    @at_owner(match_info="thread_id")
    async def thread_state(web: Any, request: Any, thread_id: str) -> Any:
        if (busy := await caught_up(web)) is not None:
            return busy
        snapshot = load(thread_id)
        if snapshot is None:
            # Only a processor that has applied everything may say "no events": one that
            # is still behind (under load, past the wait above) answers 503, try again.
            if (busy := await caught_up(web, timeout=0.0, busy_when_behind=True)) is not None:
                return busy
            return web.json({"error": f"no events for thread {thread_id!r}"}, status=404)
        return web.json(redact_if(settings.redact, snapshot.state.public()))

    app.conf.agentlog_log_store = log_store  # type: ignore[attr-defined]
    return app


def run_worker(settings: Settings, loglevel: str = "warn") -> int:
    """``agentlog run`` in the distributed deployment: one faust worker."""
    refused = bind_refusal(settings.http_host, settings.api_token)
    if refused:
        print(f"agentlog: {refused}", file=sys.stderr)
        return 2
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
