"""Where consumer groups stand: topics' end offsets, groups' committed offsets and
members, asked through one admin client and retried while a fresh broker has no group
coordinator yet. Used by ``run --until-idle`` and ``rebuild`` on Kafka."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from kafka import KafkaConsumer, TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import KafkaError

from agentlog.streams.config import Settings

Offsets = dict[TopicPartition, int]
T = TypeVar("T")


def _retrying(call: Callable[[], T], timeout_s: float = 60.0) -> T:
    """``call()``, again while the broker answers with a retriable error (a fresh broker
    has no group coordinator until its offsets topic exists)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return call()
        except KafkaError as error:
            if not getattr(error, "retriable", False) or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


class GroupWatch:
    """End offsets of topics and committed offsets of groups, through one admin client."""

    def __init__(self, settings: Settings) -> None:
        kafka = {"bootstrap_servers": settings.kafka_bootstrap, **settings.kafka_security.kafka_python()}
        self.admin = KafkaAdminClient(client_id="agentlog-groups", **kafka)
        # The end a reader of committed records reaches (the processor's commits stop there):
        # an open transaction's records are not pending work.
        self.consumer = KafkaConsumer(isolation_level="read_committed", **kafka)

    def ends(self, *topics: str) -> Offsets:
        partitions = [TopicPartition(t, p) for t in topics for p in sorted(self.consumer.partitions_for_topic(t) or ())]
        return self.consumer.end_offsets(partitions) if partitions else {}

    def behind(self, group: str, ends: Offsets) -> int:
        """How many records of ``ends`` the group has not committed yet."""
        committed = _retrying(lambda: self.admin.list_group_offsets(group)).get(group, {})
        return sum(max(0, end - (committed[tp].offset if tp in committed else 0)) for tp, end in ends.items())

    def members(self, group: str) -> int:
        return len(_retrying(lambda: self.admin.describe_groups([group]))[group]["members"])

    def close(self) -> None:
        self.consumer.close()
        self.admin.close()


__all__ = ["GroupWatch", "Offsets"]
