"""The agent step's routes answered by ``HotRoutes`` (``streams/api/hot_routes.py``) give
exactly what the FastAPI routes give: the same corpus of requests, valid and hostile, sent
to two services fed the same events, one app with ``HotRoutes`` and one without, gets the
same status, content type, length and body, request by request."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from starlette.testclient import TestClient

from agentlog.processors.state_sections import ACCEPT_PATCHES_HEADER, KNOWN_HEADER
from agentlog.streams.api.guard import Policy
from agentlog.streams.api.http import build_app
from agentlog.streams.config import Settings
from agentlog.streams.embedded.service import EmbeddedService
from agentlog.streams.metrics import METRICS

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")

LIMIT = 64 * 1024
"""The apps' request body limit here: a body past it is refused as it is read."""
NDJSON = {"Content-Type": "application/x-ndjson"}
JSON = {"Content-Type": "application/json"}


Request = tuple[str, str, dict[str, object]]
Answer = tuple[int, str | None, str | None, bytes]


def _answers(data_dir: Path, hot_routes: bool, requests: list[Request]) -> list[Answer]:
    """Each request's answer from a fresh service behind an app with or without the hot
    routes (one after the other: chDB opens one data directory per process at a time)."""
    service = EmbeddedService(Settings(data_dir=data_dir))
    try:
        app = build_app(service, Policy(max_request_bytes=LIMIT), hot_routes=hot_routes)
        with TestClient(app, base_url="http://localhost") as client:
            out = []
            for method, url, options in requests:
                if callable(options.get("content")):  # a fresh stream each time: sent chunked
                    options = {**options, "content": options["content"]()}
                r = client.request(method, url, **options)  # type: ignore[arg-type]
                out.append((r.status_code, r.headers.get("content-type"), r.headers.get("content-length"), r.content))
            return out
    finally:
        service.close()


def assert_same_answers(tmp_path: Path, requests: list[Request]) -> list[int]:
    """The corpus answered with and without the hot routes: request by request the same.
    Returns the statuses."""
    hot, plain = _answers(tmp_path / "hot", True, requests), _answers(tmp_path / "plain", False, requests)
    for request, a, b in zip(requests, hot, plain, strict=True):
        assert a == b, request[:2]
    return [a[0] for a in hot]


def _event(thread: str, n: int, text: str = "hello") -> bytes:
    return orjson.dumps({"event_id": f"{thread}.{n}", "thread_id": thread, "kind": "message",
                         "ts": f"2026-01-01T00:00:{n:02d}Z", "project": "p",
                         "payload": {"role": "user", "text": text}})  # fmt: skip


PUBLISHES: list[tuple[bytes, dict[str, str]]] = [
    (_event("t1", 1), NDJSON),
    (_event("t1", 2, "the login test fails with ERR_CACHE_MISS"), JSON),
    (_event("t1", 2), NDJSON),  # the same id again, other content: a conflicting duplicate
    (b"[" + _event("t1", 3) + b"," + _event("t2", 1) + b"]", JSON),  # an array
    (_event("t1", 4) + b"\n{not json\n" + _event("t1", 5), NDJSON),  # a bad line among good ones
    (b"", NDJSON),
    (b"   \n\n", NDJSON),
    (b"{}", JSON),
    (b"null", JSON),
    (b"[" * 5000 + b"]" * 5000, JSON),  # nested past the parser's depth
    (b'{"event_id": "x"}' * 3, NDJSON),
    (b"\xff\xfe\x00garbage", NDJSON),
    (orjson.dumps({"event_id": "t1.9", "thread_id": "t1", "kind": "message", "ts": "2026-01-01T00:01:00Z",
                   "project": "p", "payload": {"role": "user", "text": "x" * 2_000_000}}), NDJSON),  # over the event limit
    (_event("t1", 6, "what failed in the cache?"), JSON),
]


def _publishes() -> list[Request]:
    return [("POST", "/events", {"content": body, "headers": headers}) for body, headers in PUBLISHES]


