"""Typed answers of the HTTP API (SPEC §7), for its OpenAPI document: what ``/events``,
``/threads``, ``/search``, ``/sql`` and every refusal send, each status's meaning, and the
bodies FastAPI does not read itself (they are read in bounded chunks and parsed by
``schemas.requests``). The services build these answers as plain JSON-shaped dicts;
``tests/test_http_docs.py`` checks real answers against these models, so the document
cannot promise a field the server does not send.

Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agentlog.schemas.requests import ConsolidateBody, LeaseBody, RevokeBody, SqlBody
from agentlog.schemas.search import Hit
from agentlog.schemas.state import ThreadStatus


class _Answer(BaseModel):
    # What the server sends and nothing else: the tests validate real answers with these.
    model_config = ConfigDict(extra="forbid")


class Error(BaseModel):
    """Every 4xx and 5xx answer (some add detail: ``field``, ``problems``, ``limit``)."""

    error: str = Field(description="what went wrong and what to do")


class ThreadRow(_Answer):
    """A thread's summary row. A Kafka worker lists threads another worker owns from the
    log alone: their state's fields are ``null``."""

    thread_id: str
    project: str | None
    event_count: int
    last_activity: str | None = Field(description="RFC 3339 time of the newest event")
    open_calls: int | None = Field(description="tool calls without a result yet")
    failures: int | None = Field(description="recent failed tool calls the state keeps (at most 20)")
    pending_approvals: int | None
    status: ThreadStatus | None
    window_id: str | None
    goal: str | None = Field(description="the goal, shortened (and redacted when redaction is on)")


class ThreadList(_Answer):
    threads: list[ThreadRow] = Field(description="newest activity first, at most `limit`")
    total: int = Field(description="how many threads match the filters")
    partial: bool = Field(description="some rows come from the log alone (a Kafka worker's listing)")
    warnings: list[str] = Field(description="why the answer may be incomplete or stale")


class SearchAnswer(_Answer):
    query: str
    hits: list[Hit] = Field(description="best first; `source` is `index`, or `active` for an accepted "
                                        "event the index cannot show yet (read-your-writes)")  # fmt: skip
    index_visible_offset: int | None = Field(None, description="embedded: the index's refresh point")
    stale: bool | None = Field(None, description="embedded: the index may lack recent events")
    index_error: str | None = Field(None, description="Kafka worker: the index did not answer")
    warnings: list[str] = []


class SqlAnswer(_Answer):
    columns: list[str]
    rows: list[list[Any]] = Field(description="one list per row, in the order of `columns`")


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
"""What any read, and any write, may be answered besides its own errors."""


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """FastAPI's ``responses`` for these statuses: each an ``Error``."""
    return {code: {"model": Error, "description": REASONS[code]} for code in sorted(codes)}


BODIES = (SqlBody, LeaseBody, ConsolidateBody, RevokeBody)


def body_schemas() -> dict[str, Any]:
    """The JSON Schemas of ``BODIES``, for the document's components."""
    return {m.__name__: m.model_json_schema(ref_template="#/components/schemas/{model}") for m in BODIES}


def body_doc(model: type[BaseModel], required: bool = True) -> dict[str, Any]:
    """``openapi_extra`` naming a body model (one of ``BODIES``)."""
    ref = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {"requestBody": {"required": required, "content": {"application/json": {"schema": ref}}}}


EVENTS_BODY = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": {"oneOf": [{"type": "object"}, {"type": "array"}]}},
    "application/x-ndjson": {"schema": {"type": "string", "description": "JSON lines: an event a line"}},
    "application/jsonl": {"schema": {"type": "string"}}}}}  # fmt: skip


def route_table(document: dict[str, Any]) -> str:
    """The Markdown table of every route of an OpenAPI ``document`` (``docs/http-api.md``)."""
    lines = ["| Method | Path | What | Takes | Answers |", "|---|---|---|---|---|"]
    for path, operations in document["paths"].items():
        for method, op in operations.items():
            takes = [f"`{p['name']}`{' (required)' if p['required'] and p['in'] == 'query' else ''}"
                     for p in op.get("parameters", [])]  # fmt: skip
            if "requestBody" in op:
                media, content = next(iter(op["requestBody"]["content"].items()))
                takes.append(f"body {_name(content['schema'], media)}")
            media, content = next(iter(op["responses"]["200"].get("content", {"": {}}).items()))
            errors = ", ".join(code for code in op["responses"] if code != "200")
            lines.append(f"| {method.upper()} | `{path}` | {op['summary']} | {', '.join(takes) or '-'} | "
                         f"200 {_name(content.get('schema', {}), media)}; {errors} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def _name(schema: dict[str, Any], media: str) -> str:
    ref = schema.get("$ref")
    if ref:
        return f"`{ref.rsplit('/', 1)[-1]}`"
    return "events" if "oneOf" in schema else "JSON" if media in ("", "application/json") else media


__all__ = [
    "BODIES", "EVENTS_BODY", "READS", "REASONS", "WRITES", "Error", "SearchAnswer", "SqlAnswer", "ThreadList",
    "ThreadRow", "body_doc", "body_schemas", "errors", "route_table",
]  # fmt: skip
