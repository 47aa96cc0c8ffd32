"""The Kafka processor's dedup ids: one table entry per processed batch and partition.

One changelog record per batch (key ``"partition:last offset"``, value the JSON list of
the event ids it applied) instead of one per event; the ids are indexed in memory on
first use after an assignment. Without a bound both would grow with every event ever
seen, so entries more than ``horizon`` source offsets behind their partition's newest
batch are forgotten (deleted from the table, so the changelog gets a tombstone and
compaction drops them). A duplicate that arrives within the horizon is always caught;
one published again more than ``horizon`` records later in its partition would be
applied again (the log still keeps one row: its sink skips ids already logged).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, MutableMapping, Sequence

import orjson

DEFAULT_HORIZON = 1_000_000
"""Source records per partition: at about 150 bytes of memory per id, 150 MB each."""

_PENDING = ""  # the batch key of ids applied but not yet written


def batch_key(partition: int, offset: int) -> str:
    return f"{partition}:{offset}"


def _parse_key(key: str) -> tuple[int, int]:
    partition, _, offset = key.partition(":")
    return int(partition), int(offset)


class BatchSeen:
    """``SeenIds`` over a table (a faust ``Table``'s ``data``, or any mapping)."""

    def __init__(self, data: MutableMapping[str, bytes], horizon: int = DEFAULT_HORIZON) -> None:
        self.data = data
        self.horizon = horizon
        self._ids: dict[str, str] | None = None  # id -> key of the newest batch holding it
        self._batches: dict[int, deque[tuple[int, str]]] = {}  # partition -> (offset, key), ascending

    def _index(self) -> dict[str, str]:
        if self._ids is None:
            ids: dict[str, str] = {}
            batches: dict[int, deque[tuple[int, str]]] = {}
            # items(), not a lookup per key: a partitioned store can read every partition's
            # entries that way without the current event naming one.
            entries = sorted((_parse_key(k), k, v) for k, v in self.data.items())
            for (partition, offset), key, value in entries:
                batches.setdefault(partition, deque()).append((offset, key))
                for i in orjson.loads(value):
                    ids[i] = key  # ascending offsets: the newest batch wins
            self._ids, self._batches = ids, batches
        return self._ids

    def unseen(self, ids: Sequence[str]) -> set[str]:
        known = self._index()
        return {i for i in ids if i not in known}

    def add(self, ids: Iterable[str]) -> None:
        known = self._index()
        for i in ids:
            known[i] = _PENDING

    def batch_written(
        self, partition: int, offset: int, ids: Sequence[str]
    ) -> list[tuple[str, bytes | None]]:
        """Record a partition's batch ending at ``offset``; returns the changelog records
        to send: the new entry, and a tombstone for each entry now beyond the horizon."""
        known = self._index()
        key = batch_key(partition, offset)
        value = orjson.dumps(list(ids))
        self.data[key] = value
        for i in ids:
            known[i] = key
        batches = self._batches.setdefault(partition, deque())
        if not batches or batches[-1][0] < offset:
            batches.append((offset, key))
        records: list[tuple[str, bytes | None]] = [(key, value)]
        while len(batches) > 1 and batches[0][0] < offset - self.horizon:
            _, old = batches.popleft()
            for i in orjson.loads(self.data.pop(old, b"[]")):
                if known.get(i) == old:
                    del known[i]
            records.append((old, None))
        return records

    def forget(self) -> None:
        """Drop the in-memory index (after a rebalance); the table is the durable copy."""
        self._ids = None
        self._batches = {}

    def last_offset(self, partition: int) -> int | None:
        """The last source offset of the last batch processed for a partition."""
        self._index()
        batches = self._batches.get(partition)
        return batches[-1][0] if batches else None

    def __len__(self) -> int:
        """Ids indexed in memory (none before first use: a health check must not index a
        table still being restored)."""
        return 0 if self._ids is None else len(self._ids)


__all__ = ["DEFAULT_HORIZON", "BatchSeen", "batch_key"]
