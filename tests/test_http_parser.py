"""The servers' HTTP parser (``streams/api/http_parser.py``, httptools with bounds) against odd
and hostile HTTP/1.1: raw bytes over a socket to a real ``agentlog run``. Each case is one
where httptools, as uvicorn runs it, behaved worse than the h11 parser it replaced."""

from __future__ import annotations

import json
import os
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentlog.streams.api.http_parser import MAX_HEAD_BYTES, MAX_HEADERS
from tests.test_http_hostile import Served, _rss_mib, start_server

HOST = b"Host: 127.0.0.1\r\n"
HEALTH = b"GET /healthz HTTP/1.1\r\n" + HOST + b"\r\n"
SQL = b'{"sql": "SELECT 1"}'


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("parser")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTLOG_")}
    env["AGENTLOG_DATA_DIR"] = str(tmp / "data")
    server = start_server(env, tmp / "stderr.log")
    yield server
    server.proc.terminate()
    server.proc.wait(timeout=60)


def exchange(port: int, *pieces: bytes, pause: float = 0.0, wait: float = 3.0) -> tuple[list[int], bytes, bool]:
    """Send ``pieces`` (``pause`` seconds apart) on one connection; the statuses answered,
    the bytes, and whether the server closed the connection within ``wait`` seconds."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def write() -> None:
            try:
                for piece in pieces:
                    sock.sendall(piece)
                    time.sleep(pause)
            except OSError:
                pass  # refused and closed while it was still being sent

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        answer, closed = b"", False
        try:
            while chunk := sock.recv(65536):
                answer += chunk
            closed = True
        except TimeoutError:
            pass
        except OSError:
            closed = True
    return [int(s) for s in re.findall(rb"HTTP/1\.1 (\d{3}) ", answer)], answer, closed


def healthy(served: Served) -> bool:
    return exchange(served.port, HEALTH.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))[0] == [200]


def _chunked_sql(tail: bytes) -> bytes:
    return (b"POST /sql HTTP/1.1\r\n" + HOST + b"Content-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" + tail)  # fmt: skip


def test_an_endless_trailer_is_refused_with_431_and_the_server_keeps_no_more_than_its_bound(served: Served) -> None:
    before = _rss_mib(served.proc.pid)
    endless = [b"a" * 65536] * 512  # 32 MiB: httptools kept all of it (and copied it once a read)
    statuses, answer, closed = exchange(served.port, _chunked_sql(b"13\r\n" + SQL + b"\r\n0\r\nX-T: "), *endless)
    assert statuses == [431] and closed, answer[:300]
    assert _rss_mib(served.proc.pid) - before < 16
    assert healthy(served)


def test_an_endless_chunk_extension_is_refused_with_431(served: Served) -> None:
    statuses, answer, closed = exchange(served.port, _chunked_sql(b"13;x="), *[b"a" * 65536] * 64)
    assert statuses == [431] and closed, answer[:300]


def test_an_endless_run_of_blank_lines_before_a_request_is_refused_with_431(served: Served) -> None:
    statuses, answer, closed = exchange(served.port, *[b"\r\n" * 32768] * 64)
    assert statuses == [431] and closed, answer[:300]


def test_a_request_with_more_header_fields_than_the_bound_is_refused_with_431(served: Served) -> None:
    before = _rss_mib(served.proc.pid)
    flood = b"GET /healthz HTTP/1.1\r\n" + HOST + b"a:\r\n" * 250_000 + b"\r\n"  # 1 MiB: +27 MiB of header pairs
    statuses, answer, closed = exchange(served.port, flood)
    assert statuses == [431] and closed, answer[:300]
    assert str(MAX_HEADERS) in json.loads(answer.partition(b"\r\n\r\n")[2])["error"]
    assert _rss_mib(served.proc.pid) - before < 16
    many = b"GET /healthz HTTP/1.1\r\n" + HOST + b"".join(b"X-%d: v\r\n" % i for i in range(MAX_HEADERS - 2))
    assert exchange(served.port, many + b"Connection: close\r\n\r\n")[0] == [200]


@pytest.mark.parametrize("where", ["header", "url"])
def test_a_head_over_the_bound_sent_in_one_write_is_refused_with_431_and_one_under_it_is_answered(
        served: Served, where: str) -> None:  # fmt: skip
    """The stall count sees only reads in which the parser made no progress: a head that
    arrives whole in one read is measured as it is parsed."""
    def request(n: int) -> bytes:
        if where == "url":
            return b"GET /healthz?pad=" + b"a" * n + b" HTTP/1.1\r\n" + HOST + b"Connection: close\r\n\r\n"
        return b"GET /healthz HTTP/1.1\r\n" + HOST + b"X-Pad: " + b"a" * n + b"\r\nConnection: close\r\n\r\n"

    statuses, answer, closed = exchange(served.port, request(MAX_HEAD_BYTES + 2_000))
    assert statuses == [431] and closed, answer[:300]
    assert "exceed" in json.loads(answer.partition(b"\r\n\r\n")[2])["error"]
    assert exchange(served.port, request(MAX_HEAD_BYTES - 2_000))[0] == [200]


def test_a_body_asking_for_an_upgrade_is_refused_never_read_as_a_second_request(served: Served) -> None:
    smuggled = b"GET /healthz HTTP/1.1\r\n" + HOST + b"\r\n"
    head = (b"POST /sql HTTP/1.1\r\n" + HOST + b"Content-Type: application/json\r\nConnection: Upgrade\r\n"
            b"Upgrade: foo\r\nContent-Length: %d\r\n\r\n" % len(smuggled))  # fmt: skip
    statuses, answer, closed = exchange(served.port, head, smuggled, pause=0.3)
    assert statuses == [400] and closed, answer[:500]  # httptools: 400 (empty body), then 200 for the body
    assert b"upgrade" in answer.lower()


def test_a_bodiless_request_asking_for_an_upgrade_is_answered_and_its_connection_closed(served: Served) -> None:
    h2c = HEALTH.replace(b"\r\n\r\n", b"\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n")
    statuses, answer, closed = exchange(served.port, h2c + HEALTH)  # curl --http2 sends such a request
    assert statuses[:1] == [200] and closed, answer[:500]  # httptools: the second request silently dropped, kept open
    assert b"connection: close" in answer.lower()


def test_a_trailer_never_becomes_a_header_of_the_request(served: Served) -> None:
    otlp = (b"POST /v1/traces HTTP/1.1\r\n" + HOST + b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
            b"Connection: close\r\n\r\n2\r\n{}\r\n0\r\nContent-Encoding: gzip\r\n\r\n")  # fmt: skip
    statuses, answer, _ = exchange(served.port, otlp)
    assert statuses == [200], answer[-300:]  # httptools: 400, the body "does not decompress as gzip"


def test_a_malformed_request_pipelined_behind_a_good_one_leaves_its_answer_in_place(served: Served) -> None:
    statuses, answer, closed = exchange(served.port, HEALTH + b"garbage\r\n\r\n")
    assert statuses == [200, 400] and closed, answer[:500]  # httptools: only the 400, the 200 lost


def test_an_oversized_head_pipelined_behind_a_good_request_is_answered_after_it(served: Served) -> None:
    # Past the read it begins in (up to 256 KiB, which is not counted: it completed a request) and the bound.
    huge = b"GET /healthz HTTP/1.1\r\n" + HOST + b"X-A: " + b"a" * (256 * 1024 + 2 * MAX_HEAD_BYTES)
    statuses, answer, closed = exchange(served.port, HEALTH + huge)
    assert statuses == [200, 431] and closed, answer[:500]


def test_a_request_pipelined_after_a_large_body_is_never_refused_with_431(served: Served) -> None:
    body = b"\n" * (3 * MAX_HEAD_BYTES)
    post = (b"POST /events HTTP/1.1\r\n" + HOST + b"Content-Type: application/x-ndjson\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body) + body)  # fmt: skip
    chunked = _chunked_sql(b"".join(b"10000\r\n" + b" " * 65536 + b"\r\n" for _ in range(48)) + b"0\r\n\r\n")
    for first in (post, chunked):
        statuses, answer, _ = exchange(served.port, first + HEALTH, wait=5)
        assert len(statuses) == 2 and statuses[1] == 200 and 431 not in statuses, answer[:500]


def test_a_head_under_the_bound_is_answered_however_it_is_split_and_one_over_it_refused(served: Served) -> None:
    def head(size: int) -> list[bytes]:
        request = b"GET /healthz HTTP/1.1\r\n" + HOST + b"X-A: " + b"a" * size + b"\r\nConnection: close\r\n\r\n"
        return [request[i : i + 1024] for i in range(0, len(request), 1024)]

    assert exchange(served.port, *head(MAX_HEAD_BYTES - 1024), pause=0.001)[0] == [200]
    assert exchange(served.port, *head(MAX_HEAD_BYTES + 1024), pause=0.001)[0] == [431]


def test_many_connections_each_sending_a_megabyte_head_leave_the_server_no_bigger(served: Served) -> None:
    before, sockets = _rss_mib(served.proc.pid), []
    for _ in range(40):  # at a 1 MiB bound each connection kept its megabyte: +40 MiB
        sock = socket.create_connection(("127.0.0.1", served.port), timeout=5)
        sockets.append(sock)
        try:
            sock.sendall(b"GET /healthz HTTP/1.1\r\n" + HOST + b"X-A: " + b"a" * 1_000_000)
        except OSError:
            pass  # refused and closed while it was still being sent
    time.sleep(1)
    grown = _rss_mib(served.proc.pid) - before
    for sock in sockets:
        sock.close()
    assert grown < 16, grown


def test_a_head_sent_byte_by_byte_is_answered(served: Served) -> None:
    request = HEALTH.replace(b"\r\n\r\n", b"\r\nX-Slow: yes\r\nConnection: close\r\n\r\n")
    assert exchange(served.port, *[request[i : i + 1] for i in range(len(request))], pause=0.002)[0] == [200]


def test_after_the_odd_requests_the_server_still_answers_and_logged_no_failure_but_hang_ups(served: Served) -> None:
    assert served.proc.poll() is None and healthy(served)
    # A request refused while its body was read (the trailer, the chunk extension) leaves its
    # handler reading a closed connection: a client that left, not a server failure.
    log = Path(served.stderr).read_text()
    assert "Traceback" not in log, log
