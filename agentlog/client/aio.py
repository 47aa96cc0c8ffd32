"""``agentlog.AsyncClient``: the ``Client``'s surface for asyncio code.

Publishing never blocks the event loop: an event goes into the same bounded buffer at
once when there is room and waits in a worker thread when it is full (back-pressure as
an ``await``); the buffer's sender publishes in the background as for ``Client``. Reads
of a server go through httpx's async client (``aio_http``); reads of the embedded
stores, and flushes, run the ``Client``'s calls in a worker thread.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from agentlog.client.aio_http import AsyncHttpReads
from agentlog.client.client import TIMEOUT_OUTPUT, Client
from agentlog.client.errors import ClientError, DeliveryFailed, transient
from agentlog.client.results import (
    Context, LoggedEvent, SearchAnswer, SqlResult, State, ThreadList, search_from, state_from, threads_from,
)  # fmt: skip
from agentlog.client.thread import ThreadBase, ToolCallBase
from agentlog.streams.api.client import RemoteService
from agentlog.streams.api.service import Service

T = TypeVar("T")


class AsyncClient:
    """``Client`` for asyncio: the same constructor and methods, awaited."""

    def __init__(self, target: str | Path | Service | None = None, **options: Any) -> None:
        """The same arguments as ``Client`` (``token``, ``kafka``, ``worker``, ``batch_size``, ...)."""
        self.sync = Client(target, **options)
        self.ids = self.sync.ids
        self.max_event_bytes = self.sync.max_event_bytes
        self._open_calls = self.sync._open_calls
        service = self.sync.service
        reader = getattr(service, "reader", service)  # Kafka: the worker's API, if named
        self._http = AsyncHttpReads(reader) if isinstance(reader, RemoteService) else None

    async def _run(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await asyncio.to_thread(functools.partial(call, *args, **kwargs))

    async def _read(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """A read after a flush: awaited over HTTP, else the ``Client``'s in a worker thread;
        retried on transient errors as ``Client`` retries."""
        if self.sync._closed:
            raise ClientError("the client is closed")
        if self._http is None:
            return await self._run(getattr(self.sync, name), *args, **kwargs)
        await self.flush()
        policy = self.sync.policy
        deadline = time.monotonic() + policy.retry_seconds
        delay = policy.backoff_s
        while True:
            try:
                return await getattr(self._http, name)(*args, **kwargs)
            except Exception as error:
                if not transient(error):
                    raise
                if time.monotonic() + delay > deadline:
                    raise DeliveryFailed(f"no answer after {policy.retry_seconds:g} s: {error}") from error
                await asyncio.sleep(delay)
                delay = min(delay * 2, policy.backoff_max_s)

    def __repr__(self) -> str:
        return f"<agentlog.AsyncClient {self.sync.connection.where}>"

    @property
    def service(self) -> Service:
        """The ``Service`` the client drives (``health()``, the memory jobs, ``catch_up()``)."""
        return self.sync.service

    @property
    def pending(self) -> int:
        """Events buffered or being sent."""
        return self.sync.pending

    async def publish_raw(self, data: bytes) -> None:
        """Events you encoded yourself (JSON lines), through the same buffer and retries."""
        await self._run(self.sync.publish_raw, data)

    def thread(self, thread_id: str, project: str | None = None, agent_id: str | None = None,
               window_id: str | None = None) -> AsyncThread:  # fmt: skip
        """A handle on one thread (nothing is sent until it publishes)."""
        return AsyncThread(self, thread_id, project, agent_id, window_id)

    async def _send(self, event_id: str, raw: bytes) -> str:
        if not self.sync._buffer.offer(raw):  # full: wait for room off the event loop
            await self._run(self.sync._buffer.put, raw)
        return event_id

    async def flush(self, timeout: float | None = None) -> None:
        """``Client.flush``, awaited (in a worker thread)."""
        await self._run(self.sync.flush, timeout)

    async def close(self) -> None:
        """Give open tool calls a ``timeout`` result, publish the buffer, release the target."""
        if self.sync._closed:
            return
        for call in list(self._open_calls.values()):
            await call._result(TIMEOUT_OUTPUT, "timeout", None)
        try:
            await self._run(self.sync.close)
        finally:
            if self._http is not None:
                await self._http.close()

    async def __aenter__(self) -> AsyncClient:
        """The client itself; leaving the block closes it."""
        return self

    async def __aexit__(self, *exc: object) -> None:
        """``close()``."""
        await self.close()

    async def state(self, thread_id: str) -> State:
        """``Client.state``, awaited."""
        answer = await self._read("state", thread_id)  # over HTTP, the sections kept read-only: taken as they are
        return answer if isinstance(answer, State) else state_from(answer, in_process=False)

    async def context(self, thread_id: str, budget: int, query: str | None = None,
                      model: str | None = None, format: str = "generic") -> Context:  # noqa: A002 # fmt: skip
        """``Client.context``, awaited."""
        return Context.model_validate(await self._read("context", thread_id, budget, query, model, format))

    async def search(self, query: str, **filters: Any) -> SearchAnswer:
        """``Client.search``, awaited."""
        return search_from(await self._read("search", query, **filters))

    async def read(self, event_id: str) -> LoggedEvent:
        """``Client.read``, awaited."""
        return LoggedEvent.model_validate(await self._read("read", event_id))

    async def sql(self, statement: str) -> SqlResult:
        """``Client.sql``, awaited."""
        return SqlResult.model_validate(await self._read("sql", statement))

    async def threads(self, project: str | None = None, status: str | None = None, limit: int = 100) -> ThreadList:
        """``Client.threads``, awaited."""
        return threads_from(await self._read("threads", project, status, limit))


class AsyncThread(ThreadBase[Awaitable[str]]):
    """A thread of ``AsyncClient``: every publishing method is awaited (``await t.goal(...)``)."""

    client: AsyncClient

    def tool_call(self, tool_name: str, arguments: dict[str, Any] | str | None = None,
                  call_id: str | None = None) -> AsyncToolCall:  # fmt: skip
        """``async with t.tool_call("pytest", args) as call: ... await call.result(out)``."""
        return AsyncToolCall(self, tool_name, arguments, call_id)

    async def spawn(self, child_thread_id: str, role: str | None = None, agent_id: str | None = None,
                    project: str | None = None) -> AsyncThread:  # fmt: skip
        """``Thread.spawn``, awaited: the child's handle."""
        child = self._spawned(child_thread_id, agent_id, project)
        await self._spawn_event(child, role)
        return child  # type: ignore[return-value]

    async def exit(self, status: str | None = "done", summary: str | None = None) -> str:
        """``Thread.exit``, awaited."""
        return await self._exit_event(status, summary)

    async def state(self) -> State:
        """This thread's working state."""
        return await self.client.state(self.thread_id)

    async def context(self, budget: int, query: str | None = None, model: str | None = None,
                      format: str = "generic") -> Context:  # noqa: A002 # fmt: skip
        """This thread's context within ``budget`` tokens."""
        return await self.client.context(self.thread_id, budget=budget, query=query, model=model, format=format)

    async def history(self, items: Iterable[Mapping[str, Any]], format: str,  # type: ignore[override] # noqa: A002
                      system: str | None = None, at: str | None = None) -> list[str]:  # fmt: skip
        """``Thread.history``, awaited: the events in order."""
        return [await sent for sent in super().history(items, format, system, at)]

    async def search(self, query: str, **filters: Any) -> SearchAnswer:
        """Full-text search within this thread."""
        return await self.client.search(query, thread_id=self.thread_id, **filters)


class AsyncToolCall(ToolCallBase):
    async def __aenter__(self) -> AsyncToolCall:
        """Publish the call; its latency counts from here."""
        await self._start()
        return self

    async def result(self, output: Any, status: str = "ok", exit_code: int | None = None) -> str:
        """``ToolCall.result``, awaited."""
        return await self._result(output, status, exit_code)  # type: ignore[no-any-return]

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: Any) -> None:
        """An exception leaving the block becomes an ``error`` (or ``cancelled``) result, and goes on."""
        failed = self._failed(error)
        if failed is not None:
            await self.result(*failed)


__all__ = ["AsyncClient", "AsyncThread", "AsyncToolCall"]
