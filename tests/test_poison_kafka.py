"""Both deployments behave the same on bad input (issue 12, item 7): the Kafka publisher
rejects what the embedded one rejects, with the same reasons, and a line over the size
limit is dead-lettered while the rest of the file is published."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from kafka import KafkaConsumer

from agentlog.streams.kafka.topics import DLQ, EVENTS, MAX_MESSAGE_BYTES, topic
from tests.helpers import raw
from tests.test_poison import CORPUS, agentlog


def consume(bootstrap: str, name: str) -> list[tuple[bytes, dict[str, bytes]]]:
    consumer = KafkaConsumer(name, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=10_000, max_partition_fetch_bytes=MAX_MESSAGE_BYTES,
                             group_id=f"check-{uuid.uuid4().hex}")  # fmt: skip
    try:
        return [(m.value, dict(m.headers or [])) for m in consumer]
    finally:
        consumer.close()


def test_the_kafka_publisher_rejects_what_the_embedded_one_rejects_and_a_line_over_the_limit_stops_nothing(
    kafka_bootstrap: str, cli_env: dict[str, str], tmp_path: Path
) -> None:
    huge = raw("huge", "message", {"role": "user", "text": "h" * 3_000_000}, thread="kp")
    valid = [raw(f"v{i}", "message", {"role": "user", "text": f"fine {i}"}, i, thread="kp") for i in range(4)]
    poison = [rec for _, rec, why in CORPUS if why is not None and len(rec) < 1024 * 1024]
    conflict = raw("v0", "message", {"role": "user", "text": "not the first copy"}, thread="kp")
    lines = [valid[0], huge, *poison[:30], valid[1], *poison[30:], valid[2], conflict, valid[3]]
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b"\n".join(lines))

    namespace = f"poison{uuid.uuid4().hex[:8]}"
    kafka_env = {**cli_env, "AGENTLOG_KAFKA_BOOTSTRAP": kafka_bootstrap, "AGENTLOG_KAFKA_NAMESPACE": namespace}
    on_kafka = agentlog(kafka_env, "publish", str(path), "--json")
    assert on_kafka.returncode == 0, on_kafka.stderr.decode()[-3000:]
    assert b"Traceback" not in on_kafka.stderr
    embedded = agentlog(cli_env, "publish", str(path), "--json")
    kafka_report, embedded_report = json.loads(on_kafka.stdout), json.loads(embedded.stdout)
    assert (kafka_report["accepted"], kafka_report["rejected"]) == (4, len(poison) + 2)
    assert kafka_report["rejections"] == embedded_report["rejections"]
    assert kafka_report["rejections"][0]["reason"].startswith(f"too_large: {len(huge)} bytes")
    assert kafka_report["rejections"][-1]["reason"].startswith("conflicting_duplicate: event_id v0")

    published = consume(kafka_bootstrap, topic(EVENTS, namespace))
    assert sorted(v for v, _ in published) == sorted(valid)
    letters = consume(kafka_bootstrap, topic(DLQ, namespace))
    assert sorted(v for v, _ in letters) == sorted([huge[: 1024 * 1024], *poison, conflict])
    reasons = sorted(h["reason"].decode() for _, h in letters)
    assert reasons == sorted(r["reason"] for r in kafka_report["rejections"])