def test_publishes_valid_and_hostile_answer_the_same_with_and_without_the_hot_routes(tmp_path: Path) -> None:
    statuses = assert_same_answers(tmp_path, [
        *_publishes(),
        # Refused before routing, by Guard, for both: not a JSON content type.
        ("POST", "/events", {"content": _event("t1", 7), "headers": {"Content-Type": "text/plain"}}),
        ("POST", "/events?x=1&x=2", {"content": _event("t1", 8), "headers": NDJSON}),
        ("GET", "/events", {}),  # another method: the routes' 405
        ("POST", "/events/", {"content": _event("t1", 10), "headers": NDJSON}),  # not the route
        ("POST", "/events", {"content": b"x" * (LIMIT + 1), "headers": NDJSON}),  # its length refused by Guard
        # No length said, sent in chunks: refused by the route as its body is read.
        ("POST", "/events", {"content": lambda: iter([_event("t1", 11) + b"\n"] * 1000), "headers": NDJSON}),
    ])  # fmt: skip
    assert {200, 405, 413, 415} <= set(statuses)  # accepted and refused ones were all compared


KNOWN_SECTIONS = [
    {KNOWN_HEADER: "plan=" + "A" * 16}, {KNOWN_HEADER: "plan=" + "A" * 16 + ",summary=" + "B" * 16},
    {KNOWN_HEADER: "future=" + "A" * 16}, {KNOWN_HEADER: ""}, {KNOWN_HEADER: "nonsense"}, {KNOWN_HEADER: "x" * 2000},
    {KNOWN_HEADER: "plan=" + "A" * 16 + ",plan=" + "A" * 16}, [(KNOWN_HEADER, "plan=" + "A" * 16)] * 2,
    [(KNOWN_HEADER.encode(), b"plan=" + b"A" * 16 + b"\xe9")], {"agentlog-known-SECTIONS": "plan=" + "A" * 16},
    {KNOWN_HEADER: "plan=" + "A" * 16, ACCEPT_PATCHES_HEADER: "true"}, {ACCEPT_PATCHES_HEADER: "true"},
    {KNOWN_HEADER: "plan=" + "A" * 16, ACCEPT_PATCHES_HEADER: "yes"},
    [(KNOWN_HEADER, "plan=" + "A" * 16), (ACCEPT_PATCHES_HEADER, "true"), (ACCEPT_PATCHES_HEADER, "true")],
]
"""``Agentlog-Known-Sections`` headers, well-formed and not (``processors/state_sections.py``)."""


def test_state_reads_answer_the_same_with_and_without_the_hot_routes(tmp_path: Path) -> None:
    urls = ("/threads/t1/state", "/threads/t2/state", "/threads/t1/state?x=1", "/threads/nope/state",
                "/threads/a%20b/state", "/threads/a%0A/state", "/threads/t1%0A/state", "/threads/" + "a" * 129 + "/state",
                "/threads/" + "a" * 128 + "/state", "/threads/a%2Fb/state", "/threads//state", "/threads/t1/state/",
                "/threads/%E2%9C%93/state", "/threads/t1/stat")  # fmt: skip
    statuses = assert_same_answers(tmp_path, [
        *_publishes()[:5], *[("GET", url, {}) for url in urls], ("HEAD", "/threads/t1/state", {}),
        ("POST", "/threads/t1/state", {"content": b"{}", "headers": JSON}),
        *[("GET", "/threads/t1/state", {"headers": headers}) for headers in KNOWN_SECTIONS],
    ])  # fmt: skip
    assert {200, 400, 404, 405} <= set(statuses[5:])


def test_context_reads_answer_the_same_with_and_without_the_hot_routes(tmp_path: Path) -> None:
    queries = ["budget=4000", "budget=4000&format=openai", "budget=4000&format=anthropic", "budget=4000&model=gpt-4",
               "budget=4000&query=ERR_CACHE_MISS", "budget=4000&query=", "budget=4000&query=%E3%82%AD%E3%83%A3",
               "", "budget=", "budget=0", "budget=-5", "budget=abc", "budget=4000&budget=4000", "budget=1e3",
               "budget=99999999999999999999", "budget=4000&format=xml", "budget=4000&limit=3", "budget=10",
               "budget=4000&query=" + "q" * 5000, "budget=4000&model=" + "m" * 300, "budget=4000&query=a%00b",
               "budget=%204000", "budget=4000&format=OPENAI", "budget=4000&&", "budget=4000;x=1", "%ff=1&budget=4000"]  # fmt: skip
    urls = [f"/threads/t1/context?{q}" for q in queries]
    urls += ["/threads/nope/context?budget=4000", "/threads/a%20b/context?budget=4000", "/threads/t1/context/?budget=4000"]
    statuses = assert_same_answers(tmp_path, [*_publishes(), *[("GET", url, {}) for url in urls],
                                              ("HEAD", "/threads/t1/context?budget=4000", {})])  # fmt: skip
    assert {200, 400, 404} <= set(statuses[len(PUBLISHES):])


