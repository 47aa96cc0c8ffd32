"""The processor's feed of ``agent.events`` tells how far behind the processor is, without
asking the broker: the memory runner's copy yields the CPU while it is."""

from __future__ import annotations

import asyncio
import threading
import uuid
from pathlib import Path

from aiokafka import TopicPartition

from agentlog.streams.config import Settings
from agentlog.streams.kafka.event_feed import EventFeed
from agentlog.streams.kafka.publisher import KafkaPublisher
from agentlog.streams.kafka.topics import EVENTS, processor_group, topic
from agentlog.streams.memory.runner import MemoryRunner
from tests.helpers import raw


def published(data_dir: Path, kafka_bootstrap: str, count: int) -> str:
    """A fresh namespace whose one-partition event topic holds ``count`` user messages."""
    ns = f"t{uuid.uuid4().hex[:8]}"
    settings = Settings(data_dir=data_dir, kafka_bootstrap=kafka_bootstrap, kafka_namespace=ns, partitions=1)
    publisher = KafkaPublisher(settings)
    publisher.publish(b"\n".join(raw(f"e{i}", "message", {"role": "user", "text": f"m{i}"}, thread="f")
                                 for i in range(count)))  # fmt: skip
    publisher.close()
    return ns


def test_the_feed_counts_the_records_waiting_past_what_was_applied_by_the_last_fetch(
    tmp_path: Path, kafka_bootstrap: str,
) -> None:  # fmt: skip
    ns = published(tmp_path, kafka_bootstrap, 50)

    async def look() -> tuple[int, int, int, int]:
        feed = EventFeed(kafka_bootstrap, topic(EVENTS, ns), processor_group(ns))
        before = feed.behind({})  # not started: nothing known, nothing claimed
        await feed.follow({0: None})
        records: list = []
        while len(records) < 10:
            got, _ = await feed.take(10, timeout_ms=500)
            records += got
        try:
            return before, feed.behind({}), feed.behind({0: 10}), feed.behind({0: 50})
        finally:
            await feed.stop()

    assert asyncio.run(look()) == (0, 50, 40, 0)


class _Reassigned:
    """A consumer whose assignment moved on between listing a partition and reading its
    high watermark (a rebalance on the worker's loop, seen from the memory runner's thread)."""

    def assignment(self) -> frozenset[TopicPartition]:
        return frozenset({TopicPartition("t", 0), TopicPartition("t", 1)})

    def highwater(self, tp: TopicPartition) -> int:
        if tp.partition == 0:
            raise AssertionError("Partition is not assigned")  # what aiokafka raises
        return 30


def test_a_partition_unassigned_under_the_look_counts_nothing_instead_of_failing_the_caller() -> None:
    feed = EventFeed("127.0.0.1:1", "t", "g")
    feed.consumer = _Reassigned()  # type: ignore[assignment]
    assert feed.behind({1: 10}) == 20


def test_a_memory_runner_whose_busy_look_fails_keeps_running(tmp_path: Path) -> None:
    looks: list[int] = []
    stop = threading.Event()

    def busy() -> bool:
        looks.append(1)
        if len(looks) == 1:
            raise AssertionError("Partition is not assigned")
        stop.set()
        return True

    runner = MemoryRunner(Settings(data_dir=tmp_path, memory_idle_seconds=0.8), busy=busy)
    worker = threading.Thread(target=runner.run, args=(stop,), daemon=True)
    worker.start()
    worker.join(10)
    assert not worker.is_alive() and len(looks) == 2  # looked again after the failure, then stopped


