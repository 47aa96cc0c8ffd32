"""The HTTP API (SPEC §7): one FastAPI app over the ``Service`` protocol, for both deployments.
``Guard`` checks every request before routing; parameters and bodies are the models of
``agentlog.schemas.requests`` (bodies read in bounded chunks). A bad request is a 400 with a
JSON ``error`` (not FastAPI's 422), an unexpected failure a logged JSON 500, and neither
harms the next request."""

import logging
import threading
import warnings
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Annotated, Any

import anyio
import orjson
from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from agentlog.processors.context import BudgetTooSmall
from agentlog.processors.state_sections import (
    ACCEPT_PATCHES_HEADER, KNOWN_HEADER, PATCHED_HEADER, SECTIONS_HEADER, UNCHANGED_HEADER, parse_held,
)  # fmt: skip
from agentlog.schemas.requests import (
    ConsolidateBody, ContextQuery, Id, LeaseBody, MemoryQuery, RequestError, RevokeBody, SearchQuery, SqlBody,
    ThreadListQuery, bad_id, once, parse_body, refusal,
)  # fmt: skip
from agentlog.schemas.responses import (
    EVENTS_BODY, READS, WRITES, body_schemas, SearchAnswer, SqlAnswer, ThreadList, body_doc, errors,
)  # fmt: skip
from agentlog.sinks.base import StoreError
from agentlog.sinks.sql_sandbox import SqlBusy
from agentlog.streams.api import otlp
from agentlog.streams.api.guard import Guard, Policy, check_token, read_body
from agentlog.streams.api.hot_routes import HotRoutes, StepAnswers
from agentlog.streams.api.service import NotFound, NotServedHere, Service, Unavailable
from agentlog.streams.metrics import METRICS
from agentlog.streams.publish_check import PublishReport
from agentlog.streams.web.routes import add_pages

log = logging.getLogger("agentlog.http")


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
    if isinstance(error, NotServedHere):
        return _error(501, str(error))
    if isinstance(error, BudgetTooSmall):  # the figures, so a client raises the same exception
        body = {"error": str(error), "needed": error.needed, "budget": error.budget}
        return OrjsonResponse(body, status_code=400)
    if isinstance(error, (ValueError, StoreError)):
        return _error(400, str(error))
    if isinstance(error, ClientDisconnect):  # not the server's failure: no traceback in its log
        log.info("%s %s: the client left before its body was read", request.method, request.url.path)
        return _error(400, "the connection closed before the whole body arrived; send it again")
    log.error("%s %s failed", request.method, request.url.path, exc_info=error)
    return _error(500, f"{request.method} {request.url.path} failed unexpectedly; the server logged why. "
                       "Other requests are unaffected; retry, or report the log line")  # fmt: skip


def _invalid(error: RequestValidationError, fields: list[str]) -> RequestError:
    """FastAPI's refusal of a path or query parameter, said as ``parse_path``/``parse_query`` do."""
    found = list(error.errors())
    if found[0]["loc"][0] == "path":
        return bad_id(str(found[0]["loc"][-1]))
    return refusal([{**e, "loc": e["loc"][1:]} for e in found], fields, "query parameter")


KnownSections = Annotated[str | None, Header(alias=KNOWN_HEADER, description=(
    "The sections this reader holds, as the Agentlog-Sections header of an earlier state answer "
    "gave them (name=digest pairs, comma-separated): those whose digest is still the same come as "
    "null and are named in the answer's Agentlog-Unchanged header (docs/http-api.md)."))]
AcceptPatches = Annotated[str | None, Header(alias=ACCEPT_PATCHES_HEADER, description=(
    "'true': a list section that changed in a few items since the digest the reader holds may come "
    'as {"length": n, "items": [[position, item], ...]}, named in Agentlog-Patched (docs/http-api.md).'))]
_TEXT = {"type": "string"}
STATE_SECTIONS_DOC: dict[str, Any] = {"description": "the working state", "headers": {
    SECTIONS_HEADER: {"description": "name=digest of each section a reader may keep", "schema": _TEXT},
    UNCHANGED_HEADER: {"description": "the sections sent as null: the reader's copy (by digest) is the current one",
                       "schema": _TEXT},
    PATCHED_HEADER: {"description": "the sections sent as patches (only to a reader that accepts them)",
                     "schema": _TEXT},
    "Vary": {"description": f"{KNOWN_HEADER}, {ACCEPT_PATCHES_HEADER}", "schema": _TEXT}}}  # fmt: skip


