"""The distributed processor: one worker's state and steps, as a class the faust app wires.

- ``process`` reads ``agent.events`` in batches (``agentlog.streams.kafka.event_feed``, on the
  partitions faust assigned this worker): dedup, pairing and reduction with the threads'
  snapshots from the ``agentlog-state`` table, rejects to ``agent.events.dlq``, and every
  applied event with its pair rows to ``agentlog.accepted``;
- ``run_sink("log" | "index")`` reads ``agentlog.accepted`` in batches through its own plain
  consumer (``agentlog.streams.kafka.sink_feed``), on the partitions this worker processes, and
  writes the log (ClickHouse or chDB) with the pairs, or the search index; each commits a
  batch's offsets only after writing it. The writes are idempotent (events already logged
  are skipped by id, documents are upserted, pair rows are versioned), so at-least-once
  delivery gives one row per event. An unreachable index is retried with back-off while
  the log, the state and the queries carry on. With the sinks in processes of their own
  (``sinks_here=False``: ``agentlog run --role processor`` beside ``--role sinks``) this
  worker runs no sink: it learns how far the log got from the log sink group's committed
  offsets (``agentlog.streams.kafka.sink_progress``), and reads the log through the sink
  process when the log is chDB (``agentlog.streams.kafka.remote_log``).

A batch's outputs are written in three steps, each delivered before the next starts:
the accepted records, then the thread snapshots (which carry the source offset they
reflect), then the dedup ids. Whatever prefix of that a crash leaves behind, the
batch read again repairs it: a thread skips the records its snapshot already holds
(``agentlog.processors.pipeline``), ids whose snapshot was lost are applied again, and the sink
drops what it already logged. Reading resumes after the last batch the dedup table
holds, so only a batch whose three steps all landed counts as done.

From a revocation until the tables are restored nothing is applied, and queries answer
503 (try again), never a wrong "no events for thread". A batch is applied whole under
``applying``, so a revocation waits for the one in hand; each assignment is a new
``generation``, and a batch fetched under an older one is dropped.

Offsets that hold no record a reader sees (transaction markers; the records of an
aborted transaction, which the feed does not return) count as applied once the feed has
read past them, so read-your-writes never waits for them.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any, TypeVar

import faust
from faust.exceptions import ConsumerNotStarted
from faust.streams import _current_event
from kafka.partitioner.default import murmur2
from yarl import URL

from agentlog.processors.duplicates import conflicts
from agentlog.processors.pipeline import Pipeline, Record
from agentlog.schemas.snapshot import ThreadSnapshot
from agentlog.schemas.snapshot_json import SnapshotJson
from agentlog.processors.validation import bounded_letter
from agentlog.sinks.base import LoggedEvent, StoreError
from agentlog.schemas.tables import rejected_row
from agentlog.streams.api.service import Unavailable
from agentlog.streams.config import Settings
from agentlog.streams.kafka.accepted import by_partition, chunks, encode_message
from agentlog.streams.kafka.batch_producer import BatchProducer
from agentlog.streams.kafka.batch_seen import BatchSeen
from agentlog.streams.kafka.event_feed import EventFeed
from agentlog.streams.kafka.offset_guard import Checked, OffsetGuard
from agentlog.streams.kafka.remote_log import RemoteLog
from agentlog.streams.kafka.service import Unlogged
from agentlog.streams.kafka.sink_feed import SinkFeed
from agentlog.streams.kafka.sink_progress import AcceptedMarks, SinkProgress, follow_sinks
from agentlog.streams.kafka.sink_writes import SinkWriters
from agentlog.streams.kafka.topics import EVENTS, processor_group, topic
from agentlog.streams.batch_log import log_batch
from agentlog.streams.metrics import METRICS
from agentlog.streams.wiring import open_log_store, open_search_index

log = logging.getLogger("agentlog.faust")
T = TypeVar("T")
BATCH_RECORDS = 4000
"""Records the processor takes from its feed at a time; more than this waiting is a backlog."""
RESTORING = "this worker is restoring its state tables (after a start or a rebalance); try again in a few seconds"
BEHIND = "this worker has not applied every published event yet; try again in a few seconds"


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


def changelog_key(app: faust.App, table: Any, key: str) -> bytes:
    """A table key as faust encodes it in the changelog (its recovery reads them back)."""
    changelog = table.changelog_topic
    return app.serializers.dumps_key(changelog.key_type, key, serializer=changelog.key_serializer)


async def delivered(sends: list[Awaitable[Any]]) -> list[Any]:
    """Hand every message to the producer at once, then wait until all are acked (their
    metadata: partition and offset, in order)."""
    return list(await asyncio.gather(*await asyncio.gather(*sends)))


class KafkaProcessor:
    """One worker: the processor, the two sinks and the dead-letter writer, with the state
    they share; the faust app calls its methods (``agentlog.streams.kafka.app``)."""

    def __init__(self, app: faust.App, settings: Settings, states: Any, seen_table: Any, *,
                 ownership: Any, dlq: Any, accepted: Any, sinks_here: bool = True) -> None:  # fmt: skip
        self.app, self.settings = app, settings
        self.sinks_here = sinks_here
        self.states, self.seen_table = states, seen_table
        self.ownership, self.dlq, self.accepted = ownership, dlq, accepted
        ns, bootstrap = settings.kafka_namespace, settings.kafka_bootstrap or ""
        self.event_feed = EventFeed(bootstrap, topic(EVENTS, ns), processor_group(ns), settings.kafka_security)
        self.changelogs = BatchProducer(bootstrap, settings.kafka_security)
        # Two sinks on the accepted topic, each with its own committed offsets, so an index
        # outage does not hold up the log; their groups are named after faust's own.
        self.feeds = {name: SinkFeed(bootstrap, accepted.get_topic_name(), f"{app.conf.id}-{name}-sink",
                                     security=settings.kafka_security)
                      for name in ("log", "index") if sinks_here}  # fmt: skip
        # With the sinks elsewhere: which accepted record carried which events, and where
        # the log sink's group has committed (it commits only what the log holds).
        self.marks = AcceptedMarks()
        self.sink_progress = SinkProgress(bootstrap, accepted.get_topic_name(), f"{app.conf.id}-log-sink",
                                          settings.kafka_security)  # fmt: skip
        remote = not sinks_here and not settings.clickhouse_url  # chDB lives in the sink process
        self.log_store = RemoteLog(settings.sinks_address, settings.api_token) if remote else open_log_store(settings)
        self.index = open_search_index(settings)
        # Parsed thread processors stay in memory between batches (the table holds the
        # durable copy); a rebalance may hand a thread to another worker, so it empties them.
        self.seen = BatchSeen(seen_table.data, settings.dedup_horizon)
        self.pipeline = Pipeline(self.seen, self.load, settings.pairing, settings.max_event_bytes)
        self.unlogged = Unlogged()  # applied, not logged yet: read-your-writes looks here first
        self.snapshot_json = SnapshotJson()  # a busy thread's unchanged parts, kept from its last write
        self.ready = asyncio.Event()  # set from restored tables until the next revocation
        self.applying = asyncio.Lock()
        self.generation = 0
        self.guard = OffsetGuard()  # source partition -> next offset to apply
        self.processed: dict[int, int] = {}  # source partition -> next offset applied here
        self.written = {"processed": 0, "events": 0, "rejected": 0, "indexed": 0}

    # -- state the queries read -----------------------------------------------------

    def load(self, thread_id: str) -> ThreadSnapshot | None:
        raw = self.states.get(thread_id)
        return None if raw is None else ThreadSnapshot.model_validate_json(raw)

    def owned_partitions(self) -> list[int]:
        """The event partitions assigned here; none while the consumer has not started."""
        return self._assignment() or []

    def started(self) -> bool:
        """Whether faust's consumer runs (it raises for the assignment until then)."""
        return self._assignment() is not None

    def _assignment(self) -> list[int] | None:
        """The event partitions assigned here, or ``None`` while the consumer has not
        started (faust raises until its consumer thread runs: a worker joining owns nothing yet)."""
        name = self.ownership.get_topic_name()
        try:
            assigned = self.app.consumer.assignment()
        except ConsumerNotStarted:
            return None
        return sorted(tp.partition for tp in assigned if tp.topic == name)

    def health(self) -> dict[str, Any]:
        counts = {**self.written, "index_retries": self.feeds["index"].retries if self.sinks_here else 0}
        failing = {name: feed.last_error for name, feed in self.feeds.items() if feed.last_error}
        assigned = self._assignment()
        status = "degraded" if failing else "ok" if assigned is not None else "starting"
        return {"status": status, "failing": failing, "deployment": "kafka",
                "role": "all" if self.sinks_here else "processor", "written": counts,
                "partitions": assigned or [], "dedup_ids": len(self.seen),
                "unlogged": len(self.unlogged.events), "behind": self.event_feed.behind(dict(self.processed))}  # fmt: skip

    def run(self, work: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
        """``work`` on the worker's event loop, from a request's thread (never the loop's own)."""
        try:
            on_loop = asyncio.get_running_loop() is self.app.loop
        except RuntimeError:
            on_loop = False
        if on_loop:  # waiting here for the loop would block it for good
            work.close()
            raise RuntimeError("a WorkerService query blocks: call it from a thread (run_in_threadpool)")
        return asyncio.run_coroutine_threadsafe(work, self.app.loop).result(timeout)

    def busy(self) -> bool:
        """More than a batch of events waits for this processor: background work (the
        memory runner's copy of the topic) yields the CPU until it has caught up."""
        return self.event_feed.behind(dict(self.processed)) > BATCH_RECORDS

    async def owned_snapshots(self) -> list[bytes]:
        return list(self.states.data.values())  # this worker's partitions of the table, as applied

    async def caught_up(self, timeout: float = 10.0, busy_when_behind: bool = False) -> None:
        """Read-your-writes: wait until every event the broker held when this was called
        has been applied here (cheap when the processor is not behind). ``Unavailable``
        while the tables are still being restored, and when still behind after
        ``timeout`` if ``busy_when_behind`` (else the answer goes out as it is)."""
        if not self.ready.is_set() or self.app.in_recovery:
            raise Unavailable(RESTORING)
        owned = self.owned_partitions()
        if not owned:
            return
        ends = await self.event_feed.end_offsets(owned)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while any(self.processed.get(p, 0) < end for p, end in ends.items() if end):
            if loop.time() > deadline:
                if busy_when_behind:
                    raise Unavailable(BEHIND)
                log.warning("answering before the processor caught up: %s behind %s", self.processed, ends)
                return
            await asyncio.sleep(0.01)

    def owner(self, thread_id: str) -> URL | None:
        """The URL of the worker owning ``thread_id``'s partition, ``None`` if it is this
        one. The partition is the publisher's (murmur2 of the raw thread id), which the
        tables share; faust's own router hashes the JSON-encoded table key instead, and
        so sent some threads' queries to a worker that did not hold them."""
        partition = (murmur2(thread_id.encode()) & 0x7FFFFFFF) % self.settings.partitions
        if partition in self.owned_partitions():  # co-partitioned: its table partitions are here too
            return None
        changelog = self.states.changelog_topic.get_topic_name()
        for url, topics in self.app.router.table_metadata(self.states.name).items():
            if partition in topics.get(changelog, ()):
                there, here = URL(url), self.app.conf.canonical_url
                return None if (there.host, there.port) == (here.host, here.port) else there
        raise Unavailable(RESTORING)  # no assignment known yet

    # -- rebalances -----------------------------------------------------------------

    async def on_revoked(self, _app: Any, revoked: Any, **_kwargs: Any) -> None:
        self.ready.clear()
        async with self.applying:
            await self.event_feed.follow({})
            self.pipeline.threads.clear()
            self.snapshot_json.forget()
            self.seen.forget()
            self.unlogged.clear()
            self.marks.clear()
            self.guard.reset({})
            self.processed.clear()

    async def on_assigned(self, _app: Any, assigned: Any, **_kwargs: Any) -> None:
        for feed in self.feeds.values():
            feed.follow(self.owned_partitions())

    async def on_restored(self, _app: Any, **_kwargs: Any) -> None:
        async with self.applying:
            self.seen.forget()  # indexed before recovery ended (a health check)? read the whole table again
            resume: dict[int, int | None] = {}
            for p in self.owned_partitions():
                last = self.seen.last_offset(p)
                resume[p] = None if last is None else last + 1
            positions = await self.event_feed.follow(resume)
            self.guard.reset(positions)
            self.processed.clear()
            self.processed.update(positions)
            await self.event_feed.commit(positions)  # watchers: nothing pending
            self.generation += 1
            self.ready.set()

    # -- the processor --------------------------------------------------------------

    async def process(self) -> None:
        await self.event_feed.start()
        try:
            while True:
                await self.ready.wait()
                fetched_in = self.generation
                records, positions = await self.event_feed.take(BATCH_RECORDS, timeout_ms=200)
                async with self.applying:
                    if not (self.ready.is_set() and self.generation == fetched_in):
                        self.drop(records)
                    else:
                        if records:
                            await self.apply_batch(records, positions)
                        # Also after a batch: a partition the batch left out may have read a marker.
                        await self.pass_unreadable()
        finally:
            await self.event_feed.stop()

    def drop(self, records: list[Record]) -> None:
        """A batch fetched under an older assignment: not applied, and the feed goes back to
        where the table says each of its partitions resumes (the feed's position is past it;
        ``on_restored`` puts every owned partition in ``guard.expected``)."""
        for p in {r.partition for r in records}:
            if p in self.guard.expected:
                self.event_feed.rewind(p, self.guard.expected[p])

    async def pass_unreadable(self) -> None:
        """Count as applied the offsets the feed read past without a record: a transaction's
        commit marker at a partition's end, or an aborted transaction's records. Else a
        query's read-your-writes would wait for them until its deadline. Sound because every
        record the feed returned was applied, or the feed was sent back before it."""
        passed = await self.event_feed.passed(self.processed)
        for p, position in passed.items():
            self.processed[p] = position
            self.guard.expected[p] = max(self.guard.expected.get(p, position), position)
        if passed:
            await self.event_feed.commit(passed)

    def in_order(self, records: list[Record]) -> Checked:
        """The batch up to any gap in its partitions' offsets; the feed reads again from
        the gap (agentlog.streams.kafka.offset_guard). One consumer seeking where the table says should
        leave none: checked because a skipped record would be taken for a replay later."""
        checked = self.guard.check(records)
        name = self.event_feed.topic
        for p, start in checked.reread.items():  # a transactional producer's markers look like this too
            log.info("offsets of %s[%d] from %d are missing; reading again from there", name, p, start)
            self.event_feed.rewind(p, start)
        for p, start in checked.recovered:
            log.error("the event feed had skipped %s[%d] from offset %d; read again", name, p, start)
        for p, start, end in checked.absent:
            log.info("%s[%d] offsets %d..%d are not in the topic (transaction markers, or deleted by retention); "
                     "going on from %d", name, p, start, end - 1, end)  # fmt: skip
        return checked

    def first_copy(self, result: Any) -> Callable[[str], bytes | None]:
        """Where a duplicate's first copy is: this batch, accepted but not yet logged, or the log."""
        applied = {a.event.event_id: a.record.value for a in result.applied}

        def find(event_id: str) -> bytes | None:
            if event_id in applied:
                return applied[event_id]
            pending = self.unlogged.find(event_id)
            if pending is not None:
                return pending.raw
            try:
                logged = self.log_store.get(event_id)
            except StoreError as error:  # the log is out of reach (a sink process down): said, not silent
                log.error("duplicate %r not compared with its first copy (the log did not answer: %s)",
                          event_id, error)  # fmt: skip
                return None
            return None if logged is None else logged.raw

        return find

    async def apply_batch(self, records: list[Record], positions: dict[int, int]) -> None:
        started = time.perf_counter()
        checked = self.in_order(records)
        records = checked.records
        if not records:
            return
        result = self.pipeline.process(records)
        last_offset: dict[int, int] = {}
        for r in records:
            last_offset[r.partition] = max(last_offset.get(r.partition, -1), r.offset)
        groups = by_partition(result)
        await self.send_outputs(result, groups)
        await self.write_snapshots(groups)
        await self.write_seen(groups, last_offset)
        for p, offset in last_offset.items():  # markers after the last record count as applied
            self.processed[p] = max(self.processed.get(p, 0), offset + 1,
                                    positions.get(p, 0) if p not in checked.reread else 0)  # fmt: skip
        await self.event_feed.commit({p: self.processed[p] for p in last_offset})
        self.written["processed"] += len(result.applied)
        METRICS.processed(result)
        log_batch(result)
        METRICS.dedup_ids.set(len(self.seen))
        METRICS.batch_seconds.observe(time.perf_counter() - started)

    async def send_outputs(self, result: Any, groups: dict[int, Any]) -> None:
        """Step one: the rejects to the dead-letter topic, the applied events to the sinks."""
        letters = [(bad, why.reason) for bad, why in result.rejected]
        if result.duplicates:  # the same id with other content: seen, not silently dropped
            letters += await asyncio.to_thread(conflicts, result.duplicates, self.first_copy(result))
        sends = [self.dlq.send(value=bad.value, headers=[("reason", why.encode()),
                                                         ("source", f"{bad.partition}:{bad.offset}".encode())])
                 for bad, why in letters]  # fmt: skip
        carried = []  # the event ids of each accepted record, in the order sent
        for p, group in groups.items():
            for i, chunk in enumerate(chunks(group["items"])):
                body = encode_message(chunk, group["pairs"] if i == 0 else [])
                sends.append(self.accepted.send(value=body, partition=p))
                carried.append([item.event_id for item in chunk])
        # Unlogged before they are sent: the sink may log them while the sends are awaited,
        # and an id marked logged before it was added would stay "unlogged" for good.
        self.unlogged.add(LoggedEvent(a.event.event_id, a.event.thread_id, a.record.value, a.record.partition,
                                      a.record.offset) for a in result.applied)  # fmt: skip
        sent = await delivered(sends)
        if not self.sinks_here:
            for meta, ids in zip(sent[len(letters):], carried, strict=True):
                self.marks.add(meta.partition, meta.offset, ids)

    async def write_snapshots(self, groups: dict[int, Any]) -> None:
        """Step two. The table stores are partitioned like the source: each partition's keys
        are written as from one of its events (what a faust table write inside stream
        iteration would use); the changelog gets them as one batch per partition."""
        futures = []
        for p, group in groups.items():
            with _writing_partition(p):
                messages = []
                for thread_id in group["threads"]:
                    value = self.snapshot_json.dumps(self.pipeline.threads[thread_id].snapshot())
                    self.states.data[thread_id] = value
                    messages.append((changelog_key(self.app, self.states, thread_id), value))
            futures += await self.changelogs.send(self.states.changelog_topic.get_topic_name(), p, messages)
        await asyncio.gather(*futures)

    async def write_seen(self, groups: dict[int, Any], last_offset: dict[int, int]) -> None:
        """Step three: the dedup ids, for every partition, so its last offset is known durably."""
        futures = []
        for p, offset in last_offset.items():
            with _writing_partition(p):
                entries = self.seen.batch_written(p, offset, groups[p]["ids"] if p in groups else [])
            futures += await self.changelogs.send(self.seen_table.changelog_topic.get_topic_name(), p,
                                                  [(changelog_key(self.app, self.seen_table, k), v) for k, v in entries])  # fmt: skip
        await asyncio.gather(*futures)

    # -- the sinks and the dead letters ---------------------------------------------

    async def follow_sinks(self) -> None:
        """With the sinks elsewhere: forget the events the log sink has committed past."""
        await follow_sinks(self.sink_progress, self.marks, self.unlogged.logged)

    async def run_sink(self, name: str) -> None:
        writers = SinkWriters(self.log_store, self.index, self.dead_letter, self.written, self.unlogged.logged)
        write = {"log": writers.log, "index": writers.index}[name]
        feed = self.feeds[name]
        await feed.start()
        feed.follow(self.owned_partitions())
        try:
            await feed.run(write)
        finally:
            await feed.stop()

    async def dead_letter(self, letters: list[tuple[bytes, str]]) -> None:
        """Records a sink refused (retrying cannot help): to the dead-letter topic."""
        if letters:
            await delivered([self.dlq.send(value=raw, headers=[("reason", why.encode())]) for raw, why in letters])

    async def log_dead_letters(self, stream: faust.StreamT) -> None:
        """Every dead letter into the log's ``rejected_events`` (bounded, never whole)."""
        async for event in stream.events():
            headers = dict(event.headers or {})
            reason = headers.get("reason", b"unknown").decode()
            m = event.message
            partition, offset = (int(x) for x in headers.get("source", f"{m.partition}:{m.offset}".encode()).split(b":"))
            value, reason = bounded_letter(event.value, reason, self.settings.max_event_bytes)
            self.log_store.append_rejected([rejected_row(value, reason, partition, offset, m.timestamp or 0)])
            self.written["rejected"] += 1
            METRICS.rejected.inc()


__all__ = ["KafkaProcessor", "changelog_key", "delivered"]
