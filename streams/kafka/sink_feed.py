"""The sinks' feed of ``agentlog.accepted``: a plain aiokafka consumer per sink that
reads the partitions this worker's processor owns and commits a partition's offset only
after the records before it were written.

Why not a faust agent: faust acknowledges records through its own bookkeeping, and an
offset jump it never delivered to the agent is counted as acknowledged and committed
(seen as a whole batch missing from the log). Here the committed offset is the one after
the last record handed to the writer, so a record can be written twice (the writers are
idempotent) but never skipped.

In a worker that runs everything (``agentlog run``, role ``all``) the feed follows the
processor's partitions (manual assignment, no group membership of its own): a thread's
accepted records are written by the worker that applied them. In a sink process
(``agentlog run --role sinks``) it is a member of its sink's consumer group instead
(``group_managed``): the group shares the partitions among the sink processes, and a
revocation waits for the batch in hand to be written and committed, so a partition's new
owner starts exactly after it (records fetched before the revocation are dropped).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError

from agentlog.streams.kafka.topics import plain_consumer
from agentlog.streams.metrics import METRICS
from agentlog.streams.kafka.security import KafkaSecurity

log = logging.getLogger("agentlog.sinks")

Writer = Callable[[list[Any]], Awaitable[None]]

# The longest wait between retries of a failed write.
RETRY_MAX_S = 5.0


class SinkFeed:
    def __init__(self, bootstrap: str, topic_name: str, group_id: str, max_records: int = 64,
                 security: KafkaSecurity = KafkaSecurity(), group_managed: bool = False,
                 whole_records: bool = False) -> None:  # fmt: skip
        self.topic = topic_name
        self.whole_records = whole_records  # hand the writer the records (headers too), not their values
        self.group_managed = group_managed
        self.handover = asyncio.Lock()  # held while a batch is written and committed
        self.generation = 0  # moves at every revocation: a batch fetched before it is dropped
        self.committed: dict[int, int] = {}  # partition -> offset committed by this feed
        self.security = security
        self.max_records = max_records
        self.bootstrap = bootstrap
        self.group_id = group_id
        self.consumer: AIOKafkaConsumer | None = None
        self._started = False
        self.retries = 0  # failed writes retried so far
        self.last_error: str | None = None  # while a write fails: why (the worker's /healthz)

    async def start(self) -> None:
        """Connect (in the worker's event loop, which aiokafka binds to)."""
        if not self._started:
            self.consumer = plain_consumer(self.bootstrap, self.security, group_id=self.group_id)
            await self.consumer.start()
            if self.group_managed:
                self.consumer.subscribe([self.topic], listener=_Handover(self))
            self._started = True

    async def stop(self) -> None:
        if self._started and self.consumer is not None:
            self._started = False
            await self.consumer.stop()

    def follow(self, partitions: Iterable[int]) -> None:
        """Read exactly these partitions from now on, each from its committed offset."""
        if self.group_managed:
            return  # the group assigns the partitions
        wanted = {TopicPartition(self.topic, p) for p in partitions}
        if self._started and self.consumer is not None and wanted != self.consumer.assignment():
            self.consumer.assign(sorted(wanted))

    async def run(self, write: Writer) -> None:
        """Hand batches to ``write`` and commit after it returns, until cancelled."""
        assert self.consumer is not None, "start() first"
        while True:
            if not self.consumer.assignment():
                await asyncio.sleep(0.1)
                continue
            fetched_in = self.generation
            try:
                data = await self.consumer.getmany(timeout_ms=200, max_records=self.max_records)
            except IllegalStateError:  # assignment changed under the fetch
                continue
            records = [r for rs in data.values() for r in rs]
            if not records:
                continue
            async with self.handover:
                if self.generation != fetched_in:  # revoked meanwhile: the new owner writes them
                    continue
                await self._write_until_done(write, records if self.whole_records else [r.value for r in records])
                await self._commit({tp: rs[-1].offset + 1 for tp, rs in data.items() if rs})

    def partitions(self) -> list[int]:
        return sorted(tp.partition for tp in self.consumer.assignment()) if self.consumer is not None else []

    def lag(self) -> dict[int, int]:
        """Per assigned partition: records in the topic not yet committed by this feed (as
        of the last fetch's high-water mark)."""
        if self.consumer is None:
            return {}
        out = {}
        for tp in self.consumer.assignment():
            high = self.consumer.highwater(tp)
            if high is not None and tp.partition in self.committed:
                out[tp.partition] = max(0, high - self.committed[tp.partition])
        return out

    async def _write_until_done(self, write: Writer, values: list[Any]) -> None:
        """A failed write is retried with back-off, never skipped: nothing after it is
        committed until it lands, and the sink keeps running."""
        delay = 0.25
        while True:
            try:
                await write(values)
                if self.last_error is not None:
                    METRICS.store_recovered(self.group_id)
                self.last_error = None
                return
            except Exception as error:  # noqa: BLE001 - any failure: keep the batch, retry
                # (a record the store refuses never gets here: the writers dead-letter it)
                self.retries += 1
                self.last_error = str(error).strip()[:500] or type(error).__name__
                METRICS.store_failed(self.group_id, self.last_error)
                log.error("%s could not write %d records, retrying in %.1f s: %s", self.group_id, len(values),
                          delay, error)  # fmt: skip
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_S)

    async def _commit(self, offsets: dict[TopicPartition, int]) -> None:
        assert self.consumer is not None
        owned = self.consumer.assignment()
        # A partition handed to another worker meanwhile: its new owner writes the batch
        # again from the last committed offset (idempotently).
        offsets = {tp: o for tp, o in offsets.items() if tp in owned}
        if not offsets:
            return
        try:
            await self.consumer.commit(offsets)
        except (CommitFailedError, IllegalStateError, KafkaError) as error:
            log.warning("sink offsets %s not committed (written again after a restart): %s", offsets, error)
            return
        self.committed.update({tp.partition: o for tp, o in offsets.items()})


class _Handover(ConsumerRebalanceListener):  # type: ignore[misc]
    """A sink group's rebalances: the batch in hand is written and committed before a
    partition goes (its next owner starts from that commit), and whatever was fetched
    before then is dropped."""

    def __init__(self, feed: SinkFeed) -> None:
        self.feed = feed

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        async with self.feed.handover:
            self.feed.generation += 1
            for tp in revoked:
                self.feed.committed.pop(tp.partition, None)

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        self.feed.generation += 1
        consumer = self.feed.consumer
        for tp in assigned:  # where this owner starts, for the lag it reports
            try:
                self.feed.committed[tp.partition] = (await consumer.committed(tp) if consumer else None) or 0
            except KafkaError:
                self.feed.committed[tp.partition] = 0


__all__ = ["SinkFeed"]
