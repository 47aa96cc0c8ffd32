"""Issue 12, the HTTP API: a corpus of hostile requests, sent as raw bytes over a socket to
a real ``agentlog run`` (a subprocess on a free loopback port, with an API token). Every
answer is a 4xx (or a documented 2xx) with a JSON ``error``, never a 5xx, each in time;
afterwards the service still ingests, and the event is found in state, read, SQL and search.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import free_port
from tests.helpers import raw

TOKEN = "hostile-test-token-7f3a9c"
LIMIT = 256 * 1024
"""AGENTLOG_MAX_REQUEST_BYTES of the server under attack."""
ANSWER_WITHIN = 10.0
"""Seconds any one hostile request may take to be answered."""


@dataclass(frozen=True)
class Attack:
    name: str
    method: str
    target: str
    body: bytes = b""
    expect: tuple[int, ...] = (400,)
    content_type: str | None = "application/json"
    host: str | None = "127.0.0.1"
    token: str | None = TOKEN
    extra: tuple[tuple[str, str], ...] = ()
    version: str = "HTTP/1.1"
    length: str | None = None
    """A Content-Length to claim instead of the body's own."""
    chunked: bool = False
    parser: bool = False
    """Refused by the HTTP parser (400, in JSON as the app's refusals) before it reaches the app."""

    def request(self) -> bytes:
        lines = [f"{self.method} {self.target} {self.version}"]
        if self.host is not None:
            lines.append(f"Host: {self.host}")
        if self.token is not None:
            lines.append(f"Authorization: Bearer {self.token}")
        if self.content_type is not None and self.method == "POST":
            lines.append(f"Content-Type: {self.content_type}")
        if self.chunked:
            lines.append("Transfer-Encoding: chunked")
        elif self.length is not None or self.body or self.method == "POST":
            lines.append(f"Content-Length: {self.length if self.length is not None else len(self.body)}")
        lines += [f"{k}: {v}" for k, v in self.extra]
        lines.append("Connection: close")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8")
        if not self.chunked:
            return head + self.body
        step = 16 * 1024
        chunks = [self.body[i : i + step] for i in range(0, len(self.body), step)]
        return head + b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"


def _get(name: str, target: str, expect: tuple[int, ...] = (400,), **kw: object) -> Attack:
    return Attack(name, "GET", target, expect=expect, **kw)  # type: ignore[arg-type]


def _post(name: str, target: str, body: bytes, expect: tuple[int, ...] = (400,), **kw: object) -> Attack:
    return Attack(name, "POST", target, body, expect=expect, **kw)  # type: ignore[arg-type]


def _deep(n: int) -> bytes:
    return b"[" * n + b"]" * n


def _deep_object(n: int) -> bytes:
    return b'{"a":' * n + b"1" + b"}" * n


LONG_ID = "a" * 10_000
HUGE = "99999999999999999999"


