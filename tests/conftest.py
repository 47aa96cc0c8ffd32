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


def _server(service: str, variable: str) -> str:
    """A real server: the one named by ``variable`` (CI starts it with infra/up), else
    started here with the same launcher. Never skipped: a test that needs it fails
    loudly when it cannot be had."""
    import subprocess
    import sys

    if os.environ.get(variable):
        return os.environ[variable]
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run([sys.executable, str(root / "infra" / "launch.py"), "up", service],
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    for line in proc.stdout.splitlines():
        if line.startswith(f"export {variable}="):
            return line.split("=", 1)[1]
    pytest.fail(f"{service} could not be started with infra/launch.py:\n{proc.stderr[-3000:]}")


@pytest.fixture(scope="session")
def opensearch_url() -> str:
    return _server("opensearch", "AGENTLOG_OPENSEARCH_URL")


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    return _server("kafka", "AGENTLOG_KAFKA_BOOTSTRAP")
