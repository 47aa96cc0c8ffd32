"""Talking to a running ``agentlog run`` over HTTP, with the service's method names."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx

from sinks.base import QueryResult, StoreError
from streams.config import Settings
from streams.service import NotFound

SERVER_FILE = "server.json"
BUSY_RETRY_SECONDS = 60.0
"""How long a query retries while a worker answers 503 (restoring its tables, or its
thread's owner is changing hands in a rebalance)."""


def answers(url: str) -> bool:
    """Whether an agentlog server (``run``, or a Kafka worker) answers at ``url``."""
    try:
        httpx.get(f"{url}/healthz", timeout=2.0).raise_for_status()
    except httpx.HTTPError:
        return False
    return True


def server_url(settings: Settings) -> str | None:
    """The URL of the server holding this data directory, if one answers."""
    path = Path(settings.data_dir) / SERVER_FILE
    if not path.exists():
        return None
    try:
        url = str(json.loads(path.read_text())["url"])
    except (OSError, ValueError, KeyError):
        return None
    return url if answers(url) else None


class RemoteService:
    """The operations of ``EmbeddedService`` through the HTTP API."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.http = httpx.Client(base_url=url, timeout=120.0, follow_redirects=True)

    def _get(self, path: str, **params: Any) -> Any:
        return self._check(lambda: self.http.get(path, params={k: v for k, v in params.items() if v is not None}))

    def _check(self, send: Any) -> Any:
        deadline = time.monotonic() + BUSY_RETRY_SECONDS
        while True:
            try:
                response = send()
            except httpx.HTTPError as error:
                raise StoreError(f"no agentlog server answers at {self.url} ({error}); start one with `agentlog run`") from error
            if response.status_code != 503 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        if response.status_code == 404:
            raise NotFound(response.json().get("error", "not found"))
        if response.status_code >= 400:
            raise StoreError(response.json().get("error", response.text))
        return response.json()

    def publish(self, data: bytes) -> dict[str, Any]:
        return self._check(lambda: self.http.post("/events", content=data))

    def catch_up(self, on_progress: Any = None) -> dict[str, Any]:
        return self._check(lambda: self.http.post("/flush"))

    def state(self, thread_id: str) -> dict[str, Any]:
        return self._get(f"/threads/{thread_id}/state")

    def context(self, thread_id: str, budget: int, query: str | None = None) -> dict[str, Any]:
        return self._get(f"/threads/{thread_id}/context", budget=budget, query=query)

    def read(self, event_id: str) -> dict[str, Any]:
        return self._get(f"/events/{event_id}")

    def search(self, query: str, thread_id: str | None = None, kind: str | None = None,
               tool_name: str | None = None, window_id: str | None = None,
               project: str | None = None, after: str | None = None, since_ms: int | None = None,
               until_ms: int | None = None, limit: int = 10) -> dict[str, Any]:  # fmt: skip
        return self._get(
            "/search", q=query, thread=thread_id, kind=kind, tool=tool_name, window=window_id,
            project=project, after=after, since_ms=since_ms, until_ms=until_ms, limit=limit,
        )  # fmt: skip

    def sql(self, statement: str) -> QueryResult:
        body = self._check(lambda: self.http.post("/sql", content=json.dumps({"sql": statement})))
        return QueryResult(body["columns"], [tuple(r) for r in body["rows"]])

    def rebuild(self, on_progress: Any = None) -> dict[str, Any]:
        """``POST /rebuild`` (no time limit: a million events take minutes), showing the
        progress the server reports in ``/healthz`` meanwhile."""
        import threading  # noqa: PLC0415

        answer: list[Any] = []
        call = threading.Thread(target=lambda: answer.append(self._try(
            lambda: self.http.post("/rebuild", timeout=None))), daemon=True)  # fmt: skip
        call.start()
        while call.is_alive():
            call.join(0.5)
            if on_progress is not None and call.is_alive():
                try:
                    done = httpx.get(f"{self.url}/healthz", timeout=2.0).json().get("rebuild")
                except (httpx.HTTPError, ValueError):
                    done = None
                if done:
                    on_progress(done["done"], done["total"])
        if isinstance(answer[0], BaseException):
            raise answer[0]
        return answer[0]

    def _try(self, send: Any) -> Any:
        try:
            return self._check(send)
        except BaseException as error:  # noqa: BLE001 - handed to the calling thread
            return error

    def close(self) -> None:
        self.http.close()


__all__ = ["RemoteService", "SERVER_FILE", "server_url"]