def corpus() -> list[Attack]:
    attacks: list[Attack] = []
    # -- /sql bodies: malformed JSON, wrong shapes and types, too long --------------
    bad_sql_bodies = {
        "empty body": b"", "open brace": b"{", "truncated": b'{"sql": "SELECT', "null": b"null",
        "number": b"5", "string": b'"SELECT 1"', "list": b'["SELECT 1"]', "query key": b'{"query": "SELECT 1"}',
        "sql number": b'{"sql": 5}', "sql null": b'{"sql": null}', "sql list": b'{"sql": ["SELECT 1"]}',
        "sql object": b'{"sql": {"a": 1}}', "sql empty": b'{"sql": ""}', "sql bool": b'{"sql": true}',
        "extra key": b'{"sql": "SELECT 1", "readonly": 0}', "sql twice": b'{"sql": "SELECT 1", "sql": "SELECT 2"}', "NaN": b'{"sql": NaN}', "bare word": b"SELECT 1",
        "invalid utf-8": b'{"sql": "\xff\xfe"}', "deep list": _deep(10_000), "deep object": _deep_object(10_000),
        "huge number": b'{"sql": 1' + b"0" * 5000 + b"}", "sql too long": json.dumps({"sql": "SELECT 1 " + "-" * 120_000}).encode(),
        "trailing garbage": b'{"sql": "SELECT 1"} xx', "single quotes": b"{'sql': 'SELECT 1'}",
    }  # fmt: skip
    attacks += [_post(f"sql {name}", "/sql", body) for name, body in bad_sql_bodies.items()]
    # -- /search parameters -----------------------------------------------------------
    bad_search = {
        "limit 0": "limit=0", "limit -1": "limit=-1", "limit 2e9": "limit=2000000000", "limit 1001": "limit=1001",
        "limit huge": f"limit={HUGE}", "limit word": "limit=ten", "limit float": "limit=1.5", "limit empty": "limit=",
        "limit twice": "limit=1&limit=2", "q twice": "q=a&q=b", "since word": "since=soon", "until word": "until=later",
        "since_ms negative": "since_ms=-1", "since_ms huge": f"since_ms={HUGE}", "since past year 9999": "since=999999999999999",
        "thread dotdot slash": "thread=../../etc/passwd", "thread NUL": "thread=a%00b", "thread long": f"thread={LONG_ID}",
        "thread unicode": "thread=%C3%A9t%C3%A9", "thread emoji": "thread=%F0%9F%92%A5", "thread empty": "thread=",
        "after long": "after=" + "x" * 200, "after space": "after=a%20b", "q long": "q=" + "a" * 5000,
        "q NUL": "q=a%00b", "unknown param": "limt=5", "kind long": "kind=" + "k" * 300, "project NUL": "project=%00",
        "tool long": "tool=" + "t" * 1000, "window NUL": "window=w%00",
        "kind misspelt": "kind=tool_results", "kind bogus": "kind=bogus",
    }  # fmt: skip
    attacks += [_get(f"search {name}", f"/search?{query}") for name, query in bad_search.items()]
    attacks += [
        _get("search unicode query is fine", "/search?q=%E6%97%A5%E6%9C%AC%20caf%C3%A9", expect=(200,)),
        _get("search limit 1000 is fine", "/search?q=x&limit=1000", expect=(200,)),
        _get("search a 70,000-character query string", "/search?q=" + "a" * 70_000, expect=(400, 414, 431)),
        _get("search by an event kind is fine", "/search?q=x&kind=tool_result", expect=(200,)),
        _get("search invalid percent escape", "/search?q=%ZZ%", expect=(200,)),
    ]
    # -- /threads/{id}/context --------------------------------------------------------
    bad_context = {
        "no budget": "", "budget 0": "budget=0", "budget -5": "budget=-5", "budget huge": f"budget={HUGE}",
        "budget 1e3": "budget=1e3", "budget word": "budget=lots", "budget past max": "budget=2000001",
        "budget twice": "budget=10&budget=20", "budget blank": "budget=%20", "model long": "budget=100&model=" + "m" * 300,
        "query NUL": "budget=100&query=%00", "unknown param": "budget=100&tokens=5",
    }  # fmt: skip
    attacks += [_get(f"context {name}", f"/threads/t1/context?{q}") for name, q in bad_context.items()]
    # -- ids in paths -----------------------------------------------------------------
    bad_ids = {
        "NUL": "a%00b", "long": LONG_ID, "space": "a%20b", "unicode": "%C3%A9", "slash encoded": "a%2Fb",
        "dotdot encoded": "..%2F..%2Fetc", "quote": "a%27b", "semicolon": "a%3Bb", "newline": "a%0Ab",
        "129 chars": "b" * 129, "angle": "%3Cscript%3E",
    }  # fmt: skip
    for name, ident in bad_ids.items():
        # An encoded slash splits no route here (the path is decoded first): it finds none.
        expect = (400, 404)
        attacks.append(_get(f"state id {name}", f"/threads/{ident}/state", expect=expect))
        attacks.append(_get(f"read id {name}", f"/events/{ident}", expect=expect))
    attacks += [
        _get("context id long", f"/threads/{LONG_ID}/context?budget=100", expect=(400,)),
        _get("state dotdot", "/threads/../state", expect=(404,)),
        _get("read dotdot", "/events/../../etc/passwd", expect=(404,)),
        _get("read empty id", "/events/", expect=(404,)),
        _get("unknown route", "/nope", expect=(404,)),
        _get("unknown route NUL", "/%00", expect=(404,)),
        _get("long unknown route", "/" + "x" * 10_000, expect=(404,)),
        _get("GET memory unknown action", "/memory/explode", expect=(404,)),
        _post("memory unknown action", "/memory/explode", b"{}", expect=(404,)),
    ]
    # -- state changes only on POST ---------------------------------------------------
    attacks += [
        _get(f"GET {path}", path, expect=(405,))
        for path in (
            "/events",
            "/sql",
            "/flush",
            "/rebuild",
            "/memory/consolidate",
            "/memory/extract",
            "/memory/revoke",
        )
    ]
    attacks += [Attack(f"{m} {path}", m, path, expect=(405,), content_type=None) for m, path in
                (("DELETE", "/events/e1"), ("PUT", "/sql"), ("PATCH", "/threads/t1/state"),
                 ("DELETE", "/memory"), ("PUT", "/events"), ("OPTIONS", "/sql"))]  # fmt: skip
    attacks += [
        _post(f"POST {path}", path, b"{}", expect=(405,))
        for path in ("/search", "/threads/t1/state", "/events/e1", "/healthz", "/metrics", "/openapi.json")
    ]
    # -- content types: a browser's simple requests are refused -------------------------
    event = raw("ct1", "goal", {"text": "must not land"}, thread="ct")
    for ctype in (
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        None,
        "",
        "application/json-patch+json",
        "text/json",
        "application/javascript",
    ):
        for path, body in (("/events", event), ("/sql", b'{"sql": "SELECT 1"}')):
            attacks.append(_post(f"{path} as {ctype!r}", path, body, expect=(415,), content_type=ctype))
    attacks += [
        _post(f"{path} bodiless text/plain", path, b"", expect=(415,), content_type="text/plain")
        for path in ("/flush", "/rebuild", "/memory/consolidate", "/memory/extract")
    ]
    attacks.append(_post("form POST to memory revoke", "/memory/revoke", b"event_id=ct1", expect=(415,),
                         content_type="application/x-www-form-urlencoded"))  # fmt: skip
    # -- the token --------------------------------------------------------------------
    attacks += [
        _get("no token", "/search?q=x", expect=(401,), token=None),
        _get("wrong token", "/search?q=x", expect=(401,), token="guess"),
        _get("token prefix", "/search?q=x", expect=(401,), token=TOKEN[:-1]),
        _get("token suffix", "/search?q=x", expect=(401,), token=TOKEN + "x"),
        _get("empty bearer", "/search?q=x", expect=(401,), token=""),
        _get(
            "basic auth", "/search?q=x", expect=(401,), token=None, extra=(("Authorization", "Basic YTpi"),)
        ),
        _get("token in query", f"/search?q=x&token={TOKEN}", expect=(401,), token=None),
        _get("no token for sql over GET", "/sql", expect=(401,), token=None),
        _post("no token for events", "/events", event, expect=(401,), token=None),
        _post("wrong token for rebuild", "/rebuild", b"", expect=(401,), token="x"),
        _get("no token for metrics", "/metrics", expect=(401,), token=None),
        _get("no token for openapi", "/openapi.json", expect=(401,), token=None),
        _get("token twice", "/search?q=x", expect=(400,), extra=(("Authorization", f"Bearer {TOKEN}"),)),
        _get("unicode token", "/search?q=x", expect=(401,), token="tökén"),
    ]
    # -- Host and Origin (DNS rebinding, cross-origin pages) ----------------------------
    attacks += [_get(f"Host {host}", "/search?q=x", expect=(421,), host=host) for host in
                ("evil.example", "127.0.0.1.evil.example", "localhost.attacker.example", "", "attacker:8787",
                 "[::2]", "0.0.0.0", "10.0.0.1", "xn--lcalhost-9za")]  # fmt: skip
    attacks += [
        _get("Host evil even for healthz", "/healthz", expect=(421,), host="evil.example"),
        _get("HTTP/1.0 without Host", "/search?q=x", expect=(421,), host=None, version="HTTP/1.0"),
        _get("Origin evil", "/search?q=x", expect=(403,), extra=(("Origin", "http://evil.example"),)),
        _get("Origin null", "/search?q=x", expect=(403,), extra=(("Origin", "null"),)),
        _post(
            "Origin evil on events",
            "/events",
            event,
            expect=(403,),
            extra=(("Origin", "http://evil.example"),),
        ),
        _get("HTTP/1.1 without Host", "/search?q=x", host=None),
        _get("Host twice", "/search?q=x", extra=(("Host", "evil.example"),), parser=True),
    ]
    # -- sizes ------------------------------------------------------------------------
    attacks += [
        _post("claims 500 MB", "/events", b"", expect=(413,), length=str(500 * 1024 * 1024)),
        _post("claims a terabyte to sql", "/sql", b"", expect=(413,), length=str(10**12)),
        _post("over the limit, truthful length", "/events", b"\n" * (LIMIT + 1024), expect=(413,)),
        _post("over the limit, chunked", "/events", b"\n" * (LIMIT + 1024), expect=(413,), chunked=True),
        _post("sql over the limit, chunked", "/sql", b" " * (LIMIT + 1024), expect=(413,), chunked=True),
        _post("length not a number", "/sql", b"", length="abc", parser=True),
        _post("negative length", "/sql", b"", length="-1", parser=True),
    ]
    # -- memory actions ---------------------------------------------------------------
    bad_memory = {
        ("extract", "lease negative"): b'{"lease_seconds": -1}', ("extract", "lease zero"): b'{"lease_seconds": 0}',
        ("extract", "lease huge"): b'{"lease_seconds": 1e300}', ("extract", "lease word"): b'{"lease_seconds": "long"}',
        ("extract", "lease overflow"): b'{"lease_seconds": 1e400}', ("extract", "not an object"): b"[1]",
        ("consolidate", "lease negative"): b'{"lease_seconds": -60}', ("consolidate", "high_risk string"): b'{"high_risk": "db.*"}',
        ("consolidate", "high_risk numbers"): b'{"high_risk": [1, 2]}',
        ("consolidate", "high_risk too many"): json.dumps({"high_risk": ["k"] * 1000}).encode(),
        ("revoke", "no event_id"): b"{}", ("revoke", "event_id number"): b'{"event_id": 5}',
        ("revoke", "event_id long"): json.dumps({"event_id": LONG_ID}).encode(),
        ("revoke", "event_id traversal"): b'{"event_id": "../../x"}', ("revoke", "malformed"): b'{"event_id": ',
        ("revoke", "unknown field"): b'{"event_id": "e1", "force": true}',
        ("extract", "lease as a string"): b'{"lease_seconds": "60"}', ("extract", "lease as true"): b'{"lease_seconds": true}',
        ("extract", "lease twice"): b'{"lease_seconds": 60, "lease_seconds": -1}',
        ("revoke", "event_id twice"): b'{"event_id": "e1", "event_id": "e2"}',
    }  # fmt: skip
    attacks += [
        _post(f"memory {action} {name}", f"/memory/{action}", body)
        for (action, name), body in bad_memory.items()
    ]
    attacks += [
        _get("memory show twice", "/memory?project=a&project=b"),
        _get("memory show unknown param", "/memory?everything=1"),
    ]
    # -- /events: bad records are reported (200) and dead-lettered, never a failure -----
    attacks += [_post(f"events {name}", "/events", body, expect=(200,), content_type="application/x-ndjson") for name, body in {
        "not JSON": b"{", "deep list": _deep(10_000), "deep object": _deep_object(10_000), "only blank lines": b"\n\n\n",
        "invalid utf-8": b'{"event_id": "\xff"}', "a number": b"5", "NUL bytes": b"\x00" * 100,
    }.items()]  # fmt: skip
    return attacks


