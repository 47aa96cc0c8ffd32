"""The embedded search index upserts by event_id (SPEC §3: replays never double a hit)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest

from agentlog.processors.pipeline import Pipeline, Record
from agentlog.processors.records import search_docs
from agentlog.schemas.search import SearchFilters
from agentlog.sinks import tantivy_index
from agentlog.sinks.tantivy_index import TantivySearchIndex
from tests.helpers import raw


def docs(first: int, last: int) -> list[dict]:
    records = [Record(0, n, raw(f"e{n}", "message", {"role": "user", "text": f"marmot {n}"}, n)) for n in range(1, 16)]
    return [d for d in search_docs(Pipeline().process(records).applied) if first <= d["offset"] <= last]


def hits(index: TantivySearchIndex) -> list[str]:
    return sorted(h.event_id for h in index.search("marmot", SearchFilters(), limit=100))


def test_a_replay_of_documents_already_added_or_committed_leaves_one_hit_per_event(tmp_path: Path) -> None:
    index = TantivySearchIndex(str(tmp_path))
    index.add(docs(1, 10))
    index.refresh()
    index.add(docs(5, 12))  # redelivered after a crash, plus new ones
    index.refresh()
    assert hits(index) == sorted(f"e{n}" for n in range(1, 13))
    index.add(docs(11, 12))  # added again before a refresh
    index.add(docs(12, 12))
    index.close()
    reopened = TantivySearchIndex(str(tmp_path))  # what a restarted process finds
    reopened.add(docs(8, 15))
    reopened.refresh()
    assert hits(reopened) == sorted(f"e{n}" for n in range(1, 16))


def test_after_clear_the_index_takes_every_document_again(tmp_path: Path) -> None:
    index = TantivySearchIndex(str(tmp_path))
    index.add(docs(1, 15))
    index.refresh()
    index.clear()
    index.add(docs(1, 15))
    index.refresh()
    assert hits(index) == sorted(f"e{n}" for n in range(1, 16))


def _as_dicts(found: list) -> list[dict]:
    return [h.as_dict() for h in found]


def test_a_search_started_beside_the_caller_answers_exactly_what_a_search_answers(tmp_path: Path) -> None:
    beside, inline = TantivySearchIndex(str(tmp_path / "a")), TantivySearchIndex(str(tmp_path / "b"))
    for index in (beside, inline):
        index.add(docs(1, 15))
        index.refresh()
    asked = [("marmot", SearchFilters(), 5), ("marmot 7", SearchFilters(kind="message"), 3), ("nothing", SearchFilters(), 4),
             ("marmot", SearchFilters(thread_id="t1"), 15)]  # fmt: skip
    for query, filters, limit in asked * 2:  # the second time from memory
        assert _as_dicts(beside.search_later(query, filters, limit)()) == _as_dicts(inline.search(query, filters, limit))
    beside.close()
    inline.close()


def test_a_search_started_before_a_refresh_answers_for_the_reader_it_started_on_and_is_not_remembered(
    tmp_path: Path,
) -> None:
    index = TantivySearchIndex(str(tmp_path))
    index.add(docs(1, 10))
    index.refresh()
    answer = index.search_later("marmot", SearchFilters(), 100)
    index.add(docs(11, 15))
    index.refresh()
    assert sorted(h.event_id for h in answer()) == sorted(f"e{n}" for n in range(1, 11))
    assert hits(index) == sorted(f"e{n}" for n in range(1, 16))  # the older answer was not kept
    index.close()


@contextmanager
def _pool_taken(tmp_path: Path, counted: bool) -> Iterator[tuple[TantivySearchIndex, list[dict]]]:
    """An index whose one search thread is taken by a search that takes its time (``counted``:
    as the index counts its own searches; else a pool it cannot know is stuck), and the answer
    to "marmot 3" (limit 5) a search gives, not remembered."""
    index = TantivySearchIndex(str(tmp_path))
    index.add(docs(1, 15))
    index.refresh()
    want = _as_dicts(index.search("marmot 3", SearchFilters(), 5))
    index._answers.clear()  # asked again, not remembered
    busy, release = ThreadPoolExecutor(1), threading.Event()
    busy.submit(release.wait)
    index._beside = busy
    index._scoring = 1 if counted else 0
    try:
        yield index, want
    finally:
        release.set()
        index.close()


def test_a_search_whose_thread_never_comes_runs_in_the_caller_after_a_bounded_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tantivy_index, "START_WAIT_S", 0.05)
    with _pool_taken(tmp_path, counted=False) as (index, want):
        assert _as_dicts(index.search_later("marmot 3", SearchFilters(), 5)()) == want


def test_a_search_started_while_every_search_thread_is_taken_runs_in_the_caller_without_waiting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tantivy_index, "SEARCH_THREADS", 1)
    with _pool_taken(tmp_path, counted=True) as (index, want):
        t0 = time.monotonic()
        answer = index.search_later("marmot 3", SearchFilters(), 5)
        assert time.monotonic() - t0 < tantivy_index.START_WAIT_S  # not queued behind it
        assert _as_dicts(answer()) == want
