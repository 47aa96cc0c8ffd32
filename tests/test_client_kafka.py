"""The client on Kafka: the same thread handle produces the same events to the event
topic (through the validating Kafka publisher), and reads say where to go when no
worker URL is given."""

from __future__ import annotations

import uuid

import orjson
import pytest
from agentlog.streams.api.service import NotServedHere
from agentlog.streams.config import Settings
from agentlog.streams.kafka.topics import EVENTS, topic
from kafka import KafkaConsumer

from agentlog.client import Client
from tests.test_client import script


def _produced(bootstrap: str, name: str) -> list[dict]:
    consumer = KafkaConsumer(name, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=5_000, group_id=f"check-{uuid.uuid4().hex}")  # fmt: skip
    try:
        return [orjson.loads(m.value) for m in consumer]
    finally:
        consumer.close()


def test_the_client_produces_the_script_s_events_to_kafka_once_each_keyed_by_thread(
    kafka_bootstrap: str, tmp_path
) -> None:
    namespace = f"client{uuid.uuid4().hex[:8]}"
    settings = Settings(data_dir=tmp_path, kafka_namespace=namespace, partitions=2)
    with Client(kafka=kafka_bootstrap, settings=settings, id_prefix="k") as client:
        script(client)
        client.flush()
        with pytest.raises(NotServedHere, match="worker"):
            client.state("s1")
    events = _produced(kafka_bootstrap, topic(EVENTS, namespace))
    assert sorted(e["event_id"] for e in events) == sorted(f"k-{i}" for i in range(1, 17))
    by_id = {e["event_id"]: e for e in events}
    assert by_id["k-1"]["kind"] == "goal" and by_id["k-1"]["project"] == "billing"
    spawn = next(e for e in events if e["kind"] == "agent_spawn")
    assert spawn["payload"]["child_thread_id"] == "s1-review"
