"""What a word is: one rule for the read-your-writes scan and the embedded index, and a
word inside a Chinese or Japanese sentence is found (each such character is a word)."""

from __future__ import annotations

import subprocess
import sys
import unicodedata
from pathlib import Path
from typing import Any

import orjson

import pytest
import tantivy
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agentlog.processors.recall import recall_query
from collections import Counter

from agentlog.processors.words import MAX_QUERY_WORDS, is_one_character_word, query_words, tokenize, word_counts
from agentlog.sinks.tantivy_index import _words_analyzer
from agentlog.schemas.tables import SEARCH_FIELDS
from agentlog.streams.api.context import context_for
from agentlog.streams.config import Settings
from agentlog.streams.embedded.service import EmbeddedService
from tests.helpers import raw

JA = "東京に行きました。サーバーの設定を確認してください"
ZH = "数据库连接超时，请检查配置文件"

# Letters and digits of many scripts, CJK at its range edges, marks, punctuation, the
# underscore, long runs: where two regex engines could disagree.
_ALPHABET = st.sampled_from(list(
    "aZ9_ -.:/\n\tÉéßİıΣςЖж١٢½①ⅫĀ̀\u0301\u200d한국어단어ก่า"
    "東京大阪々〆〇ぁゖゝゞゟァヺー・ヿㇰㇿ㐀䶿一鿿豈﫿ｦﾝﾞﾟ𠀀𪛖𱍊、。！？「」"
))  # fmt: skip


def _assigned(text: str) -> str:
    """Characters this Python's Unicode database knows: one assigned since (tantivy's regex
    crate follows a newer Unicode) may be a letter there and unassigned here."""
    return "".join(c for c in text if unicodedata.category(c) != "Cn")


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(_ALPHABET, st.text(min_size=1, max_size=3)), max_size=80).map("".join).map(_assigned))
@example("a" * 40 + " " + "b" * 41 + " " + "é" * 20 + " " + "é" * 21)
@example(JA + " " + ZH + " Hello_World ERR_042")
def test_the_index_splits_text_into_the_same_words_as_the_read_your_writes_scan(text: str) -> None:
    assert _words_analyzer().analyze(text) == tokenize(text)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_ALPHABET, st.text(min_size=1, max_size=3)), max_size=120).map("".join))
@example("ΟΔΟΣ 東京 Σa " + "é" * 21 + " ・ー")
def test_word_counts_are_the_counts_of_the_words(text: str) -> None:
    assert word_counts(text) == Counter(tokenize(text))


def test_a_query_looks_for_each_word_once_and_its_first_256_only() -> None:
    assert query_words("cache miss cache MISS") == ["cache", "miss"]
    many = "".join(chr(0x4E00 + i) for i in range(1000))
    assert query_words(many) == [chr(0x4E00 + i) for i in range(MAX_QUERY_WORDS)]


def test_each_chinese_or_japanese_character_is_a_word_and_punctuation_is_not() -> None:
    assert tokenize("東京に行きました") == ["東", "京", "に", "行", "き", "ま", "し", "た"]
    assert tokenize("サーバー・設定") == ["サ", "ー", "バ", "ー", "設", "定"]  # the middle dot separates
    assert tokenize("한국어 단어 Hello_World") == ["한국어", "단어", "hello", "world"]  # Hangul keeps its words
    assert is_one_character_word("東") and not is_one_character_word("a") and not is_one_character_word("東京")


def test_a_word_longer_than_forty_bytes_is_not_a_word() -> None:
    assert tokenize("a" * 40) == ["a" * 40] and tokenize("a" * 41) == []
    assert tokenize("é" * 20) == ["é" * 20] and tokenize("é" * 21) == []  # two bytes each


def test_a_question_in_japanese_searches_for_its_kanji_and_katakana_not_its_particles() -> None:
    query = recall_query({"thread_id": "t1"}, "すみません、以前に話していた件ですが、本番サーバーのパスワードはどこですか？", None)
    assert set("本番サバパスワド以前話件").issubset(query.split())
    assert not set("すみませのはどこでか").intersection(query.split())  # particles and endings match everything
    assert recall_query({"thread_id": "t1"}, "ありがとう", None).split() == list("ありがとう")  # nothing else to go on
    assert "的" not in recall_query({"thread_id": "t1"}, "数据库的配置在哪里", None).split()


@pytest.fixture
def service(tmp_path: Path) -> EmbeddedService:
    s = EmbeddedService(Settings(data_dir=tmp_path / "data"))
    yield s
    s.close()


