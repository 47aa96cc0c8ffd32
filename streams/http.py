"""The HTTP API of ``agentlog run`` (SPEC §7), over an ``EmbeddedService``."""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from schemas.search import time_bounds
from sinks.base import StoreError
from streams.metrics import METRICS
from streams.service import EmbeddedService, NotFound


class OrjsonResponse(JSONResponse):
    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, default=str)


def _error(status: int, message: str) -> OrjsonResponse:
    return OrjsonResponse({"error": message}, status_code=status)


def build_app(service: EmbeddedService) -> Starlette:
    stop = threading.Event()

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        worker = threading.Thread(target=service.run_forever, args=(stop,), name="driver", daemon=True)
        worker.start()
        try:
            yield
        finally:
            stop.set()
            worker.join(timeout=30)

    def route(name: str, fn: Callable[[Request], Any]) -> Callable[[Request], Any]:
        async def handler(request: Request) -> Response:
            t0 = time.perf_counter()
            try:
                result = await fn(request)
            except NotFound as error:
                return _error(404, str(error))
            except (ValueError, StoreError) as error:
                return _error(400, str(error))
            finally:
                METRICS.requests.labels(name).observe(time.perf_counter() - t0)
            return result if isinstance(result, Response) else OrjsonResponse(result)

        return handler

    async def post_events(request: Request) -> Any:
        body = await request.body()
        report = await run_in_threadpool(service.publish, body)
        return OrjsonResponse(report.as_dict(), status_code=200)

    async def get_state(request: Request) -> Any:
        return await run_in_threadpool(service.state, request.path_params["thread_id"])

    async def get_context(request: Request) -> Any:
        from streams.context_api import context_for  # noqa: PLC0415 - optional feature

        q = request.query_params
        budget = q.get("budget")
        if budget is None:
            raise ValueError("budget is required, e.g. ?budget=4000")
        return await run_in_threadpool(
            context_for, service, request.path_params["thread_id"], int(budget), q.get("query")
        )

    async def get_search(request: Request) -> Any:
        q = request.query_params
        return await run_in_threadpool(
            service.search, q.get("q", ""), q.get("thread"), q.get("kind"), q.get("tool"),
            q.get("window"), q.get("project"), q.get("after"), *time_bounds(q), int(q.get("limit", "10")),
        )  # fmt: skip

    async def get_event(request: Request) -> Any:
        return await run_in_threadpool(service.read, request.path_params["event_id"])

    async def post_sql(request: Request) -> Any:
        body = orjson.loads(await request.body())
        result = await run_in_threadpool(service.sql, body["sql"])
        return {"columns": result.columns, "rows": [list(r) for r in result.rows]}

    async def post_flush(_request: Request) -> Any:
        return await run_in_threadpool(service.wait_processed, service.bus.end_offsets()[0]) or {"ok": True}

    async def post_rebuild(_request: Request) -> Any:
        return await run_in_threadpool(service.rebuild)

    def memory_job() -> Any:
        from streams.memory_jobs import Memory  # noqa: PLC0415

        return Memory(service.settings)

    async def get_memory(request: Request) -> Any:
        q = request.query_params

        def show() -> Any:
            job = memory_job()
            try:
                return job.show(q.get("project"), q.get("key"))
            finally:
                job.close()

        return await run_in_threadpool(show)

    async def memory_action(request: Request) -> Any:
        action = request.path_params["action"]
        body = orjson.loads(await request.body() or b"{}")

        def run() -> Any:
            job = memory_job()
            try:
                if action == "extract":
                    return job.extract(lease_s=float(body.get("lease_seconds", 60))).__dict__
                if action == "consolidate":
                    return job.consolidate(lease_s=float(body.get("lease_seconds", 60)),
                                           high_risk=body.get("high_risk"))  # fmt: skip
                if action == "revoke":
                    try:
                        return job.revoke(body["event_id"], body.get("reason"))
                    except LookupError as error:
                        raise NotFound(str(error)) from error
                if action == "status":
                    return job.status()
                raise NotFound(f"no memory action {action!r}: extract, consolidate, revoke or status")
            finally:
                job.close()

        return await run_in_threadpool(run)

    async def healthz(_request: Request) -> Any:
        return service.health()

    async def metrics(_request: Request) -> Any:
        return Response(generate_latest(METRICS.registry), media_type=CONTENT_TYPE_LATEST)

    routes = [
        Route("/events", route("events", post_events), methods=["POST"]),
        Route("/threads/{thread_id}/state", route("state", get_state)),
        Route("/threads/{thread_id}/context", route("context", get_context)),
        Route("/search", route("search", get_search)),
        Route("/events/{event_id}", route("read", get_event)),
        Route("/sql", route("sql", post_sql), methods=["POST"]),
        Route("/flush", route("flush", post_flush), methods=["POST"]),
        Route("/rebuild", route("rebuild", post_rebuild), methods=["POST"]),
        Route("/memory", route("memory", get_memory)),
        Route("/memory/{action}", route("memory", memory_action), methods=["POST", "GET"]),
        Route("/healthz", route("healthz", healthz)),
        Route("/metrics", route("metrics", metrics)),
    ]
    return Starlette(routes=routes, lifespan=lifespan)


__all__ = ["build_app"]
