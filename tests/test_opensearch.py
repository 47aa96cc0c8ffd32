"""The search index on a real OpenSearch node: the same contract as the embedded index."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentlog.sinks.base import StoreError
from agentlog.sinks.opensearch_index import OpenSearchIndex
from agentlog.streams.config import Settings
from agentlog.streams.cli.demo import sample_session
from agentlog.streams.embedded.service import EmbeddedService
from tests.helpers import raw


@pytest.fixture
def os_settings(tmp_path: Path, opensearch_url: str) -> Iterator[Settings]:
    index = f"agentlog-test-{uuid.uuid4().hex[:10]}"
    yield Settings(data_dir=tmp_path / "os", opensearch_url=opensearch_url, opensearch_index=index)
    OpenSearchIndex(opensearch_url, index)._client.indices.delete(index=index, ignore_unavailable=True)


QUERIES = [("KeyError session_ttl", {}), ("pytest", {"tool_name": "pytest"}), ("runbook", {"thread_id": "demo-docs"}),
           ("src", {"kind": "file_change"}), ("login", {"project": "webshop"})]  # fmt: skip


def test_opensearch_and_the_embedded_index_give_the_same_hits(tmp_path: Path, os_settings: Settings) -> None:
    lines, _info = sample_session()
    results = []
    for settings in (Settings(data_dir=tmp_path / "embedded"), os_settings):
        service = EmbeddedService(settings)
        try:
            service.publish(b"\n".join(lines))
            service.catch_up()
            results.append([
                {h["event_id"]: (h["role"], h["status"], h["exit_code"])
                 for h in service.search(q, limit=50, **{k: v for k, v in f.items()})["hits"]}
                for q, f in QUERIES
            ])
        finally:
            service.close()
    embedded, opensearch = results
    assert all(embedded), "every query should hit something"
    assert opensearch == embedded  # the same events, each with the same role, status and exit code
    outcomes = {o for found in embedded for o in found.values()}
    assert {"user", "assistant"} <= {role for role, _, _ in outcomes} and "ok" in {s for _, s, _ in outcomes}


def test_indexing_is_an_upsert_by_event_id_so_replays_never_duplicate(os_settings: Settings) -> None:
    index = OpenSearchIndex(os_settings.opensearch_url, os_settings.opensearch_index)  # type: ignore[arg-type]
    doc = {"event_id": "e1", "thread_id": "t", "window_id": "w0", "kind": "message", "tool_name": "",
           "project": "p", "agent_id": "main", "repo_commit": "", "error_code": "", "ts": "2026-01-01T00:00:00Z",
           "ts_ms": 1767225600000, "offset": 7, "path": "", "text": "unique walrus"}  # fmt: skip
    index.add([doc])
    index.add([doc])
    index.refresh()
    from agentlog.schemas.search import SearchFilters

    assert [h.event_id for h in index.search("walrus", SearchFilters())] == ["e1"]
    assert index.visible_offsets() == {0: 7}


def test_a_document_the_index_refuses_is_an_error_naming_the_reason_not_a_silent_gap(os_settings: Settings) -> None:
    index = OpenSearchIndex(os_settings.opensearch_url, os_settings.opensearch_index)  # type: ignore[arg-type]
    good = {"event_id": "ok", "thread_id": "t", "kind": "message", "ts_ms": 1767225600000, "offset": 1, "text": "fine"}
    bad = {**good, "event_id": "bad", "offset": "not a number"}  # the mapping says long
    with pytest.raises(StoreError, match=r"1 of 2 documents failed.*offset"):
        index.add([good, bad])


def test_read_your_writes_against_the_lagging_opensearch_index(os_settings: Settings) -> None:
    service = EmbeddedService(os_settings)
    stop = threading.Event()
    worker = threading.Thread(target=service.run_forever, args=(stop,))
    worker.start()
    sources = []
    try:
        for i in range(30):
            eid = f"ryw{i}"
            service.publish(raw(eid, "message", {"role": "user", "text": f"quokka note {i}"}, i, thread="ryw"))
            hits = service.search("quokka", after=eid, limit=100)["hits"]
            by_id = {h["event_id"]: h["source"] for h in hits}
            assert eid in by_id, f"search after {eid} missed it"
            sources.append(by_id[eid])
    finally:
        stop.set()
        worker.join()
        service.close()
    assert "active" in sources  # the index really lagged, and the fallback covered it


LOOSE = [f"the cache had a miss, err {i}: cache miss cache miss err" for i in range(12)]


def test_an_exact_identifier_ranks_first_ahead_of_loosely_related_hits_on_opensearch(os_settings: Settings) -> None:
    service = EmbeddedService(os_settings)
    try:
        lines = [raw(f"l{i}", "message", {"role": "assistant", "text": t}, i) for i, t in enumerate(LOOSE[:6])]
        lines.append(raw("x", "tool_result", {"call_id": "k", "output": "fetch failed: ERR_CACHE_MISS",
                                              "status": "error"}, 7))  # fmt: skip
        lines += [raw(f"m{i}", "message", {"role": "assistant", "text": t}, 8 + i) for i, t in enumerate(LOOSE[6:])]
        lines += [raw("p", "file_change", {"path": "src/app/main.py", "change": "modified"}, 30),
                  *[raw(f"pl{i}", "message", {"role": "user", "text": "main app: src main py app main src"}, 31 + i)
                    for i in range(6)]]  # fmt: skip
        service.publish(b"\n".join(lines))
        service.catch_up()
        hits = service.search("ERR_CACHE_MISS", limit=20)["hits"]
        assert len(hits) > 1 and hits[0]["event_id"] == "x" and hits[0]["source"] == "index"
        assert service.search("src/app/main.py", limit=20)["hits"][0]["event_id"] == "p"
    finally:
        service.close()


def test_a_query_of_one_long_identifier_finds_only_the_events_that_hold_it_on_opensearch(os_settings: Settings) -> None:
    sha = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    service = EmbeddedService(os_settings)
    try:
        service.publish(b"\n".join([raw("a", "message", {"role": "user", "text": "deploy the build"}, 0),
                                    raw("b", "tool_result", {"call_id": "k", "output": f"sha256 {sha} ok"}, 1)]))
        service.catch_up()
        assert [h["event_id"] for h in service.search(sha)["hits"]] == ["b"]
        assert len(service.search("?!")["hits"]) == 2  # no word, no identifier: everything, as tantivy
    finally:
        service.close()


def test_an_opensearch_index_created_before_the_terms_field_gains_it_and_keeps_working(os_settings: Settings) -> None:
    from agentlog.sinks.opensearch_index import index_body
    from agentlog.schemas.search import SearchFilters

    url, name = os_settings.opensearch_url, os_settings.opensearch_index
    old = index_body()
    for later in ("terms", "role", "status", "exit_code"):  # the mapping an older version created
        del old["mappings"]["properties"][later]
    client = OpenSearchIndex(url, name)._client
    client.indices.delete(index=name)
    client.indices.create(index=name, body=old)
    doc = {"event_id": "old", "thread_id": "t", "window_id": "w0", "kind": "message", "tool_name": "",
           "project": "p", "agent_id": "main", "repo_commit": "", "error_code": "", "ts": "2026-01-01T00:00:00Z",
           "ts_ms": 1767225600000, "offset": 1, "path": "", "text": "an old ERR_CACHE_MISS note"}  # fmt: skip
    client.index(index=name, id="old", body=doc, refresh=True)
    index = OpenSearchIndex(url, name)  # opening it adds the fields
    mapped = client.indices.get_mapping(index=name)[name]["mappings"]["properties"]
    assert {"terms", "role", "status", "exit_code"} <= set(mapped)
    index.add([{**doc, "event_id": "new", "offset": 2, "text": "a new ERR_CACHE_MISS", "terms": ["ERR_CACHE_MISS"]},
               {**doc, "event_id": "loose", "offset": 3, "text": "err cache miss, cache miss err"}])  # fmt: skip
    index.refresh()
    hits = [h.event_id for h in index.search("ERR_CACHE_MISS", SearchFilters())]
    assert hits[0] == "new" and set(hits) == {"new", "old", "loose"}  # the old document is still found
    index.add([{**doc, "event_id": "said", "offset": 4, "text": "ERR_CACHE_MISS said", "role": "user", "status": "",
                "exit_code": ""}])  # fmt: skip
    index.refresh()
    roles = {h.event_id: (h.role, h.exit_code) for h in index.search("ERR_CACHE_MISS", SearchFilters())}
    assert roles["said"] == ("user", None) and roles["old"] == ("", None)  # an old document's hit says none


def test_a_path_too_long_for_a_keyword_term_is_indexed_without_its_exact_term(os_settings: Settings) -> None:
    service = EmbeddedService(os_settings)
    try:
        long_path = "src/" + "d/" * 20_000 + "f.py"  # beyond OpenSearch's 32 KB keyword term
        service.publish(raw("c", "tool_call", {"call_id": "k", "tool_name": "read", "arguments": {"path": long_path}}, 0))
        service.catch_up()
        assert not service.health().get("degraded"), service.health()
        assert [h["event_id"] for h in service.search("read", limit=5)["hits"]] == ["c"]
    finally:
        service.close()


WORD_SAMPLES = ["東京に行きました。サーバーの設定を確認してください", "数据库连接超时，请检查配置文件",
                "한국어 단어 Hello_World ERR_042 ΟΔΟΣ οδός", "ｻｰﾊﾞｰ ・ 々〆〇 𠀋 ①½", "a" * 40 + " " + "b" * 41]  # fmt: skip


def test_opensearch_splits_text_into_the_same_words_as_the_embedded_engines(os_settings: Settings) -> None:
    from agentlog.processors.words import tokenize

    index = OpenSearchIndex(os_settings.opensearch_url, os_settings.opensearch_index)  # type: ignore[arg-type]
    for text in WORD_SAMPLES:
        analyzed = index._client.indices.analyze(index=index.index, body={"analyzer": "agentlog", "text": text})
        assert [t["token"] for t in analyzed["tokens"]] == tokenize(text), text


def test_a_word_inside_a_japanese_sentence_is_found_on_opensearch(os_settings: Settings) -> None:
    service = EmbeddedService(os_settings)
    try:
        service.publish(b"\n".join([raw("ja", "message", {"role": "user", "text": WORD_SAMPLES[0]}, 0),
                                    raw("zh", "message", {"role": "user", "text": WORD_SAMPLES[1]}, 1)]))  # fmt: skip
        service.catch_up()
        found = service.search("東京", limit=5)
        assert [h["event_id"] for h in found["hits"]] == ["ja"] and found["hits"][0]["source"] == "index"
        assert [h["event_id"] for h in service.search("配置", limit=5)["hits"]] == ["zh"]
        assert found["warnings"] == []
    finally:
        service.close()


def test_an_index_with_the_older_word_rule_says_so_until_a_rebuild_makes_it_again(os_settings: Settings) -> None:
    from agentlog.processors.words import WORDS_VERSION
    from agentlog.sinks.opensearch_index import index_body
    from agentlog.schemas.search import SearchFilters

    url, name = os_settings.opensearch_url, os_settings.opensearch_index
    old = index_body()  # as an older version created it: letters and digits split on the rest, no version
    old["settings"]["analysis"]["tokenizer"]["agentlog_words"] = {"type": "pattern", "pattern": "[^\\p{L}\\p{N}]+"}
    del old["mappings"]["_meta"]
    client = OpenSearchIndex(url, name)._client
    client.indices.delete(index=name)
    client.indices.create(index=name, body=old)
    doc = {"event_id": "ja", "thread_id": "t1", "window_id": "w0", "kind": "message", "tool_name": "",
           "project": "", "agent_id": "main", "repo_commit": "", "error_code": "", "ts": "2026-01-01T00:00:00Z",
           "ts_ms": 1767225600000, "offset": 1, "path": "", "text": WORD_SAMPLES[0], "terms": []}  # fmt: skip
    client.index(index=name, id="ja", body=doc, refresh=True)
    index = OpenSearchIndex(url, name)
    assert index.outdated_words and "agentlog rebuild" in index.warnings[0]
    assert index.search("東京", SearchFilters()) == []  # the whole sentence is one word there
    service = EmbeddedService(os_settings)
    try:
        assert any("agentlog rebuild" in w for w in service.search("東京")["warnings"])  # every answer says so
    finally:
        service.close()
    index.clear()  # what `agentlog rebuild` does first: the index is made again, with the current rule
    assert not index.outdated_words and index.warnings == []
    assert client.indices.get_mapping(index=name)[name]["mappings"]["_meta"] == {"words": WORDS_VERSION}
    index.add([doc])
    index.refresh()
    assert [h.event_id for h in index.search("東京", SearchFilters())] == ["ja"]
    assert not OpenSearchIndex(url, name).outdated_words  # opened again: current


def test_a_query_of_a_thousand_kanji_is_answered_on_opensearch(os_settings: Settings) -> None:
    service = EmbeddedService(os_settings)
    try:
        service.publish(raw("ja", "message", {"role": "user", "text": WORD_SAMPLES[0]}, 0))
        service.catch_up()
        query = "東京" + "".join(chr(0x4E00 + i) for i in range(1000))  # 2,000 clauses, were there one a word a field
        answer = service.search(query)
        assert [h["event_id"] for h in answer["hits"]] == ["ja"]
        assert any("only its first 256" in w for w in answer["warnings"])
    finally:
        service.close()
