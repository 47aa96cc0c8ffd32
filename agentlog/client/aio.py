"""``agentlog.AsyncClient``: the ``Client``'s surface for asyncio code.

Publishing never blocks the event loop: an event goes into the same bounded buffer at
once when there is room and waits in a worker thread when it is full (back-pressure as
an ``await``). Flushes and reads run the ``Client``'s calls in a worker thread, so the
embedded stores and the HTTP transport behave exactly as they do for ``Client``.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from agentlog.client.client import TIMEOUT_OUTPUT, Client
from agentlog.client.results import Context, LoggedEvent, SearchAnswer, SqlResult, State, ThreadList
from agentlog.client.thread import ThreadBase, ToolCallBase
from agentlog.streams.api.service import Service

T = TypeVar("T")


class AsyncClient:
    """``Client`` for asyncio: the same constructor and methods, awaited."""

    def __init__(self, target: str | Path | Service | None = None, **options: Any) -> None:
        """The same arguments as ``Client`` (``token``, ``kafka``, ``worker``, ``batch_size``, ...)."""
        self.sync = Client(target, **options)
        self.ids = self.sync.ids
        self._open_calls = self.sync._open_calls

    async def _run(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await asyncio.to_thread(functools.partial(call, *args, **kwargs))

    def thread(self, thread_id: str, project: str | None = None, agent_id: str | None = None,
               window_id: str | None = None) -> AsyncThread:  # fmt: skip
        return AsyncThread(self, thread_id, project, agent_id, window_id)

    async def _send(self, event_id: str, raw: bytes) -> str:
        if not self.sync._buffer.offer(raw):  # full: wait for room off the event loop
            await self._run(self.sync._buffer.put, raw)
        return event_id

    async def flush(self, timeout: float | None = None) -> None:
        await self._run(self.sync.flush, timeout)

    async def close(self) -> None:
        """Give open tool calls a ``timeout`` result, publish the buffer, release the target."""
        for call in list(self._open_calls.values()):
            await call._result(TIMEOUT_OUTPUT, "timeout", None)
        await self._run(self.sync.close)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def state(self, thread_id: str) -> State:
        return await self._run(self.sync.state, thread_id)

    async def context(self, thread_id: str, budget: int, query: str | None = None,
                      model: str | None = None) -> Context:  # fmt: skip
        return await self._run(self.sync.context, thread_id, budget, query, model)

    async def search(self, query: str, **filters: Any) -> SearchAnswer:
        return await self._run(self.sync.search, query, **filters)

    async def read(self, event_id: str) -> LoggedEvent:
        return await self._run(self.sync.read, event_id)

    async def sql(self, statement: str) -> SqlResult:
        return await self._run(self.sync.sql, statement)

    async def threads(self, project: str | None = None, status: str | None = None, limit: int = 100) -> ThreadList:
        return await self._run(self.sync.threads, project, status, limit)


class AsyncThread(ThreadBase[Awaitable[str]]):
    """A thread of ``AsyncClient``: every publishing method is awaited (``await t.goal(...)``)."""

    client: AsyncClient

    def tool_call(self, tool_name: str, arguments: dict[str, Any] | str | None = None,
                  call_id: str | None = None) -> AsyncToolCall:  # fmt: skip
        """``async with t.tool_call("pytest", args) as call: ... await call.result(out)``."""
        return AsyncToolCall(self, tool_name, arguments, call_id)

    async def spawn(self, child_thread_id: str, role: str | None = None, agent_id: str | None = None,
                    project: str | None = None) -> AsyncThread:  # fmt: skip
        child = self._spawned(child_thread_id, agent_id, project)
        await self._spawn_event(child, role)
        return child  # type: ignore[return-value]

    async def exit(self, status: str | None = "done", summary: str | None = None) -> str:
        return await self._exit_event(status, summary)

    async def state(self) -> State:
        return await self.client.state(self.thread_id)

    async def context(self, budget: int, query: str | None = None, model: str | None = None) -> Context:
        return await self.client.context(self.thread_id, budget=budget, query=query, model=model)

    async def search(self, query: str, **filters: Any) -> SearchAnswer:
        return await self.client.search(query, thread_id=self.thread_id, **filters)


class AsyncToolCall(ToolCallBase):
    async def __aenter__(self) -> AsyncToolCall:
        await self._start()
        return self

    async def result(self, output: str, status: str = "ok", exit_code: int | None = None) -> str:
        return await self._result(output, status, exit_code)  # type: ignore[no-any-return]

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: Any) -> None:
        failed = self._failed(error)
        if failed is not None:
            await self.result(*failed)


__all__ = ["AsyncClient", "AsyncThread", "AsyncToolCall"]
