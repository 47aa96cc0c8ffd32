"""Typed requests of the HTTP API (SPEC §7): every query, path parameter and body a route
takes, with its bounds. Both servers (``agentlog run`` and the Kafka worker) parse through
these models, so a bad request is refused the same way before it reaches a handler.

Pure: no I/O. A refusal is a ``RequestError`` carrying the status and a JSON body that
says what to do.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import Annotated, Any, Literal, TypeVar

import orjson
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from agentlog.schemas.events import KINDS
from agentlog.schemas.search import time_bound_ms
from agentlog.schemas.state import ThreadStatus

MAX_SEARCH_LIMIT = 1000
"""Most hits one search returns: the index allocates for ``limit`` up front."""
DEFAULT_THREAD_LIMIT = 100
MAX_THREAD_LIMIT = 1000
"""Most rows one thread listing returns (every thread is read to sort them, not sent)."""
MAX_BUDGET = 2_000_000
"""Largest context budget, in tokens (ten times the longest model window today)."""
MAX_SQL_CHARS = 100_000
MAX_LEASE_SECONDS = 86_400.0
MAX_TIME_MS = 253_402_300_799_999
"""9999-12-31T23:59:59.999Z: a time bound past this is a typo, and overflows the index's i64."""
ID_PATTERN = r"^[A-Za-z0-9._:-]{1,128}$"
"""SPEC §2: ``event_id`` and ``thread_id`` are 1–128 chars of ``[A-Za-z0-9._:-]``."""
ID_RE = re.compile(ID_PATTERN.removeprefix("^").removesuffix("$"))
"""``ID_PATTERN`` for ``fullmatch`` (Python's ``$`` would let a final newline through)."""
ContextFormat = Literal["generic", "openai", "anthropic"]
CONTEXT_FORMATS: tuple[str, ...] = ("generic", "openai", "anthropic")
"""Shapes a context's messages come in (``agentlog.processors.formats.render_context``)."""


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain a NUL character")
    return value


Id = Annotated[str, StringConstraints(pattern=ID_PATTERN)]
Text = Annotated[str, StringConstraints(max_length=4096), AfterValidator(_no_nul)]
Name = Annotated[str, StringConstraints(max_length=256), AfterValidator(_no_nul)]


def _event_kind(value: str) -> str:
    if value not in KINDS:
        raise ValueError(f"not an event kind; the kinds are {', '.join(KINDS)}")
    return value


EventKindName = Annotated[str, StringConstraints(max_length=256), AfterValidator(_event_kind)]
"""A kind to filter on: one misspelt (``tool_results``) would match nothing, silently."""


class RequestError(Exception):
    """A request refused before any work: ``status`` and the JSON ``body`` to answer."""

    def __init__(self, status: int, message: str, **detail: Any) -> None:
        super().__init__(message)
        self.status = status
        self.body: dict[str, Any] = {"error": message, **detail}


class _Strict(BaseModel):
    # Unknown parameters are refused: a misspelt ``limt`` silently ignored would answer
    # something other than what was asked.
    model_config = ConfigDict(extra="forbid", frozen=True)


class SearchQuery(_Strict):
    q: Text = Field("", description="keywords; empty matches every event under the filters")
    thread: Id | None = Field(None, description="only this thread (and its not-yet-indexed events)")
    kind: EventKindName | None = None
    tool: Name | None = None
    window: Name | None = None
    project: Name | None = None
    after: Id | None = Field(
        None, description="read-your-writes: an event id whose thread is searched up to it"
    )
    since: Name | None = Field(None, description="RFC 3339 time with offset, or epoch milliseconds")
    until: Name | None = Field(None, description="RFC 3339 time with offset, or epoch milliseconds")
    since_ms: Annotated[int, Field(ge=0, le=MAX_TIME_MS)] | None = None
    until_ms: Annotated[int, Field(ge=0, le=MAX_TIME_MS)] | None = None
    limit: int = Field(10, ge=1, le=MAX_SEARCH_LIMIT, description="at most this many hits")

    def bounds(self) -> tuple[int | None, int | None]:
        """``since``/``until`` (either form) as epoch milliseconds, bounded."""
        since = _bound("since", self.since) if self.since else self.since_ms
        until = _bound("until", self.until) if self.until else self.until_ms
        return since, until


