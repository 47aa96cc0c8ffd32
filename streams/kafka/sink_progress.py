"""How far the sink processes have logged, as a processor with its sinks elsewhere
(``agentlog run --role processor``) learns it: from the committed offsets of the log
sink's consumer group on ``agentlog.accepted``.

The processor keeps the events it applied and forwarded in ``Unlogged`` (read-your-writes
answers from there). In a worker that runs its own sinks the log feed drops them as it
writes; here the processor remembers which accepted record (partition, offset) carried
which event ids (``AcceptedMarks``), and drops a record's ids once the log sink's group
has committed past it: a sink commits only after the log holds the batch, so an event
leaves ``Unlogged`` only once the log can answer for it.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Iterable

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from agentlog.streams.kafka.security import KafkaSecurity
from agentlog.streams.kafka.topics import plain_consumer

log = logging.getLogger("agentlog.faust")

# How often the processor asks where the log sink's group stands (only while it waits).
POLL_SECONDS = 0.2


class AcceptedMarks:
    """Accepted records not yet committed by the log sink: partition -> (offset, event ids), in offset order."""

    def __init__(self) -> None:
        self.marks: dict[int, deque[tuple[int, list[str]]]] = {}

    def add(self, partition: int, offset: int, event_ids: list[str]) -> None:
        self.marks.setdefault(partition, deque()).append((offset, event_ids))

    def waiting(self) -> list[int]:
        return sorted(p for p, q in self.marks.items() if q)

    def logged(self, committed: dict[int, int]) -> Iterable[str]:
        """The event ids of every record before each partition's committed offset, forgotten here."""
        for p, end in committed.items():
            q = self.marks.get(p)
            while q and q[0][0] < end:
                yield from q.popleft()[1]

    def clear(self) -> None:
        self.marks.clear()


class SinkProgress:
    """Reads the committed offsets of a sink group (never joins it, never commits)."""

    def __init__(self, bootstrap: str, topic_name: str, group_id: str, security: KafkaSecurity) -> None:
        self.topic = topic_name
        self.bootstrap, self.security, self.group_id = bootstrap, security, group_id
        self.consumer: AIOKafkaConsumer | None = None
        self._started = False

    async def start(self) -> None:
        """Connect (in the worker's event loop, which aiokafka binds to)."""
        if not self._started:
            self.consumer = plain_consumer(self.bootstrap, self.security, group_id=self.group_id)
            await self.consumer.start()
            self._started = True

    async def stop(self) -> None:
        if self._started and self.consumer is not None:
            self._started = False
            await self.consumer.stop()

    async def committed(self, partitions: list[int]) -> dict[int, int]:
        assert self.consumer is not None, "start() first"
        out = {}
        for p in partitions:
            try:
                offset = await self.consumer.committed(TopicPartition(self.topic, p))
            except KafkaError as error:  # the coordinator moved: ask again at the next poll
                log.debug("committed offsets of %s[%d] not known yet: %s", self.topic, p, error)
                continue
            if offset is not None:
                out[p] = offset
        return out


async def follow_sinks(progress: SinkProgress, marks: AcceptedMarks, logged: Callable[[list[str]], None]) -> None:
    """Until cancelled: every ``POLL_SECONDS`` while records wait, hand the ids the log
    sink has committed past to ``logged``."""
    await progress.start()
    try:
        while True:
            await asyncio.sleep(POLL_SECONDS)
            waiting = marks.waiting()
            if waiting:
                committed = await progress.committed(waiting)
                done = list(marks.logged(committed))
                if done:
                    logged(done)
    finally:
        await progress.stop()


__all__ = ["AcceptedMarks", "POLL_SECONDS", "SinkProgress", "follow_sinks"]