@pytest.fixture
def twins(tmp_path: Path) -> Iterator[tuple[TestClient, TestClient]]:
    """One service behind two apps: with the hot routes, and without."""
    service = EmbeddedService(Settings(data_dir=tmp_path))
    try:
        with TestClient(build_app(service), base_url="http://localhost") as hot, \
             TestClient(build_app(service, hot_routes=False), base_url="http://localhost") as plain:  # fmt: skip
            yield hot, plain
    finally:
        service.close()


def test_the_hot_routes_answer_the_agent_step_and_count_it_in_the_routes_metrics(twins) -> None:
    hot, _ = twins
    counts = {name: _observed(name) for name in ("events", "state", "context")}
    assert hot.post("/events", content=_event("m1", 1), headers=NDJSON).status_code == 200
    assert hot.get("/threads/m1/state").json()["thread_id"] == "m1"
    assert hot.get("/threads/m1/context", params={"budget": 4000}).status_code == 200
    assert {name: _observed(name) - counts[name] for name in counts} == {"events": 1, "state": 1, "context": 1}


def _observed(name: str) -> float:
    """How many requests the route's latency histogram has counted."""
    for metric in METRICS.requests.collect():
        for sample in metric.samples:
            if sample.name.endswith("_count") and sample.labels.get("route", sample.labels.get("name")) == name:
                return sample.value
    return 0.0


@pytest.mark.parametrize("error", [RuntimeError("a bug"), StopIteration(), KeyError("k"), ValueError("bad")])
def test_one_failing_request_on_a_hot_route_spares_the_next(twins, monkeypatch: pytest.MonkeyPatch,
                                                            error: Exception) -> None:  # fmt: skip
    hot, plain = twins
    assert hot.post("/events", content=_event("f1", 1), headers=NDJSON).status_code == 200
    calls: list[str] = []

    def failing(*_args: object, **_kwargs: object) -> None:
        calls.append("context")
        raise error

    monkeypatch.setattr(EmbeddedService, "context", failing)
    a, b = (asyncio.run(_get(client.app, "/threads/f1/context", b"budget=4000")) for client in (hot, plain))
    assert a == b and a[0] in (400, 500) and calls == ["context", "context"]
    monkeypatch.undo()
    assert hot.get("/threads/f1/context?budget=4000").status_code == 200


async def _get(app: object, path: str, query: bytes) -> tuple[int, bytes]:
    """A GET straight to the ASGI app: status and body, or a failure after 30 s (a request
    that never answers must fail the test, not hang the run)."""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
             "path": path, "raw_path": path.encode(), "root_path": "", "query_string": query,
             "headers": [(b"host", b"localhost")], "client": ("127.0.0.1", 1), "server": ("localhost", 80)}  # fmt: skip
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    await asyncio.wait_for(app(scope, receive, send), 30)  # type: ignore[operator]
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


def test_the_hot_routes_pool_ends_with_the_app(tmp_path: Path) -> None:
    service = EmbeddedService(Settings(data_dir=tmp_path))
    try:
        app = build_app(service)
        with TestClient(app, base_url="http://localhost") as client:
            assert client.post("/events", content=_event("p1", 1), headers=NDJSON).status_code == 200
            pool = _hot_routes(app).pool
            assert not pool._shutdown  # noqa: SLF001
        assert pool._shutdown  # noqa: SLF001
    finally:
        service.close()


def _hot_routes(app: object) -> object:
    layer = app.front  # type: ignore[attr-defined]
    while not hasattr(layer, "pool"):
        layer = layer.app
    return layer