class Api(FastAPI):
    """The FastAPI app with a front that its HTTP requests pass first: ``Guard`` (every
    access rule), then the agent step's ``HotRoutes``, then FastAPI's own stack. In front
    of FastAPI's per-request layers (its telemetry switch, error, body-limit and exception
    middleware), which cost the step's requests more than their answers; what goes on is
    routed as before. The front answers an exception as the routes do (``failure``)."""

    front: ASGIApp | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.front is not None and scope["type"] in ("http", "lifespan"):
            await self.front(scope, receive, send)
        else:
            await super().__call__(scope, receive, send)

    async def routed(self, scope: Scope, receive: Receive, send: Send) -> None:
        """FastAPI's own answer: its middleware, then the routes."""
        await super().__call__(scope, receive, send)


class Route(APIRoute):
    """A route whose every failure is answered by ``failure``, and whose time is measured;
    a query parameter given twice is refused (FastAPI would take the last)."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **options: Any) -> None:
        methods = set(options.pop("methods", None) or ())
        super().__init__(path, endpoint, methods=methods | {"HEAD"} if "GET" in methods else methods, **options)

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle, name = super().get_route_handler(), self.name
        models = [p.field_info.annotation for p in self.dependant.query_params]
        fields = [f for model in models for f in getattr(model, "model_fields", ())]

        async def answer(request: Request) -> Response:
            t0 = time.perf_counter()
            try:
                if fields:
                    once(request.query_params.multi_items())
                return await handle(request)
            except RequestValidationError as error:
                return failure(request, _invalid(error, fields))
            except Exception as error:  # noqa: BLE001 - a bug must answer, be logged, and spare the next request
                return failure(request, error)
            finally:
                METRICS.requests.labels(name).observe(time.perf_counter() - t0)

        return answer


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


def build_app(service: Service, policy: Policy | None = None, identity: dict[str, str] | None = None,
              background: Callable[[threading.Event], None] | None = None, hot_routes: bool = True) -> FastAPI:  # fmt: skip
    """The API; ``policy`` (default: loopback, no token) says who may call it, ``identity``
    (instance id, data directory) is what ``/healthz`` tells, and ``background`` (the embedded
    driver loop) runs in a thread while the app serves, until the event it is given is set.
    ``hot_routes``: the agent step's requests answered by ``HotRoutes`` (the same answers;
    off only to compare the two)."""
    policy = policy or Policy()
    stop = threading.Event()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Analyst queries wait on threads of their own (a limiter belongs to the running loop),
        # so however many queue up, the shared pool stays free for /events, state and context.
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

    app = Api(title="agentlog", version="1", lifespan=lifespan, redirect_slashes=False, openapi_url=None,
                  docs_url=None, redoc_url=None, default_response_class=OrjsonResponse,
                  exception_handlers={HTTPException: _http_error, Exception: failure},  # type: ignore[dict-item]
                  description="Agent events in; working state, context, search and SQL out (docs/http-api.md).")  # fmt: skip
    app.router.route_class = Route
    routed: ASGIApp = app.routed
    if hot_routes:
        routed = HotRoutes(routed, service=service, policy=policy, json=OrjsonResponse, failure=failure)
    app.front = ServerErrorMiddleware(Guard(routed, policy=policy), handler=failure)

    async def raw(request: Request) -> bytes:
        return await read_body(request.stream(), policy.max_request_bytes)

    def body(model: type[BaseModel], empty_ok: bool = False) -> Any:
        async def parse(data: Annotated[bytes, Depends(raw)]) -> Any:
            return parse_body(model, data, empty_ok=empty_ok)

        return Depends(parse)

    json = OrjsonResponse  # answers as they are, no second encoding; plain handlers run on the thread pool
    answers = StepAnswers(service, json, run_in_threadpool)  # the agent step's, as HotRoutes gives them too

    @app.post("/events", name="events", summary="publish events: one JSON object, a JSON array, or JSON lines",
              response_model=PublishReport, responses=errors(400, *WRITES), openapi_extra=EVENTS_BODY)  # fmt: skip
    async def publish(data: Annotated[bytes, Depends(raw)]) -> Response:
        return await answers.publish(data)

    @app.post("/v1/traces", name="otlp", summary="OpenTelemetry GenAI spans (OTLP/HTTP, protobuf or JSON) as events",
              responses=errors(400, *WRITES), openapi_extra=otlp.TRACES_DOC)  # fmt: skip
    def traces(request: Request, data: Annotated[bytes, Depends(raw)]) -> Response:
        data = otlp.decompressed(data, request.headers.get("content-encoding"), policy.max_request_bytes)
        rejected, reason = otlp.ingest(service, data, request.headers.get("content-type"), policy.max_event_bytes)
        content, media = otlp.response(otlp.media_type(request.headers.get("content-type")), rejected, reason)
        return Response(content, media_type=media)

    @app.get("/threads", name="threads", response_model=ThreadList, responses=errors(400, *READS),
             summary="every thread's summary row, newest activity first")  # fmt: skip
    def thread_list(q: Annotated[ThreadListQuery, Query()]) -> Response:
        return json(service.thread_list(q.project, q.status, q.limit))

    @app.get("/threads/{thread_id}/state", name="state", summary="a thread's working state",
             responses={200: STATE_SECTIONS_DOC, **errors(400, 404, *READS)})  # fmt: skip
    async def state(thread_id: Id, request: Request, known: KnownSections = None,
                    patches: AcceptPatches = None) -> Response:  # fmt: skip
        try:  # each header as often as it was sent (the parameters above document them)
            held = parse_held(request.headers.getlist(KNOWN_HEADER), request.headers.getlist(ACCEPT_PATCHES_HEADER))
        except ValueError as error:
            raise RequestError(400, str(error)) from None
        return await answers.state(thread_id, held)

    @app.get("/threads/{thread_id}/context", name="context", responses=errors(400, 404, *READS),
             summary="the thread's context assembled under a token budget")  # fmt: skip
    async def context(thread_id: Id, q: Annotated[ContextQuery, Query()]) -> Response:
        return await answers.context(thread_id, q)

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
              response_model=SqlAnswer, responses=errors(400, *WRITES), openapi_extra=body_doc(SqlBody))  # fmt: skip
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
              responses=errors(400, *WRITES), openapi_extra=body_doc(LeaseBody, required=False))  # fmt: skip
    def memory_extract(q: Annotated[LeaseBody, body(LeaseBody, empty_ok=True)]) -> Response:
        return json(service.memory_extract(q.lease_seconds))

    @app.post("/memory/consolidate", name="memory", summary="consolidate candidates into a new published view",
              responses=errors(400, *WRITES), openapi_extra=body_doc(ConsolidateBody, required=False))  # fmt: skip
    def memory_consolidate(q: Annotated[ConsolidateBody, body(ConsolidateBody, empty_ok=True)]) -> Response:
        return json(service.memory_consolidate(q.lease_seconds, q.high_risk))

    @app.post("/memory/revoke", name="memory", summary="withdraw a source event's facts",
              responses=errors(400, 404, *WRITES), openapi_extra=body_doc(RevokeBody))  # fmt: skip
    def memory_revoke(q: Annotated[RevokeBody, body(RevokeBody)]) -> Response:
        return json(service.memory_revoke(q.event_id, q.reason))

    @app.get("/memory/status", name="memory", summary="memory jobs' leases and versions", responses=errors(*READS))
    @app.post("/memory/status", name="memory", summary="memory jobs' leases and versions", responses=errors(*WRITES))
    def memory_status() -> Response:
        return json(service.memory_status())

    @app.get("/healthz", name="healthz", responses=errors(403, 421, 500, 503),
             summary="liveness, and which data directory this server holds (no token needed)")  # fmt: skip
    def healthz(request: Request) -> Response:
        health = {**service.health(), **(identity or {})}
        # A Kafka worker still joining its group answers 503 with its counters: a check that
        # waits for 200 waits until the worker can answer queries.
        status, retry = (503, {"Retry-After": "2"}) if health.get("status") == "starting" else (200, None)
        if check_token(policy, "/", request.headers.get("authorization")) is not None:
            # Without the token: liveness only; paths and store details are for callers with it.
            bare = {k: health[k] for k in ("status", "deployment", "instance") if k in health}
            return json(bare, status_code=status, headers=retry)
        return json(health, status_code=status, headers=retry)

    @app.get("/metrics", name="metrics", summary="Prometheus metrics", responses=errors(*READS),
             response_class=PlainTextResponse)  # fmt: skip
    def metrics() -> Response:
        return Response(generate_latest(METRICS.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/openapi.json", name="openapi", summary="this document", responses=errors(*READS))
    def openapi() -> Response:
        return json(document())

    def document() -> dict[str, Any]:
        if app.openapi_schema is None:
            with warnings.catch_warnings():  # GET and its HEAD share an operation id; HEAD is dropped below
                warnings.filterwarnings("ignore", "Duplicate Operation ID", UserWarning)
                doc = get_openapi(title=app.title, version=app.version, description=app.description,
                                  routes=app.routes)  # fmt: skip
            for ops in doc["paths"].values():
                ops.pop("head", None)  # every GET takes HEAD too, as HTTP says
                for operation in ops.values():
                    operation["responses"].pop("422", None)  # refusals are 400s (``failure``)
            schemas = {k: v for k, v in doc["components"]["schemas"].items() if "ValidationError" not in k}
            schemas.update(body_schemas())
            token = {"type": "http", "scheme": "bearer", "description": "AGENTLOG_API_TOKEN (beyond loopback)"}
            doc["components"] = {"schemas": schemas, "securitySchemes": {"token": token}}
            doc["security"] = [{"token": []}, {}]  # the token, or none on loopback
            app.openapi_schema = doc
        return app.openapi_schema

    add_pages(app, service, policy)  # the web view: pages at / and under /ui/ (streams/web)
    app.openapi = document  # type: ignore[method-assign]
    return app


__all__ = ["build_app", "failure"]
