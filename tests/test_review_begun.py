"""Review: a search begun before a refresh answers the events a search asked at answer
time finds (read-your-writes covers what the refresh showed in between)."""

from __future__ import annotations

from typing import Any

from agentlog.schemas.search import SearchFilters
from agentlog.streams.config import Settings
from agentlog.streams.embedded.service import EmbeddedService
from tests.helpers import raw


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
    from agentlog.sinks import tantivy_index

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
