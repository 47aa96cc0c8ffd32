"""Publishing to Apache Kafka with kafka-python: validation before send, key =
``thread_id`` (one thread is one partition, in order), acks=all, idempotent producer,
compression and batching; rejects go to the dead-letter topic with their reason."""

from __future__ import annotations

from collections.abc import Sequence

from kafka import KafkaProducer

from agentlog.streams.config import Settings
from agentlog.streams.kafka.topics import DLQ, EVENTS, ensure_topics, topic
from agentlog.streams.metrics import METRICS
from agentlog.streams.publish_check import PublishReport, Publisher, check_records, split_records, with_letters


class KafkaPublisher(Publisher):
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        ensure_topics(settings.kafka_bootstrap, settings.partitions, settings.kafka_namespace,  # type: ignore[arg-type]
                  settings.kafka_security)
        self.events_topic = topic(EVENTS, settings.kafka_namespace)
        self.dlq_topic = topic(DLQ, settings.kafka_namespace)
        self.producer = KafkaProducer(
            bootstrap_servers=settings.kafka_bootstrap, acks="all", enable_idempotence=True,
            compression_type="gzip", linger_ms=5, batch_size=256 * 1024, retries=5,
            max_request_size=settings.max_event_bytes + 64 * 1024, **settings.kafka_security.kafka_python(),
        )  # fmt: skip

    def publish(self, data: bytes, dead_letters: Sequence[tuple[bytes, str]] = ()) -> PublishReport:
        records = split_records(data)
        METRICS.published.inc(len(records))
        accepted, rejected, report = check_records(records, self.settings.max_event_bytes)
        rejected = with_letters(rejected, report, dead_letters, self.settings.max_event_bytes)
        sent = [self.producer.send(self.events_topic, key=thread_id.encode(), value=raw)
                for thread_id, _event_id, raw in accepted]  # fmt: skip
        sent += [self.producer.send(self.dlq_topic, value=raw, headers=[("reason", reason.encode())])
                 for raw, reason in rejected]  # fmt: skip
        self.producer.flush()
        # flush() returns once every record is answered for, delivered or not: a record the
        # brokers never took (away past the producer's retries, refused) must not be
        # reported accepted. Raising lets the caller send the batch again; the records that
        # did land are exact duplicates then, which the pipeline drops.
        failed = next((f.exception for f in sent if f.failed()), None)
        if failed is not None:
            raise failed
        return report

    def close(self) -> None:
        self.producer.close()


__all__ = ["KafkaPublisher"]
