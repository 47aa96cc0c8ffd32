"""A filtered search is planned by the postings it reads (`sinks/tantivy_index._filters_lead`):
the plan changes what tantivy reads, never what a search answers."""

from __future__ import annotations

from itertools import islice
from pathlib import Path

import orjson
import pytest

from agentlog.bench.crowd import _interleaved
from agentlog.bench.step import Traffic
from agentlog.processors.pipeline import Pipeline, Record
from agentlog.processors.records import search_docs
from agentlog.schemas.search import SearchFilters
from agentlog.sinks import tantivy_index
from agentlog.sinks.tantivy_index import FILTER_LEAD_COST, TantivySearchIndex, _filters_lead
from agentlog.streams.cli.demo import BASE_TIME

THREADS, EACH = 12, 150
MIDDLE_MS = int(BASE_TIME.timestamp() * 1000) + 2_000 * EACH // 2
"""Half of each thread's events are before this time (the traffic's events are 2 s apart)."""


@pytest.fixture(scope="module")
def crowd_docs() -> list[dict]:
    """Twelve threads of generated agent traffic, their events mixed as agents side by side write them."""
    events = _interleaved([Traffic(f"t{i}", seed=i) for i in range(THREADS)], EACH)
    records = [Record(0, n, orjson.dumps(e)) for n, e in enumerate(events, 1)]
    return search_docs(Pipeline().process(records).applied)


def _questions(n: int) -> list[str]:
    events = Traffic("q", seed=3).take(400)
    return list(islice((e["payload"]["text"] for e in events if e["kind"] == "message"), n))


ASKED = [
    *[(q, SearchFilters(thread_id="t0")) for q in _questions(12)],
    *[(q, SearchFilters(thread_id="t5", kind="tool_result")) for q in _questions(4)],
    ("ERR_007 timed out", SearchFilters(thread_id="t3")),
    ("read_file component", SearchFilters(thread_id="t7", tool_name="read_file")),
    ("component ok", SearchFilters(project="bench")),  # every document's project: no filter at all
    ("checked and noted", SearchFilters(thread_id="t1", since_ms=0)),
    ("checked and noted component", SearchFilters(thread_id="t1", since_ms=MIDDLE_MS)),
    ("what did bash say ERR_012", SearchFilters(thread_id="t6", until_ms=MIDDLE_MS)),
    ("ERR_011", SearchFilters(kind="error")),  # the traffic has no ``error`` events
    ("no such words here", SearchFilters(thread_id="t2")),
    ("!!!", SearchFilters(thread_id="t4")),  # punctuation alone: every document of the thread
]


def test_a_filtered_search_answers_the_same_hits_and_scores_whichever_way_it_is_planned(
    tmp_path: Path, crowd_docs: list[dict], monkeypatch: pytest.MonkeyPatch
) -> None:
    answers, planned = {}, []

    def planning(*args: object) -> bool:
        planned.append(led := _filters_lead(*args))  # type: ignore[arg-type]
        return led

    monkeypatch.setattr(tantivy_index, "_filters_lead", planning)
    for plan, cost in (("filters lead", 0.0), ("union first", 1e12)):
        monkeypatch.setattr(tantivy_index, "FILTER_LEAD_COST", cost)
        planned.clear()
        index = TantivySearchIndex(str(tmp_path / plan.replace(" ", "-")))
        index.add(crowd_docs)
        index.refresh()
        answers[plan] = [[h.as_dict() for h in index.search(q, f, limit=20)] for q, f in ASKED]
        index.close()
        # Forced either way: every search with a selective filter and a word some document
        # holds is led by it (all but the project's, the punctuation's and the unheld
        # words'), or only the one whose filter selects no document (it reads nothing led).
        assert planned.count(True) == (len(ASKED) - 3 if plan == "filters lead" else 1)
    assert answers["filters lead"] == answers["union first"]
    # Only the words no event holds, and the kind no event has, find nothing.
    assert sum(map(bool, answers["union first"])) == len(ASKED) - 2


def test_a_time_range_selects_hits_and_never_scores_them(tmp_path: Path, crowd_docs: list[dict]) -> None:
    index = TantivySearchIndex(str(tmp_path))
    index.add(crowd_docs)
    index.refresh()
    query, thread = "checked and noted component", SearchFilters(thread_id="t1")
    unranged = {h.event_id: h.score for h in index.search(query, thread, limit=400)}
    for ranged in (SearchFilters(thread_id="t1", since_ms=MIDDLE_MS),
                   SearchFilters(thread_id="t1", until_ms=MIDDLE_MS)):
        hits = index.search(query, ranged, limit=400)
        assert 0 < len(hits) < len(unranged)
        assert {h.event_id: h.score for h in hits} == {h.event_id: unranged[h.event_id] for h in hits}
    index.close()


class Counts:
    """A searcher that knows only how many documents hold each term."""

    def __init__(self, held: dict[tuple[str, str], int]) -> None:
        self.held = held

    def doc_freq(self, field: str, value: str) -> int:
        return self.held.get((field, value), 0)


WORDS = [("text", "what"), ("text", "component"), ("text", "err_018")]


def test_a_small_thread_among_many_leads_with_its_filter_and_a_thread_alone_reads_the_union() -> None:
    crowded = Counts({("text", "what"): 200_000, ("text", "component"): 150_000, ("text", "err_018"): 40})
    assert _filters_lead(crowded, WORDS, narrowest=2_000)  # 2 * (2,000 + 2,000 + 40) against 350,040
    assert not _filters_lead(crowded, WORDS, narrowest=200_000)  # the filter selects nearly every document
    alone = Counts({("text", "what"): 2_000, ("text", "component"): 1_500, ("text", "err_018"): 40})
    assert not _filters_lead(alone, WORDS, narrowest=2_000)
    assert not _filters_lead(crowded, WORDS, narrowest=None)  # no term filter: nothing to lead with
    assert not _filters_lead(Counts({}), WORDS, narrowest=10)  # no document holds a word
    assert FILTER_LEAD_COST > 1  # a led posting is dearer than a scanned one