def _bound(name: str, value: str) -> int:
    try:
        ms = time_bound_ms(value)
    except ValueError as error:
        raise RequestError(400, f"{name}: {error}", field=name) from error
    if ms is None or ms > MAX_TIME_MS:
        raise RequestError(400, f"{name}: {value!r} is past the year 9999", field=name)
    return ms


class ThreadListQuery(_Strict):
    project: Name | None = Field(None, description="only this project's threads")
    status: ThreadStatus | None = Field(None, description="only threads with this status")
    limit: int = Field(DEFAULT_THREAD_LIMIT, ge=1, le=MAX_THREAD_LIMIT,
                       description="at most this many threads, newest activity first")  # fmt: skip


def thread_list_query(project: str | None, status: str | None, limit: int) -> ThreadListQuery:
    """The listing's parameters checked on every path (HTTP, CLI, Kafka worker); a bad
    one is a ``ValueError`` that says what is allowed."""
    try:
        values = {"project": project, "status": status, "limit": limit}
        return ThreadListQuery.model_validate(values, strict=True)
    except ValidationError as error:
        raise ValueError(_refusal(ThreadListQuery, error, "parameter").body["error"]) from None


class ContextQuery(_Strict):
    budget: int = Field(..., ge=1, le=MAX_BUDGET, description="token budget, e.g. 4000")
    query: Text | None = Field(None, description="recall evidence matching this query (default: the latest user message and the goal)")
    model: Name | None = Field(None, description="model family, to choose the tokenizer")
    format: ContextFormat = Field("generic", description="shape of the messages: generic (the default), openai "
                                  "(Chat Completions messages) or anthropic (Messages system and messages)")


class MemoryQuery(_Strict):
    project: Name | None = None
    key: Name | None = None


class SqlBody(_Strict):
    sql: str = Field(..., min_length=1, max_length=MAX_SQL_CHARS, description="one read-only SELECT")


class LeaseBody(_Strict):
    lease_seconds: float = Field(60.0, gt=0, le=MAX_LEASE_SECONDS, allow_inf_nan=False)


class ConsolidateBody(LeaseBody):
    high_risk: list[Name] | None = Field(None, max_length=100,
                                         description="key globs whose fallback value becomes 'unknown, needs check'")  # fmt: skip


class RevokeBody(_Strict):
    event_id: Id
    reason: Text | None = None


class ThreadPath(_Strict):
    thread_id: Id


class EventPath(_Strict):
    event_id: Id


M = TypeVar("M", bound=BaseModel)


def check_search_limit(limit: int) -> int:
    """The search bound every path applies (HTTP, CLI, Kafka worker): 1..1000."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_SEARCH_LIMIT:
        raise ValueError(f"search limit must be between 1 and {MAX_SEARCH_LIMIT}, not {limit!r}")
    return limit


def check_format(format: str) -> str:  # noqa: A002
    """The context format every path applies: generic, openai or anthropic."""
    if format not in CONTEXT_FORMATS:
        raise ValueError(f"context format must be one of {', '.join(CONTEXT_FORMATS)}, not {format!r}")
    return format


def check_budget(budget: int) -> int:
    """The context budget every path applies: 1..2,000,000 tokens."""
    if isinstance(budget, bool) or not isinstance(budget, int) or not 1 <= budget <= MAX_BUDGET:
        raise ValueError(f"context budget must be between 1 and {MAX_BUDGET} tokens, not {budget!r}")
    return budget


def _refusal(model: type[BaseModel], error: ValidationError, where: str) -> RequestError:
    return refusal(error.errors(include_url=False, include_input=False), model.model_fields, where)


def refusal(errors: Sequence[Any], fields: Iterable[str], where: str) -> RequestError:
    """The 400 for pydantic's validation ``errors`` of a route taking ``fields``."""
    problems = [{"field": ".".join(str(p) for p in e["loc"]) or where, "problem": e["msg"]} for e in errors]
    first, takes = problems[0], ", ".join(fields)
    return RequestError(400, f"bad {where}: {first['field']}: {first['problem']} (this route takes: {takes})",
                        problems=problems)  # fmt: skip


