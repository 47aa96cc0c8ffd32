"""The memory jobs' view of the Kafka deployment: the events topic copied into a file of
the data directory (``kafka_events.db``), where extraction, revocation and status read it exactly as in
the embedded deployment. The copy's progress is a Kafka consumer group's (one per data
directory) committed offsets, committed after each appended batch (a batch copied twice is harmless:
extraction and lookups take the first copy of an event id).

The copy reads with aiokafka (its record parsing and checksums are compiled): kafka-python
spent about 30 us per record here, half the copy's cost, beside the publish check each
record goes through again. The memory runner copies in the background: it stops after a
batch while the processor has a backlog, and rests between batches (``rest``) so that a
large catch-up never takes a whole core from the processor.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable
from pathlib import Path

from aiokafka import AIOKafkaConsumer, TopicPartition

from agentlog.sinks.base import Topic
from agentlog.streams.config import Settings
from agentlog.streams.kafka.topics import EVENTS, MAX_MESSAGE_BYTES, ensure_topics, topic
from agentlog.streams.publish_check import check_records

BATCH_RECORDS = 5000
"""Records copied between two commits (and two looks at ``busy``)."""


def copy_group(settings: Settings) -> str:
    """The copy's consumer group: one per data directory, since each machine (each worker
    running memory on its own) keeps its own whole copy."""
    where = hashlib.sha256(str(Path(settings.data_dir).resolve()).encode()).hexdigest()[:12]
    ns = f"{settings.kafka_namespace}-" if settings.kafka_namespace else ""
    return f"agentlog-memory-{ns}{where}-copy"  # -copy: the copy's own file, from its start


def pull_events(settings: Settings, bus: Topic, busy: Callable[[], bool] = lambda: False, rest: float = 0.0) -> int:
    """Copy what the events topic holds now (at least up to its end offsets at the call)
    into ``bus``; returns how many records were copied. Stops after a batch when ``busy``
    says the processor has a backlog: the copy checks every record again, CPU the
    processor needs more (the next pass goes on from the committed offsets). After each
    batch it sleeps ``rest`` times as long as the batch took."""
    ensure_topics(settings.kafka_bootstrap, settings.partitions, settings.kafka_namespace,  # type: ignore[arg-type]
                  settings.kafka_security)
    return asyncio.run(_copy(settings, bus, busy, rest))


async def _copy(settings: Settings, bus: Topic, busy: Callable[[], bool], rest: float) -> int:
    name = topic(EVENTS, settings.kafka_namespace)
    # read_committed: an event of an aborted transaction never becomes memory.
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap, group_id=copy_group(settings),
                                isolation_level="read_committed", enable_auto_commit=False,
                                auto_offset_reset="earliest", max_partition_fetch_bytes=MAX_MESSAGE_BYTES,
                                **settings.kafka_security.aiokafka())  # fmt: skip
    try:
        await consumer.start()
        tps = [TopicPartition(name, p) for p in await _partitions(consumer, name)]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        copied = 0
        while any([await consumer.position(tp) < ends[tp] for tp in tps]):
            started = time.thread_time()  # the CPU of this batch (the fetch's decoding too), not the poll's wait
            polled = await consumer.getmany(timeout_ms=1000, max_records=BATCH_RECORDS)
            # Every record fetched is copied, those past the ends too: the positions
            # committed below are after them.
            values = [m.value for batch in polled.values() for m in batch]
            accepted, _rejected, _report = check_records(values, settings.max_event_bytes)
            if accepted:
                bus.append(accepted)
            copied += len(values)
            await consumer.commit()
            if busy():
                break
            await asyncio.sleep(rest * (time.thread_time() - started))
        return copied
    finally:
        await consumer.stop()


async def _partitions(consumer: AIOKafkaConsumer, name: str) -> list[int]:
    """The topic's partitions as the broker has them now. (aiokafka's public
    ``partitions_for_topic`` answers only from a cache that a consumer of manually
    assigned partitions has not filled yet.)"""
    cluster = await consumer._client.fetch_all_metadata()  # noqa: SLF001
    return sorted(cluster.partitions_for_topic(name) or ())


__all__ = ["BATCH_RECORDS", "copy_group", "pull_events"]
