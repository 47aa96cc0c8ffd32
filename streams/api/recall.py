"""Recall for ``context_for``: the searches and reads behind ``agentlog.processors.recall``'s rules."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from agentlog.processors.recall import (
    RECALL_LIMIT, asks_about_failure, error_entry, family_threads, first_partner, fresh, held_ids, needs_event,
    partner_kind, prefer, rank, recall_searches, unit_entry,
)  # fmt: skip
from agentlog.processors.textsearch import EXACT_BOOST, pair_term
from agentlog.schemas.events import Envelope

SEARCH_LIMIT = 2 * RECALL_LIMIT
"""Hits asked of each search: orphans and what the context holds are skipped after it."""
RERANK_DEPTH = 16
"""Hits read to be ordered by what they are (facts before guesses): a bounded cost."""
PARTNER_LIMIT = 4
"""Hits asked of the search for a tool event's partner."""


class RecallSource(Protocol):
    def read_event(self, event_id: str) -> Envelope | None: ...
    def search(self, query: str, thread_id: str | None = None, kind: str | None = None,
               project: str | None = None, limit: int = 10) -> dict[str, Any]: ...  # fmt: skip


def begin_recall(service: Any, state: dict[str, Any], query: str | None) -> None:
    """Begin the searches ``recall_for`` asks first (the most telling query's, in the thread
    and its children) when the service can begin one before it is asked (``begins``): the
    index scores them on its own thread while the context's other parts are read, and
    ``recall_for``'s same searches take their answers. Nothing is read otherwise."""
    if not getattr(service, "begins", False):
        return
    latest_id = state.get("latest_user_message_id")
    asked = service.read_event(latest_id) if latest_id and not query else None  # a query replaces it
    searches = recall_searches(state, getattr(asked.payload, "text", None) if asked is not None else None, query)
    if searches:
        service.begin_searches(_searches_of(searches[0][0], searches, family_threads(state), state["project"]))


def _searches_of(q: str, searches: list[tuple[str, str | None]], threads: list[str],
                 project: str) -> list[tuple[str, str, str | None, str, int]]:  # fmt: skip
    """``(query, thread_id, kind, project, limit)`` of each search recall runs for ``q``:
    in each thread, for each kind ``q`` is asked with."""
    kinds = [kind for query, kind in searches if query == q]
    return [(q, t, kind, project, SEARCH_LIMIT) for t in threads for kind in kinds]


def recall_for(service: RecallSource, state: dict[str, Any], window: Sequence[Envelope],
               latest: Envelope | None, orphans: set[str], query: str | None) -> list[dict[str, Any]]:  # fmt: skip
    """The recalled entries for a context: ``query``, else the latest user message and the
    goal, searched in the thread and its child threads of the same project, whole units,
    nothing the context already holds."""
    latest_id = state.get("latest_user_message_id")
    latest_event = latest or next((e for e in window if e.event_id == latest_id), None)
    text = getattr(latest_event.payload, "text", None) if latest_event is not None else None
    searches = recall_searches(state, text, query)
    if not searches:
        return []
    project, threads = state["project"], family_threads(state)
    held = held_ids(state, (e.event_id for e in window))
    candidates: dict[str, dict[str, Any]] = {}  # the hits ranked per query, queries in their order
    what_failed: set[str] = set()  # found by the failure searches (a kind: error, tool_result)
    queries = list(dict.fromkeys(q for q, _ in searches))
    for q in queries:
        if len(queries) > 1 and q == queries[-1] and len(candidates) >= RECALL_LIMIT:
            break  # the goal's search (the last) is a fallback: the question's hits are enough
        found = [(kind, service.search(one, thread_id=t, kind=kind, project=p, limit=limit)["hits"])
                 for one, t, kind, p, limit in _searches_of(q, searches, threads, project)]  # fmt: skip
        what_failed.update(h["event_id"] for kind, hits in found if kind is not None for h in hits)
        for h in rank(hits for _, hits in found):
            if h["event_id"] not in held and h["event_id"] not in orphans:
                candidates.setdefault(h["event_id"], h)
    if query:  # the caller's own query: its ranking as the engine gives it
        return fresh(_entries(service, list(candidates.values()), held, project, query, {}), held, orphans)
    # Facts before guesses, failures first when asked about one: a message's role and a
    # result's status are the hit's own (an older index's hit takes a read of its event).
    ranked = list(candidates.values())[:RERANK_DEPTH]
    events = _read_all(service, [h["event_id"] for h in ranked if needs_event(h)])
    ranked = prefer(ranked, events, asks_about_failure(text), what_failed)
    return fresh(_entries(service, ranked, held, project, searches[0][0], events), held, orphans)


def _read_all(service: RecallSource, event_ids: list[str]) -> dict[str, Envelope | None]:
    """Each event read, in one batch when the source reads several at once."""
    batch = getattr(service, "read_events", None)
    if batch is None:
        return {i: service.read_event(i) for i in event_ids}
    found = batch(list(dict.fromkeys(event_ids)))
    return {i: found[i] for i in event_ids}


def _entries(service: RecallSource, hits: list[dict[str, Any]], held: set[str], project: str,
             query: str, events: dict[str, Envelope | None]) -> Iterator[dict[str, Any] | None]:  # fmt: skip
    """Each hit's entry, lazily (``fresh`` stops at its limit), skipping a hit whose unit an
    earlier entry already brought: each unit's partner is looked up once."""
    covered = set(held)
    for hit in hits:
        if hit["event_id"] in covered:
            continue
        entry = _unit(service, hit, project, query, events)
        if entry is not None:
            covered.update(entry["event_ids"])
        yield entry


def _unit(service: RecallSource, hit: dict[str, Any], project: str, query: str,
          events: dict[str, Envelope | None]) -> dict[str, Any] | None:  # fmt: skip
    """The hit's entry, its tool unit completed by the partner event (searched exactly by
    the ``call:<call_id>`` term both halves are indexed with); ``events``: those already read."""
    if hit["kind"] not in ("tool_call", "tool_result", "error"):
        return unit_entry(hit, None, None, query)
    event = events[hit["event_id"]] if hit["event_id"] in events else service.read_event(hit["event_id"])
    if hit["kind"] == "error":
        return error_entry(hit, event)
    want = partner_kind(event) if event is not None else None
    if event is None or want is None:
        return None
    found = _exact_hits(service, pair_term(str(event.payload.call_id)), event.thread_id, want, project)  # type: ignore[attr-defined]
    candidates = [(c, offset) for event_id, offset in found if (c := service.read_event(event_id)) is not None]
    partner = first_partner(event, candidates)
    call, result = (event, partner) if event.kind == "tool_call" else (partner, event)
    return unit_entry(hit, call, result, query)


def _exact_hits(service: RecallSource, term: str, thread_id: str, kind: str, project: str) -> list[tuple[str, int]]:
    """``(event_id, offset)`` of the best ``PARTNER_LIMIT`` hits of a search for ``term``
    that hold it exactly (only those can be the partner: the others are not read); the
    source finds them without the search when it can (``exact_holders``)."""
    holders = getattr(service, "exact_holders", None)
    found = holders(term, thread_id, kind, project, PARTNER_LIMIT) if holders is not None else None
    if found is not None:
        return found
    hits = service.search(term, thread_id=thread_id, kind=kind, project=project, limit=PARTNER_LIMIT)["hits"]
    return [(h["event_id"], h["offset"]) for h in hits if h["score"] >= EXACT_BOOST]


__all__ = ["PARTNER_LIMIT", "RERANK_DEPTH", "SEARCH_LIMIT", "RecallSource", "begin_recall", "recall_for"]
