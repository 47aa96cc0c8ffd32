"""The Kafka topics of the distributed deployment, created before anyone uses them (a
consumer that subscribes to a missing topic ignores it until the next rebalance)."""

from __future__ import annotations

from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import TopicAlreadyExistsError

EVENTS = "agent.events"
DLQ = "agent.events.dlq"
ACCEPTED = "agentlog.accepted"

# Room for the largest event (1 MiB) with its envelope, on every topic and client.
MAX_MESSAGE_BYTES = 4 * 1024 * 1024


def topic(name: str, namespace: str = "") -> str:
    """A topic's name in a namespace (``AGENTLOG_KAFKA_NAMESPACE``): several pipelines,
    or test runs, can share one cluster."""
    return f"{namespace}.{name}" if namespace else name


def ensure_topics(bootstrap: str, partitions: int, namespace: str = "") -> None:
    names = [topic(n, namespace) for n in (EVENTS, DLQ, ACCEPTED)]
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="agentlog-admin")
    try:
        existing = set(admin.list_topics())
        config = {"max.message.bytes": str(MAX_MESSAGE_BYTES)}
        wanted = [NewTopic(t, partitions, 1, topic_configs=config) for t in names if t not in existing]
        if wanted:
            try:
                admin.create_topics(wanted)
            except TopicAlreadyExistsError:
                pass
    finally:
        admin.close()


__all__ = ["ACCEPTED", "DLQ", "EVENTS", "MAX_MESSAGE_BYTES", "ensure_topics", "topic"]
