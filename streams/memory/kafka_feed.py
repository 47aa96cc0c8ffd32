"""The memory jobs' view of the Kafka deployment: the events topic copied into a file of
the data directory (``kafka_events.db``), where extraction, revocation and status read it exactly as in
the embedded deployment. The copy's progress is a Kafka consumer group's (one per data
directory) committed offsets, committed after each appended batch (a batch copied twice is harmless:
extraction and lookups take the first copy of an event id)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from kafka import KafkaConsumer, TopicPartition

from agentlog.sinks.base import Topic
from agentlog.streams.config import Settings
from agentlog.streams.kafka.topics import EVENTS, ensure_topics, topic
from agentlog.streams.publish_check import check_records


def copy_group(settings: Settings) -> str:
    """The copy's consumer group: one per data directory, since each machine (each worker
    running memory on its own) keeps its own whole copy."""
    where = hashlib.sha256(str(Path(settings.data_dir).resolve()).encode()).hexdigest()[:12]
    ns = f"{settings.kafka_namespace}-" if settings.kafka_namespace else ""
    return f"agentlog-memory-{ns}{where}-copy"  # -copy: the copy's own file, from its start


def pull_events(settings: Settings, bus: Topic) -> int:
    """Copy what the events topic holds now (up to its end offsets at the call) into
    ``bus``; returns how many records were copied."""
    name = topic(EVENTS, settings.kafka_namespace)
    ensure_topics(settings.kafka_bootstrap, settings.partitions, settings.kafka_namespace,  # type: ignore[arg-type]
                  settings.kafka_security)
    group = copy_group(settings)
    # read_committed: an event of an aborted transaction never becomes memory.
    consumer = KafkaConsumer(bootstrap_servers=settings.kafka_bootstrap, group_id=group,
                             isolation_level="read_committed", enable_auto_commit=False, auto_offset_reset="earliest",
                             max_partition_fetch_bytes=8 * 1024 * 1024, **settings.kafka_security.kafka_python())  # fmt: skip
    try:
        tps = [TopicPartition(name, p) for p in sorted(consumer.partitions_for_topic(name) or ())]
        consumer.assign(tps)
        ends = consumer.end_offsets(tps)
        copied = 0
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            polled = consumer.poll(timeout_ms=1000, max_records=5000)
            values = [m.value for batch in polled.values() for m in batch if m.offset < ends[TopicPartition(m.topic, m.partition)]]
            accepted, _rejected, _report = check_records(values, settings.max_event_bytes)
            if accepted:
                bus.append(accepted)
            copied += len(values)
            consumer.commit()
        return copied
    finally:
        consumer.close()


__all__ = ["copy_group", "pull_events"]
