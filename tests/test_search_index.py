"""The embedded search index upserts by event_id (SPEC §3: replays never double a hit)."""

from __future__ import annotations

from pathlib import Path

from agentlog.processors.pipeline import Pipeline, Record
from agentlog.processors.records import search_docs
from agentlog.schemas.search import SearchFilters
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
