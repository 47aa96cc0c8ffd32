"""The agent step's routes without FastAPI's per-request machinery.

An agent's step over HTTP is ``POST /events``, then ``GET /threads/{id}/state`` or
``GET /threads/{id}/context``. Profiled on ``agentlog run``, a small publish cost about
1.1 ms of the event loop's time, of which the publish itself was under 0.1 ms: the rest
was routing, dependency solving, FastAPI's exception and exit-stack layers and anyio's
thread-pool hop. ``HotRoutes`` answers these three requests itself, right behind
``Guard`` (so every access rule has been applied), through the same ``StepAnswers`` the
routes call, the same error mapping (``failure``) and the same metrics.

It only answers a request that is plainly valid: the exact method and path, a well-formed
id, context parameters that ``ContextQuery`` accepts each given once. Anything else goes
on to the FastAPI routes, which answer it as before (their refusals are the canonical
ones). A test sends the same corpus of requests, hostile ones included, through the app
with and without ``HotRoutes`` and compares status, headers and body.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any
from urllib.parse import parse_qsl

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from agentlog.processors.state_sections import ACCEPT_PATCHES_HEADER, KNOWN_HEADER, Held, StateBody, parse_held, serialised
from agentlog.schemas.requests import ID_RE, ContextQuery, RequestError, parse_query
from agentlog.streams.api.guard import Policy, read_body
from agentlog.streams.api.service import Service, StateJson
from agentlog.streams.metrics import METRICS

_THREAD_ROUTE = re.compile(r"/threads/(?P<thread_id>[^/]+)/(?P<what>state|context)")
"""Starlette's pattern for ``/threads/{thread_id}/state`` (and ``/context``)."""

_KNOWN, _ACCEPT = KNOWN_HEADER.lower().encode(), ACCEPT_PATCHES_HEADER.lower().encode()
Handler = Callable[[], Awaitable[Response]]
THREADS = 40
"""Threads of the hot routes' own pool (as many as anyio's default limiter gives the routes)."""


class StepAnswers:
    """The agent step's three answers, the one definition both the FastAPI routes and
    ``HotRoutes`` give; ``off_loop`` runs a blocking service call off the event loop."""

    def __init__(self, service: Service, json: type[Response], off_loop: Callable[..., Awaitable[Any]]) -> None:
        self.service, self.json, self.off_loop = service, json, off_loop
        self.spliced = service if isinstance(service, StateJson) else None  # the state's JSON written by the service

    async def publish(self, data: bytes) -> Response:
        return self.json((await self.off_loop(self.service.publish, data)).as_dict())

    async def state(self, thread_id: str, held: Held | None) -> Response:
        """The state but for the sections the reader ``held`` (null, or patches)."""
        if self.spliced is None:
            public, digests = serialised(await self.off_loop(self.service.state, thread_id))
            answer = StateBody.of(public, digests, held)
        else:
            # Answered on the event loop when that costs no wait (an agent's step: its event
            # applied, the state spliced from kept JSON; see ``state_json_now``), else off it.
            found = self.spliced.state_json_now(thread_id, held)
            answer = found if found is not None else await self.off_loop(self.spliced.state_json, thread_id, held)
        return Response(answer.body, media_type=self.json.media_type, headers=answer.headers())

    async def context(self, thread_id: str, q: ContextQuery) -> Response:
        return self.json(await self.off_loop(self.service.context, thread_id, q.budget, q.query, q.model, q.format))


class HotRoutes:
    """ASGI middleware in front of the FastAPI routes: the agent step's requests answered
    here, everything else passed on. ``json`` is the routes' response class, ``failure``
    their mapping of an exception to an answer."""

    def __init__(self, app: ASGIApp, service: Service, policy: Policy, json: type[Response],
                 failure: Callable[[Request, Exception], Response]) -> None:  # fmt: skip
        self.app, self.policy, self.failure = app, policy, failure
        # A pool of their own: the Kafka worker serves on faust's loop, whose default
        # executor writes its sinks; blocking reads there would queue those writes.
        self.pool = ThreadPoolExecutor(THREADS, thread_name_prefix="agentlog-hot")
        self.answers = StepAnswers(service, json, self._off_loop)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":  # the pool's idle threads end with the app
            await self.app(scope, receive, self._closing(send))
            return
        found = self._match(scope, receive) if scope["type"] == "http" else None
        if found is None:
            await self.app(scope, receive, send)
            return
        name, handle = found
        t0 = time.perf_counter()
        try:
            response = await handle()
        except Exception as error:  # noqa: BLE001 - answered as the routes answer it, the next request spared
            response = self.failure(Request(scope, receive), error)
        finally:
            METRICS.requests.labels(name).observe(time.perf_counter() - t0)
        await response(scope, receive, send)

    def _closing(self, send: Send) -> Send:
        async def sending(message: dict[str, Any]) -> None:
            await send(message)
            if message["type"] == "lifespan.shutdown.complete":
                self.pool.shutdown(wait=False)

        return sending

    def _match(self, scope: Scope, receive: Receive) -> tuple[str, Handler] | None:
        """The route's name and its handler, or ``None`` (the FastAPI routes answer it)."""
        if scope.get("root_path"):  # mounted under a prefix: the routes strip it as they route
            return None
        method, path = scope["method"], scope["path"]
        if path == "/events":
            return ("events", partial(self._publish, scope, receive)) if method == "POST" else None
        m = _THREAD_ROUTE.fullmatch(path)
        if m is None or method != "GET" or not ID_RE.fullmatch(m["thread_id"]):
            return None
        if m["what"] == "state":
            headers = scope["headers"]
            try:
                held = parse_held([v.decode("latin-1") for k, v in headers if k == _KNOWN],
                                  [v.decode("latin-1") for k, v in headers if k == _ACCEPT])  # fmt: skip
            except ValueError:
                return None  # refused by the route, in its words
            return "state", partial(self.answers.state, m["thread_id"], held)
        try:
            q = parse_query(ContextQuery, parse_qsl(scope["query_string"].decode("latin-1"), keep_blank_values=True))
        except RequestError:
            return None  # refused by the route, in its words
        return "context", partial(self.answers.context, m["thread_id"], q)

    async def _publish(self, scope: Scope, receive: Receive) -> Response:
        return await self.answers.publish(await read_body(Request(scope, receive).stream(), self.policy.max_request_bytes))

    async def _off_loop(self, call: Callable[..., Any], *args: Any) -> Any:
        """``call(*args)`` on this pool: a blocking call never holds up the loop, without
        anyio's limiter and task bookkeeping around the hop."""
        return await asyncio.get_running_loop().run_in_executor(self.pool, _no_stop_iteration, call, *args)


def _no_stop_iteration(call: Callable[..., Any], *args: Any) -> Any:
    """``call(*args)``; a ``StopIteration`` it raises becomes a ``RuntimeError`` (as anyio
    makes it): asyncio cannot set one on a future, and the request would never answer."""
    try:
        return call(*args)
    except StopIteration as error:
        raise RuntimeError(f"{getattr(call, '__name__', call)!s} raised StopIteration") from error


__all__ = ["HotRoutes", "StepAnswers"]
