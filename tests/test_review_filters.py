"""Review of the filters the index leaves out (``_everyone_holds``): a document that holds
no term of the field (tantivy drops a token over its 65,530-byte limit) passes no term
filter, so a filter is not one every document passes just because the field's dictionary
holds one term and its count reaches the live documents' (a replay's deleted copy counts)."""

from __future__ import annotations

from pathlib import Path

from agentlog.processors.pipeline import Pipeline, Record
from agentlog.processors.records import search_docs
from agentlog.schemas.search import SearchFilters
from agentlog.sinks.tantivy_index import TantivySearchIndex
from tests.helpers import raw


def _doc(event_id: str, offset: int, thread: str, project: str, text: str) -> dict:
    record = Record(0, offset, raw(event_id, "message", {"role": "user", "text": text}, offset, thread, project=project))
    return search_docs(Pipeline().process([record]).applied)[0]


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
