"""Read-your-writes keeps only the best ``2 * limit`` active hits, and a search answers
exactly what it answered with all of them, whatever the index returned."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agentlog.processors.records import active_hits
from agentlog.schemas.search import Hit, SearchFilters
from tests.helpers import ev

WORDS = ["deploy", "build", "cache", "error", "login", "test"]


def merged(index: list[Hit], active: list[Hit], limit: int) -> list[tuple[str, float, str]]:
    """What a search answers: the index's hits, then active ones it lacks, best first."""
    known = {h.event_id for h in index}
    out = sorted(index + [h for h in active if h.event_id not in known], key=lambda h: (-h.score, -h.offset))
    return [(h.event_id, h.score, h.source) for h in out[:limit]]


@settings(max_examples=150, deadline=None)
@given(texts=st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=6).map(" ".join), min_size=1, max_size=40),
       query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join),
       limit=st.integers(1, 8), known=st.data())  # fmt: skip
def test_keeping_the_best_two_limits_of_active_hits_answers_the_same_search(texts: list[str], query: str,
                                                                            limit: int, known: st.DataObject) -> None:  # fmt: skip
    events = [(ev(f"e{i}", "message", {"role": "user", "text": t}, float(i)), i) for i, t in enumerate(texts)]
    terms, filters = query.split(), SearchFilters("t1")
    every = active_hits(events, terms, filters, "w0", set(), {})
    kept = active_hits(events, terms, filters, "w0", set(), {}, keep=2 * limit)
    assert len(kept) <= 2 * limit and set(h.event_id for h in kept) <= set(h.event_id for h in every)
    # The index may hold some of the same events (a refresh in between), with other scores.
    chosen = known.draw(st.lists(st.sampled_from(every), max_size=limit, unique_by=lambda h: h.event_id)) if every else []
    index = [Hit(**{**h.as_dict(), "source": "index", "score": known.draw(st.floats(0, 5))}) for h in chosen]
    assert merged(index, kept, limit) == merged(index, every, limit)
