"""The HTTP client's kept connections (``agentlog.streams.api.wire``) answer as httpx did.

``RemoteService`` sends plain-HTTP requests over kept ``http.client`` connections and
everything else through httpx: for the same server behaviour both must give the same
answer or the same exception. Each test runs a small real HTTP server of its own.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from agentlog.streams.api.client import RemoteService, Unreachable
from agentlog.streams.api.wire import ONE_WRITE_BYTES, _Connection


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        """Quiet."""

    def answer(self, body: dict[str, Any], status: int = 200) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextmanager
def _serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _both(url: str, call: Callable[[RemoteService], Any]) -> list[tuple[str, Any]]:
    """``call``'s outcome on the kept connections, then through httpx."""
    out = []
    for wire in (True, False):
        remote = RemoteService(url, busy_seconds=0)
        assert remote.wire is not None
        if not wire:
            remote.wire = None
        try:
            out.append(("ok", call(remote)))
        except Exception as error:  # noqa: BLE001 - compared between the two paths
            out.append(("raised", type(error).__name__))
        finally:
            remote.close()
    return out


class _Moved(_Handler):
    def do_GET(self) -> None:
        if self.path.startswith("/old"):
            self.send_response(308)
            self.send_header("Location", self.path[len("/old"):])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.answer({"status": "ok", "path": self.path})


def test_a_redirect_is_followed_on_kept_connections_as_httpx_follows_it() -> None:
    with _serving(_Moved) as url:
        wire, through_httpx = _both(url + "/old", lambda r: r.health())
    assert through_httpx == ("ok", {"status": "ok", "path": "/healthz"})
    assert wire == through_httpx


class _LosesSecondAnswer(_Handler):
    """Reads each POST whole and counts it; the second on a connection loses its answer."""

    posts = 0

    def handle(self) -> None:
        self.served = 0
        super().handle()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        type(self).posts += 1
        self.served += 1
        if self.served > 1:
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.answer({"revoked": "e1"})


def test_a_post_whose_answer_was_lost_is_never_sent_again() -> None:
    outcomes = []
    for wire in (True, False):
        _LosesSecondAnswer.posts = 0
        with _serving(_LosesSecondAnswer) as url:
            remote = RemoteService(url, busy_seconds=0)
            if not wire:
                remote.wire = None
            remote.memory_revoke("e1")
            with pytest.raises(Unreachable):  # the caller knows the answer was lost
                remote.memory_revoke("e2")
            remote.close()
        outcomes.append(_LosesSecondAnswer.posts)
    assert outcomes == [2, 2]  # each POST reached the server once


class _Slow(_Handler):
    def do_GET(self) -> None:
        body = json.dumps({"x": "y" * 100_000}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body[:10])
        self.wfile.flush()
        time.sleep(1.0)
        try:
            self.wfile.write(body[10:])
        except OSError:
            pass


def test_closing_the_client_during_another_thread_s_request_gives_that_thread_unreachable() -> None:
    with _serving(_Slow) as url:
        remote = RemoteService(url, busy_seconds=0)
        got: list[BaseException | None] = []

        def ask() -> None:
            try:
                remote.health()
                got.append(None)
            except BaseException as error:  # noqa: BLE001 - inspected below
                got.append(error)

        asking = threading.Thread(target=ask)
        asking.start()
        time.sleep(0.3)
        remote.close()
        asking.join(5)
    assert len(got) == 1 and isinstance(got[0], Unreachable), got


class _Says(_Handler):
    name = "direct"

    def do_GET(self) -> None:
        self.answer({"via": self.name})


class _Proxy(_Says):
    name = "proxy"


def test_a_url_the_environment_sends_through_a_proxy_goes_through_it(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("http_proxy", "HTTP_PROXY", "no_proxy", "NO_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    with _serving(_Says) as url, _serving(_Proxy) as proxy:
        monkeypatch.setenv("ALL_PROXY", proxy)
        remote = RemoteService(url, busy_seconds=0)
        assert remote.wire is None  # httpx, which honours the proxy
        assert remote.health() == {"via": "proxy"}
        remote.close()
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        remote = RemoteService(url, busy_seconds=0)
        assert remote.wire is not None and remote.health() == {"via": "direct"}
        remote.close()


def test_a_text_body_is_sent_as_utf8_as_httpx_sends_it() -> None:
    received: list[bytes] = []

    class Echo(_Handler):
        def do_POST(self) -> None:
            received.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.answer({"accepted": 1, "rejected": 0})

    line = '{"text": "café 漢字"}'
    with _serving(Echo) as url:
        assert [o for o, _ in _both(url, lambda r: r.publish(line))] == ["ok", "ok"]  # type: ignore[arg-type]
    assert received == [line.encode(), line.encode()]


def test_a_long_answer_is_read_with_no_collection_in_the_middle_of_it() -> None:
    """A long thread's state is ten thousand lists and dicts: collections started while
    they are built (one per 700 new objects) move them, still young, into the older
    generations, and a full pass of the caller's heap follows every few hundred steps."""
    import gc

    import orjson

    from agentlog.streams.api.client import PAUSED_PARSE_BYTES, _json
    from agentlog.streams.api.wire import Answer

    body = orjson.dumps({"plan": [{"step_id": f"s{i}", "status": "done", "tags": [i]} for i in range(5000)]})
    assert len(body) >= PAUSED_PARSE_BYTES
    answer = Answer(200, body)
    collections: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    gc.callbacks.append(count)
    try:
        gc.collect()
        collections.clear()
        orjson.loads(body)
        assert len(collections) >= 5, "read with the collector running, it collects all along (the check can fail)"
        gc.collect()
        collections.clear()
        plan = _json(answer)["plan"]
        assert len(collections) <= 1  # once, after the read, counting what it built
        assert plan[4999]["tags"] == [4999]
        assert gc.isenabled()
    finally:
        gc.callbacks.remove(count)


class _Echo(_Handler):
    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.answer({"accepted": len(body), "rejected": 0})


@pytest.mark.parametrize(("size", "writes"), [(1, 1), (4096, 1), (ONE_WRITE_BYTES, 1), (ONE_WRITE_BYTES + 1, 2)])
def test_a_small_body_goes_out_in_the_same_write_as_the_request_head(monkeypatch: pytest.MonkeyPatch, size: int,
                                                                     writes: int) -> None:  # fmt: skip
    sent: list[int] = []
    send = _Connection.send
    monkeypatch.setattr(_Connection, "send", lambda self, data: (sent.append(len(data)), send(self, data))[1])
    with _serving(_Echo) as url:
        remote = RemoteService(url)
        try:
            report = remote.publish(b"a" * size)
        finally:
            remote.close()
    assert report.accepted == size  # the server read the whole body, right after the head
    assert len(sent) == writes and sum(sent) > size