ATTACKS = corpus()


def send(port: int, request: bytes) -> tuple[int, bytes]:
    """One raw request; its status and body. The request is written by a thread while the
    answer is read, so a refusal sent before the body is read still arrives."""
    with socket.create_connection(("127.0.0.1", port), timeout=ANSWER_WITHIN) as sock:
        writer = threading.Thread(target=_write, args=(sock, request), daemon=True)
        writer.start()
        answer = b""
        try:
            while not _complete(answer) and (chunk := sock.recv(65536)):
                answer += chunk
        except ConnectionResetError:
            pass  # the server closed on a body it refused to read; what came first counts
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1."), f"no HTTP answer: {answer[:200]!r}"
    return int(head.split()[1]), body


def _complete(answer: bytes) -> bool:
    """Whether ``answer`` holds a whole response with a Content-Length (a server may keep
    the connection open a while to drain a body it refused)."""
    head, sep, body = answer.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n")[1:] if sep else []:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value)
    return False


def _write(sock: socket.socket, data: bytes) -> None:
    try:
        sock.sendall(data)
    except OSError:
        pass  # refused before the body was read



@dataclass
class Served:
    port: int
    env: dict[str, str]
    proc: subprocess.Popen
    stderr: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def start_server(env: dict[str, str], stderr: Path, port: int | None = None) -> Served:
    port = port or free_port()
    env = {**env, "AGENTLOG_HTTP_PORT": str(port)}
    with stderr.open("ab") as err:
        proc = subprocess.Popen([sys.executable, "-m", "agentlog", "run"], env=env,
                                stdout=subprocess.DEVNULL, stderr=err)  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if send(port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")[0] == 200:
                return Served(port, env, proc, stderr)
        except (OSError, AssertionError):
            if proc.poll() is not None:
                break
            time.sleep(0.2)
    proc.kill()
    raise AssertionError(f"agentlog run did not start: {stderr.read_text()}")


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("hostile")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTLOG_")}
    env.update(AGENTLOG_DATA_DIR=str(tmp / "data"), AGENTLOG_API_TOKEN=TOKEN,
               AGENTLOG_MAX_REQUEST_BYTES=str(LIMIT))  # fmt: skip
    served = start_server(env, tmp / "stderr.log")
    yield served
    served.proc.terminate()
    served.proc.wait(timeout=60)


def test_the_corpus_holds_over_a_hundred_distinct_hostile_requests() -> None:
    names = [a.name for a in ATTACKS]
    assert len(ATTACKS) >= 100 and len(set(names)) == len(names), [n for n in names if names.count(n) > 1]


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.name for a in ATTACKS])
def test_a_hostile_request_gets_a_4xx_with_a_json_reason_in_time_never_a_5xx(
    hostile: Served, attack: Attack
) -> None:
    t0 = time.monotonic()
    status, body = send(hostile.port, attack.request())
    assert time.monotonic() - t0 < ANSWER_WITHIN
    assert status < 500, body[:500]
    # One refused by the HTTP parser, before the app, answers in JSON too.
    assert status in ((400,) if attack.parser else attack.expect), (status, body[:500])
    answer = json.loads(body)
    if status >= 400:
        assert isinstance(answer.get("error"), str) and answer["error"], answer


