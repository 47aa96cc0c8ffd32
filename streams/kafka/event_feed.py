"""The processor's feed of ``agent.events``: a plain aiokafka consumer that reads the
partitions faust assigned to this worker, each from the offset after the last batch the
dedup table holds.

Why not a faust stream: on this machine faust's consume path delivered 4,600 events/s to
an agent that did nothing with them, while aiokafka's ``getmany`` reads 300,000 on the
same broker; that path was about half of the worker's time. faust also acknowledges by
its own bookkeeping and was seen to commit past a record it never delivered
(faust-streaming #606, #312). faust keeps what it does well: group membership, the
assignment (its tables are co-partitioned with ``agentlog.ownership``, whose partition
numbers this feed reads), table recovery, changelogs and routing.

Where to resume is the dedup table's business, not the group's: it is written with every
batch's outputs, and restored with the state, so a restart or a takeover resumes exactly
after the last batch applied. The offsets committed under ``{group}-processor`` are for
watchers (``run --until-idle``, lag), never read back.

A consumer can break for good: aiokafka's coordination task dies on an assertion when the
assignment changes under it (aio-libs/aiokafka#796), and every later call re-raises that.
The feed knows where each partition it follows reads next (what it returned, or where it
was sent back), so it replaces a broken consumer by a new one at those offsets: nothing
skipped, nothing delivered twice, and the worker keeps running instead of exiting.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import IllegalStateError, KafkaError

from agentlog.processors.pipeline import Record
from agentlog.streams.kafka.topics import plain_consumer
from agentlog.streams.kafka.security import KafkaSecurity

log = logging.getLogger("agentlog.faust")

# What a consumer raises once it is of no more use: aiokafka's internal assertions (its
# coordination task died, #796) and Kafka errors from a call. Replacing the consumer on a
# passing Kafka error costs a reconnect, never a record.
_BROKEN: tuple[type[BaseException], ...] = (AssertionError, KafkaError)


class EventFeed:
    def __init__(self, bootstrap: str, topic_name: str, group_id: str,
                 security: KafkaSecurity = KafkaSecurity()) -> None:  # fmt: skip
        self.bootstrap = bootstrap
        self.topic = topic_name
        self.group_id = group_id
        self.security = security
        self.consumer: AIOKafkaConsumer | None = None
        # Followed partition -> the offset it reads next, as this feed has told its caller.
        self.next_offsets: dict[int, int] = {}
        self.replaced = 0  # broken consumers replaced (a test and the logs look at it)
        self.follows = 0  # follows done: a fetch begun before one does not move next_offsets
        self._swapping = asyncio.Lock()  # one follow or replacement at a time

    async def start(self) -> None:
        """Connect (in the worker's event loop, which aiokafka binds to)."""
        if self.consumer is None:
            consumer = plain_consumer(self.bootstrap, self.security, group_id=self.group_id)
            try:
                await consumer.start()
            except BaseException:
                await consumer.stop()  # leaves no connection behind
                raise
            self.consumer = consumer

    async def stop(self) -> None:
        if self.consumer is not None:
            consumer, self.consumer = self.consumer, None
            await consumer.stop()

    async def follow(self, positions: Mapping[int, int | None]) -> dict[int, int]:
        """Read exactly these partitions from now on, each from its given offset (``None``:
        from the beginning); gives the offset each one reads next. Records fetched before
        are dropped. A consumer found broken is replaced once, and the follow done again."""
        async with self._swapping:
            try:
                return await self._follow(positions)
            except _BROKEN as error:
                await self._discard(self.consumer, error)
                return await self._follow(positions)

    async def _follow(self, positions: Mapping[int, int | None]) -> dict[int, int]:
        await self.start()  # faust may revoke or assign before the processing task starts
        consumer = self.consumer
        assert consumer is not None
        tps = {p: TopicPartition(self.topic, p) for p in positions}
        consumer.assign(sorted(tps.values()))
        for p, offset in positions.items():
            if offset is None:
                await consumer.seek_to_beginning(tps[p])
            else:
                consumer.seek(tps[p], offset)
        # "The beginning" as an offset: a batch dropped later is rewound to where it began.
        self.next_offsets = {p: await consumer.position(tp) for p, tp in tps.items()}
        self.follows += 1
        return dict(self.next_offsets)

    def rewind(self, partition: int, offset: int) -> None:
        self.next_offsets[partition] = offset
        if self.consumer is not None:  # else the replacement starts there
            self.consumer.seek(TopicPartition(self.topic, partition), offset)

    async def _discard(self, consumer: AIOKafkaConsumer | None, error: BaseException) -> None:
        """Drop a consumer that failed for good (once: a follow may have replaced it already)."""
        if consumer is None or consumer is not self.consumer:
            return
        self.consumer = None
        self.replaced += 1
        log.warning("the event feed's consumer of %s broke (%s: %s); replacing it at offsets %s",
                    self.topic, type(error).__name__, error, self.next_offsets)  # fmt: skip
        try:
            await consumer.stop()
        except asyncio.CancelledError as stopping:  # a task of the broken consumer's, cancelled
            task = asyncio.current_task()
            if task is not None and task.cancelling():  # this caller is being cancelled: let it
                raise
            log.debug("stopping the broken consumer: %r", stopping)
        except Exception as stopping:  # noqa: BLE001 - it is broken already; the new one matters
            log.debug("stopping the broken consumer: %r", stopping)

    async def _replace(self) -> bool:
        """A new consumer reading the followed partitions from where this feed left them."""
        async with self._swapping:
            if self.consumer is not None:  # a follow got there first
                return True
            try:
                await self._follow(dict(self.next_offsets))
                return True
            except _BROKEN as error:
                log.warning("the event feed cannot follow %s again yet (%s); retrying", self.topic, error)
                await self._discard(self.consumer, error)
                return False

    async def take(self, max_records: int, timeout_ms: int) -> tuple[list[Record], dict[int, int]]:
        """The next records of the followed partitions, in offset order per partition, and
        where each partition that gave some stands after them: past any offsets the topic
        does not hold (a transactional producer's markers), which a record's offset + 1
        would not tell."""
        if self.consumer is None and self.next_offsets and not await self._replace():
            await asyncio.sleep(timeout_ms / 1000)
            return [], {}
        consumer, follows = self.consumer, self.follows
        if consumer is None or not consumer.assignment():
            await asyncio.sleep(timeout_ms / 1000)  # owning no partition is not a reason to spin
            return [], {}
        try:
            data = await consumer.getmany(timeout_ms=timeout_ms, max_records=max_records)
            positions = {tp.partition: await consumer.position(tp) for tp, messages in data.items() if messages}
        except IllegalStateError:  # the assignment changed under the fetch
            return [], {}
        except _BROKEN as error:
            await self._discard(consumer, error)
            return [], {}
        if consumer is not self.consumer:  # replaced meanwhile: the new one reads these again
            return [], {}
        if follows == self.follows:  # else the caller drops them and rewinds (its generation moved)
            self.next_offsets.update(positions)
        return [Record(tp.partition, m.offset, m.value) for tp, messages in data.items() for m in messages], positions

    async def passed(self, applied: Mapping[int, int]) -> dict[int, int]:
        """Partitions this feed has read past ``applied`` (partition -> next offset applied)
        without giving a record: the offsets between hold none a reader sees (a transaction's
        commit marker at the partition's end, an aborted transaction's records). Asks for
        the position only where the last fetch's high watermark is past ``applied``."""
        consumer = self.consumer
        if consumer is None:
            return {}
        moved: dict[int, int] = {}
        for tp in list(consumer.assignment()):
            done = applied.get(tp.partition, 0)
            try:
                high = consumer.highwater(tp)
                if high is None or high <= done:
                    continue
                position = await consumer.position(tp)
            except (IllegalStateError, AssertionError, AttributeError):  # unassigned meanwhile (aiokafka asserts)
                continue
            if position > done:
                moved[tp.partition] = position
        return moved

    def behind(self, applied: Mapping[int, int]) -> int:
        """Records of the followed partitions past ``applied`` (partition -> next offset
        applied), by the high watermarks of the last fetches: a look from another thread
        that asks the broker nothing (0 before the first fetch)."""
        consumer = self.consumer
        if consumer is None:
            return 0
        total = 0
        for tp in list(consumer.assignment()):
            try:
                high = consumer.highwater(tp)
            except (IllegalStateError, AssertionError, AttributeError):  # unassigned meanwhile (aiokafka asserts)
                continue
            if high is not None:
                total += max(0, high - applied.get(tp.partition, 0))
        return total

    async def end_offsets(self, partitions: list[int]) -> dict[int, int]:
        wanted = [TopicPartition(self.topic, p) for p in partitions]
        try:
            return await self._ends(wanted)
        except _BROKEN as error:  # replaced once, as a follow is
            await self._discard(self.consumer, error)
            return await self._ends(wanted)

    async def _ends(self, wanted: list[TopicPartition]) -> dict[int, int]:
        if self.consumer is None:
            await self.follow(dict(self.next_offsets))  # a broken one replaced, or the first
        assert self.consumer is not None
        ends = await self.consumer.end_offsets(wanted)
        return {tp.partition: offset for tp, offset in ends.items()}

    async def commit(self, offsets: Mapping[int, int]) -> None:
        """Tell watchers how far this worker has applied (a failure only delays them)."""
        if self.consumer is None:
            return
        owned = {tp.partition for tp in self.consumer.assignment()}
        wanted = {TopicPartition(self.topic, p): o for p, o in offsets.items() if p in owned}
        if not wanted:
            return
        try:
            await self.consumer.commit(wanted)
        except (IllegalStateError, *_BROKEN) as error:
            log.warning("processor offsets %s not committed (watchers see them later): %s", wanted, error)


__all__ = ["EventFeed"]
