"""The records of agentlog.accepted: what the processor forwards and the log sink writes."""

from __future__ import annotations

import orjson

from agentlog.processors.pipeline import MemorySeen, Pipeline, Record
from agentlog.streams.kafka.accepted import CHUNK_BYTES, by_partition, chunks, read_messages, write_log


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
    assert [item["event_id"] for item in groups[0]["items"]] == ["e1", "e3"]
    assert groups[0]["threads"] == {"t-a"} and groups[1]["threads"] == {"t-b"}
    assert [p["call_id"] for p in groups[0]["pairs"]] == ["c1"] and groups[1]["pairs"] == []
    item = groups[1]["items"][0]
    assert orjson.loads(item["row"]["raw"])["event_id"] == "e2" and item["row"]["offset"] == 20
    assert item["doc"]["text"] == "hello 2" and item["doc"]["thread_id"] == "t-b"


def test_items_are_chunked_in_order_under_the_message_limit_and_a_huge_one_travels_alone() -> None:
    def item(n: int) -> dict:
        return {"row": {"raw": "x" * n}, "doc": {"text": ""}}

    items = [item(200_000), item(200_000), item(200_000), item(2 * CHUNK_BYTES), item(10)]
    sizes = [[len(i["row"]["raw"]) for i in c] for c in chunks(items)]
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
    items = [{"event_id": i, "row": {"raw": i}} for i in ("a", "b", "a", "c")]
    log = FakeLog(logged={"c"})
    assert write_log(log, items, [{"call_id": "c1"}]) == 2
    assert [r["raw"] for r in log.rows] == ["a", "b"] and log.pairs == [{"call_id": "c1"}]


def test_accepted_messages_read_back_as_their_items_and_pairs_in_order() -> None:
    messages = [orjson.dumps({"items": [{"event_id": "a"}, {"event_id": "b"}], "pairs": [{"call_id": "c1"}]}),
                orjson.dumps({"items": [{"event_id": "c"}], "pairs": []})]  # fmt: skip
    items, pairs = read_messages(messages)
    assert [i["event_id"] for i in items] == ["a", "b", "c"] and pairs == [{"call_id": "c1"}]
