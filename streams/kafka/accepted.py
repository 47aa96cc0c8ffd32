"""The records of the ``agentlog.accepted`` topic: built by the processor from a batch's
result, written to the log and the index by the sinks.

An item carries what the sinks need of an applied event, computed once by the processor
(which holds the parsed event): its ``events`` row and its search document, each already
encoded as JSON. A message holds one source partition's items (at most ``CHUNK_BYTES``)
and its pair rows, as lines: a header (``v``, the items' ids, the pair rows), then each
item's row and document. A sink slices the lines it needs and hands them to its store
as they are: parsing whole messages into dicts, in each of the two sinks, only to encode
them again, was a fifth of the sink process's CPU. (orjson never writes a raw newline,
so a line is a whole JSON value; a message of the first layout, one JSON object, is
still read.)
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from agentlog.processors.pipeline import Applied, BatchResult
from agentlog.processors.records import log_row, search_doc
from agentlog.sinks.base import LogWriter, SearchIndex
from agentlog.streams.sink_guard import StoreUnavailable, write_isolating

# Accepted items travel in messages of at most this many bytes (one large event alone).
CHUNK_BYTES = 512 * 1024
LAYOUT = 2
"""The message layout written (``v`` in the header line)."""


@dataclass(frozen=True, slots=True)
class Item:
    """One applied event as the sinks need it: its id, its ``events`` row and its search
    document, each as JSON."""

    event_id: str
    row: bytes
    doc: bytes

    @property
    def raw(self) -> bytes:
        """The event as published (what a dead letter keeps): parsed only for a refusal."""
        return orjson.loads(self.row)["raw"].encode("utf-8")


def chunks(items: list[Item]) -> Iterator[list[Item]]:
    """Items in order, in runs of at most ``CHUNK_BYTES`` (an oversized item alone)."""
    chunk: list[Item] = []
    size = 0
    for item in items:
        n = len(item.row) + len(item.doc) + 64
        if chunk and size + n > CHUNK_BYTES:
            yield chunk
            chunk, size = [], 0
        chunk.append(item)
        size += n
    if chunk:
        yield chunk


def sink_item(a: Applied) -> Item:
    """What the sinks need of an applied event, computed once by the processor (which has
    the parsed event): its ``events`` row and its search document."""
    r = a.record
    return Item(a.event.event_id, orjson.dumps(log_row(a.event, r.value, r.partition, r.offset, a.window_id)),
                orjson.dumps(search_doc(a.event, r.offset, a.window_id, a.tool_name)))  # fmt: skip


def encode_message(items: Sequence[Item], pairs: Sequence[dict[str, Any]]) -> bytes:
    """One accepted message: the header line, then each item's row and document lines."""
    header = orjson.dumps({"v": LAYOUT, "ids": [i.event_id for i in items], "pairs": pairs})
    return b"\n".join([header, *(line for i in items for line in (i.row, i.doc))])


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


def read_messages(messages: list[bytes]) -> tuple[list[Item], list[dict[str, Any]]]:
    """The items and pair rows of a run of accepted messages, in order."""
    items: list[Item] = []
    pairs: list[dict[str, Any]] = []
    for message in messages:
        lines = message.split(b"\n")
        header = orjson.loads(lines[0])
        if "v" not in header:  # the first layout: the message is one JSON object
            items += [Item(i["event_id"], orjson.dumps(i["row"]), orjson.dumps(i["doc"])) for i in header["items"]]
            pairs += header["pairs"]
            continue
        ids = header["ids"]
        if len(lines) != 1 + 2 * len(ids):
            raise ValueError(f"an accepted message of layout {header.get('v')} names {len(ids)} items "
                             f"but holds {len(lines) - 1} lines")  # fmt: skip
        items += [Item(event_id, lines[1 + 2 * n], lines[2 + 2 * n]) for n, event_id in enumerate(ids)]
        pairs += header["pairs"]
    return items, pairs


def write_log(log_store: LogWriter, items: list[Item], pairs: list[dict[str, Any]]) -> int:
    """Write one batch of accepted items to the log: event rows (skipping ids already
    logged) and pair rows. Runs before the batch's offsets are committed; returns the
    rows written."""
    # Skip what the log holds, and a second copy within the batch: after a crash the
    # processor may forward an event again.
    seen = set(log_store.existing([item.event_id for item in items])) if items else set()
    rows = []
    for item in items:
        if item.event_id not in seen:
            seen.add(item.event_id)
            rows.append(orjson.Fragment(item.row))
    log_store.append_events(rows)
    log_store.upsert_pairs(pairs)
    return len(rows)


def _item_raw(item: Item) -> bytes:
    return item.raw


def write_log_guarded(
    log_store: LogWriter, items: list[Item], pairs: list[dict[str, Any]]
) -> tuple[int, list[tuple[bytes, str]]]:
    """``write_log``, with the items the log refuses isolated: (rows written, dead letters
    of the refused items). A log that is down raises ``StoreUnavailable``."""
    written = [0]

    def write(some: Sequence[Item]) -> None:
        written[0] += write_log(log_store, list(some), [])

    letters = write_isolating("log", write, items, _item_raw)
    try:
        log_store.upsert_pairs(pairs)
    except Exception as error:  # noqa: BLE001 - pair rows are derived, never poison
        raise StoreUnavailable("log", error) from error
    return written[0], letters


def index_guarded(index: SearchIndex, items: list[Item]) -> list[tuple[bytes, str]]:
    """Index the items' documents; the dead letters of those the index refuses."""
    return write_isolating("index", lambda some: index.add_encoded([(i.event_id, i.doc) for i in some]), items,
                           _item_raw)  # fmt: skip


__all__ = [
    "CHUNK_BYTES", "Item", "by_partition", "chunks", "encode_message", "index_guarded", "read_messages", "sink_item",
    "write_log", "write_log_guarded",
]  # fmt: skip
