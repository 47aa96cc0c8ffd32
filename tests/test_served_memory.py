"""Where ``agentlog run``'s memory goes (issue 15: the whole pipeline over a million events
under 1.5 GiB, both processes together): chDB's engine lives in the sink process alone,
and the topic is read in offset order through connections with a small page cache."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
import orjson

from agentlog.sinks.sqlite_db import CACHE_KIB, READ_CACHE_KIB
from agentlog.streams.config import Settings
from agentlog.streams.embedded.service import EmbeddedService
from agentlog.streams.embedded.sink_process import SinkHost
from tests.helpers import child_pids, raw


def _maps(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()


def _event(i: int) -> bytes:
    return raw(f"m{i}", "message", {"role": "user", "text": f"walrus {i}"}, i, thread="mem")


def test_agentlog_run_loads_the_chdb_engine_in_its_sink_process_only_and_still_answers_sql(
    start_server,
) -> None:
    url, env = start_server()
    server = orjson.loads((Path(env["AGENTLOG_DATA_DIR"]) / "server.json").read_bytes())["pid"]
    sinks = [c for c in child_pids(server) if b"spawn_main" in Path(f"/proc/{c}/cmdline").read_bytes()]
    assert len(sinks) == 1, child_pids(server)
    with httpx.Client(base_url=url, timeout=30) as http:
        posted = http.post("/events", content=_event(1), headers={"content-type": "application/json"})
        assert posted.status_code == 200
        assert http.post("/flush", json={}).status_code == 200
        assert http.post("/sql", json={"sql": "SELECT count() FROM events"}).json()["rows"] == [[1]]
    assert "_chdb" in _maps(sinks[0])
    assert "_chdb" not in _maps(server), "the serving process loaded chDB (about 250 MiB resident for nothing)"


def test_a_lost_index_under_agentlog_run_is_rebuilt_in_the_server_then_written_by_the_sink_process(
    start_server, settings: Settings
) -> None:
    service = EmbeddedService(settings)
    service.publish(b"\n".join(_event(i) for i in range(1, 6)))
    service.close()
    shutil.rmtree(settings.path("index"))
    url, env = start_server(AGENTLOG_DATA_DIR=str(settings.data_dir))
    server = orjson.loads((settings.path("server.json")).read_bytes())["pid"]
    assert any(b"spawn_main" in Path(f"/proc/{c}/cmdline").read_bytes() for c in child_pids(server))
    with httpx.Client(base_url=url, timeout=30) as http:
        assert http.post("/flush", json={}).status_code == 200
        assert len(http.get("/search", params={"q": "walrus", "limit": 10}).json()["hits"]) == 5
        assert http.post("/sql", json={"sql": "SELECT count() FROM events"}).json()["rows"] == [[5]]


def test_the_processor_and_the_sink_process_read_the_topic_with_a_small_page_cache(settings: Settings) -> None:
    service = EmbeddedService(settings)
    try:
        cache = lambda bus: bus._db.execute("PRAGMA cache_size").fetchone()[0]  # noqa: E731
        assert cache(service.driver.bus) == cache(service.sinks.bus) == -READ_CACHE_KIB
        assert cache(service.bus) == -CACHE_KIB  # publishers keep the cache their index inserts want
    finally:
        service.close()
    host = SinkHost(settings)
    try:
        assert host.bus._db.execute("PRAGMA cache_size").fetchone()[0] == -READ_CACHE_KIB
    finally:
        host.close()