def test_the_feed_returns_no_aborted_record_and_tells_how_far_it_read_past_what_it_returned(
    tmp_path: Path, kafka_bootstrap: str,
) -> None:  # fmt: skip
    # An aborted transaction at a partition's end: its records and its marker are offsets
    # no record comes from, and a processor waiting for them would wait forever.
    from aiokafka import AIOKafkaProducer  # noqa: PLC0415

    ns = published(tmp_path, kafka_bootstrap, 3)
    name = topic(EVENTS, ns)

    async def abort_two() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=f"tx-{uuid.uuid4()}")
        await producer.start()
        try:
            await producer.begin_transaction()
            for i in range(2):
                await producer.send_and_wait(name, raw(f"x{i}", "message", {"role": "user", "text": "no"}, thread="f"))
            await producer.abort_transaction()
        finally:
            await producer.stop()

    async def read() -> tuple[list[int], dict[int, int], dict[int, int], int]:
        await abort_two()
        feed = EventFeed(kafka_bootstrap, name, processor_group(ns))
        assert await feed.follow({0: None}) == {0: 0}  # "from the beginning" as an offset
        try:
            records: list = []
            passed: dict[int, int] = {}
            for _ in range(50):
                got, _ = await feed.take(10, timeout_ms=200)
                records += got
                passed = await feed.passed({0: 3})
                if passed:
                    break
            end = (await feed.end_offsets([0]))[0]
            return [r.offset for r in records], passed, await feed.passed({0: end}), end
        finally:
            await feed.stop()

    offsets, passed, nothing_past_the_end, end = asyncio.run(read())
    assert offsets == [0, 1, 2]  # the aborted records are not returned
    assert end == 6 and passed == {0: end}  # 3 records, 2 aborted ones, their marker
    assert nothing_past_the_end == {}


def break_coordinator(feed: EventFeed) -> None:
    """What aiokafka#796 leaves: the consumer's coordination task ended on an assertion
    (the assignment changed under it), so every later call on the consumer re-raises it."""
    coordinator = feed.consumer._coordinator  # type: ignore[union-attr]

    async def dies() -> None:
        raise AssertionError("assert assignment is not None and assignment.active")

    coordinator._coordination_task.cancel()
    coordinator._coordination_task = asyncio.ensure_future(dies())


async def take_until(feed: EventFeed, count: int, rounds: int = 100) -> list[int]:
    offsets: list[int] = []
    for _ in range(rounds):
        if len(offsets) >= count:
            break
        got, _ = await feed.take(7, timeout_ms=200)
        offsets += [r.offset for r in got]
    return offsets


def test_a_feed_whose_consumer_breaks_replaces_it_and_delivers_every_record_once_in_order(
    tmp_path: Path, kafka_bootstrap: str,
) -> None:  # fmt: skip
    ns = published(tmp_path, kafka_bootstrap, 50)

    async def read() -> tuple[list[int], list[int], int]:
        feed = EventFeed(kafka_bootstrap, topic(EVENTS, ns), processor_group(ns))
        await feed.follow({0: None})
        try:
            before = await take_until(feed, 10)
            break_coordinator(feed)
            await asyncio.sleep(0)
            after = await take_until(feed, 50 - len(before))
            return before, after, feed.replaced
        finally:
            await feed.stop()

    before, after, replaced = asyncio.run(read())
    assert before + after == list(range(50))  # nothing skipped, nothing twice
    assert replaced == 1


def test_a_follow_or_rewind_given_to_a_broken_feed_is_where_its_new_consumer_reads(
    tmp_path: Path, kafka_bootstrap: str,
) -> None:  # fmt: skip
    # faust's on_restored follows again after a rebalance, the moment the race breaks the
    # consumer; a dropped batch rewinds. Either must hold on the consumer that replaces it.
    ns = published(tmp_path, kafka_bootstrap, 30)

    async def read() -> tuple[dict[int, int], list[int], list[int], int]:
        feed = EventFeed(kafka_bootstrap, topic(EVENTS, ns), processor_group(ns))
        await feed.follow({0: None})
        try:
            await take_until(feed, 5)
            break_coordinator(feed)
            await asyncio.sleep(0)
            followed = await feed.follow({0: 20})
            from_follow = await take_until(feed, 10)
            break_coordinator(feed)
            await asyncio.sleep(0)
            assert await feed.take(7, timeout_ms=200) == ([], {})  # finds it broken, lets it go
            feed.rewind(0, 3)
            from_rewind = await take_until(feed, 27)
            return followed, from_follow, from_rewind, feed.replaced
        finally:
            await feed.stop()

    followed, from_follow, from_rewind, replaced = asyncio.run(read())
    assert followed == {0: 20} and from_follow == list(range(20, 30))
    assert from_rewind == list(range(3, 30)) and replaced == 2
