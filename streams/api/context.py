"""``context(thread_id, budget, query)`` on a service: state (rolling summary included),
the raw window after the summary's cover, recall. A read writes nothing: the window is
folded into the summary by the stream processor (``agentlog.processors.fold``), never here,
so a context request never changes what a later one sees."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from agentlog.processors.context import draft, finish
from agentlog.processors.formats.render import render_context
from agentlog.processors.tokens import counter, encoding_for, known_encoding
from agentlog.schemas.events import Envelope
from agentlog.schemas.requests import check_budget, check_format
from agentlog.schemas.search import SearchFilters
from agentlog.streams.api.context_cache import ContextCache, cache_for
from agentlog.streams.api.recall import begin_recall, recall_for
from agentlog.streams.config import Settings

WINDOW_RECORDS = 400
"""How many of a thread's newest records assembly looks at: its cost is bounded by this,
not by the thread's length. The stream-side fold keeps the raw window under it (at most
``agentlog.processors.fold.MAX_ENTRIES`` events before it folds), so nothing is skipped."""


class ContextSource(Protocol):
    """What assembly reads (it writes nothing); the embedded service and the Kafka worker each
    provide it over their own stores."""

    settings: Settings

    def state(self, thread_id: str) -> dict[str, Any]:
        """The state as users see it: already redacted when ``settings.redact`` is on."""
    def orphans(self, thread_id: str) -> set[str]: ...
    def window(self, thread_id: str, after: Sequence[str], limit: int) -> list[Envelope]:
        """The thread's newest ``limit`` accepted events after the events named in
        ``after`` (window start, summary cover), oldest first."""

    def read_event(self, event_id: str) -> Envelope | None: ...
    def search(self, query: str, thread_id: str | None = None, kind: str | None = None,
               project: str | None = None, limit: int = 10) -> dict[str, Any]: ...  # fmt: skip
    def memory_facts(self, project: str) -> list[dict[str, Any]]: ...


def context_for(service: ContextSource, thread_id: str, budget: int, query: str | None = None,
                model: str | None = None, format: str = "generic") -> dict[str, Any]:  # noqa: A002 # fmt: skip
    check_budget(budget)
    check_format(format)
    cache = cache_for(service)  # what earlier requests worked out: the answer stays the same
    reads = _CachedReads(service, cache)
    state = service.state(thread_id)
    begin_recall(reads, state, query)  # the question is known: its searches begin before the rest is read
    orphans = service.orphans(thread_id)
    # The raw window starts after the window switch and after what the summary covers:
    # only those records are read (at most WINDOW_RECORDS), however long the thread is.
    markers = [m for m in (state.get("window_started_by"), state.get("summary_covers_through")) if m]
    window = service.window(thread_id, markers, WINDOW_RECORDS)
    tokens = counter(encoding_for(model))
    latest = None
    latest_id = state.get("latest_user_message_id")
    if latest_id and all(e.event_id != latest_id for e in window):
        latest = reads.read_event(latest_id)  # remembered: recall's beginning may have read it
    facts = service.memory_facts(state["project"])
    redact = service.settings.redact
    # All but the recalled evidence is drafted while the index scores the searches begun.
    drafted = draft(state, window, tokens, budget, latest, orphans, memory=facts, redact_secrets=redact,
                    memo=cache.texts, state_redacted=redact, derived=cache.derived, redaction_memo=cache.items)  # fmt: skip
    # Recall runs on every request: the query, else the latest user message and the goal.
    recall = recall_for(reads, state, window, latest, orphans, query) or None
    out = finish(drafted, recall).as_dict()
    out["thread_id"] = thread_id
    out["meta"]["summary_covers_through"] = state.get("summary_covers_through")
    if model and known_encoding(model) is None:
        out["meta"]["encoding_note"] = (
            f"the tokenizer of model {model[:100]!r} is not known here: tokens are counted with {tokens.encoding_name}, "
            "an estimate (models of the gpt-4o, gpt-4.1, gpt-5, o1, o3 families count with o200k_base; gpt-4 "
            "and gpt-3.5 with cl100k_base)")  # fmt: skip
    # The one place a provider's shape is made: every deployment answers through here.
    return render_context(out, format)


class _CachedReads:
    """The service as recall sees it: its searches as they are (or as begun for this
    context), its reads remembered."""

    def __init__(self, service: ContextSource, cache: ContextCache) -> None:
        self.service, self.cache = service, cache
        self.begins = hasattr(service, "search_begun")  # a search can be begun before it is asked
        self._begun: dict[tuple[str, str | None, str | None, str | None, int], Callable[[], dict[str, Any]]] = {}

    def begin_searches(self, searches: list[tuple[str, str | None, str | None, str | None, int]]) -> None:
        """Begin each ``(query, thread_id, kind, project, limit)`` search now (only when
        ``begins``); ``search`` with the same arguments answers it."""
        for q, thread_id, kind, project, limit in searches:
            filters = SearchFilters(thread_id, None, kind, None, project, None, None)
            self._begun[(q, thread_id, kind, project, limit)] = self.service.search_begun(q, filters, limit)  # type: ignore[attr-defined]

    def read_event(self, event_id: str) -> Envelope | None:
        return self.cache.read_event(self.service, event_id)

    def read_events(self, event_ids: list[str]) -> dict[str, Envelope | None]:
        return self.cache.read_events(self.service, event_ids)

    def search(self, query: str, thread_id: str | None = None, kind: str | None = None,
               project: str | None = None, limit: int = 10) -> dict[str, Any]:  # fmt: skip
        begun = self._begun.pop((query, thread_id, kind, project, limit), None)
        if begun is not None:
            return begun()
        return self.service.search(query, thread_id=thread_id, kind=kind, project=project, limit=limit)

    def exact_holders(self, query: str, thread_id: str, kind: str | None = None, project: str | None = None,
                      limit: int = 10) -> list[tuple[str, int]] | None:  # fmt: skip
        """The service's ``exact_holders`` (see ``EmbeddedService.exact_holders``); ``None``
        (ask the search) when it has none."""
        holders = getattr(self.service, "exact_holders", None)
        return holders(query, thread_id, kind, project, limit) if holders is not None else None


__all__ = ["WINDOW_RECORDS", "ContextSource", "context_for"]