def _call(
    served: Served, method: str, path: str, body: bytes = b"", ctype: str = "application/json"
) -> tuple[int, object]:
    attack = Attack("valid", method, path, body, content_type=ctype)
    status, answer = send(served.port, attack.request())
    return status, json.loads(answer)


def test_after_the_attacks_the_service_still_ingests_and_every_read_path_finds_the_event(
    hostile: Served,
) -> None:
    assert hostile.proc.poll() is None, "the server died"
    event = raw(
        "after-attack-1", "message", {"role": "user", "text": "quetzalcoatl survives"}, thread="survivor"
    )
    status, report = _call(hostile, "POST", "/events", event, "application/x-ndjson")
    assert (status, report["accepted"]) == (200, 1), report  # type: ignore[index]
    assert _call(hostile, "POST", "/flush")[0] == 200
    status, state = _call(hostile, "GET", "/threads/survivor/state")
    assert status == 200 and state["event_count"] == 1  # type: ignore[index]
    status, read = _call(hostile, "GET", "/events/after-attack-1")
    assert status == 200 and read["event"]["payload"]["text"] == "quetzalcoatl survives"  # type: ignore[index]
    sql = json.dumps({"sql": "SELECT count() FROM events WHERE event_id = 'after-attack-1'"}).encode()
    status, rows = _call(hostile, "POST", "/sql", sql)
    assert status == 200 and rows["rows"] == [[1]], rows  # type: ignore[index]
    deadline = time.monotonic() + 20  # the index refreshes each second: then search finds it without a thread
    while True:
        status, found = _call(hostile, "GET", "/search?q=quetzalcoatl")
        hits = [h["event_id"] for h in found["hits"]]  # type: ignore[index]
        if hits == ["after-attack-1"] or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert status == 200 and hits == ["after-attack-1"]
    # The refused writes changed nothing: the content-type attacks' event never landed.
    assert _call(hostile, "GET", "/events/ct1")[0] == 404
    assert "Traceback" not in hostile.stderr.read_text()


