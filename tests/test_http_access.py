"""Issue 12, the HTTP API's rules one by one: the token, the Host allow-list, JSON content
types for writes, streamed body limits, typed and bounded parameters on every path (HTTP,
CLI, the Kafka worker's web server), the OpenAPI document, a bug answered as a JSON 500
that spares the next request, and ``server.json`` (removed on exit, never trusted for
another data directory)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from agentlog.schemas.requests import (
    MAX_SEARCH_LIMIT, ContextQuery, RequestError, SearchQuery, SqlBody, check_search_limit, parse_body, parse_query,
)  # fmt: skip
from agentlog.streams.api.client import SERVER_FILE, server_url
from agentlog.streams.config import Settings
from agentlog.streams.api.http import build_app
from agentlog.streams.api.guard import (
    Policy, bind_refusal, check_content_type, check_host, check_length, check_token, read_body,
)  # fmt: skip
from agentlog.streams.embedded.service import EmbeddedService
from tests.conftest import free_port
from tests.helpers import raw
from tests.test_http_hostile import start_server

TOKEN = "s3cret-token"


# -- the rules, as plain functions ---------------------------------------------------


def test_a_loopback_server_needs_no_token_but_any_other_address_refuses_to_start_without_one() -> None:
    for host in ("127.0.0.1", "localhost", "::1", "[::1]", "127.0.0.2"):
        assert bind_refusal(host, None) is None, host
    for host in ("0.0.0.0", "::", "192.168.1.5", "agentlog.example"):
        reason = bind_refusal(host, None)
        assert reason is not None and "AGENTLOG_API_TOKEN" in reason, host
        assert bind_refusal(host, TOKEN) is None


def test_with_a_token_every_route_but_healthz_needs_it_whole() -> None:
    policy = Policy(token=TOKEN)
    assert check_token(policy, "/search", f"Bearer {TOKEN}") is None
    assert check_token(policy, "/search", f"bearer {TOKEN}") is None  # the scheme is case-insensitive
    assert check_token(policy, "/healthz", None) is None
    for header in (None, "", "Bearer", f"Bearer {TOKEN[:-1]}", f"Bearer {TOKEN}x", f"Basic {TOKEN}", TOKEN):
        refused = check_token(policy, "/search", header)
        assert refused is not None and refused.status == 401 and "Bearer" in refused.body["error"], header
    assert check_token(Policy(token=None), "/sql", None) is None  # loopback without a token: open


def test_a_loopback_server_answers_only_loopback_names_and_the_allowed_list() -> None:
    policy = Policy.of(Settings(allowed_hosts="agentlog.internal, Box.LAN"), "127.0.0.1")
    for host in (
        "localhost",
        "localhost:8787",
        "127.0.0.1:1",
        "[::1]:8787",
        "agentlog.internal:80",
        "box.lan",
    ):
        assert check_host(policy, host, None) is None, host
    for host in (None, "", "evil.example", "127.0.0.1.evil.example", "localhost.evil", "10.0.0.1"):
        refused = check_host(policy, host, None)
        assert refused is not None and refused.status == 421, host
    assert check_host(policy, "localhost", "http://localhost:3000") is None
    for origin in ("http://evil.example", "null", "https://127.0.0.1.evil.example"):
        refused = check_host(policy, "localhost", origin)
        assert refused is not None and refused.status == 403, origin


def test_a_server_beyond_loopback_answers_any_host_unless_given_a_list() -> None:
    assert check_host(Policy.of(Settings(api_token=TOKEN), "0.0.0.0"), "203.0.113.7:8787", None) is None
    listed = Policy.of(Settings(api_token=TOKEN, allowed_hosts="agentlog.example"), "0.0.0.0")
    assert check_host(listed, "agentlog.example", None) is None
    assert check_host(listed, "203.0.113.7", None) is not None


def test_a_post_needs_a_json_content_type_and_a_get_does_not() -> None:
    for ctype in (
        "application/json",
        "application/JSON; charset=utf-8",
        "application/x-ndjson",
        "application/jsonl",
    ):
        assert check_content_type("POST", ctype) is None, ctype
    for ctype in (
        None,
        "",
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ):
        refused = check_content_type("POST", ctype)
        assert refused is not None and refused.status == 415, ctype
    assert check_content_type("GET", None) is None


def test_a_body_is_refused_as_soon_as_it_passes_the_limit_and_the_rest_is_never_read() -> None:
    pulled = []

    async def chunks() -> AsyncIterator[bytes]:
        for n in range(1000):
            pulled.append(n)
            yield b"x" * 1024

    with pytest.raises(RequestError) as refused:
        asyncio.run(read_body(chunks(), 10 * 1024))
    assert refused.value.status == 413 and len(pulled) == 11
    assert asyncio.run(read_body(chunks(), 2 * 1024 * 1024)) == b"x" * 1024 * 1000
    assert check_length(Policy(max_request_bytes=100), "101").status == 413  # type: ignore[union-attr]
    assert check_length(Policy(max_request_bytes=100), "100") is None


def test_the_settings_read_token_limit_and_hosts_from_the_environment_and_never_show_the_token() -> None:
    settings = Settings.from_env({"AGENTLOG_API_TOKEN": TOKEN, "AGENTLOG_MAX_REQUEST_BYTES": "1000",
                                  "AGENTLOG_ALLOWED_HOSTS": "a.example", "AGENTLOG_DATA_DIR": "/tmp/x"})  # fmt: skip
    assert (settings.api_token, settings.max_request_bytes, settings.allowed_hosts) == (
        TOKEN,
        1000,
        "a.example",
    )
    assert TOKEN not in repr(settings)
    assert Settings().max_request_bytes == 64 * 1024 * 1024


# -- typed, bounded requests ---------------------------------------------------------


def test_search_limit_is_bounded_in_the_request_the_service_and_the_cli(service: EmbeddedService,
                                                                       cli_env: dict[str, str]) -> None:  # fmt: skip
    for bad in ("0", "-1", "1001", "2000000000", "99999999999999999999"):
        with pytest.raises(RequestError):
            parse_query(SearchQuery, [("limit", bad)])
    assert parse_query(SearchQuery, [("limit", str(MAX_SEARCH_LIMIT))]).limit == MAX_SEARCH_LIMIT
    for bad_limit in (0, -1, 1001, 2_000_000_000):
        with pytest.raises(ValueError, match="between 1 and 1000"):
            service.search("x", limit=bad_limit)
    assert check_search_limit(1) == 1
    proc = subprocess.run([sys.executable, "-m", "agentlog", "search", "x", "--limit", "2000000000"],
                          env=cli_env, capture_output=True, timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 1 and b"between 1 and 1000" in proc.stderr, proc.stderr


def test_a_parameter_given_twice_or_unknown_is_refused_with_what_the_route_takes() -> None:
    with pytest.raises(RequestError, match="given twice"):
        parse_query(SearchQuery, [("q", "a"), ("q", "b")])
    with pytest.raises(RequestError, match="this route takes: budget, query, model"):
        parse_query(ContextQuery, [("budget", "10"), ("tokens", "5")])
    with pytest.raises(RequestError, match="budget"):
        parse_query(ContextQuery, [])


def test_a_sql_body_must_be_an_object_with_a_bounded_string() -> None:
    assert parse_body(SqlBody, b'{"sql": "SELECT 1"}').sql == "SELECT 1"
    for body in (b'{"query": "SELECT 1"}', b'{"sql": 5}', b'["SELECT 1"]', b"", b"{", b'{"sql": ""}',
                 json.dumps({"sql": "x" * 100_001}).encode(), b"[" * 5000 + b"]" * 5000):  # fmt: skip
        with pytest.raises(RequestError) as refused:
            parse_body(SqlBody, body)
        assert refused.value.status == 400 and refused.value.body["error"], body[:40]


def test_every_served_route_and_method_is_in_the_openapi_document_and_nothing_else(
    service: EmbeddedService,
) -> None:
    app = build_app(service)
    document = app.openapi()
    assert document["openapi"].startswith("3.1")
    served = {(route.path, method.lower()) for route in app.routes
              for method in route.methods if method != "HEAD"}  # type: ignore[attr-defined]  # fmt: skip
    documented = {(path, method) for path, ops in document["paths"].items() for method in ops}
    assert served == documented
    search = document["paths"]["/search"]["get"]
    limit = next(p for p in search["parameters"] if p["name"] == "limit")
    assert (limit["schema"]["minimum"], limit["schema"]["maximum"]) == (1, 1000)
    assert {"400", "401", "421", "500"} <= set(search["responses"])
    assert "SqlBody" in document["components"]["schemas"]


# -- in-process over real HTTP: a bug is a JSON 500 that spares the next request ---------


class _BuggyRead(EmbeddedService):
    """A real service with one injected bug (a read of ``boom`` raises), standing in for
    whatever unforeseen failure a handler may meet."""

    def read(self, event_id: str) -> dict[str, Any]:
        if event_id == "boom":
            raise RuntimeError("an unforeseen bug")
        return super().read(event_id)



@pytest.fixture
def in_process(settings: Settings) -> Iterator[str]:
    service = _BuggyRead(settings)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(build_app(service, background=service.run_forever), host="127.0.0.1", port=port, log_level="critical")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(30)
    service.close()


def test_an_unexpected_failure_is_a_logged_json_500_and_the_next_request_works(in_process: str,
                                                                              caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    url = in_process
    publish = httpx.post(f"{url}/events", content=raw("ok1", "goal", {"text": "fine"}, thread="b"),
                         headers={"Content-Type": "application/x-ndjson"})  # fmt: skip
    assert publish.json()["accepted"] == 1
    with caplog.at_level("ERROR", logger="agentlog.http"):
        failed = httpx.get(f"{url}/events/boom")
    assert failed.status_code == 500 and "failed unexpectedly" in failed.json()["error"]
    assert "an unforeseen bug" not in failed.text  # the reason is logged, not shown
    assert any("GET /events/boom failed" in r.getMessage() for r in caplog.records)
    httpx.post(f"{url}/flush", headers={"Content-Type": "application/json"})
    assert httpx.get(f"{url}/events/ok1").json()["event"]["payload"]["text"] == "fine"
    assert httpx.get(f"{url}/healthz").json()["status"] == "ok"


# -- agentlog run: the bind rule and server.json ---------------------------------------


def _env(tmp: Path, name: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTLOG_")}
    env["AGENTLOG_DATA_DIR"] = str(tmp / name)
    return env


def _cli(env: dict[str, str], *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agentlog", *args], env=env, input=stdin,
                          capture_output=True, timeout=120, check=False)  # fmt: skip


def test_run_refuses_to_listen_beyond_loopback_without_a_token(tmp_path: Path) -> None:
    env = _env(tmp_path, "open")
    proc = subprocess.run([sys.executable, "-m", "agentlog", "run", "--host", "0.0.0.0", "--port", str(free_port())],
                          env=env, capture_output=True, timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 2 and b"AGENTLOG_API_TOKEN" in proc.stderr, proc.stderr
    assert not (tmp_path / "open" / SERVER_FILE).exists()


def test_server_json_is_removed_when_the_server_stops_on_sigterm(tmp_path: Path) -> None:
    served = start_server(_env(tmp_path, "d"), tmp_path / "stderr.log")
    marker = tmp_path / "d" / SERVER_FILE
    info = json.loads(marker.read_text())
    assert info["data_dir"] == str((tmp_path / "d").resolve()) and info["instance"]
    served.proc.send_signal(signal.SIGTERM)
    assert served.proc.wait(timeout=60) == 0
    assert not marker.exists()


def test_a_stale_server_json_naming_another_directorys_server_is_never_used(tmp_path: Path) -> None:
    env_a, env_b = _env(tmp_path, "a"), _env(tmp_path, "b")
    a = start_server(env_a, tmp_path / "a.log")
    assert _cli(a.env, "publish", "-", stdin=raw("a1", "goal", {"text": "in a"}, thread="ta")).returncode == 0
    a.proc.kill()  # kill -9: no cleanup, A's server.json stays and names A's port
    a.proc.wait(timeout=30)
    assert (tmp_path / "a" / SERVER_FILE).exists()
    b = start_server(env_b, tmp_path / "b.log", port=a.port)  # B now holds that very port
    try:
        assert (
            _cli(b.env, "publish", "-", stdin=raw("b1", "goal", {"text": "in b"}, thread="tb")).returncode
            == 0
        )
        settings_a = Settings.from_env(env_a)
        assert server_url(settings_a) is None
        assert server_url(Settings.from_env(env_b)) == b.url
        # Commands for A answer from A's own stores, never from B's server.
        read = _cli(env_a, "read", "a1", "--json")
        assert read.returncode == 0 and json.loads(read.stdout)["event"]["thread_id"] == "ta", read.stderr
        counted = _cli(env_a, "sql", "SELECT count() AS n FROM events WHERE event_id = 'b1'", "--json")
        assert json.loads(counted.stdout) == [{"n": 0}], counted.stderr
        assert _cli(env_a, "read", "b1").returncode == 1
    finally:
        b.proc.terminate()
        b.proc.wait(timeout=60)


def test_healthz_answers_without_the_token_but_tells_no_paths(tmp_path: Path) -> None:
    env = {**_env(tmp_path, "h"), "AGENTLOG_API_TOKEN": TOKEN}
    served = start_server(env, tmp_path / "stderr.log")
    try:
        bare = httpx.get(f"{served.url}/healthz").json()
        assert bare["status"] == "ok" and bare["instance"] and str(tmp_path) not in json.dumps(bare)
        full = httpx.get(f"{served.url}/healthz", headers={"Authorization": f"Bearer {TOKEN}"}).json()
        assert full["data_dir"] == str((tmp_path / "h").resolve()) and full["instance"] == bare["instance"]
        assert httpx.get(f"{served.url}/search", params={"q": "x"}).status_code == 401
    finally:
        served.proc.terminate()
        served.proc.wait(timeout=60)


def test_with_a_token_the_server_listens_beyond_loopback_and_answers_any_host_with_the_token(
    tmp_path: Path,
) -> None:
    env = {**_env(tmp_path, "wide"), "AGENTLOG_API_TOKEN": TOKEN, "AGENTLOG_HTTP_HOST": "0.0.0.0"}
    served = start_server(env, tmp_path / "stderr.log")
    try:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        named = httpx.get(
            f"{served.url}/search", params={"q": "x"}, headers={**auth, "Host": "agentlog.example"}
        )
        assert named.status_code == 200, named.text
        assert httpx.get(f"{served.url}/search", params={"q": "x"}).status_code == 401
        assert server_url(Settings.from_env(env)) == served.url  # server.json names a reachable address
    finally:
        served.proc.terminate()
        served.proc.wait(timeout=60)


def test_a_cli_without_the_servers_token_is_told_to_set_agentlog_api_token(tmp_path: Path) -> None:
    env = {**_env(tmp_path, "t"), "AGENTLOG_API_TOKEN": TOKEN}
    served = start_server(env, tmp_path / "stderr.log")
    try:
        tokenless = {k: v for k, v in served.env.items() if k != "AGENTLOG_API_TOKEN"}
        for given in (tokenless, {**tokenless, "AGENTLOG_API_TOKEN": "wrong"}):
            done = _cli(given, "state", "t1")
            assert done.returncode == 1
            assert "set AGENTLOG_API_TOKEN to the server's token" in done.stderr.decode(), done.stderr
    finally:
        served.proc.terminate()
        served.proc.wait(timeout=60)
