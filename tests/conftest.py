from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from streams.config import Settings
from streams.service import EmbeddedService


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path / "data")


@pytest.fixture
def service(settings: Settings) -> Iterator[EmbeddedService]:
    svc = EmbeddedService(settings)
    yield svc
    svc.close()


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTLOG_")}
    env["AGENTLOG_DATA_DIR"] = str(tmp_path / "cli-data")
    return env


@pytest.fixture(scope="session")
def opensearch_url() -> str:
    """A real OpenSearch: the one named by AGENTLOG_OPENSEARCH_URL (CI starts it with
    infra/up), else started here with the same launcher. Never skipped: a test that
    needs it fails loudly when it cannot be had."""
    import subprocess
    import sys

    url = os.environ.get("AGENTLOG_OPENSEARCH_URL")
    if url:
        return url
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run([sys.executable, str(root / "infra" / "launch.py"), "up", "opensearch"],
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    for line in proc.stdout.splitlines():
        if line.startswith("export AGENTLOG_OPENSEARCH_URL="):
            return line.split("=", 1)[1]
    pytest.fail(f"OpenSearch could not be started with infra/launch.py:\n{proc.stderr[-3000:]}")


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    """A real Apache Kafka broker: AGENTLOG_KAFKA_BOOTSTRAP (CI starts it with infra/up),
    else started here with the same launcher. Fails loudly if it cannot be had."""
    import subprocess
    import sys

    bootstrap = os.environ.get("AGENTLOG_KAFKA_BOOTSTRAP")
    if bootstrap:
        return bootstrap
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run([sys.executable, str(root / "infra" / "launch.py"), "up", "kafka"],
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    for line in proc.stdout.splitlines():
        if line.startswith("export AGENTLOG_KAFKA_BOOTSTRAP="):
            return line.split("=", 1)[1]
    pytest.fail(f"Kafka could not be started with infra/launch.py:\n{proc.stderr[-3000:]}")
