"""`agentlog rebuild` past one replay batch, with and without a running server (issue 12)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import orjson
import pytest

from agentlog.streams.cli.demo import synthetic_events
from tests.conftest import free_port
from tests.test_e2e_embedded import agentlog

EVENTS = 12_000  # more than two replay batches of 5,000: the first flush used to deadlock


def _publish(env: dict[str, str], tmp_path: Path) -> Path:
    events = tmp_path / "events.jsonl"
    events.write_bytes(b"\n".join(synthetic_events(EVENTS, 40)))
    agentlog(env, "publish", str(events))
    return events


def _states(env: dict[str, str]) -> dict[str, dict]:
    return {t: orjson.loads(agentlog(env, "state", "--json", t).stdout) for t in ("bench-00000", "bench-00017")}


def test_rebuild_of_a_log_longer_than_one_replay_batch_completes_and_lands_on_the_same_state(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    _publish(cli_env, tmp_path)
    agentlog(cli_env, "run", "--until-idle")
    before = _states(cli_env)
    out = orjson.loads(agentlog(cli_env, "rebuild", "--json").stdout)
    assert out == {"events": EVENTS, "threads": 40}
    assert _states(cli_env) == before
    counts = agentlog(cli_env, "sql", "--format", "csv", "SELECT count(), uniqExact(event_id) FROM events").stdout
    assert counts.decode().splitlines()[1] == f"{EVENTS},{EVENTS}"


@pytest.fixture
def running(cli_env: dict[str, str]):
    port = free_port()
    env = {**cli_env, "AGENTLOG_HTTP_PORT": str(port)}
    proc = subprocess.Popen([sys.executable, "-m", "agentlog", "run"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.2)
    yield proc, env
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_rebuild_reports_its_progress_against_the_count_of_the_log(service) -> None:
    service.publish(b"\n".join(synthetic_events(EVENTS, 40)))
    service.catch_up()
    seen: list[tuple[int, int]] = []
    service.rebuild(lambda done, total: seen.append((done, total)))
    assert seen == [(5000, EVENTS), (10000, EVENTS), (EVENTS, EVENTS)]


def test_rebuild_through_a_running_server_completes_and_the_server_still_stops_on_sigterm(
    running, tmp_path: Path
) -> None:
    proc, env = running
    _publish(env, tmp_path)
    agentlog(env, "run", "--until-idle")
    before = _states(env)
    url = f"http://127.0.0.1:{env['AGENTLOG_HTTP_PORT']}"
    answer: list[httpx.Response] = []
    call = threading.Thread(target=lambda: answer.append(httpx.post(f"{url}/rebuild", json={}, timeout=300)))
    call.start()
    progress = []
    while call.is_alive():  # what `agentlog rebuild` shows while the server rebuilds
        progress.append(httpx.get(f"{url}/healthz", timeout=10).json().get("rebuild"))
        time.sleep(0.02)
    call.join()
    assert answer[0].json() == {"events": EVENTS, "threads": 40}
    assert {p["total"] for p in progress if p} == {EVENTS}
    out = orjson.loads(agentlog(env, "rebuild", "--json").stdout)  # and through the command
    assert out == {"events": EVENTS, "threads": 40}
    assert _states(env) == before
    agentlog(env, "publish", "-", stdin=next(iter(synthetic_events(1, 1, seed=99))).replace(b"bench-", b"after-"))
    assert orjson.loads(agentlog(env, "state", "--json", "after-00000").stdout)["event_count"] == 1
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    assert not (Path(env["AGENTLOG_DATA_DIR"]) / "server.json").exists()  # removed on a clean stop


def test_a_rebuild_stopped_by_the_server_shutting_down_is_finished_from_the_topic_on_the_next_start(
    settings, capfd
) -> None:
    from agentlog.streams.rebuild import RebuildInterrupted  # noqa: PLC0415
    from agentlog.streams.embedded.service import EmbeddedService  # noqa: PLC0415

    service = EmbeddedService(settings)
    service.publish(b"\n".join(synthetic_events(EVENTS, 40)))
    service.catch_up()
    before = {t: service.state(t) for t in service.threads()}
    service.stopping.set()  # what SIGTERM to `agentlog run` does
    with pytest.raises(RebuildInterrupted, match="after 5,000 of 12,000"):
        service.rebuild()
    service.close()
    again = EmbeddedService(settings)
    try:
        assert {t: again.state(t) for t in again.threads()} == before
        assert "state.db was missing or empty; rebuilt from the topic" in capfd.readouterr().err
    finally:
        again.close()
