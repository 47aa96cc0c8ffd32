"""The memory view on the Kafka deployment: published to a one-partition memory topic by a
transactional producer, so the fence is the broker's, across machines.

Every consolidator of a namespace uses the same ``transactional.id``. Starting a
publication (``init_transactions``) bumps the producer epoch, and the broker then refuses
any older producer with that id: a worker paused while it held the transaction (or past
its timeout, ``AGENTLOG_MEMORY_LEASE_SECONDS``, when the broker aborts it on its own) gets
``ProducerFencedError`` or ``InvalidProducerEpochError`` when it resumes, and its view is
never committed. The epoch is the fencing token. Readers read ``read_committed``: an
aborted or fenced view is never seen. Each machine adopts the newest committed view into
its data directory's memory store, where ``memory show`` and contexts read it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import orjson
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import InvalidProducerEpochError, KafkaError, ProducerFencedError, TopicAlreadyExistsError

from agentlog.sinks.base import StaleToken
from agentlog.streams.config import Settings
from agentlog.streams.kafka.topics import MAX_MESSAGE_BYTES, topic

log = logging.getLogger("agentlog.memory")

MEMORY = "agentlog.memory"
VIEW_KEY = b"view"
FENCED = (ProducerFencedError, InvalidProducerEpochError)


@dataclass(frozen=True)
class KafkaView:
    """A view as committed to the memory topic."""

    version: int
    owner: str
    epoch: int
    facts: dict[str, dict[str, Any]]


def memory_topic(settings: Settings) -> str:
    return topic(MEMORY, settings.kafka_namespace)


def transactional_id(settings: Settings) -> str:
    """One per namespace: every consolidator of the deployment competes for it."""
    ns = settings.kafka_namespace
    return f"agentlog-memory-{ns}" if ns else "agentlog-memory"


_ensured: set[tuple[str | None, str]] = set()


def ensure_memory_topic(settings: Settings) -> None:
    """One partition (one total order of views), compacted to the newest view; checked
    once per process."""
    if (settings.kafka_bootstrap, memory_topic(settings)) in _ensured:
        return
    admin = KafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap, client_id="agentlog-admin",
                             **settings.kafka_security.kafka_python())  # fmt: skip
    try:
        name = memory_topic(settings)
        if name not in set(admin.list_topics()):
            config = {"max.message.bytes": str(MAX_MESSAGE_BYTES), "cleanup.policy": "compact"}
            try:
                admin.create_topics([NewTopic(name, 1, 1, topic_configs=config)])
            except TopicAlreadyExistsError:
                pass
        _ensured.add((settings.kafka_bootstrap, name))
    finally:
        admin.close()


def latest_view(settings: Settings, timeout_s: float = 10.0) -> KafkaView | None:
    """The newest committed view (``read_committed``), or ``None`` before the first."""
    ensure_memory_topic(settings)
    tp = TopicPartition(memory_topic(settings), 0)
    consumer = KafkaConsumer(bootstrap_servers=settings.kafka_bootstrap, isolation_level="read_committed",
                             enable_auto_commit=False, max_partition_fetch_bytes=MAX_MESSAGE_BYTES,
                             **settings.kafka_security.kafka_python())  # fmt: skip
    try:
        consumer.assign([tp])
        # read_committed ends at the last stable offset: an open transaction's view is not read.
        end = consumer.end_offsets([tp])[tp]
        consumer.seek_to_beginning(tp)
        newest = None
        deadline = time.monotonic() + timeout_s
        while consumer.position(tp) < end and time.monotonic() < deadline:
            for message in consumer.poll(timeout_ms=500).get(tp, []):
                if message.key == VIEW_KEY:
                    newest = message.value
        if newest is None:
            return None
        body = orjson.loads(newest)
        return KafkaView(int(body["version"]), str(body["owner"]), int(body["epoch"]), body["facts"])
    finally:
        consumer.close()


def publish_view(settings: Settings, facts: dict[str, dict[str, Any]], owner: str, after: int,
                 lease_s: float, pause_s: float = 0.0) -> KafkaView:  # fmt: skip
    """Commit ``facts`` as view ``after + 1`` in one transaction; ``StaleToken`` if the
    broker fenced this publisher (a newer one started, or the transaction timed out).
    ``pause_s`` holds the open transaction, for fencing drills."""
    producer = KafkaProducer(bootstrap_servers=settings.kafka_bootstrap, transactional_id=transactional_id(settings),
                             transaction_timeout_ms=max(1000, int(lease_s * 1000)),
                             max_request_size=MAX_MESSAGE_BYTES, **settings.kafka_security.kafka_python())  # fmt: skip
    try:
        producer.init_transactions()  # fences every older holder of the id
        epoch = producer._transaction_manager.producer_id_and_epoch.epoch  # noqa: SLF001 - the token, for the record
        # Every view committed before this epoch is visible now, and none can be committed
        # after it without fencing this one: a view newer than the one this consolidation
        # started from means it was built on stale facts.
        newest = latest_view(settings)
        if newest is not None and newest.version > after:
            raise StaleToken(f"the memory view of {owner} was built on v{after}, but v{newest.version} of "
                             f"{newest.owner} was committed since; the next run consolidates on top of it")
        view = KafkaView(after + 1, owner, epoch, facts)
        producer.begin_transaction()
        producer.send(memory_topic(settings), orjson.dumps(view.__dict__), key=VIEW_KEY)
        producer.flush()
        if pause_s:
            log.warning("memory view v%d of %s (epoch %d) sent; holding the transaction %.1f s", view.version,
                        owner, epoch, pause_s)  # fmt: skip
            time.sleep(pause_s)
        producer.commit_transaction()
        return view
    except FENCED as error:
        raise StaleToken(f"the broker refused the memory view of {owner} (producer epoch fenced: "
                         f"{type(error).__name__}): a newer consolidator holds the view") from error
    except KafkaError as error:
        if any(isinstance(e, FENCED) for e in (error.__cause__, error.__context__)):
            raise StaleToken(f"the broker refused the memory view of {owner}: {error}") from error
        raise
    finally:
        producer.close(timeout=5)


__all__ = ["FENCED", "MEMORY", "KafkaView", "ensure_memory_topic", "latest_view", "memory_topic", "publish_view",
           "transactional_id"]
