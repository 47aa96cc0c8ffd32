from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx

import pytest

from agentlog.streams.config import Settings
from agentlog.streams.embedded.service import EmbeddedService
from tests.servers import LAUNCHED_LIST, ROOT, launch


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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def start_server(cli_env: dict[str, str]) -> Iterator[Callable[..., tuple[str, dict[str, str]]]]:
    """``start_server(**env)``: ``agentlog run`` on a free loopback port for this test's
    data directory; gives its URL and the environment the CLI needs to reach it."""
    running: list[subprocess.Popen] = []

    def start(**extra_env: str) -> tuple[str, dict[str, str]]:
        port = free_port()
        env = {**cli_env, "AGENTLOG_HTTP_PORT": str(port), **extra_env}
        proc = subprocess.Popen([sys.executable, "-m", "agentlog", "run"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
        running.append(proc)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    return url, env
            except httpx.HTTPError:
                time.sleep(0.2)
        proc.kill()
        raise AssertionError(f"agentlog run did not start: {proc.stderr.read().decode()}")  # type: ignore[union-attr]

    yield start
    for proc in running:
        proc.terminate()
        proc.wait(timeout=60)


@pytest.fixture
def server(start_server: Callable[..., tuple[str, dict[str, str]]]) -> tuple[str, dict[str, str]]:
    """``agentlog run`` serving, its index refreshed only every 30 s (so read-your-writes
    must come from the active state)."""
    return start_server(AGENTLOG_REFRESH_SECONDS="30")


def _docker_answers() -> bool:
    try:
        import docker  # noqa: PLC0415 - only with the test extra

        docker.from_env(timeout=3).ping()
        return True
    except Exception:  # noqa: BLE001 - no client, no socket, no engine: all mean "no Docker"
        return False


_CONTAINERS: list = []
_LAUNCHED_KEY = pytest.StashKey[Path]()  # set on the controller only


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput") and not os.environ.get(LAUNCHED_LIST):  # the run's controller
        fd, path = tempfile.mkstemp(prefix="agentlog-launched-", suffix=".txt")
        os.close(fd)
        os.environ[LAUNCHED_LIST] = path  # the workers it spawns inherit it
        config.stash[_LAUNCHED_KEY] = Path(path)


def _container(service: str) -> str:
    """``service`` in a throwaway container (testcontainers), for machines with Docker."""
    if service == "kafka":
        from testcontainers.community.kafka import KafkaContainer  # noqa: PLC0415

        kafka = KafkaContainer("confluentinc/cp-kafka:7.6.1").with_kraft()
        kafka.start()
        _CONTAINERS.append(kafka)
        return kafka.get_bootstrap_server()
    from testcontainers.community.opensearch import OpenSearchContainer  # noqa: PLC0415

    opensearch = OpenSearchContainer("opensearchproject/opensearch:2.19.1", security_enabled=False)
    opensearch.start()
    _CONTAINERS.append(opensearch)
    return f"http://{opensearch.get_container_host_ip()}:{opensearch.get_exposed_port(9200)}"


def _server(service: str, variable: str) -> str:
    """A real server: the one named by ``variable`` (CI starts it with infra/up); else a
    container when a Docker engine answers; else started here with the same launcher as
    infra/up. Never skipped: a test that needs it fails loudly when it cannot be had."""
    if os.environ.get(variable):
        return os.environ[variable]
    if _docker_answers():
        return _container(service)
    proc = launch(service)
    for line in proc.stdout.splitlines():
        if line.startswith(f"export {variable}="):
            return line.split("=", 1)[1]
    pytest.fail(f"{service} could not be started with infra/launch.py:\n{proc.stderr[-3000:]}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    for container in _CONTAINERS:
        container.stop()
    listed = session.config.stash.get(_LAUNCHED_KEY, None)
    if listed is None:  # a worker: the controller stops what any of them started
        return
    launched = sorted(set(listed.read_text(encoding="utf-8").split())) if listed.exists() else []
    if launched:
        subprocess.run([sys.executable, str(ROOT / "infra" / "launch.py"), "down", *launched],
                       capture_output=True, timeout=120)  # fmt: skip
    listed.unlink(missing_ok=True)


@pytest.fixture(scope="session")
def opensearch_url() -> str:
    return _server("opensearch", "AGENTLOG_OPENSEARCH_URL")


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    return _server("kafka", "AGENTLOG_KAFKA_BOOTSTRAP")
