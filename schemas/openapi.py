"""``GET /openapi.json``: an OpenAPI 3.1 document of the HTTP API, generated from the
request models (``agentlog.schemas.requests``), so the document and the checks cannot drift apart."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from agentlog.schemas.requests import (
    ConsolidateBody, ContextQuery, EventPath, LeaseBody, MemoryQuery, RevokeBody, SearchQuery, SqlBody,
    ThreadListQuery, ThreadPath,
)  # fmt: skip

_REF = "#/components/schemas/{model}"


@dataclass(frozen=True)
class RouteDoc:
    method: str
    path: str
    summary: str
    query: type[BaseModel] | None = None
    path_params: type[BaseModel] | None = None
    body: type[BaseModel] | str | None = None
    """A model, or a media-type description for a raw body (``/events``)."""
    errors: tuple[int, ...] = ()


_GUARD = (401, 413, 415, 421)
# fmt: off
ROUTES: tuple[RouteDoc, ...] = (
    RouteDoc("post", "/events", "publish events: one JSON object, a JSON array, or JSON lines",
             body="events", errors=(400, *_GUARD)),
    RouteDoc("get", "/threads", "every thread's summary (project, events, last activity, open calls, "
             "failures, status), newest activity first", query=ThreadListQuery, errors=(400, 401, 421)),
    RouteDoc("get", "/threads/{thread_id}/state", "a thread's working state",
             path_params=ThreadPath, errors=(400, 401, 404, 421)),
    RouteDoc("get", "/threads/{thread_id}/context", "the thread's context assembled under a token budget",
             query=ContextQuery, path_params=ThreadPath, errors=(400, 401, 404, 421)),
    RouteDoc("get", "/search", "keyword search over events", query=SearchQuery, errors=(400, 401, 421)),
    RouteDoc("get", "/events/{event_id}", "the original event, by id", path_params=EventPath,
             errors=(400, 401, 404, 421)),
    RouteDoc("post", "/sql", "one sandboxed read-only query over the log's tables", body=SqlBody,
             errors=(400, *_GUARD)),
    RouteDoc("post", "/flush", "wait until what is published is processed", errors=_GUARD),
    RouteDoc("post", "/rebuild", "replay the log into state, pairs and index", errors=_GUARD),
    RouteDoc("get", "/memory", "the published long-term memory", query=MemoryQuery, errors=(400, 401, 421)),
    RouteDoc("post", "/memory/extract", "extract memory candidates from new events", body=LeaseBody,
             errors=(400, *_GUARD)),
    RouteDoc("post", "/memory/consolidate", "consolidate candidates into a new published view",
             body=ConsolidateBody, errors=(400, *_GUARD)),
    RouteDoc("post", "/memory/revoke", "withdraw a source event's facts", body=RevokeBody,
             errors=(400, 404, *_GUARD)),
    RouteDoc("get", "/memory/status", "memory jobs' leases and versions", errors=(401, 421)),
    RouteDoc("post", "/memory/status", "memory jobs' leases and versions", errors=_GUARD),
    RouteDoc("get", "/healthz", "liveness, and which data directory this server holds (no token needed)",
             errors=(421,)),
    RouteDoc("get", "/metrics", "Prometheus metrics", errors=(401, 421)),
    RouteDoc("get", "/openapi.json", "this document", errors=(401, 421)),
)
# fmt: on

_REASONS = {
    400: "a bad parameter or body; `error` says which and what to send",
    401: "the API token is missing or wrong (`Authorization: Bearer <AGENTLOG_API_TOKEN>`)",
    404: "no such thread, event or route",
    405: "wrong method: state changes only on POST",
    413: "the body passes AGENTLOG_MAX_REQUEST_BYTES",
    415: "a POST without a JSON content type",
    421: "a Host (or browser Origin) this server does not answer to",
    500: "an unexpected failure, logged by the server; the next request is unaffected",
}


def _parameters(model: type[BaseModel], where: str) -> list[dict[str, Any]]:
    schema = model.model_json_schema(ref_template=_REF)
    required = set(schema.get("required", []))
    return [
        {
            "name": name,
            "in": where,
            "required": where == "path" or name in required,
            "schema": prop,
            **({"description": prop["description"]} if "description" in prop else {}),
        }
        for name, prop in schema["properties"].items()
    ]


def _operation(route: RouteDoc, components: dict[str, Any]) -> dict[str, Any]:
    op: dict[str, Any] = {"summary": route.summary, "operationId": f"{route.method}_{route.path}"}
    params = []
    if route.path_params is not None:
        params += _parameters(route.path_params, "path")
    if route.query is not None:
        params += _parameters(route.query, "query")
    if params:
        op["parameters"] = params
    if isinstance(route.body, type):
        components[route.body.__name__] = route.body.model_json_schema(ref_template=_REF)
        ref = {"$ref": _REF.format(model=route.body.__name__)}
        required = any(f.is_required() for f in route.body.model_fields.values())
        op["requestBody"] = {"required": required, "content": {"application/json": {"schema": ref}}}
    elif route.body == "events":
        raw = {"type": "string", "description": "SPEC §2 events"}
        op["requestBody"] = {"required": True, "content": {
            "application/json": {"schema": {"oneOf": [{"type": "object"}, {"type": "array"}]}},
            "application/x-ndjson": {"schema": raw}, "application/jsonl": {"schema": raw}}}  # fmt: skip
    error = {"content": {"application/json": {"schema": {"$ref": _REF.format(model="Error")}}}}
    op["responses"] = {"200": {"description": "ok", "content": {"application/json": {}}},
                       **{str(code): {"description": _REASONS[code], **error} for code in (*route.errors, 500)}}  # fmt: skip
    return op


def openapi_document() -> dict[str, Any]:
    components: dict[str, Any] = {"Error": {
        "type": "object", "required": ["error"],
        "properties": {"error": {"type": "string", "description": "what went wrong and what to do"}},
    }}  # fmt: skip
    paths: dict[str, dict[str, Any]] = {}
    for route in ROUTES:
        paths.setdefault(route.path, {})[route.method] = _operation(route, components)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "agentlog",
            "version": "1",
            "description": "Agent events in; working state, context, search and SQL out (SPEC §7).",
        },
        "components": {
            "schemas": components,
            "securitySchemes": {
                "token": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "AGENTLOG_API_TOKEN; required beyond loopback",
                },
            },
        },
        "security": [{"token": []}, {}],
        "paths": paths,
    }


__all__ = ["ROUTES", "RouteDoc", "openapi_document"]
