"""The HTTP API (SPEC §7): one FastAPI app written once over the ``Service`` protocol;
``agentlog run`` serves it over its ``EmbeddedService``, a Kafka worker over its own.

Every request passes ``agentlog.streams.api.guard`` (Host, token, size, content type) before
routing. Query and path parameters are the models of ``agentlog.schemas.requests`` (FastAPI
checks them and documents them in ``/openapi.json``); bodies are read in bounded chunks and
parsed by the same module. A bad request is a 400 with a JSON ``error`` (not FastAPI's
422), an unexpected failure a logged JSON 500, and neither harms the next request.
"""

import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Annotated, Any

import anyio
import orjson
from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from agentlog.schemas.requests import (
    ConsolidateBody, ContextQuery, Id, LeaseBody, MemoryQuery, RequestError, RevokeBody, SearchQuery, SqlBody,
    ThreadListQuery, bad_id, parse_body, refusal,
)  # fmt: skip
from agentlog.schemas.responses import Error, SearchAnswer, SqlAnswer, ThreadList
from agentlog.sinks.base import StoreError
from agentlog.sinks.sql_sandbox import SqlBusy
from agentlog.streams.api.guard import Policy, check_token, read_body, refusal as guard_refusal
from agentlog.streams.api.service import NotFound, Service, Unavailable
from agentlog.streams.metrics import METRICS
from agentlog.streams.publish_check import PublishReport

log = logging.getLogger("agentlog.http")

REASONS = {
    400: "a bad parameter or body; `error` says which and what to send",
    401: "the API token is missing or wrong (`Authorization: Bearer <AGENTLOG_API_TOKEN>`)",
    403: "a browser page of another origin",
    404: "no such thread, event or route",
    405: "wrong method: state changes only on POST",
    413: "the body passes AGENTLOG_MAX_REQUEST_BYTES",
    415: "a POST without a JSON content type",
    421: "a Host this server does not answer to",
    500: "an unexpected failure, logged by the server; the next request is unaffected",
    503: "busy or catching up: retry after `Retry-After` seconds",
}
READS, WRITES = (401, 403, 421, 500, 503), (401, 403, 413, 415, 421, 500, 503)


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: {"model": Error, "description": REASONS[code]} for code in sorted(codes)}


class OrjsonResponse(JSONResponse):
    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, default=str)


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> OrjsonResponse:
    return OrjsonResponse({"error": message}, status_code=status, headers=headers)


def failure(request: Request, error: Exception) -> OrjsonResponse:
    """The answer to a route's exception: the one mapping of both deployments."""
    if isinstance(error, RequestError):
        return OrjsonResponse(error.body, status_code=error.status)
    if isinstance(error, NotFound):
        return _error(404, str(error))
    if isinstance(error, (Unavailable, SqlBusy)):
        return _error(503, str(error), {"Retry-After": "2"})
    if isinstance(error, (ValueError, StoreError)):  # BudgetTooSmall is a ValueError
        return _error(400, str(error))
    log.error("%s %s failed", request.method, request.url.path, exc_info=error)
    return _error(500, f"{request.method} {request.url.path} failed unexpectedly; the server logged why. "
                       "Other requests are unaffected; retry, or report the log line")  # fmt: skip


def _invalid(error: RequestValidationError, fields: list[str]) -> RequestError:
    """FastAPI's refusal of a path or query parameter, said as ``parse_path``/``parse_query`` do."""
    found = list(error.errors())
    where, name = found[0]["loc"][:2]
    if where == "path":
        return bad_id(str(name))
    return refusal([{**e, "loc": e["loc"][1:]} for e in found], fields, "query parameter")