def _ids(answer: dict) -> list[str]:
    return [h["event_id"] for h in answer["hits"]]


def test_a_word_inside_a_japanese_sentence_is_found_before_and_after_it_is_indexed(service: EmbeddedService) -> None:
    service.publish(b"\n".join([raw("ja", "message", {"role": "user", "text": JA}, 0),
                                raw("zh", "message", {"role": "user", "text": ZH}, 1),
                                raw("en", "message", {"role": "user", "text": "tokyo is far"}, 2)]))  # fmt: skip
    active = service.search("東京", thread_id="t1", drain=False)  # nothing written to the index yet
    assert _ids(active) == ["ja"] and active["hits"][0]["source"] == "active"
    indexed = service.search("東京")
    assert _ids(indexed) == ["ja"] and indexed["hits"][0]["source"] == "index"
    assert _ids(service.search("配置")) == ["zh"]
    assert _ids(service.search("設定")) == ["ja"]  # both sentences hold no other 設 or 定


def test_recall_brings_back_the_japanese_message_that_answers_the_question(service: EmbeddedService) -> None:
    service.publish(b"\n".join([
        raw("g", "goal", {"text": "リリースを出す"}, 0),
        raw("m1", "message", {"role": "user", "text": "デプロイ先は大阪のクラスタです"}, 1),
        *[raw(f"a{i}", "message", {"role": "assistant", "text": f"了解しました {i}"}, 2 + i) for i in range(5)],
        raw("ws", "window_switch", {"new_window_id": "w2"}, 20),
        raw("ask", "message", {"role": "user", "text": "デプロイ先はどこでしたか？"}, 21),
    ]))  # fmt: skip
    service.catch_up()
    ctx = context_for(service, "t1", 4000)
    recalled = next(s for s in ctx["sections"] if s["name"] == "recall")["hits"]
    assert recalled and recalled[0] == "m1"


def test_a_query_of_a_thousand_kanji_is_answered_and_says_what_was_searched(service: EmbeddedService) -> None:
    service.publish(raw("ja", "message", {"role": "user", "text": JA}, 0))
    query = "".join(chr(0x4E00 + i) for i in range(1000)) + "東京"
    for answer in (service.search(query, thread_id="t1", drain=False), service.search(query)):
        assert any(f"{len(set(query)):,} distinct words: only its first 256" in w for w in answer["warnings"])
    assert service.search("東京 東京")["warnings"] == []


def test_recall_of_a_japanese_question_is_not_led_by_messages_that_share_only_particles(service: EmbeddedService) -> None:
    unrelated = ["今日はいい天気ですね", "それはどうですか", "ランチは何にしますか", "会議は何時からですか",
                 "それでいいですか", "明日はどこに行きますか", "これは何ですか", "そうですね、わかりました"]  # fmt: skip
    service.publish(b"\n".join([
        raw("ans", "message", {"role": "user", "text": "本番サーバーのパスワードは金庫の prod/db にあります。"}, 0),
        *[raw(f"u{i}", "message", {"role": "user", "text": t}, 1 + i) for i, t in enumerate(unrelated)],
        raw("ws", "window_switch", {"new_window_id": "w2"}, 20),
        raw("ask", "message", {"role": "user", "text": "すみません、本番サーバーのパスワードはどこですか？"}, 21),
    ]))  # fmt: skip
    service.catch_up()
    recalled = next(s for s in context_for(service, "t1", 700)["sections"] if s["name"] == "recall")["hits"]
    assert recalled[0] == "ans" and not set(recalled) & {f"u{i}" for i in range(8)}


def _older_rule_index(index_dir: Path) -> Any:
    """The index as the older rule wrote it (tantivy's default analyzer), holding JA."""
    for f in index_dir.iterdir():
        f.unlink() if f.is_file() else None
    builder = tantivy.SchemaBuilder()
    for f in SEARCH_FIELDS:
        if f.type == "long":
            builder.add_integer_field(f.name, stored=f.stored, indexed=True, fast=True)
        else:
            builder.add_text_field(f.name, stored=f.stored, tokenizer_name="default" if f.type == "text" else "raw")
    old = tantivy.Index(builder.build(), path=str(index_dir))
    writer = old.writer()
    writer.add_document(tantivy.Document(event_id="ja", thread_id="t1", text=JA, offset=1))
    writer.commit()
    writer.wait_merging_threads()
    return old


