"""The memory jobs' view of the Kafka deployment: the events topic copied into the data
directory's topic file, where extraction, revocation and status read it exactly as in
the embedded deployment. The copy's progress is a Kafka consumer group's committed
offsets, committed after each appended batch (a batch copied twice is harmless:
extraction and lookups take the first copy of an event id)."""

from __future__ import annotations

from kafka import KafkaConsumer, TopicPartition

from agentlog.streams.embedded.topic import SqliteEventBus
from agentlog.streams.config import Settings
from agentlog.streams.kafka.topics import EVENTS, ensure_topics, topic
from agentlog.streams.publish_check import check_records


def pull_events(settings: Settings, bus: SqliteEventBus) -> int:
    """Copy what the events topic holds now (up to its end offsets at the call) into
    ``bus``; returns how many records were copied."""
    name = topic(EVENTS, settings.kafka_namespace)
    ensure_topics(settings.kafka_bootstrap, settings.partitions, settings.kafka_namespace,  # type: ignore[arg-type]
                  settings.kafka_security)
    group = f"agentlog-memory-{settings.kafka_namespace}" if settings.kafka_namespace else "agentlog-memory"
    consumer = KafkaConsumer(bootstrap_servers=settings.kafka_bootstrap, group_id=group,
                             enable_auto_commit=False, auto_offset_reset="earliest",
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


__all__ = ["pull_events"]