class Route(APIRoute):
    """A route whose every failure is answered by ``failure``, and whose time is measured;
    a query parameter given twice is refused (FastAPI would take the last)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle, name = super().get_route_handler(), self.name
        fields = [f for p in self.dependant.query_params for f in p.field_info.annotation.model_fields]  # type: ignore[union-attr]

        async def answer(request: Request) -> Response:
            t0 = time.perf_counter()
            try:
                if fields:
                    keys = [key for key, _ in request.query_params.multi_items()]
                    if twice := next((k for k in keys if keys.count(k) > 1), None):
                        raise RequestError(400, f"parameter {twice!r} is given twice; give it once", field=twice)
                return await handle(request)
            except RequestValidationError as error:
                return failure(request, _invalid(error, fields))
            except Exception as error:  # noqa: BLE001 - a bug must answer, be logged, and spare the next request
                return failure(request, error)
            finally:
                METRICS.requests.labels(name).observe(time.perf_counter() - t0)

        return answer


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
            refused = refused or guard_refusal(self.policy, scope["method"], scope["path"], headers)
            if refused is not None:
                await OrjsonResponse(refused.body, status_code=refused.status)(scope, receive, send)
                return
        await self.app(scope, receive, send)


async def _http_error(_request: Request, error: Exception) -> Response:
    """Routing's own refusals (no such route, wrong method), in JSON."""
    assert isinstance(error, HTTPException)
    headers = dict(error.headers or {})
    if error.status_code == 405:
        return _error(405, f"method not allowed here; use {headers.get('Allow', 'POST')} "
                           "(state changes only on POST)", headers)  # fmt: skip
    if error.status_code == 404:
        return _error(404, "no such route; GET /openapi.json lists them")
    return _error(error.status_code, str(error.detail), headers)


def _body(model: type[BaseModel], required: bool = True) -> dict[str, Any]:
    ref = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {"requestBody": {"required": required, "content": {"application/json": {"schema": ref}}}}


EVENTS_BODY = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": {"oneOf": [{"type": "object"}, {"type": "array"}]}},
    "application/x-ndjson": {"schema": {"type": "string", "description": "JSON lines: one SPEC §2 event a line"}},
    "application/jsonl": {"schema": {"type": "string"}}}}}  # fmt: skip
BODIES = (SqlBody, LeaseBody, ConsolidateBody, RevokeBody)