def test_the_cli_talks_to_a_token_server_with_its_token_and_says_so_without(hostile: Served) -> None:
    publish = subprocess.run([sys.executable, "-m", "agentlog", "publish", "-"], env=hostile.env,
                             input=raw("cli-1", "goal", {"text": "via cli"}, thread="cli"), capture_output=True,
                             check=False)  # fmt: skip
    assert publish.returncode == 0, publish.stderr
    state = subprocess.run([sys.executable, "-m", "agentlog", "state", "cli", "--json"], env=hostile.env,
                           capture_output=True, check=False)  # fmt: skip
    assert json.loads(state.stdout)["goal"]["text"] == "via cli"
    tokenless = {k: v for k, v in hostile.env.items() if k != "AGENTLOG_API_TOKEN"}
    refused = subprocess.run([sys.executable, "-m", "agentlog", "state", "cli"], env=tokenless,
                             capture_output=True, timeout=120, check=False)  # fmt: skip
    assert refused.returncode == 1 and b"AGENTLOG_API_TOKEN" in refused.stderr, refused.stderr


def _rss_mib(pid: int) -> int:
    return int(Path(f"/proc/{pid}/status").read_text().split("VmRSS:")[1].split()[0]) // 1024


def test_an_endless_header_is_refused_with_431_and_the_server_keeps_no_more_than_its_bound(hostile: Served) -> None:
    before = _rss_mib(hostile.proc.pid)
    answer = b""
    with socket.create_connection(("127.0.0.1", hostile.port), timeout=ANSWER_WITHIN) as sock:
        try:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Endless: ")
            for _ in range(1024):  # up to 64 MiB, far past any bound
                sock.sendall(b"a" * 65536)
        except OSError:
            pass  # refused and closed while it was still being sent
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except OSError:
            pass
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431"), answer[:200]
    assert "headers exceed" in json.loads(body)["error"]
    assert _rss_mib(hostile.proc.pid) - before < 32  # httptools alone kept the whole header
    assert send(hostile.port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")[0] == 200


def test_a_two_megabyte_request_line_is_refused_with_431(hostile: Served) -> None:
    status, body = send(hostile.port, b"GET /healthz?" + b"q" * (2 * 1024 * 1024) + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert status == 431, body[:200]
    assert "headers exceed" in json.loads(body)["error"]
