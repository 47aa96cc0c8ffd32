"""The processor's writes to Kafka as record batches: one produce request per partition
instead of one per message.

A batch of events touches hundreds of threads, and each thread's snapshot goes to the
state table's changelog. Through faust's ``Topic.send`` every message costs about a
millisecond of Python (the measured bottleneck of the worker); aiokafka's
``create_batch``/``send_batch`` builds each partition's messages into one batch first.
Idempotent, acks from all replicas, like every producer here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from aiokafka import AIOKafkaProducer

from agentlog.streams.kafka.topics import MAX_MESSAGE_BYTES
from agentlog.streams.kafka.security import KafkaSecurity

# Under the max.message.bytes of the changelog topics (agentlog.streams.kafka.topics).
MAX_BATCH_BYTES = MAX_MESSAGE_BYTES - 64 * 1024


class BatchProducer:
    def __init__(self, bootstrap: str, security: KafkaSecurity = KafkaSecurity()) -> None:
        self.bootstrap = bootstrap
        self.security = security
        self.producer: AIOKafkaProducer | None = None

    async def _started(self) -> AIOKafkaProducer:
        # Created in the worker's event loop, which aiokafka binds to.
        if self.producer is None:
            self.producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all", enable_idempotence=True,
                                             max_batch_size=MAX_BATCH_BYTES, max_request_size=MAX_MESSAGE_BYTES,
                                             linger_ms=0, **self.security.aiokafka())  # fmt: skip
            await self.producer.start()
        return self.producer

    async def send(self, topic: str, partition: int, messages: Iterable[tuple[bytes | None, bytes]]) -> list[asyncio.Future]:
        """Queue ``(key, value)`` messages for one partition in as few batches as fit;
        the returned futures resolve once the broker has them."""
        producer = await self._started()
        futures = []
        batch = producer.create_batch()
        for key, value in messages:
            if batch.append(key=key, value=value, timestamp=None) is None:
                if batch.record_count() == 0:
                    raise ValueError(f"a message of {len(value)} bytes is over the {topic} batch limit")
                futures.append(await producer.send_batch(batch, topic, partition=partition))
                batch = producer.create_batch()
                if batch.append(key=key, value=value, timestamp=None) is None:
                    raise ValueError(f"a message of {len(value)} bytes is over the {topic} batch limit")
        if batch.record_count():
            futures.append(await producer.send_batch(batch, topic, partition=partition))
        return futures

    async def close(self) -> None:
        if self.producer is not None:
            await self.producer.stop()
            self.producer = None


__all__ = ["BatchProducer", "MAX_BATCH_BYTES"]