def test_an_index_that_split_words_by_the_older_rule_is_rebuilt_from_the_topic(tmp_path: Path,
                                                                               capfd: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    settings_ = Settings(data_dir=tmp_path / "data")
    service = EmbeddedService(settings_)
    service.publish(raw("ja", "message", {"role": "user", "text": JA}, 0))
    service.catch_up()
    service.close()
    old = _older_rule_index(settings_.path("index"))
    assert old.searcher().search(old.parse_query("東京", ["text"]), 5).count == 0  # the old rule: one long word
    del old
    service = EmbeddedService(settings_)
    try:
        notice = capfd.readouterr().err
        assert "index/ was made by an older version (" in notice and "older rule" in notice, notice
        assert "safe to delete" in notice and "(default)" not in notice
        assert [p.name.startswith("index.outdated-") for p in settings_.data_dir.iterdir()].count(True) == 1
        found = service.search("東京")
        assert _ids(found) == ["ja"] and found["hits"][0]["source"] == "index"
    finally:
        service.close()


@pytest.mark.parametrize("meta", [b"{not json", b"[]", b'{"schema": 7}', b'{"schema": [1, 2]}',
                                  b'{"schema": [{"name": "text", "options": 5}]}', b'{"schema": [{}]}'])  # fmt: skip
def test_an_index_whose_meta_json_is_not_an_index_is_moved_aside_and_rebuilt(tmp_path: Path, meta: bytes) -> None:
    settings_ = Settings(data_dir=tmp_path / "data")
    service = EmbeddedService(settings_)
    service.publish(raw("ja", "message", {"role": "user", "text": JA}, 0))
    service.catch_up()
    service.close()
    (settings_.path("index") / "meta.json").write_bytes(meta)
    service = EmbeddedService(settings_)
    try:
        assert _ids(service.search("東京")) == ["ja"]
        assert any(p.name.startswith("index.corrupt-") for p in settings_.data_dir.iterdir())
    finally:
        service.close()


def test_a_query_of_bytes_that_are_not_utf8_gets_the_same_answer_with_a_server_as_without(
        cli_env: dict[str, str], start_server: Any) -> None:  # fmt: skip
    def search(env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([sys.executable, "-m", "agentlog", "search", b"\xff\xfe", "--json"], env=env,
                              capture_output=True, timeout=120, check=False)  # fmt: skip

    subprocess.run([sys.executable, "-m", "agentlog", "publish", "-"], env=cli_env, check=True, timeout=120,
                   input=raw("ja", "message", {"role": "user", "text": JA}, 0))  # fmt: skip
    alone = search(cli_env)
    _url, env = start_server()
    served = search(env)
    assert alone.returncode == served.returncode == 0, (alone.stderr, served.stderr)
    for answer in (alone, served):
        found = orjson.loads(answer.stdout)
        assert [h["event_id"] for h in found["hits"]] == ["ja"] and "holds no word" in found["warnings"][-1]


def test_a_kafka_worker_on_an_older_rule_index_says_to_rebuild_and_a_rebuild_remakes_it(tmp_path: Path,
                                                                                       capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    from agentlog.streams.kafka.app import run_worker
    from agentlog.streams.wiring import open_search_index, outdated_index

    settings_ = Settings(data_dir=tmp_path / "worker", kafka_bootstrap="127.0.0.1:9")  # never reached
    settings_.path("index").mkdir()
    _older_rule_index(settings_.path("index"))
    assert "older rule" in (outdated_index(settings_) or "")
    assert run_worker(settings_) == 2  # refused before any broker is asked
    assert "run `agentlog rebuild`" in capsys.readouterr().err
    index = open_search_index(settings_, remake_outdated=True)  # what a rebuild opens
    try:
        assert outdated_index(settings_) is None
        assert [p.name.startswith("index.outdated-") for p in settings_.data_dir.iterdir()].count(True) == 1
    finally:
        index.close()


def test_a_kafka_query_with_no_worker_on_an_older_rule_index_says_what_to_do(cli_env: dict[str, str]) -> None:
    index_dir = Path(cli_env["AGENTLOG_DATA_DIR"]) / "index"
    index_dir.mkdir(parents=True)
    _older_rule_index(index_dir)
    env = {**cli_env, "AGENTLOG_KAFKA_BOOTSTRAP": "127.0.0.1:9", "AGENTLOG_HTTP_PORT": "9"}  # nothing answers there
    done = subprocess.run([sys.executable, "-m", "agentlog", "search", "東京"], env=env, capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 1 and "older rule: stop the workers and run `agentlog rebuild`" in done.stderr
    assert "Traceback" not in done.stderr
