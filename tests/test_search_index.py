"""The embedded search index upserts by event_id (SPEC §3: replays never double a hit)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import hypothesis
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from agentlog.processors.pipeline import Pipeline, Record
from agentlog.processors.records import search_docs
from agentlog.schemas.search import SearchFilters
from agentlog.sinks import tantivy_index
from agentlog.sinks.tantivy_index import TantivySearchIndex
from agentlog.streams.config import Settings
from agentlog.streams.embedded.service import EmbeddedService
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


# -- a filter every document passes ------------------------------------------------------


def _doc(event_id: str, offset: int, thread: str, project: str, text: str) -> dict:
    record = Record(0, offset, raw(event_id, "message", {"role": "user", "text": text}, offset, thread, project=project))
    return search_docs(Pipeline().process([record]).applied)[0]


def test_a_filter_every_document_passes_is_left_out_of_the_query_and_one_some_fail_is_kept(tmp_path: Path) -> None:
    index = TantivySearchIndex(str(tmp_path))
    index.add([_doc(f"e{n}", n, "t1", "p", f"marmot {n}") for n in range(5)])
    index.refresh()
    searcher = index._index.searcher()
    both = SearchFilters(thread_id="t1", project="p")
    assert index._filter_clauses(both, searcher) == []  # one thread, one project: both select everything
    assert len(index._filter_clauses(both)) == 2  # without a searcher to ask: as given
    index.add([_doc("e9", 9, "t2", "p", "marmot 9")])
    index.refresh()
    assert len(index._filter_clauses(both, index._index.searcher())) == 1  # the thread's now selects
    assert [h.event_id for h in index.search("marmot", SearchFilters(thread_id="t2"), limit=10)] == ["e9"]
    index.close()


def test_a_thread_filter_is_kept_while_a_deleted_document_still_names_the_thread(tmp_path: Path) -> None:
    """Every live document but one holds t1, and a deleted one does too: t1's count then
    equals the live documents', and only a count of every document, deleted ones
    included, tells that one is t2's."""
    index = TantivySearchIndex(str(tmp_path))
    index.add([_doc("moved", 0, "t1", "p", "otter"), _doc("stays", 1, "t1", "p", "marmot")])
    index.refresh()
    index.add([_doc("moved", 0, "t2", "p", "otter")])  # the same event upserted: its t1 copy deleted
    index.refresh()
    assert index._index.searcher().doc_freq("thread_id", "t1") == index._index.searcher().num_docs == 2
    assert index.search("otter", SearchFilters(thread_id="t1"), limit=10) == []
    assert [h.event_id for h in index.search("otter", SearchFilters(thread_id="t2"), limit=10)] == ["moved"]
    index.close()


@hypothesis.settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 5), st.sampled_from(["t1", "t2"]), st.sampled_from(["", "p"]),
                          st.sampled_from(["marmot", "marmot otter", "otter"])), min_size=1, max_size=12),  # fmt: skip
       st.sampled_from([None, "t1", "t2"]), st.sampled_from([None, "", "p", "q"]), st.booleans())
def test_a_filtered_search_answers_what_a_scan_of_the_live_documents_answers(
    tmp_path_factory: pytest.TempPathFactory, writes: list, thread: str | None, project: str | None, refresh_each: bool
) -> None:
    """Events upserted across threads and projects (a later write of an event replaces
    it, its old copy deleted): whichever filters the index leaves out, its hits are the
    live documents that pass them."""
    index = TantivySearchIndex(str(tmp_path_factory.mktemp("ix")))
    live: dict[str, tuple[str, str, str]] = {}
    for n, (event, thread_id, project_id, text) in enumerate(writes):
        index.add([_doc(f"e{event}", event, thread_id, project_id, text)])
        live[f"e{event}"] = (thread_id, project_id, text)
        if refresh_each or n == len(writes) - 1:
            index.refresh()
    found = index.search("marmot", SearchFilters(thread_id=thread, project=project), limit=20)
    expected = {e for e, (t, p, text) in live.items()
                if "marmot" in text and thread in (None, t) and project in (None, p)}  # fmt: skip
    assert {h.event_id for h in found} == expected
    index.close()


def test_a_project_filter_is_kept_when_a_live_document_holds_no_project_term(tmp_path: Path) -> None:
    long_project = "x" * 70_000  # a valid event's project (events may be 1 MiB); tantivy indexes no term for it
    index = TantivySearchIndex(str(tmp_path))
    index.add([_doc("mine", 0, "t1", "p", "marmot"), _doc("theirs", 1, "t1", long_project, "marmot")])
    index.refresh()
    index.add([_doc("mine", 0, "t1", "p", "marmot")])  # a replay: the first copy deleted, its term counted
    index.refresh()
    found = index.search("marmot", SearchFilters(thread_id="t1", project="p"), limit=10)
    assert [h.event_id for h in found] == ["mine"]
    index.close()


