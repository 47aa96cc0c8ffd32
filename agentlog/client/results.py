"""Typed answers of the client's reads. Where the HTTP API declares an answer's model
(``agentlog.schemas.responses``) the client returns that model; the state, a context
and a logged event are described here, with their main fields typed and every other
field the deployment sends kept (``extra``)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from agentlog.processors.read_only import ReadOnlyDict, ReadOnlyList
from agentlog.schemas.responses import SearchAnswer, SqlAnswer, ThreadList, ThreadRow
from agentlog.schemas.search import HIT_FIELDS


class _Open(BaseModel):
    # A newer server may add fields: they are kept, never refused.
    model_config = ConfigDict(extra="allow")


class State(_Open):
    """A thread's working state (``agentlog state``)."""

    thread_id: str
    project: str = "default"
    window_id: str | None = None
    goal: dict[str, Any] | None = None
    constraints: list[dict[str, Any]] = []
    plan: list[dict[str, Any]] = []
    tasks: list[dict[str, Any]] = []
    files: list[dict[str, Any]] = []
    agents: list[dict[str, Any]] = []
    pending_calls: list[dict[str, Any]] = []
    failures: list[dict[str, Any]] = []
    pending_approvals: list[dict[str, Any]] = []
    summary: dict[str, Any] | None = None
    event_count: int = 0
    last_event_id: str | None = None


def state_from(answer: dict[str, Any], in_process: bool) -> State:
    """A state answer as a ``State``. This process's own service (``in_process``) built it
    in State's shape: taken as it is, so a read costs what changed since the last one
    (validating each item again would cost the plan's length: a millisecond and a half at
    1,600 steps). A server's answer (another process, maybe another version) is validated,
    but for the sections the HTTP client keeps (``agentlog.streams.api.kept_states``):
    read-only lists of read-only dicts, and read-only dicts, made from JSON, which is what
    their types ask: checked as such and taken as they are (read-only, as in-process)."""
    if in_process:  # the fields set are the answer's, as validation would set them
        return State.model_construct(_fields_set=set(answer), **answer)
    kept = {name: v for name, v in answer.items() if _kept(name, v)}
    if not kept:
        return State.model_validate(answer)
    state = State.model_validate({**answer, **{name: () if name in _LISTS_OF_DICTS else None for name in kept}})
    for name, value in kept.items():
        setattr(state, name, value)  # no validation on assignment: the list itself, shared
    return state


def _kept(name: str, value: Any) -> bool:
    """Whether ``value`` is a section as the HTTP client keeps it, of the field's type."""
    if name in _LISTS_OF_DICTS:
        return type(value) is ReadOnlyList and _ONLY_READ_ONLY_DICTS.issuperset(map(type, value))
    return name in _DICTS and type(value) is ReadOnlyDict


_LISTS_OF_DICTS = frozenset(name for name, field in State.model_fields.items() if field.annotation == list[dict[str, Any]])
_DICTS = frozenset(name for name, field in State.model_fields.items() if field.annotation == dict[str, Any] | None)
_ONLY_READ_ONLY_DICTS = frozenset({ReadOnlyDict})


class Context(_Open):
    """The model's working set for a thread within a token budget (``agentlog context``):
    ``messages`` is ready to send to a chat API."""

    thread_id: str
    messages: list[dict[str, Any]]
    format: str = "generic"
    """``openai``/``anthropic``: ``messages`` (and ``system``) are that provider's payload."""
    system: Any = None
    """The system prompt of an ``anthropic`` payload (the other formats keep it in ``messages``)."""
    sections: list[dict[str, Any]] = []
    meta: dict[str, Any] = {}
    """The budget, the tokens used, and what was dropped (``dropped``), per section."""


class LoggedEvent(_Open):
    """One event as logged (``source``: ``log``, or ``active`` if accepted and not logged yet)."""

    event: dict[str, Any]
    source: str | None = None
    offset: int | None = None


class SqlResult(SqlAnswer):
    """An analyst query's columns and rows."""

    def records(self) -> list[dict[str, Any]]:
        """Each row as a dict keyed by column."""
        return [dict(zip(self.columns, row)) for row in self.rows]

    def scalar(self) -> Any:
        """The first column of the first row (``SELECT count() ...``)."""
        return self.rows[0][0] if self.rows and self.rows[0] else None


def search_from(answer: dict[str, Any]) -> SearchAnswer:
    """A search answer as this client knows it: the API's own model is strict (its
    document promises exactly what the server sends), so fields a newer server adds to
    the answer or to its hits are left out here, not refused."""
    hits = [{k: v for k, v in h.items() if k in HIT_FIELDS} for h in answer.get("hits", [])]
    return SearchAnswer.model_validate({**_known(SearchAnswer, answer), "hits": hits})


def threads_from(answer: dict[str, Any]) -> ThreadList:
    """A thread list as this client knows it (a newer server's added fields left out)."""
    rows = [_known(ThreadRow, r) for r in answer.get("threads", [])]
    return ThreadList.model_validate({**_known(ThreadList, answer), "threads": rows})


def _known(model: type[BaseModel], data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k in model.model_fields}


__all__ = ["search_from", "threads_from", "Context", "LoggedEvent", "SearchAnswer", "SqlResult", "State", "ThreadList", "state_from"]