def once(items: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Query parameters as a dict, refusing one given twice (which would be read as either)."""
    values: dict[str, str] = {}
    for key, value in items:
        if key in values:
            raise RequestError(400, f"parameter {key!r} is given twice; give it once", field=key)
        values[key] = value
    return values


def parse_query(model: type[M], items: Iterable[tuple[str, str]]) -> M:
    """The route's query parameters, each given once, as ``model``."""
    try:
        return model.model_validate(once(items))
    except ValidationError as error:
        raise _refusal(model, error, "query parameter") from None


def parse_path(model: type[M], values: dict[str, str]) -> M:
    try:
        return model.model_validate(values)
    except ValidationError:
        raise bad_id(next(iter(values), "id")) from None


def bad_id(name: str) -> RequestError:
    return RequestError(400, f"{name} must be 1-128 characters of A-Z a-z 0-9 . _ : - (docs/events.md)", field=name)


def parse_body(model: type[M], body: bytes, *, empty_ok: bool = False) -> M:
    """A JSON object body as ``model``; an empty body is ``{}`` when ``empty_ok``."""
    if not body.strip():
        if empty_ok:
            body = b"{}"
        else:
            raise RequestError(400, f"a JSON object body is required, e.g. {_example(model)}")
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        # orjson refuses nesting beyond 1024 levels here too, without recursing in Python.
        raise RequestError(400, f"the body is not valid JSON ({error}); send {_example(model)}") from None
    if not isinstance(value, dict):
        raise RequestError(
            400, f"the body must be a JSON object, not {type(value).__name__}; send {_example(model)}"
        )
    repeated = _repeated_key(body)
    if repeated is not None:  # JSON parsers disagree on which copy wins: none is taken
        raise RequestError(400, f"the body gives {repeated!r} more than once; send it once")
    try:
        # Strict: "60" or true is no number of seconds (a number may still be an integer).
        return model.model_validate(value, strict=True)
    except ValidationError as error:
        raise _refusal(model, error, "body field") from None


def _repeated_key(body: bytes) -> str | None:
    """A key some object of the (already parsed, so valid) JSON body gives twice."""
    found: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in items]
        if not found and len(set(keys)) < len(keys):
            found.append(next(k for i, k in enumerate(keys) if k in keys[:i]))
        return dict(items)

    try:
        json.loads(body, object_pairs_hook=pairs)
    except RecursionError:  # orjson took it (under 1,024 levels); no request body nests so
        raise RequestError(400, "the body nests too deeply; send a flat JSON object") from None
    return found[0] if found else None


def _example(model: type[BaseModel]) -> str:
    return {"SqlBody": '{"sql": "SELECT count() FROM events"}', "RevokeBody": '{"event_id": "..."}'}.get(
        model.__name__, '{"lease_seconds": 60}'
    )


__all__ = [
    "CONTEXT_FORMATS", "ContextFormat", "ID_PATTERN", "MAX_BUDGET", "MAX_SEARCH_LIMIT", "MAX_SQL_CHARS", "ConsolidateBody", "ContextQuery",
    "EventPath", "ID_RE", "LeaseBody", "MemoryQuery", "RequestError", "RevokeBody", "SearchQuery", "SqlBody",
    "DEFAULT_THREAD_LIMIT", "MAX_THREAD_LIMIT", "ThreadListQuery", "ThreadPath", "check_budget", "check_format",
    "bad_id", "check_search_limit", "once", "parse_body", "refusal", "parse_path", "parse_query", "thread_list_query",
]  # fmt: skip
