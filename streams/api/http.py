"""The HTTP API of ``agentlog run`` (SPEC §7), over an ``EmbeddedService``.

Every request passes ``agentlog.streams.api.guard`` (Host, token, size, content type) before
routing, and every parameter and body is parsed by its model in ``agentlog.schemas.requests``
before a handler sees it: a bad request is a 4xx with a JSON ``error``, an unexpected
failure a logged JSON 500, and neither harms the next request.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import orjson
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from agentlog.schemas.openapi import openapi_document
from agentlog.schemas.requests import (
    ConsolidateBody, ContextQuery, EventPath, LeaseBody, MemoryQuery, RequestError, RevokeBody, SearchQuery,
    SqlBody, ThreadListQuery, ThreadPath, parse_body, parse_path, parse_query,
)  # fmt: skip
from agentlog.sinks.base import StoreError
from agentlog.sinks.sql_sandbox import SqlBusy
from agentlog.streams.api.guard import Policy, check_token, read_body, refusal
from agentlog.streams.metrics import METRICS
from agentlog.streams.api.service import NotFound, Unavailable
from agentlog.streams.embedded.service import EmbeddedService

log = logging.getLogger("agentlog.http")


class OrjsonResponse(JSONResponse):
    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, default=str)


def _error(status: int, message: str) -> OrjsonResponse:
    return OrjsonResponse({"error": message}, status_code=status)


def _refused(error: RequestError) -> OrjsonResponse:
    return OrjsonResponse(error.body, status_code=error.status)


class Guard:
    """The access rules of ``agentlog.streams.api.guard``, before any routing (pure ASGI, so a
    refused body is never read)."""

    def __init__(self, app: ASGIApp, policy: Policy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers: dict[str, str] = {}
            refused: RequestError | None = None
            for key, value in scope["headers"]:
                name = key.decode("latin-1").lower()
                if name in headers and name in ("host", "authorization", "content-length", "content-type"):
                    refused = RequestError(400, f"the {name} header is given twice; give it once")
                headers[name] = value.decode("latin-1")
            refused = refused or refusal(self.policy, scope["method"], scope["path"], headers)
            if refused is not None:
                await _refused(refused)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def build_app(service: EmbeddedService, policy: Policy | None = None, identity: dict[str, str] | None = None,
              background: Callable[[threading.Event], None] | None = None) -> Starlette:  # fmt: skip
    """The API; ``policy`` (default: loopback, no token) says who may call it,
    ``identity`` (instance id, data directory) is what ``/healthz`` tells clients, and
    ``background`` (the embedded driver loop) runs in a thread while the app serves,
    until the event it is given is set."""
    policy = policy or Policy(max_request_bytes=service.settings.max_request_bytes)
    stop = threading.Event()

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # Analyst queries wait on threads of their own (made here: a limiter belongs to the
        # running event loop), so however many queue up, the shared pool stays free for
        # /events, state and context.
        app.state.sql_threads = anyio.CapacityLimiter(2)
        worker = threading.Thread(target=background, args=(stop,), name="driver", daemon=True) if background else None
        if worker:
            worker.start()
        try:
            yield
        finally:
            stop.set()
            if worker:
                worker.join(timeout=30)

    def route(name: str, fn: Callable[[Request], Any]) -> Callable[[Request], Any]:
        async def handler(request: Request) -> Response:
            t0 = time.perf_counter()
            try:
                result = await fn(request)
                # Rendered here, so a value JSON cannot hold is answered like any failure.
                return result if isinstance(result, Response) else OrjsonResponse(result)
            except RequestError as error:
                return _refused(error)
            except NotFound as error:
                return _error(404, str(error))
            except (SqlBusy, Unavailable) as error:
                return OrjsonResponse({"error": str(error)}, status_code=503, headers={"Retry-After": "2"})
            except (ValueError, StoreError) as error:
                return _error(400, str(error))
            except Exception:  # noqa: BLE001 - a bug must answer, be logged, and spare the next request
                log.exception("%s %s failed", request.method, request.url.path)
                return _error(500, f"{request.method} {request.url.path} failed unexpectedly; the server "
                                   "logged why. Other requests are unaffected; retry, or report the log line")  # fmt: skip
            finally:
                METRICS.requests.labels(name).observe(time.perf_counter() - t0)

        return handler

    async def body_of(request: Request) -> bytes:
        return await read_body(request.stream(), policy.max_request_bytes)

    def thread_of(request: Request) -> str:
        return parse_path(ThreadPath, request.path_params).thread_id

    async def post_events(request: Request) -> Any:
        body = await body_of(request)
        report = await run_in_threadpool(service.publish, body)
        return OrjsonResponse(report.as_dict(), status_code=200)

    async def get_threads(request: Request) -> Any:
        q = parse_query(ThreadListQuery, request.query_params.multi_items())
        return await run_in_threadpool(service.thread_list, q.project, q.status, q.limit)

    async def get_state(request: Request) -> Any:
        return await run_in_threadpool(service.state, thread_of(request))

    async def get_context(request: Request) -> Any:
        thread_id = thread_of(request)
        q = parse_query(ContextQuery, request.query_params.multi_items())
        return await run_in_threadpool(service.context, thread_id, q.budget, q.query, q.model)

    async def get_search(request: Request) -> Any:
        q = parse_query(SearchQuery, request.query_params.multi_items())
        return await run_in_threadpool(
            service.search, q.q, q.thread, q.kind, q.tool, q.window, q.project, q.after, *q.bounds(), q.limit,
        )  # fmt: skip

    async def get_event(request: Request) -> Any:
        return await run_in_threadpool(service.read, parse_path(EventPath, request.path_params).event_id)

    async def post_sql(request: Request) -> Any:
        body = parse_body(SqlBody, await body_of(request))
        result = await anyio.to_thread.run_sync(service.sql, body.sql, limiter=request.app.state.sql_threads)
        return {"columns": result.columns, "rows": [list(r) for r in result.rows]}

    async def post_flush(_request: Request) -> Any:
        if not isinstance(service, EmbeddedService):  # a Kafka worker: wait for its processor
            return await run_in_threadpool(service.catch_up)
        return await run_in_threadpool(service.wait_processed, service.bus.end_offsets()[0]) or {"ok": True}

    async def post_rebuild(_request: Request) -> Any:
        return await run_in_threadpool(service.rebuild)

    def with_memory(action: Callable[[Any], Any]) -> Any:
        from agentlog.streams.memory.jobs import Memory  # noqa: PLC0415

        if service.settings.distributed:  # the jobs pull from Kafka themselves; a worker does not run them
            raise RequestError(501, "a Kafka worker does not run the memory jobs: run `agentlog memory ...` "
                                    "with the same settings (it reads the events topic)")  # fmt: skip
        job = Memory(service.settings)
        try:
            return action(job)
        finally:
            job.close()

    async def get_memory(request: Request) -> Any:
        q = parse_query(MemoryQuery, request.query_params.multi_items())
        return await run_in_threadpool(with_memory, lambda job: job.show(q.project, q.key))

    async def memory_extract(request: Request) -> Any:
        body = parse_body(LeaseBody, await body_of(request), empty_ok=True)
        return await run_in_threadpool(with_memory, lambda job: job.extract(lease_s=body.lease_seconds).__dict__)

    async def memory_consolidate(request: Request) -> Any:
        body = parse_body(ConsolidateBody, await body_of(request), empty_ok=True)
        return await run_in_threadpool(
            with_memory, lambda job: job.consolidate(lease_s=body.lease_seconds, high_risk=body.high_risk)
        )

    async def memory_revoke(request: Request) -> Any:
        body = parse_body(RevokeBody, await body_of(request))

        def revoke(job: Any) -> Any:
            try:
                return job.revoke(body.event_id, body.reason)
            except LookupError as error:
                raise NotFound(str(error)) from error

        return await run_in_threadpool(with_memory, revoke)

    async def memory_status(_request: Request) -> Any:
        return await run_in_threadpool(with_memory, lambda job: job.status())

    async def healthz(request: Request) -> Any:
        health = {**service.health(), **(identity or {})}
        if check_token(policy, "/", request.headers.get("authorization")) is not None:
            # Without the token: liveness only; paths and store details are for callers with it.
            return {k: health[k] for k in ("status", "deployment", "instance") if k in health}
        return health

    async def metrics(_request: Request) -> Any:
        return Response(generate_latest(METRICS.registry), media_type=CONTENT_TYPE_LATEST)

    document = openapi_document()

    async def openapi(_request: Request) -> Any:
        return document

    async def http_error(_request: Request, error: Exception) -> Response:
        assert isinstance(error, HTTPException)
        headers = dict(error.headers or {})
        if error.status_code == 405:
            return OrjsonResponse({"error": f"method not allowed here; use {headers.get('Allow', 'POST')} "
                                   "(state changes only on POST)"}, status_code=405, headers=headers)  # fmt: skip
        if error.status_code == 404:
            return _error(404, "no such route; GET /openapi.json lists them")
        return OrjsonResponse({"error": str(error.detail)}, status_code=error.status_code, headers=headers)

    async def server_error(request: Request, _exc: Exception) -> Response:
        return _error(500, f"{request.method} {request.url.path} failed unexpectedly; the server logged why")

    routes = [
        Route("/events", route("events", post_events), methods=["POST"]),
        Route("/threads", route("threads", get_threads), methods=["GET"]),
        Route("/threads/{thread_id}/state", route("state", get_state), methods=["GET"]),
        Route("/threads/{thread_id}/context", route("context", get_context), methods=["GET"]),
        Route("/search", route("search", get_search), methods=["GET"]),
        Route("/events/{event_id}", route("read", get_event), methods=["GET"]),
        Route("/sql", route("sql", post_sql), methods=["POST"]),
        Route("/flush", route("flush", post_flush), methods=["POST"]),
        Route("/rebuild", route("rebuild", post_rebuild), methods=["POST"]),
        Route("/memory", route("memory", get_memory), methods=["GET"]),
        Route("/memory/status", route("memory", memory_status), methods=["GET", "POST"]),
        Route("/memory/extract", route("memory", memory_extract), methods=["POST"]),
        Route("/memory/consolidate", route("memory", memory_consolidate), methods=["POST"]),
        Route("/memory/revoke", route("memory", memory_revoke), methods=["POST"]),
        Route("/healthz", route("healthz", healthz), methods=["GET"]),
        Route("/metrics", route("metrics", metrics), methods=["GET"]),
        Route("/openapi.json", route("openapi", openapi), methods=["GET"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan, middleware=[Middleware(Guard, policy=policy)],
                    exception_handlers={HTTPException: http_error, Exception: server_error})  # fmt: skip
    app.router.redirect_slashes = False  # a redirect is no answer; `/events/` is a 404 that says why
    return app


__all__ = ["Guard", "build_app"]
