"""The sinks' consumer commits a batch's offsets only after the batch was written, and a
failed write is retried, never skipped (a stand-in consumer plays the broker here; the
distributed tests run it on Kafka)."""

from __future__ import annotations

import asyncio
from collections import namedtuple

import pytest
from aiokafka import TopicPartition

import agentlog.streams.kafka.sink_feed as sink_feed
from agentlog.streams.kafka.sink_feed import SinkFeed

Message = namedtuple("Message", "offset value")
TP = TopicPartition("agentlog.accepted", 0)


class OneBatchConsumer:
    """Hands out one batch, then nothing; records what was committed and when."""

    def __init__(self, log: list) -> None:
        self.log = log
        self.batches = [{TP: [Message(7, b"a"), Message(8, b"b")]}]

    def assignment(self) -> set:
        return {TP}

    async def getmany(self, timeout_ms: int, max_records: int) -> dict:
        if self.batches:
            return self.batches.pop(0)
        await asyncio.sleep(0.01)
        return {}

    async def commit(self, offsets: dict) -> None:
        self.log.append(("commit", offsets))


def run_feed(write, log: list) -> SinkFeed:
    feed = SinkFeed("unused:9092", TP.topic, "test-sink")
    feed.consumer = OneBatchConsumer(log)  # type: ignore[assignment]
    feed._started = True

    async def main() -> None:
        task = asyncio.create_task(feed.run(write))
        while not any(entry[0] == "commit" for entry in log):
            await asyncio.sleep(0.01)
        task.cancel()

    asyncio.run(asyncio.wait_for(main(), 10))
    return feed


def test_the_offsets_are_committed_after_the_batch_is_written_and_point_past_it() -> None:
    log: list = []

    async def write(values: list[bytes]) -> None:
        log.append(("write", values))

    run_feed(write, log)
    assert log == [("write", [b"a", b"b"]), ("commit", {TP: 9})]


def test_a_failed_write_is_retried_and_nothing_is_committed_before_it_lands(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sink_feed, "RETRY_MAX_S", 0.01)
    log: list = []
    failures = [RuntimeError("log store down"), RuntimeError("still down")]

    async def write(values: list[bytes]) -> None:
        if failures:
            log.append(("failed", values))
            raise failures.pop(0)
        log.append(("write", values))

    feed = run_feed(write, log)
    assert log == [("failed", [b"a", b"b"]), ("failed", [b"a", b"b"]), ("write", [b"a", b"b"]), ("commit", {TP: 9})]
    assert feed.retries == 2
