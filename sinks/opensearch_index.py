"""The search index on OpenSearch (opensearch-py), the production twin of tantivy.

Documents are bulk-indexed with ``_id = event_id`` (a replay overwrites, never
duplicates) into an index created from ``agentlog.schemas.tables.SEARCH_FIELDS`` with explicit
mappings, one primary shard (so refreshes expose offsets in order) and OpenSearch's own
refresh interval: searches really are eventually consistent.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Sequence
from typing import Any

import orjson
from opensearchpy import OpenSearch
from opensearchpy.exceptions import ConnectionError as OSConnectionError
from opensearchpy.exceptions import OpenSearchException

from agentlog.processors.textsearch import EXACT_BOOST, identifiers, snippet
from agentlog.processors.words import JAVA_WORD, MAX_WORD_BYTES, WORDS_VERSION, query_words
from agentlog.schemas.search import Hit, SearchFilters, exit_code_of
from agentlog.schemas.tables import SEARCH_FIELDS, SEARCH_INDEX_NAME
from agentlog.sinks.base import SearchIndex, StoreError, redact_url

log = logging.getLogger("agentlog.sinks")

BULK_DOCS = 5000
"""Documents per bulk request (well under OpenSearch's 100 MB request limit)."""

_TYPES = {"keyword": {"type": "keyword"}, "text": {"type": "text", "analyzer": "agentlog"},
          "date": {"type": "date", "format": "strict_date_optional_time||epoch_millis"},
          "long": {"type": "long"}}  # fmt: skip


# Words as ``agentlog.processors.words`` has them (tantivy's analyzer and the read-your-
# writes scan are made from the same rule), so both engines, and the read-your-writes
# fallback, find the same events for the same query: each match of the pattern a word
# (``group: 0``), lowercased, those over ``MAX_WORD_BYTES`` characters dropped.
ANALYSIS = {
    "tokenizer": {"agentlog_words": {"type": "pattern", "pattern": JAVA_WORD, "group": 0}},
    "filter": {"agentlog_length": {"type": "length", "max": MAX_WORD_BYTES}},
    "analyzer": {"agentlog": {"type": "custom", "tokenizer": "agentlog_words",
                              "filter": ["lowercase", "agentlog_length"]}},
}  # fmt: skip

OUTDATED_WORDS = ("the search index {index} splits text into words by an older rule (a run of Chinese or "
                  "Japanese is one word there, so a search for a word inside it finds nothing): "
                  "`agentlog rebuild` makes the index again")  # fmt: skip


def index_body(refresh_interval: str = "1s") -> dict[str, Any]:
    """A new index's settings and mappings (a fresh copy: changing it changes no other)."""
    return {
        "settings": {"number_of_shards": 1, "number_of_replicas": 0, "refresh_interval": refresh_interval,
                     "analysis": copy.deepcopy(ANALYSIS)},
        "mappings": {"dynamic": "strict", "_meta": {"words": WORDS_VERSION},
                     "properties": {f.name: _TYPES[f.type] for f in SEARCH_FIELDS}},
    }


class OpenSearchIndex(SearchIndex):
    """``SearchIndex`` on an OpenSearch cluster."""

    def __init__(self, url: str, index: str = SEARCH_INDEX_NAME, refresh_interval: str = "1s",
                 **client_options: Any) -> None:  # fmt: skip
        self.index, self.refresh_interval = index, refresh_interval
        self._client = OpenSearch(hosts=[url], timeout=30, **client_options)
        self._lock = threading.Lock()
        self.outdated_words = False  # made with an older word rule (``_add_missing_fields``)
        try:
            if not self._client.indices.exists(index=index):
                self._client.indices.create(index=index, body=index_body(refresh_interval))
            else:
                self._add_missing_fields()
        except OSConnectionError as error:
            raise StoreError(
                f"cannot reach OpenSearch at {redact_url(url)}: start it (`eval \"$(infra/up)\"`) or unset "
                "AGENTLOG_OPENSEARCH_URL to use the embedded index"
            ) from error
        except OpenSearchException as error:
            if "resource_already_exists" not in str(error):
                raise StoreError(f"OpenSearch refused the index {index}: {error}") from error

    def _add_missing_fields(self) -> None:
        """An index created before a field of ``SEARCH_FIELDS`` (``terms``) gains it by a
        put-mapping (adding a field is allowed on a live index): old documents simply lack
        it (no exact matches until they are indexed again: ``agentlog rebuild``), new ones
        have it, and the strict mapping accepts them. An index whose analyzer splits words
        by an older rule cannot change it while open (other workers write it): every
        search says so until ``agentlog rebuild`` makes it again (``clear``)."""
        mapping = self._client.indices.get_mapping(index=self.index)
        known = set().union(*(m["mappings"].get("properties", {}) for m in mapping.values()))
        missing = {f.name: _TYPES[f.type] for f in SEARCH_FIELDS if f.name not in known}
        if missing:
            self._client.indices.put_mapping(index=self.index, body={"properties": missing})
        versions = {(m["mappings"].get("_meta") or {}).get("words") for m in mapping.values()}
        if versions != {WORDS_VERSION}:
            self.outdated_words = True
            log.warning("%s", OUTDATED_WORDS.format(index=self.index))

    @property
    def warnings(self) -> list[str]:
        """What every search answer says of this index."""
        return [OUTDATED_WORDS.format(index=self.index)] if self.outdated_words else []

    def add(self, docs: Sequence[dict[str, Any]], new: bool = False) -> None:  # an index op upserts anyway
        # The bulk body is built with orjson: the client's own JSON encoding of every
        # action and document was a tenth of the Kafka worker's sink time.
        self.add_encoded([(d["event_id"], orjson.dumps(d)) for d in docs])

    def add_encoded(self, docs: Sequence[tuple[str, bytes]]) -> None:
        """The documents' JSON goes into the bulk body as it came: nothing is parsed."""
        for start in range(0, len(docs), BULK_DOCS):
            chunk = docs[start : start + BULK_DOCS]
            body = b"".join(orjson.dumps({"index": {"_index": self.index, "_id": event_id}}) + b"\n" + doc + b"\n"
                            for event_id, doc in chunk)  # fmt: skip
            try:
                with self._lock:  # only failures come back: a full response is as long as the request
                    response = self._client.bulk(body=body, filter_path="errors,items.*.error")
            except OpenSearchException as error:
                raise StoreError(f"bulk indexing into {self.index} failed: {error}") from error
            if response.get("errors"):
                failed = [item["index"] for item in response.get("items", []) if item["index"].get("error")]
                raise StoreError(f"bulk indexing into {self.index}: {len(failed)} of {len(chunk)} documents failed, "
                                 f"first: {failed[0]}")  # fmt: skip

    def tick(self) -> None:
        """OpenSearch refreshes on its own interval; nothing to do here."""

    def refresh(self) -> None:
        """Make everything indexed so far searchable now (``run --until-idle``)."""
        with self._lock:
            self._client.indices.refresh(index=self.index)

    def visible_offsets(self) -> dict[int, int]:
        result = self._client.search(index=self.index, body={
            "size": 0, "aggs": {"top": {"max": {"field": "offset"}}}})  # fmt: skip
        value = result["aggregations"]["top"]["value"]
        return {} if value is None else {0: int(value)}

    def visible_ids(self, event_ids: Sequence[str]) -> set[str]:
        if not event_ids:
            return set()
        body = {"query": {"ids": {"values": list(event_ids)}}, "_source": False, "size": len(event_ids)}
        try:
            found = self._client.search(index=self.index, body=body)["hits"]["hits"]
        except OpenSearchException as error:
            raise StoreError(f"search failed: {error}") from error
        return {h["_id"] for h in found}

    def search(self, query: str, filters: SearchFilters, limit: int = 10) -> list[Hit]:
        terms = query_words(query)
        exact = identifiers(query)
        # A text match, or an identifier held exactly, which scores a constant far above
        # any text score (as tantivy's query does).
        should: list[dict[str, Any]] = [
            *([{"multi_match": {"query": " ".join(terms), "fields": ["text", "path"], "operator": "or"}}] if terms else []),
            *({"constant_score": {"filter": {"term": {"terms": t}}, "boost": EXACT_BOOST}} for t in exact),
        ]
        must: list[dict[str, Any]] = (  # no word and no identifier: everything under the filters
            [{"bool": {"should": should, "minimum_should_match": 1}}] if should else [{"match_all": {}}]
        )  # fmt: skip
        flt: list[dict[str, Any]] = [
            {"term": {field: value}}
            for field, value in (("thread_id", filters.thread_id), ("window_id", filters.window_id),
                                 ("kind", filters.kind), ("tool_name", filters.tool_name),
                                 ("project", filters.project))
            if value is not None
        ]  # fmt: skip
        if filters.since_ms is not None or filters.until_ms is not None:
            bounds = {k: v for k, v in (("gte", filters.since_ms), ("lte", filters.until_ms)) if v is not None}
            flt.append({"range": {"ts_ms": bounds}})
        body = {"size": limit, "query": {"bool": {"must": must, "filter": flt}},
                "sort": ["_score", {"offset": "desc"}]}  # fmt: skip
        try:
            result = self._client.search(index=self.index, body=body)
        except OpenSearchException as error:
            raise StoreError(f"search failed: {error}") from error
        hits = []
        for h in result["hits"]["hits"]:
            d = h["_source"]
            hits.append(Hit(
                event_id=d["event_id"], thread_id=d["thread_id"], window_id=d["window_id"], kind=d["kind"],
                tool_name=d["tool_name"], ts=d["ts"], repo_commit=d["repo_commit"],
                score=round(float(h["_score"] or 0.0), 6), snippet=snippet(terms, d.get("text", "")),
                source="index", offset=int(d["offset"]), role=d.get("role") or "",
                status=d.get("status") or "", exit_code=exit_code_of(d.get("exit_code")),
            ))  # fmt: skip
        return hits

    def clear(self) -> None:
        """No documents left (``agentlog rebuild`` adds them all again); an index whose
        words are split by an older rule is made again, with the current analyzer."""
        with self._lock:
            if not self.outdated_words:
                self._client.delete_by_query(index=self.index, body={"query": {"match_all": {}}},
                                             refresh=True, conflicts="proceed")  # fmt: skip
                return
            try:
                self._client.indices.delete(index=self.index)
                self._client.indices.create(index=self.index, body=index_body(self.refresh_interval))
            except OpenSearchException as error:
                raise StoreError(f"cannot make the index {self.index} again: {error}") from error
            self.outdated_words = False

    def close(self) -> None:
        self._client.close()


__all__ = ["OpenSearchIndex", "index_body"]
