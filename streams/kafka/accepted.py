"""The records of the ``agentlog.accepted`` topic: built by the processor from a batch's
result, written to the log by the sink.

An item carries what the sinks need of an applied event, computed once by the processor
(which holds the parsed event): its ``events`` row and its search document. A message
holds one source partition's items (at most ``CHUNK_BYTES``) and its pair rows.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from typing import Any

import orjson

from agentlog.processors.pipeline import Applied, BatchResult
from agentlog.processors.records import log_row, search_doc
from agentlog.sinks.base import LogWriter, SearchIndex
from agentlog.streams.sink_guard import StoreUnavailable, write_isolating

# Accepted items travel in messages of at most this many bytes (one large event alone).
CHUNK_BYTES = 512 * 1024


def chunks(items: list[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    """Items in order, in runs of at most ``CHUNK_BYTES`` (an oversized item alone)."""
    chunk: list[dict[str, Any]] = []
    size = 0
    for item in items:
        n = len(item["row"]["raw"]) + len(item["doc"]["text"]) + 512
        if chunk and size + n > CHUNK_BYTES:
            yield chunk
            chunk, size = [], 0
        chunk.append(item)
        size += n
    if chunk:
        yield chunk


def sink_item(a: Applied) -> dict[str, Any]:
    """What the sinks need of an applied event, computed once by the processor (which has
    the parsed event): its ``events`` row and its search document."""
    r = a.record
    return {"event_id": a.event.event_id, "row": log_row(a.event, r.value, r.partition, r.offset, a.window_id),
            "doc": search_doc(a.event, r.offset, a.window_id, a.tool_name)}  # fmt: skip


def by_partition(result: BatchResult) -> dict[int, dict[str, Any]]:
    """The batch's outputs grouped by source partition: accepted items, pair rows,
    touched threads and the ids to remember."""
    out: dict[int, dict[str, Any]] = defaultdict(lambda: {"items": [], "pairs": [], "threads": set(), "ids": []})
    thread_partition: dict[str, int] = {}
    for a in result.applied:
        p = a.record.partition
        thread_partition[a.event.thread_id] = p
        group = out[p]
        group["items"].append(sink_item(a))
        group["threads"].add(a.event.thread_id)
        group["ids"].append(a.event.event_id)
    for record, event in result.replayed:
        out[record.partition]["ids"].append(event.event_id)
    for pair in result.pairs:
        out[thread_partition[pair.thread_id]]["pairs"].append(pair.row())
    return out


def read_messages(messages: list[bytes]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The items and pair rows of a run of accepted messages, in order."""
    bodies = [orjson.loads(m) for m in messages]
    return [item for body in bodies for item in body["items"]], [pair for body in bodies for pair in body["pairs"]]


def write_log(log_store: LogWriter, items: list[dict[str, Any]], pairs: list[dict[str, Any]]) -> int:
    """Write one batch of accepted items to the log: event rows (skipping ids already
    logged) and pair rows. Runs before the batch's offsets are committed; returns the
    rows written."""
    # Skip what the log holds, and a second copy within the batch: after a crash the
    # processor may forward an event again.
    seen = set(log_store.existing([item["event_id"] for item in items])) if items else set()
    rows = []
    for item in items:
        if item["event_id"] not in seen:
            seen.add(item["event_id"])
            rows.append(item["row"])
    log_store.append_events(rows)
    log_store.upsert_pairs(pairs)
    return len(rows)


def _item_raw(item: dict[str, Any]) -> bytes:
    return item["row"]["raw"].encode("utf-8")


def write_log_guarded(
    log_store: LogWriter, items: list[dict[str, Any]], pairs: list[dict[str, Any]]
) -> tuple[int, list[tuple[bytes, str]]]:
    """``write_log``, with the items the log refuses isolated: (rows written, dead letters
    of the refused items). A log that is down raises ``StoreUnavailable``."""
    written = [0]

    def write(some: Sequence[dict[str, Any]]) -> None:
        written[0] += write_log(log_store, list(some), [])

    letters = write_isolating("log", write, items, _item_raw)
    try:
        log_store.upsert_pairs(pairs)
    except Exception as error:  # noqa: BLE001 - pair rows are derived, never poison
        raise StoreUnavailable("log", error) from error
    return written[0], letters


def index_guarded(index: SearchIndex, items: list[dict[str, Any]]) -> list[tuple[bytes, str]]:
    """Index the items' documents; the dead letters of those the index refuses."""
    return write_isolating("index", lambda some: index.add([i["doc"] for i in some]), items, _item_raw)


__all__ = [
    "CHUNK_BYTES", "by_partition", "chunks", "index_guarded", "read_messages", "sink_item", "write_log",
    "write_log_guarded",
]  # fmt: skip
