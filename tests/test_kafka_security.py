"""SPEC §7: configuration covers "the usual security settings of each (SASL/TLS, users,
passwords)". Every Kafka client of agentlog (kafka-python, aiokafka, faust) takes them
from one place; a broker with a SASL/PLAIN listener (started by infra/up) checks them
for real."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from agentlog.sinks.base import redact_url
from agentlog.streams.config import Settings
from agentlog.streams.kafka.publisher import KafkaPublisher
from agentlog.streams.kafka.security import KafkaSecurity, clickhouse_options, opensearch_options
from agentlog.streams.kafka.worker_process import start_worker, stop_worker
from tests.helpers import raw
from tests.servers import launch
from tests.test_distributed import drop_index, kafka_settings, state_when_served, wait_written

SASL_VARIABLES = ("AGENTLOG_TEST_KAFKA_SASL_BOOTSTRAP", "AGENTLOG_TEST_KAFKA_SASL_USERNAME",
                  "AGENTLOG_TEST_KAFKA_SASL_PASSWORD")  # fmt: skip


@pytest.fixture(scope="session")
def kafka_sasl() -> tuple[str, str, str]:
    """The SASL/PLAIN listener of the broker infra/up starts: from the environment (CI
    evaluates infra/up), else started here. Never skipped."""
    if not all(os.environ.get(v) for v in SASL_VARIABLES):
        proc = launch("kafka")
        found = dict(word.split("=", 1) for line in proc.stdout.splitlines() for word in line.split()[1:] if "=" in word)
        if not all(found.get(v) for v in SASL_VARIABLES):
            pytest.fail(f"no SASL listener: infra/launch.py up kafka printed {proc.stdout!r}\n{proc.stderr[-2000:]}")
        return tuple(found[v] for v in SASL_VARIABLES)  # type: ignore[return-value]
    return tuple(os.environ[v] for v in SASL_VARIABLES)  # type: ignore[return-value]


def test_sasl_settings_come_from_the_environment_and_passwords_stay_out_of_every_repr() -> None:
    settings = Settings.from_env({"AGENTLOG_KAFKA_SECURITY_PROTOCOL": "sasl_ssl", "AGENTLOG_KAFKA_SASL_MECHANISM": "scram-sha-512",
                                  "AGENTLOG_KAFKA_SASL_USERNAME": "svc", "AGENTLOG_KAFKA_SASL_PASSWORD": "hunter2",
                                  "AGENTLOG_OPENSEARCH_PASSWORD": "os-secret", "AGENTLOG_CLICKHOUSE_PASSWORD": "ch-secret"})  # fmt: skip
    security = settings.kafka_security
    options = security.kafka_python()
    assert options["security_protocol"] == "SASL_SSL" and options["sasl_mechanism"] == "SCRAM-SHA-512"
    assert options["sasl_plain_username"] == "svc" and options["sasl_plain_password"] == "hunter2"
    assert options["ssl_context"] is not None  # TLS: the server is verified against the system's CAs
    for text in (repr(settings), repr(security), repr(security.faust_credentials())):
        assert "hunter2" not in text and "os-secret" not in text and "ch-secret" not in text


def test_plaintext_is_the_default_and_adds_no_options_a_broker_would_refuse() -> None:
    assert Settings().kafka_security.kafka_python() == {"security_protocol": "PLAINTEXT"}
    assert Settings().kafka_security.faust_credentials() is None


def test_a_sasl_protocol_without_a_password_or_an_unknown_protocol_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="AGENTLOG_KAFKA_SASL_PASSWORD"):
        KafkaSecurity("SASL_PLAINTEXT", username="svc")
    with pytest.raises(ValueError, match="PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"):
        KafkaSecurity("TLS")


def test_opensearch_and_clickhouse_take_users_passwords_and_certificates() -> None:
    settings = Settings(opensearch_username="os", opensearch_password="p1", opensearch_ca_certs="/ca.pem",
                        clickhouse_username="ch", clickhouse_password="p2", clickhouse_ca_certs="/ca.pem")  # fmt: skip
    assert opensearch_options(settings) == {"http_auth": ("os", "p1"), "ca_certs": "/ca.pem"}
    assert clickhouse_options(settings) == {"username": "ch", "password": "p2", "ca_cert": "/ca.pem"}
    assert opensearch_options(Settings(opensearch_verify_certs=False))["verify_certs"] is False


def test_server_urls_in_messages_never_show_a_password() -> None:
    assert redact_url("https://default:s3cret@ch.example:8443/db") == "https://default:***@ch.example:8443/db"
    assert redact_url("http://localhost:9200") == "http://localhost:9200"


def test_the_worker_publishes_consumes_and_serves_state_over_a_sasl_listener(
    tmp_path: Path, kafka_sasl: tuple[str, str, str], opensearch_url: str
) -> None:
    bootstrap, username, password = kafka_sasl
    settings = kafka_settings(tmp_path / "sasl", bootstrap, opensearch_url, partitions=2,
                              kafka_security_protocol="SASL_PLAINTEXT", kafka_sasl_username=username,
                              kafka_sasl_password=password)  # fmt: skip
    publisher = KafkaPublisher(settings)  # kafka-python: admin and producer
    report = publisher.publish(b"\n".join([raw("s1", "goal", {"text": "authenticated goal"}, thread="sasl"),
                                           raw("s2", "tool_call", {"call_id": "c", "tool_name": "ls"}, 1, thread="sasl"),
                                           raw("s3", "tool_result", {"call_id": "c", "output": "a b"}, 2, thread="sasl")]))  # fmt: skip
    publisher.close()
    assert report.accepted == 3
    worker = start_worker(settings)  # faust, aiokafka changelog producer and sink consumers
    try:
        wait_written(settings, worker, 3, 0)
        state = state_when_served(settings, "sasl")
        assert state["goal"]["text"] == "authenticated goal" and state["event_count"] == 3
        rows = httpx.post(f"http://127.0.0.1:{settings.worker_port}/sql", timeout=30,
                          json={"sql": "SELECT status FROM tool_calls FINAL"}).json()["rows"]  # fmt: skip
        assert rows == [["ok"]]
    finally:
        stop_worker(worker)
        drop_index(settings)


def test_a_wrong_kafka_password_is_a_clear_error_naming_the_settings(tmp_path: Path, kafka_sasl: tuple[str, str, str]) -> None:
    bootstrap, username, _password = kafka_sasl
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTLOG_")}
    env.update(AGENTLOG_DATA_DIR=str(tmp_path / "d"), AGENTLOG_KAFKA_BOOTSTRAP=bootstrap,
               AGENTLOG_KAFKA_SECURITY_PROTOCOL="SASL_PLAINTEXT", AGENTLOG_KAFKA_SASL_USERNAME=username,
               AGENTLOG_KAFKA_SASL_PASSWORD="not-the-password", AGENTLOG_KAFKA_NAMESPACE="wrongpw")  # fmt: skip
    proc = subprocess.run([sys.executable, "-m", "agentlog", "publish", "-"], env=env, capture_output=True,
                          input=raw("x1", "goal", {"text": "g"}), timeout=180)  # fmt: skip
    assert proc.returncode == 1, proc.stderr.decode()
    assert b"AGENTLOG_KAFKA_SASL_USERNAME/PASSWORD" in proc.stderr and b"not-the-password" not in proc.stderr