# -- a search begun before it is answered ----------------------------------------------------


def _ids(answer: dict[str, Any]) -> set[str]:
    return {h["event_id"] for h in answer["hits"]}


def test_a_search_begun_before_a_refresh_holds_what_the_refresh_showed(settings: Settings) -> None:
    service = EmbeddedService(settings)
    try:
        service.publish(b"\n".join(raw(f"a{i}", "message", {"role": "user", "text": f"marmot {i}"}, float(i), "t1")
                                   for i in range(4)))  # fmt: skip
        service.catch_up()
        service._drain()
        begun = service._answering.search_begun("marmot", SearchFilters(thread_id="t1", project="default"), 20)
        service.publish(b"\n".join(raw(f"b{i}", "message", {"role": "user", "text": f"marmot late {i}"}, 10.0 + i, "t1")
                                   for i in range(3)))  # fmt: skip
        service.state("t1")
        service._drain()  # indexed and refreshed between the begin and the answer
        service.publish(raw("c0", "message", {"role": "user", "text": "marmot newest"}, 20.0, "t1"))
        service.state("t1")  # applied, not indexed
        now = service._answering.search("marmot", thread_id="t1", project="default", limit=20)
        answered = begun()
        assert _ids(answered) == _ids(now) == {*(f"a{i}" for i in range(4)), "b0", "b1", "b2", "c0"}
    finally:
        service.close()


def test_leaving_out_the_filters_every_document_passes_keeps_the_answer_s_order(settings: Settings, monkeypatch: Any) -> None:
    """The filters' term clauses score (BM25 of a term every document holds: about 1/N
    each), so leaving them out lowers every index hit by that much, while the unindexed
    events' scores stay: in a small index, where it is most of a hit's score, an index
    hit and an unindexed one change places."""
    service = EmbeddedService(settings)
    try:
        service.publish(raw("old", "message", {"role": "user", "text": "marmot"}, 1.0, "t1"))
        service.catch_up()
        service._drain()
        service.publish(raw("new", "message", {"role": "user", "text": "marmot seen in the hills"}, 2.0, "t1"))
        service.state("t1")
        left_out = [h["event_id"] for h in service._answering.search("marmot", thread_id="t1", project="default")["hits"]]
        service.index._reload()  # forget the remembered answer
        monkeypatch.setattr(tantivy_index, "_everyone_holds", lambda *_: False)
        kept = [h["event_id"] for h in service._answering.search("marmot", thread_id="t1", project="default")["hits"]]
        assert left_out == kept
    finally:
        service.close()


def test_documents_given_as_json_or_as_dicts_give_the_same_hits_and_a_null_field_is_left_out(tmp_path: Path) -> None:
    """The sinks hand tantivy each document as JSON (parsed in Rust); a dict is encoded
    first. Tantivy refuses a null where a text field is: such a field is left out, as a
    missing one would be, and the document is still found."""
    import orjson  # noqa: PLC0415

    as_dicts, as_json = TantivySearchIndex(str(tmp_path / "d")), TantivySearchIndex(str(tmp_path / "j"))
    as_dicts.add(docs(1, 8))
    as_json.add_encoded([(d["event_id"], orjson.dumps(d)) for d in docs(1, 8)])
    with_null = {**docs(9, 9)[0], "repo_commit": None, "path": None}
    as_dicts.add([with_null])
    as_json.add_encoded([(with_null["event_id"], orjson.dumps(with_null))])
    for index in (as_dicts, as_json):
        index.refresh()
    assert hits(as_dicts) == hits(as_json) == sorted(f"e{n}" for n in range(1, 10))
    found = as_json.search("marmot 9", SearchFilters(), limit=1)
    assert found[0].event_id == "e9"


def test_a_json_document_s_offset_is_its_key_s_never_one_written_in_its_text(tmp_path: Path) -> None:
    import orjson  # noqa: PLC0415

    index = TantivySearchIndex(str(tmp_path))
    tricky = {**docs(5, 5)[0], "text": 'marmot "offset":99, {"offset":98}'}
    index.add_encoded([(tricky["event_id"], orjson.dumps(tricky))])
    index.refresh()
    assert index.visible_offsets() == {0: 5}
    index.add_encoded([(tricky["event_id"], orjson.dumps(tricky))])  # a replay: still one hit
    index.refresh()
    assert hits(index) == ["e5"]
