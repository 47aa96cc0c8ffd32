"""Talking to a running ``agentlog run`` over HTTP, with the service's method names."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import httpx
import orjson

from agentlog.processors.context import BudgetTooSmall
from agentlog.sinks.base import QueryResult, StoreError
from agentlog.streams.config import Settings
from agentlog.streams.api.service import NotFound, NotServedHere, Unavailable
from agentlog.streams import gc_heap
from agentlog.streams.api.kept_states import THREADS_KEPT, KeptStates
from agentlog.streams.api.wire import WIRE_ERRORS, Answer, KeepAlive, plain_http
from agentlog.streams.publish_check import PublishReport

log = logging.getLogger("agentlog.client")

SERVER_FILE = "server.json"
BUSY_RETRY_SECONDS = 60.0
"""How long a query retries while a worker answers 503 (restoring its tables, or its
thread's owner is changing hands in a rebalance)."""


def _auth(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def answers(url: str, token: str | None = None) -> bool:
    """Whether an agentlog server (``run``, or a Kafka worker) answers at ``url``."""
    return _health(url, token) is not None


def _health(url: str, token: str | None) -> dict[str, Any] | None:
    try:
        response = httpx.get(f"{url}/healthz", timeout=2.0, headers=_auth(token))
        response.raise_for_status()
        health = response.json()
    except (httpx.HTTPError, ValueError):
        return None
    return health if isinstance(health, dict) else None


def data_dir_identity(settings: Settings) -> str:
    """How a server names the data directory it holds (``/healthz``, ``server.json``)."""
    return str(Path(settings.data_dir).resolve())


def server_url(settings: Settings) -> str | None:
    """The URL of the server holding this data directory, if one answers there and says
    it is the server ``server.json`` names (its instance id) for this very directory: a
    stale file may name a port that another directory's server holds now."""
    path = Path(settings.data_dir) / SERVER_FILE
    if not path.exists():
        return None
    try:
        info = json.loads(path.read_text())
        url = str(info["url"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    health = _health(url, settings.api_token)
    if health is None:
        return None
    mine = data_dir_identity(settings)
    if health.get("instance") != info.get("instance") or health.get("data_dir", info.get("data_dir")) != mine:
        log.warning("ignoring stale %s: the server at %s holds %s, not %s", path, url,
                    health.get("data_dir", "another data directory"), mine)  # fmt: skip
        return None
    return url


def segment(name: str) -> str:
    """An id as one path segment: escaped, and the ids ``.`` and ``..`` (valid ids) with
    their dots escaped too, which an HTTP client would otherwise resolve as a directory."""
    quoted = quote(name, safe="")
    return quoted.replace(".", "%2E") if quoted in (".", "..") else quoted


JSON = {"Content-Type": "application/json"}
NDJSON = {"Content-Type": "application/x-ndjson"}


Response = httpx.Response | Answer
"""A server's answer, from httpx or from the kept-alive wire (``agentlog.streams.api.wire``)."""


def _reason(response: Response) -> str:
    try:
        return str(response.json().get("error", response.text))
    except (ValueError, AttributeError):
        return f"HTTP {response.status_code}: {response.text[:200]}"


def _raise_budget(response: Response) -> None:
    """A context budget too small, as the service raised it (the CLI exits 2 on it)."""
    try:
        body = response.json()
    except ValueError:
        return
    if isinstance(body, dict) and isinstance(body.get("needed"), int) and isinstance(body.get("budget"), int):
        raise BudgetTooSmall(body["needed"], body["budget"])


def answer_of(response: Response) -> Any:
    """A server's answer as the service's: its JSON, or the exception its status means."""
    if response.status_code == 404:
        raise NotFound(_reason(response))
    if response.status_code == 503:
        raise Unavailable(_reason(response))
    if response.status_code == 400:
        _raise_budget(response)
    if response.status_code == 401:  # the server speaks to HTTP callers: say where a client sets its token
        raise StoreError(f"{_reason(response)} (set AGENTLOG_API_TOKEN to the server's token, "
                         "or pass token= to agentlog.Client)")
    if response.status_code >= 400:
        raise StoreError(_reason(response))
    return _json(response)


def _json(response: Response) -> Any:
    """The body's JSON: orjson reads a long thread's state about ten times faster than the
    standard library (part of every agent step over HTTP); what it refuses (an integer
    beyond 64 bits, say) is read by the standard library, as before."""
    content = response.content
    try:
        if len(content) < PAUSED_PARSE_BYTES:
            return orjson.loads(content)
        with gc_heap.paused():
            return orjson.loads(content)
    except orjson.JSONDecodeError:
        return response.json()


PAUSED_PARSE_BYTES = 32 * 1024
"""Answers this long are read with the garbage collector paused (``gc_heap.paused``)."""


class Unreachable(StoreError):
    """No answer from the server (connection refused, reset or timed out): the same
    request may succeed later, unlike a refusal (``StoreError``)."""


class RemoteService:
    """The ``Service`` of a server elsewhere (``agentlog run`` or a Kafka worker), through its
    HTTP API: every answer is the server's, every refusal the same exception."""

    def __init__(self, url: str, token: str | None = None, busy_seconds: float = BUSY_RETRY_SECONDS,
                 kept_threads: int = THREADS_KEPT) -> None:  # fmt: skip
        self.url = url
        self.busy_seconds = busy_seconds  # how long a 503 is retried (0: a worker asking another passes it on)
        self.http = httpx.Client(base_url=url, timeout=120.0, follow_redirects=True, headers=_auth(token))
        # An agent's step (publish, then state or context) on kept connections of the
        # standard library's, where nothing (TLS, a proxy) needs httpx.
        self.wire = KeepAlive(url, _auth(token), timeout=120.0) if plain_http(url) else None
        self.kept_states = KeptStates(kept_threads)  # each thread's state sections: only changes are sent

    def _send(self, method: str, path: str, params: dict[str, Any] | None = None, content: bytes | str | None = None,
              headers: dict[str, str] | None = None, with_headers: bool = False) -> Any:  # fmt: skip
        """One request, answered as the service would (retried while the server is busy);
        ``with_headers``: the answer and the response's headers."""
        query = {k: v for k, v in (params or {}).items() if v is not None}
        if self.wire is None:
            return self._check(lambda: self.http.request(method, path, params=query, content=content, headers=headers),
                               with_headers)  # fmt: skip
        target = f"{path}?{urlencode(query)}" if query else path
        body = content.encode() if isinstance(content, str) else content  # UTF-8, as httpx sends it
        wire = self.wire

        def send() -> Response:
            answer = wire.request(method, target, body, headers)
            if 300 <= answer.status_code < 400:  # a front that moved the API: httpx follows it
                return self.http.request(method, path, params=query, content=body, headers=headers)
            return answer

        return self._check(send, with_headers)

    def _get(self, path: str, **params: Any) -> Any:
        return self._send("GET", path, params)

    def _check(self, send: Any, with_headers: bool = False) -> Any:
        deadline = time.monotonic() + self.busy_seconds
        while True:
            try:
                response = send()
            except (httpx.HTTPError, *WIRE_ERRORS) as error:
                raise Unreachable(f"no agentlog server answers at {self.url} ({error}); start one with `agentlog run`") from error
            if response.status_code != 503 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        return (answer_of(response), response.headers) if with_headers else answer_of(response)

    def _post(self, path: str, body: dict[str, Any] | None = None) -> Any:
        return self._send("POST", path, content=json.dumps(body or {}).encode(), headers=JSON)

    def publish(self, data: bytes, dead_letters: Sequence[tuple[bytes, str]] = ()) -> PublishReport:
        if dead_letters:  # an ingest adapter runs in the server, beside its topic
            raise NotServedHere("dead letters are written by the server itself (POST /v1/traces takes OTLP)")
        return PublishReport(**self._send("POST", "/events", content=data, headers=NDJSON))

    def catch_up(self, on_progress: Any = None) -> dict[str, Any]:
        return self._post("/flush")

    def thread_list(self, project: str | None = None, status: str | None = None,
                    limit: int = 100) -> dict[str, Any]:  # fmt: skip
        return self._get("/threads", project=project, status=status, limit=limit)

    def state(self, thread_id: str) -> dict[str, Any]:
        """The server's answer; its sections read-only and, while they do not change, the
        same objects read after read: only what changed is sent (``kept_states``)."""
        path = f"/threads/{segment(thread_id)}/state"
        return self.kept_states.read(thread_id, lambda headers: self._send("GET", path, headers=headers, with_headers=True))

    def context(self, thread_id: str, budget: int, query: str | None = None,
                model: str | None = None, format: str = "generic") -> dict[str, Any]:  # noqa: A002 # fmt: skip
        # generic is the route's default: not sent, so an older server still answers it
        shape = None if format == "generic" else format
        return self._get(f"/threads/{segment(thread_id)}/context", budget=budget, query=query, model=model, format=shape)

    def read(self, event_id: str) -> dict[str, Any]:
        return self._get(f"/events/{segment(event_id)}")

    def search(self, query: str, thread_id: str | None = None, kind: str | None = None,
               tool_name: str | None = None, window_id: str | None = None,
               project: str | None = None, after: str | None = None, since_ms: int | None = None,
               until_ms: int | None = None, limit: int = 10) -> dict[str, Any]:  # fmt: skip
        return self._get(
            "/search", q=query, thread=thread_id, kind=kind, tool=tool_name, window=window_id,
            project=project, after=after, since_ms=since_ms, until_ms=until_ms, limit=limit,
        )  # fmt: skip

    def health(self) -> dict[str, Any]:
        return self._get("/healthz")

    def sql(self, statement: str) -> QueryResult:
        body = self._post("/sql", {"sql": statement})
        return QueryResult(body["columns"], [tuple(r) for r in body["rows"]])

    def rebuild(self, on_progress: Any = None) -> dict[str, Any]:
        """``POST /rebuild`` (no time limit: a million events take minutes), showing the
        progress the server reports in ``/healthz`` meanwhile."""
        answer: list[Any] = []
        call = threading.Thread(target=lambda: answer.append(self._try(
            lambda: self.http.post("/rebuild", headers=JSON, timeout=None))), daemon=True)  # fmt: skip
        call.start()
        while call.is_alive():
            call.join(0.5)
            if on_progress is not None and call.is_alive():
                try:
                    done = self.http.get("/healthz", timeout=2.0).json().get("rebuild")
                except (httpx.HTTPError, ValueError):
                    done = None
                if done:
                    on_progress(done["done"], done["total"])
        if isinstance(answer[0], BaseException):
            raise answer[0]
        return answer[0]

    def memory_show(self, project: str | None = None, key: str | None = None) -> dict[str, Any]:
        return self._get("/memory", project=project, key=key)

    def memory_status(self) -> dict[str, Any]:
        return self._get("/memory/status")

    def memory_extract(self, lease_seconds: float = 60.0) -> dict[str, Any]:
        return self._post("/memory/extract", {"lease_seconds": lease_seconds})

    def memory_consolidate(self, lease_seconds: float = 60.0,
                           high_risk: list[str] | None = None) -> dict[str, Any]:  # fmt: skip
        return self._post("/memory/consolidate", {"lease_seconds": lease_seconds, "high_risk": high_risk})

    def memory_revoke(self, event_id: str, reason: str | None = None) -> dict[str, Any]:
        return self._post("/memory/revoke", {"event_id": event_id, "reason": reason})

    def _try(self, send: Any) -> Any:
        try:
            return self._check(send)
        except BaseException as error:  # noqa: BLE001 - handed to the calling thread
            return error

    def close(self) -> None:
        if self.wire is not None:
            self.wire.close()
        self.http.close()


__all__ = ["SERVER_FILE", "RemoteService", "Unreachable", "answer_of", "answers", "data_dir_identity", "segment", "server_url"]
