"""The records of agentlog.accepted: what the processor forwards and the log sink writes."""

from __future__ import annotations

import orjson
import pytest

from agentlog.processors.pipeline import MemorySeen, Pipeline, Record
from agentlog.streams.kafka.accepted import (
    CHUNK_BYTES, Item, by_partition, chunks, encode_message, read_messages, write_log,
)  # fmt: skip


def event(i: int, thread: str, kind: str = "message", **payload: object) -> bytes:
    body = payload or {"role": "user", "text": f"hello {i}"}
    return orjson.dumps({"event_id": f"e{i}", "thread_id": thread, "kind": kind,
                         "ts": f"2026-11-30T12:00:{i:02d}Z", "payload": body})  # fmt: skip


def test_a_batch_is_grouped_by_source_partition_with_its_pairs_threads_and_ids() -> None:
    records = [
        Record(0, 10, event(1, "t-a", "tool_call", call_id="c1", tool_name="grep", arguments={"q": "x"})),
        Record(1, 20, event(2, "t-b")),
        Record(0, 11, event(3, "t-a", "tool_result", call_id="c1", status="ok", output="found")),
    ]
    groups = by_partition(Pipeline(MemorySeen()).process(records))
    assert sorted(groups) == [0, 1]
    assert [item.event_id for item in groups[0]["items"]] == ["e1", "e3"]
    assert groups[0]["threads"] == {"t-a"} and groups[1]["threads"] == {"t-b"}
    assert [p["call_id"] for p in groups[0]["pairs"]] == ["c1"] and groups[1]["pairs"] == []
    item = groups[1]["items"][0]
    row, doc = orjson.loads(item.row), orjson.loads(item.doc)
    assert orjson.loads(row["raw"])["event_id"] == "e2" and row["offset"] == 20
    assert doc["text"] == "hello 2" and doc["thread_id"] == "t-b"
    assert item.raw == event(2, "t-b")  # what a dead letter keeps: the event as published


def test_items_are_chunked_in_order_under_the_message_limit_and_a_huge_one_travels_alone() -> None:
    def item(n: int) -> Item:
        return Item("e", b"x" * n, b"{}")

    items = [item(200_000), item(200_000), item(200_000), item(2 * CHUNK_BYTES), item(10)]
    sizes = [[len(i.row) for i in c] for c in chunks(items)]
    assert sizes == [[200_000, 200_000], [200_000], [2 * CHUNK_BYTES], [10]]


class FakeLog:
    def __init__(self, logged: set[str]) -> None:
        self.logged = logged
        self.rows: list[dict] = []
        self.pairs: list[dict] = []

    def existing(self, ids: list[str]) -> list[str]:
        return [i for i in ids if i in self.logged]

    def append_events(self, rows: list[dict]) -> None:
        self.rows.extend(rows)

    def upsert_pairs(self, rows: list[dict]) -> None:
        self.pairs.extend(rows)


def test_the_log_sink_skips_events_already_logged_and_a_second_copy_in_the_batch() -> None:
    items = [Item(i, orjson.dumps({"raw": i}), b"{}") for i in ("a", "b", "a", "c")]
    log = FakeLog(logged={"c"})
    assert write_log(log, items, [{"call_id": "c1"}]) == 2
    assert [orjson.loads(orjson.dumps(r))["raw"] for r in log.rows] == ["a", "b"]
    assert log.pairs == [{"call_id": "c1"}]


def test_accepted_messages_read_back_as_their_items_and_pairs_in_order() -> None:
    records = [Record(0, i, event(i, "t-a", role="user", text=f"line one\nline two {i}")) for i in range(3)]
    items = by_partition(Pipeline(MemorySeen()).process(records))[0]["items"]
    messages = [encode_message(items[:2], [{"call_id": "c1"}]), encode_message(items[2:], [])]
    back, pairs = read_messages(messages)
    assert back == items and pairs == [{"call_id": "c1"}]
    assert orjson.loads(back[1].doc)["text"] == "line one\nline two 1"  # a newline in a text is escaped


def test_a_message_of_the_first_layout_one_json_object_still_reads_as_the_same_items() -> None:
    items = by_partition(Pipeline(MemorySeen()).process([Record(0, 1, event(1, "t-a"))]))[0]["items"]
    first_layout = orjson.dumps({"items": [{"event_id": i.event_id, "row": orjson.loads(i.row),
                                            "doc": orjson.loads(i.doc)} for i in items],
                                 "pairs": [{"call_id": "c9"}]})  # fmt: skip
    back, pairs = read_messages([first_layout])
    assert [(i.event_id, orjson.loads(i.row), orjson.loads(i.doc)) for i in back] == [
        (i.event_id, orjson.loads(i.row), orjson.loads(i.doc)) for i in items]
    assert pairs == [{"call_id": "c9"}]


@pytest.mark.parametrize("message", [
    b'{"v":2,"ids":["a","b"],"pairs":[]}\n{}\n{}',  # two items named, one held
    b'{"v":2,"ids":[],"pairs":[]}\n{}',  # a line no item owns
    b"not json\n{}\n{}",
])  # fmt: skip
def test_a_message_whose_lines_do_not_match_its_header_is_refused_not_misread(message: bytes) -> None:
    with pytest.raises(ValueError):
        read_messages([message])