def build_app(service: Service, policy: Policy | None = None, identity: dict[str, str] | None = None,
              background: Callable[[threading.Event], None] | None = None) -> FastAPI:  # fmt: skip
    """The API; ``policy`` (default: loopback, no token) says who may call it,
    ``identity`` (instance id, data directory) is what ``/healthz`` tells clients, and
    ``background`` (the embedded driver loop) runs in a thread while the app serves,
    until the event it is given is set."""
    policy = policy or Policy()
    stop = threading.Event()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
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

    app = FastAPI(title="agentlog", version="1", lifespan=lifespan, redirect_slashes=False, openapi_url=None,
                  docs_url=None, redoc_url=None, default_response_class=OrjsonResponse,
                  exception_handlers={HTTPException: _http_error},
                  description="Agent events in; working state, context, search and SQL out (SPEC §7).")  # fmt: skip
    app.router.route_class = Route
    app.add_middleware(Guard, policy=policy)

    async def raw(request: Request) -> bytes:
        return await read_body(request.stream(), policy.max_request_bytes)

    def body(model: type[BaseModel], empty_ok: bool = False) -> Any:
        async def parse(data: Annotated[bytes, Depends(raw)]) -> Any:
            return parse_body(model, data, empty_ok=empty_ok)

        return Depends(parse)

    json = OrjsonResponse  # handlers answer JSON as it is: no second encoding pass
    # Handlers are plain functions: FastAPI runs them on its thread pool, off the event loop.

    @app.post("/events", name="events", summary="publish events: one JSON object, a JSON array, or JSON lines",
              response_model=PublishReport, responses=errors(400, *WRITES), openapi_extra=EVENTS_BODY)  # fmt: skip
    def publish(data: Annotated[bytes, Depends(raw)]) -> Response:
        return json(service.publish(data).as_dict())

    @app.get("/threads", name="threads", response_model=ThreadList, responses=errors(400, *READS),
             summary="every thread's summary row, newest activity first")  # fmt: skip
    def thread_list(q: Annotated[ThreadListQuery, Query()]) -> Response:
        return json(service.thread_list(q.project, q.status, q.limit))

    @app.get("/threads/{thread_id}/state", name="state", summary="a thread's working state",
             responses=errors(400, 404, *READS))  # fmt: skip
    def state(thread_id: Id) -> Response:
        return json(service.state(thread_id))

    @app.get("/threads/{thread_id}/context", name="context", responses=errors(400, 404, *READS),
             summary="the thread's context assembled under a token budget")  # fmt: skip
    def context(thread_id: Id, q: Annotated[ContextQuery, Query()]) -> Response:
        return json(service.context(thread_id, q.budget, q.query, q.model))

    @app.get("/search", name="search", summary="keyword search over events", response_model=SearchAnswer,
             responses=errors(400, *READS))  # fmt: skip
    def search(q: Annotated[SearchQuery, Query()]) -> Response:
        bounds = q.bounds()
        return json(service.search(q.q, q.thread, q.kind, q.tool, q.window, q.project, q.after, *bounds, q.limit))

    @app.get("/events/{event_id}", name="read", summary="the original event, by id",
             responses=errors(400, 404, *READS))  # fmt: skip
    def read(event_id: Id) -> Response:
        return json(service.read(event_id))

    @app.post("/sql", name="sql", summary="one sandboxed read-only query over the log's tables",
              response_model=SqlAnswer, responses=errors(400, *WRITES), openapi_extra=_body(SqlBody))  # fmt: skip
    async def sql(request: Request, q: Annotated[SqlBody, body(SqlBody)]) -> Response:
        result = await anyio.to_thread.run_sync(service.sql, q.sql, limiter=request.app.state.sql_threads)
        return json({"columns": result.columns, "rows": [list(r) for r in result.rows]})

    @app.post("/flush", name="flush", summary="wait until what is published is processed",
              responses=errors(*WRITES))  # fmt: skip
    def flush() -> Response:
        return json(service.catch_up())

    @app.post("/rebuild", name="rebuild", summary="replay the log into state, pairs and index",
              responses=errors(*WRITES))  # fmt: skip
    def rebuild() -> Response:
        return json(service.rebuild())

    @app.get("/memory", name="memory", summary="the published long-term memory", responses=errors(400, *READS))
    def memory(q: Annotated[MemoryQuery, Query()]) -> Response:
        return json(service.memory_show(q.project, q.key))

    @app.post("/memory/extract", name="memory", summary="extract memory candidates from new events",
              responses=errors(400, *WRITES), openapi_extra=_body(LeaseBody, required=False))  # fmt: skip
    def memory_extract(q: Annotated[LeaseBody, body(LeaseBody, empty_ok=True)]) -> Response:
        return json(service.memory_extract(q.lease_seconds))

    @app.post("/memory/consolidate", name="memory", summary="consolidate candidates into a new published view",
              responses=errors(400, *WRITES), openapi_extra=_body(ConsolidateBody, required=False))  # fmt: skip
    def memory_consolidate(q: Annotated[ConsolidateBody, body(ConsolidateBody, empty_ok=True)]) -> Response:
        return json(service.memory_consolidate(q.lease_seconds, q.high_risk))

    @app.post("/memory/revoke", name="memory", summary="withdraw a source event's facts",
              responses=errors(400, 404, *WRITES), openapi_extra=_body(RevokeBody))  # fmt: skip
    def memory_revoke(q: Annotated[RevokeBody, body(RevokeBody)]) -> Response:
        return json(service.memory_revoke(q.event_id, q.reason))

    @app.get("/memory/status", name="memory", summary="memory jobs' leases and versions", responses=errors(*READS))
    @app.post("/memory/status", name="memory", summary="memory jobs' leases and versions", responses=errors(*WRITES))
    def memory_status() -> Response:
        return json(service.memory_status())

    @app.get("/healthz", name="healthz", responses=errors(403, 421, 500),
             summary="liveness, and which data directory this server holds (no token needed)")  # fmt: skip
    def healthz(request: Request) -> Response:
        health = {**service.health(), **(identity or {})}
        if check_token(policy, "/", request.headers.get("authorization")) is not None:
            # Without the token: liveness only; paths and store details are for callers with it.
            return json({k: health[k] for k in ("status", "deployment", "instance") if k in health})
        return json(health)

    @app.get("/metrics", name="metrics", summary="Prometheus metrics", responses=errors(*READS))
    def metrics() -> Response:
        return Response(generate_latest(METRICS.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/openapi.json", name="openapi", summary="this document", responses=errors(*READS))
    def openapi() -> Response:
        return json(document())

    def document() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            for operation in (op for ops in doc["paths"].values() for op in ops.values()):
                operation["responses"].pop("422", None)  # refusals are 400s (``failure``)
            schemas = doc["components"]["schemas"]
            for unused in ("HTTPValidationError", "ValidationError"):
                schemas.pop(unused, None)
            schemas.update({m.__name__: m.model_json_schema(ref_template="#/components/schemas/{model}") for m in BODIES})
            doc["components"]["securitySchemes"] = {"token": {"type": "http", "scheme": "bearer",
                                                              "description": "AGENTLOG_API_TOKEN; required beyond loopback"}}  # fmt: skip
            doc["security"] = [{"token": []}, {}]
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = document  # type: ignore[method-assign]
    return app


__all__ = ["Guard", "build_app", "failure"]
