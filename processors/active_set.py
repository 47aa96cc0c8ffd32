"""One thread's events the index cannot see yet, kept between searches (read-your-writes).

``agentlog.processors.records.active_hits`` reads a thread's unindexed events, makes each
one's search document and scores them all, on every search. An agent's loop asks the same
searches step after step while its thread grows by an event or two, so an ``ActiveSet``
keeps what that work gave: each event prepared once, when it is added, and each search's
best matches, extended by the events added since it was last asked instead of redone.
Its answers are exactly ``active_hits``' over the same events (a property test checks
it). Events only ever join a set: when the index shows more (its visible offset moves) or
the thread's windows change, the caller starts a new set.

Pure: the caller reads the events and says what the index shows.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from agentlog.processors.records import Match, Prepared, best_of, matches_of, prepare, prepared_doc, tool_of
from agentlog.processors.textsearch import EXACT_BOOST, LN2, document_filter, final_score, hit_of, term_weight
from agentlog.schemas.events import Envelope
from agentlog.schemas.search import Hit, SearchFilters

SEARCHES_KEPT = 64
"""Searches one set remembers the answers of (least recently asked out first)."""

Answer = tuple[int, list[Match], dict[str, Hit]]
"""How many prepared events a search has scored, its best matches, their hits by id."""


@dataclass(slots=True)
class Pending:
    """An active hit as a search merges it with the index's (by score, then offset);
    ``hit()`` makes it, snippet and all, for those the search keeps. Not frozen: a frozen
    dataclass sets each field through ``object.__setattr__``, twice the cost of making
    the 32 that every search of the set hands out."""

    event_id: str
    score: float
    offset: int
    hit: Callable[[], Hit]


def _made(made: dict[str, Hit], doc: dict[str, Any], terms: list[str], score: float) -> Hit:
    """The document's hit, made once per search answer (a snippet is most of a hit's cost)."""
    found = made.get(doc["event_id"])
    if found is None:
        found = made[doc["event_id"]] = hit_of(doc, terms, score)
    return found


class ActiveSet:
    """A thread's events after ``visible`` (what the index shows), as ``active_hits`` would
    search them with the thread's ``window`` and ``closed`` windows."""

    def __init__(self, visible: int, window: str, closed: Mapping[str, str],
                 docs: MutableMapping[Any, Any] | None = None) -> None:  # fmt: skip
        self.visible, self.window, self.closed = visible, window, dict(closed)
        self.last = visible  # the newest offset read
        self.records = 0  # records read (each delivery of an event counts)
        self.chars = 0  # the prepared documents' text: what the set holds in memory
        self._docs = docs
        self._ids: set[str] = set()
        self._calls: dict[str, str] = {}
        self._prepared: list[Prepared] = []
        # Token (and exact term) -> the positions of the documents holding it, ascending:
        # a search scores only those (any other scores 0 and is no match). Each token's
        # ``term_weight`` in each of them alongside: a search adds those up term by term.
        self._postings: dict[str, list[int]] = {}
        self._weights: dict[str, list[float]] = {}
        self._exact: dict[str, list[int]] = {}
        self._answers: OrderedDict[tuple[Any, ...], Answer] = OrderedDict()
        # Per filters, whether each prepared document passes them (a document never
        # changes): a new query's search looks each one up instead of comparing again.
        self._passing: OrderedDict[SearchFilters, list[bool]] = OrderedDict()

    def fits(self, window: str, closed: Mapping[str, str], visible: int) -> bool:
        """Whether this set still stands for the thread: same windows, same index view."""
        return visible == self.visible and window == self.window and closed == self.closed

    def add(self, events: Sequence[tuple[Envelope, int]], records: int, last: int) -> bool:
        """Add the thread's next events (offsets above ``last``, in order), read from
        ``records`` records up to offset ``last``. ``False``: one of them is a switch the
        thread already closed, which names the window of the events before it
        (``agentlog.processors.records.windows_of``): this set cannot take it and the
        caller starts a new one from all of them."""
        if not self._ids:
            self._first(events)
        elif any(e.kind == "window_switch" and e.event_id in self.closed and e.event_id not in self._ids
                 for e, _ in events):  # fmt: skip
            return False
        else:
            self._more(events)
        self.records += records
        self.last = max(self.last, last)
        return True

    def _more(self, events: Sequence[tuple[Envelope, int]]) -> None:
        """Events after every switch the thread closed: each in its own window, else the
        thread's current one."""
        for event, offset in events:
            if event.event_id in self._ids:
                continue  # a redelivery, which the pipeline dropped
            self._ids.add(event.event_id)
            tool_name = tool_of(event, self._calls)
            self._keep(prepared_doc(event, offset, event.window_id or self.window, tool_name, self._docs))

    def _first(self, events: Sequence[tuple[Envelope, int]]) -> None:
        """The first events: prepared all at once, their windows read backwards as ever."""
        for event, _ in events:
            if event.event_id not in self._ids:
                self._ids.add(event.event_id)
                tool_of(event, self._calls)  # the calls still open for the events after these
        for prepared in prepare(events, self.window, set(), self.closed, self._docs):
            self._keep(prepared)

    def _keep(self, prepared: Prepared) -> None:
        position = len(self._prepared)
        self._prepared.append(prepared)
        scored = prepared[1]
        length_norm = scored.length_norm()
        for token, tf in scored.counts.items():
            self._postings.setdefault(token, []).append(position)
            self._weights.setdefault(token, []).append(term_weight(tf, length_norm))
        for term in prepared[1].terms:
            self._exact.setdefault(term, []).append(position)
        self.chars += len(prepared[0]["text"]) + len(prepared[0]["path"]) + 256

    def hits(self, terms: list[str], filters: SearchFilters, exact: Sequence[str], keep: int) -> list[Hit]:
        """``active_hits`` over every event added, with no ``known`` events: the best
        ``keep`` in topic order."""
        return [p.hit() for p in self.pending(terms, filters, exact, keep)]

    def pending(self, terms: list[str], filters: SearchFilters, exact: Sequence[str], keep: int) -> list[Pending]:
        """``hits``, each made (its snippet) only when asked: a search keeps only some of
        them after the index's. Only the events added since this search was last asked
        are scored."""
        key = (tuple(terms), filters, tuple(exact), keep)
        scored, best, made = self._answers.pop(key, None) or (0, [], {})
        if scored < len(self._prepared):
            found = self._matches(scored, terms, filters, exact, keep) if terms else \
                matches_of(self._prepared[scored:], terms, filters, exact)  # fmt: skip
            best = best_of(best + found, keep)
            kept = {doc["event_id"] for _, doc in best}
            made = {i: h for i, h in made.items() if i in kept}
        self._answers[key] = (len(self._prepared), best, made)
        if len(self._answers) > SEARCHES_KEPT:
            self._answers.popitem(last=False)
        return [Pending(doc["event_id"], score, doc["offset"], partial(_made, made, doc, terms, score))
                for score, doc in best]  # fmt: skip

    def _passes(self, filters: SearchFilters) -> list[bool]:
        """Whether each prepared document passes ``filters``, those added since last asked
        compared now (the filters of the last ``SEARCHES_KEPT`` searches are kept)."""
        passing = self._passing.pop(filters, None) or []
        if len(passing) < len(self._prepared):
            passes = document_filter(filters)
            passing.extend(passes(doc) for doc, _ in self._prepared[len(passing):])
        self._passing[filters] = passing
        if len(self._passing) > SEARCHES_KEPT:
            self._passing.popitem(last=False)
        return passing

    def holders(self, exact: Sequence[str], filters: SearchFilters) -> list[tuple[str, int]]:
        """``(event_id, offset)`` of each event that passes ``filters`` and holds one of the
        ``exact`` terms, in topic order: those a search with these identifiers scores at
        least ``EXACT_BOOST`` (its text scores less: ``term_weight`` is under 2.2 a term)."""
        passing = self._passes(filters)
        positions = sorted({p for term in frozenset(exact) for p in self._exact.get(term, ())})
        return [(doc["event_id"], doc["offset"]) for doc in (self._prepared[p][0] for p in positions if passing[p])]

    def _matches(self, start: int, terms: list[str], filters: SearchFilters, exact: Sequence[str],
                 keep: int | None = None) -> list[Match]:  # fmt: skip
        """``matches_of`` the documents from position ``start`` on, term at a time: only
        the documents holding a term of the query are visited, once per term they hold.
        Each document's weights are added in the order of the query's term set, as
        ``score_of`` adds them, so every score is the same float. ``keep``: only matches
        that can be among the best ``keep`` of them are given (``best_of`` answers the same)."""
        totals: dict[int, float] = {}
        for term in set(terms):
            held = self._postings.get(term)
            if held:
                first = bisect_left(held, start)
                for position, weight in zip(held[first:], self._weights[term][first:]):
                    totals[position] = totals.get(position, 0.0) + weight
        boosts: dict[int, int] = {}
        for term in frozenset(exact):
            held = self._exact.get(term)
            if held:
                for position in held[bisect_left(held, start):]:
                    boosts[position] = boosts.get(position, 0) + 1
        prepared, passing = self._prepared, self._passes(filters)
        positions = [p for p in sorted(totals.keys() | boosts.keys()) if passing[p]]
        if keep is not None and len(positions) > keep:
            positions = _contenders(positions, totals, boosts, keep)
        matches: list[Match] = []
        for position in positions:
            total = totals.get(position)
            score = final_score(total) if total is not None else 0.0
            score = score + EXACT_BOOST * boosts[position] if position in boosts else score + 0.0
            if score:
                matches.append((score, prepared[position][0]))
        return matches


ROUNDING_MARGIN = 1e-5
"""More than twice what ``final_score``'s rounding (half of 1e-6) and the float sums can
move a score: a document whose unrounded score is this far below the ``keep``-th best
unrounded score cannot be among the best ``keep``."""


def _contenders(positions: list[int], totals: Mapping[int, float], boosts: Mapping[int, int], keep: int) -> list[int]:
    """The ``positions`` (in order) whose score can be among the best ``keep``: rounding
    every score (``final_score``) and ranking them all costs most of a new query's search,
    so the scores are first compared unrounded, and only those close enough to the
    ``keep``-th best are scored exactly and ranked (``best_of``) as before."""
    rough = [totals.get(p, 0.0) * LN2 + EXACT_BOOST * boosts.get(p, 0) for p in positions]
    floor = sorted(rough)[-keep] - ROUNDING_MARGIN
    return [p for p, r in zip(positions, rough) if r >= floor]


__all__ = ["ROUNDING_MARGIN", "SEARCHES_KEPT", "ActiveSet", "Pending"]
