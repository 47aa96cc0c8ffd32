"""``AsyncClient``'s reads of a server with httpx's async client: the routes and the
answers ``RemoteService`` reads synchronously (``answer_of`` maps a status to the same
exception), so an asyncio program reads without tying up a worker thread per request."""

from __future__ import annotations

from typing import Any

import httpx

from agentlog.streams.api.client import RemoteService, Unreachable, answer_of, segment
from agentlog.streams.api.kept_states import KeptStates


class AsyncHttpReads:
    """The read operations of the server ``remote`` talks to, awaited."""

    def __init__(self, remote: RemoteService) -> None:
        auth = {k: v for k, v in remote.http.headers.items() if k.lower() == "authorization"}
        self.url = remote.url
        self.http = httpx.AsyncClient(base_url=remote.url, timeout=120.0, follow_redirects=True, headers=auth)
        self.kept_states = KeptStates()  # each thread's state sections: only changes are sent

    async def _send(self, method: str, path: str, params: dict[str, Any] | None = None,
                    body: dict[str, Any] | None = None, headers: dict[str, str] | None = None) -> Any:  # fmt: skip
        response = await self._response(method, path, params, body, headers)
        return answer_of(response)

    async def _response(self, method: str, path: str, params: dict[str, Any] | None = None,
                        body: dict[str, Any] | None = None, headers: dict[str, str] | None = None) -> httpx.Response:  # fmt: skip
        query = {k: v for k, v in (params or {}).items() if v is not None}
        try:
            return await self.http.request(method, path, params=query, json=body, headers=headers)
        except httpx.HTTPError as error:
            raise Unreachable(f"no agentlog server answers at {self.url} ({error})") from error

    async def state(self, thread_id: str) -> Any:
        """As ``RemoteService.state``: only what changed is sent (``kept_states``)."""
        path = f"/threads/{segment(thread_id)}/state"

        async def request(headers: dict[str, str]) -> tuple[Any, Any]:
            response = await self._response("GET", path, headers=headers)
            return answer_of(response), response.headers

        return await self.kept_states.read_async(thread_id, request)

    async def context(self, thread_id: str, budget: int, query: str | None, model: str | None,
                      format: str = "generic") -> Any:  # noqa: A002 # fmt: skip
        return await self._send("GET", f"/threads/{segment(thread_id)}/context", {
            "budget": budget, "query": query, "model": model,
            "format": None if format == "generic" else format})  # fmt: skip

    async def search(self, query: str, thread_id: str | None = None, kind: str | None = None,
                     tool_name: str | None = None, project: str | None = None, limit: int = 10,
                     window_id: str | None = None, after: str | None = None, since_ms: int | None = None,
                     until_ms: int | None = None) -> Any:  # fmt: skip
        return await self._send("GET", "/search", {
            "q": query, "thread": thread_id, "kind": kind, "tool": tool_name, "window": window_id,
            "project": project, "after": after, "since_ms": since_ms, "until_ms": until_ms, "limit": limit})  # fmt: skip

    async def read(self, event_id: str) -> Any:
        return await self._send("GET", f"/events/{segment(event_id)}")

    async def sql(self, statement: str) -> Any:
        return await self._send("POST", "/sql", body={"sql": statement})

    async def threads(self, project: str | None, status: str | None, limit: int) -> Any:
        return await self._send("GET", "/threads", {"project": project, "status": status, "limit": limit})

    async def close(self) -> None:
        await self.http.aclose()


__all__ = ["AsyncHttpReads"]
