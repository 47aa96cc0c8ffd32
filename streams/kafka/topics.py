"""The Kafka topics of the distributed deployment, created before anyone uses them (a
consumer that subscribes to a missing topic ignores it until the next rebalance)."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from aiokafka import AIOKafkaConsumer
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError

from agentlog.sinks.base import StoreError
from agentlog.streams.api.guard import bind_refusal
from agentlog.streams.kafka.security import KafkaSecurity

if TYPE_CHECKING:
    from agentlog.streams.config import Settings

EVENTS = "agent.events"
DLQ = "agent.events.dlq"
ACCEPTED = "agentlog.accepted"
# Never written to: faust assigns its partitions, and with them (co-partitioned) the
# table partitions; a worker processes the event partitions of the same numbers.
OWNERSHIP = "agentlog.ownership"

# Room for the largest event (1 MiB) with its envelope, on every topic and client.
MAX_MESSAGE_BYTES = 4 * 1024 * 1024


def topic(name: str, namespace: str = "") -> str:
    """A topic's name in a namespace (``AGENTLOG_KAFKA_NAMESPACE``): several pipelines,
    or test runs, can share one cluster."""
    return f"{namespace}.{name}" if namespace else name


def worker_group(namespace: str = "") -> str:
    """The faust app id, which is also the workers' consumer group; the offsets of the
    processors and the sinks are committed as ``{group}-processor``, ``{group}-log-sink``
    and ``{group}-index-sink``."""
    return f"agentlog-{namespace}" if namespace else "agentlog"


def processor_group(namespace: str = "") -> str:
    """Where the processors commit how far they applied the event topic (for watchers)."""
    return f"{worker_group(namespace)}-processor"


def plain_consumer(bootstrap: str, security: KafkaSecurity, group_id: str | None = None) -> AIOKafkaConsumer:
    """An aiokafka consumer of manually assigned partitions that commits only when told,
    taking the largest message any topic here holds. It reads committed records only: an
    agent that publishes through a transactional producer and aborts takes its events back."""
    return AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group_id, enable_auto_commit=False,
                            auto_offset_reset="earliest", isolation_level="read_committed",
                            max_partition_fetch_bytes=MAX_MESSAGE_BYTES,
                            fetch_max_bytes=4 * MAX_MESSAGE_BYTES, **security.aiokafka())  # fmt: skip


def ensure_topics(bootstrap: str, partitions: int, namespace: str = "",
                  security: KafkaSecurity = KafkaSecurity(), also: Sequence[NewTopic] = ()) -> None:  # fmt: skip
    """The deployment's topics, and ``also`` (a worker's faust-internal ones), created where
    missing and visible in the broker's metadata before this returns: a consumer that
    subscribes to a topic its metadata lacks ignores it until the next rebalance, and a
    worker that started so owned no table partition and answered 503 for minutes."""
    config = {"max.message.bytes": str(MAX_MESSAGE_BYTES)}
    specs = [NewTopic(topic(n, namespace), partitions, 1, topic_configs=config)
             for n in (EVENTS, DLQ, ACCEPTED, OWNERSHIP)] + list(also)  # fmt: skip
    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="agentlog-admin", **security.kafka_python())
    except KafkaError as error:  # kafka-python reports a refused login as a bootstrap timeout
        raise StoreError(
            f"cannot connect to Kafka at {bootstrap} over {security.protocol} ({error}): check "
            "AGENTLOG_KAFKA_BOOTSTRAP and AGENTLOG_KAFKA_SECURITY_PROTOCOL"
            + (", and AGENTLOG_KAFKA_SASL_USERNAME/PASSWORD (a wrong password looks like this too)" if security.sasl else "")
        ) from error
    try:
        existing = set(admin.list_topics())
        wanted = [spec for spec in specs if spec.name not in existing]
        if wanted:
            try:
                admin.create_topics(wanted)
            except TopicAlreadyExistsError:
                pass
            _wait_until_visible(admin, [spec.name for spec in wanted])
    finally:
        admin.close()


TOPICS_VISIBLE_WITHIN_S = 30.0


def _wait_until_visible(admin: KafkaAdminClient, names: list[str]) -> None:
    """Until the broker's metadata lists every partition of ``names`` with a leader (a
    created topic reaches the brokers' metadata caches a little later)."""
    deadline = time.monotonic() + TOPICS_VISIBLE_WITHIN_S
    while True:
        pending = [t["name"] for t in admin.describe_topics(names) if not _led(t)]
        if not pending:
            return
        if time.monotonic() > deadline:
            raise StoreError(f"Kafka created the topics {pending} but its metadata has not shown them with a "
                             f"leader for {TOPICS_VISIBLE_WITHIN_S:.0f} s: check the brokers' health")  # fmt: skip
        time.sleep(0.1)


def _led(described: dict) -> bool:
    partitions = described.get("partitions") or []
    return described.get("error_code") == 0 and bool(partitions) and all(p["leader_id"] >= 0 for p in partitions)


def may_serve(settings: Settings) -> bool:
    """Whether a worker or sink process may listen at its address (a token beyond
    loopback); else the reason on stderr and ``False``."""
    refused = bind_refusal(settings.http_host, settings.api_token)
    if refused:
        print(f"agentlog: {refused}", file=sys.stderr)
    return refused is None


def ready_to_serve(settings: Settings) -> bool:
    """Before a sink process starts: ``may_serve``, and the topics exist (a worker creates
    them with faust's own, in one look at the broker's topics: ``run_worker``)."""
    if not may_serve(settings):
        return False
    ensure_topics(settings.kafka_bootstrap or "", settings.partitions, settings.kafka_namespace,
                  settings.kafka_security)  # fmt: skip
    return True


__all__ = ["ACCEPTED", "DLQ", "EVENTS", "MAX_MESSAGE_BYTES", "OWNERSHIP", "ensure_topics", "may_serve", "plain_consumer",
           "processor_group", "ready_to_serve", "topic", "worker_group"]
