"""The processor's feed of ``agent.events`` tells how far behind the processor is, without
asking the broker: the memory runner's copy yields the CPU while it is."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from agentlog.streams.config import Settings
from agentlog.streams.kafka.event_feed import EventFeed
from agentlog.streams.kafka.publisher import KafkaPublisher
from agentlog.streams.kafka.topics import EVENTS, processor_group, topic
from tests.helpers import raw


def test_the_feed_counts_the_records_waiting_past_what_was_applied_by_the_last_fetch(
    tmp_path: Path, kafka_bootstrap: str,
) -> None:  # fmt: skip
    ns = f"t{uuid.uuid4().hex[:8]}"
    settings = Settings(data_dir=tmp_path, kafka_bootstrap=kafka_bootstrap, kafka_namespace=ns, partitions=1)
    publisher = KafkaPublisher(settings)
    publisher.publish(b"\n".join(raw(f"e{i}", "message", {"role": "user", "text": f"m{i}"}, thread="f")
                                 for i in range(50)))  # fmt: skip
    publisher.close()

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
