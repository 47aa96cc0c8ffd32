"""The immutable log in ClickHouse: a server over HTTP or chDB in-process, one adapter.

clickhouse-connect speaks to both (``interface="chdb"`` runs the ClickHouse engine in
this process), so the DDL, the inserts and every analyst query are the same SQL.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from typing import Any

import clickhouse_connect
import orjson
from clickhouse_connect.driver.exceptions import ClickHouseError

from schemas.tables import DDL, MEMORY_DDL, REJECTED_COLUMNS
from sinks.base import LoggedEvent, QueryResult, StoreError, redact_url

REPLAY_PAGE = 5000
"""Rows a replay reads per query (one page is held in memory at a time)."""

_INSERT_SETTINGS = {"date_time_input_format": "best_effort", "input_format_skip_unknown_fields": 1}


class ClickHouseLogStore:
    """``LogStore`` on ClickHouse. Thread-safe: one lock serialises the client."""

    def __init__(self, client: Any, description: str) -> None:
        self._client = client
        self._lock = threading.Lock()
        self.description = description
        for statement in (*DDL, *MEMORY_DDL):
            self._client.command(statement)

    @classmethod
    def open(cls, url: str | None = None, path: str | None = None, **kwargs: Any) -> ClickHouseLogStore:
        """A server when ``url`` is given (``http[s]://user:pass@host:port/db``), else chDB at ``path``."""
        if url:
            try:
                client = clickhouse_connect.get_client(dsn=url, **kwargs)
            except Exception as error:  # noqa: BLE001 - the driver raises many kinds
                raise StoreError(
                    f"cannot reach ClickHouse at {redact_url(url)}: {error}. Check AGENTLOG_CLICKHOUSE_URL "
                    "or unset it to use the embedded chDB log."
                ) from error
            return cls(client, f"ClickHouse server {url.split('@')[-1]}")
        if path is None:
            raise StoreError("the chDB log needs a data directory")
        try:
            client = clickhouse_connect.get_client(interface="chdb", path=path)
        except Exception as error:  # noqa: BLE001
            raise StoreError(f"cannot open the chDB log in {path}: {error}") from error
        return cls(client, f"chDB {path}")

    # -- writes -----------------------------------------------------------------------

    def _insert_json(self, table: str, rows: Sequence[dict[str, Any]]) -> None:
        if not rows:
            return
        body = b"\n".join(orjson.dumps(r) for r in rows)
        with self._lock:
            self._client.raw_insert(table, None, body, settings=_INSERT_SETTINGS, fmt="JSONEachRow")

    def append_events(self, rows: Sequence[dict[str, Any]]) -> None:
        self._insert_json("events", rows)

    def upsert_pairs(self, rows: Sequence[dict[str, Any]]) -> None:
        self._insert_json("tool_calls", rows)

    def append_rejected(self, rows: Sequence[dict[str, Any]]) -> None:
        # Rejected bytes need not be UTF-8 (or JSON): insert them as binary column data.
        if not rows:
            return
        data = [[r[c] for c in REJECTED_COLUMNS] for r in rows]
        with self._lock:
            self._client.insert("rejected_events", data, column_names=list(REJECTED_COLUMNS))

    # -- reads ------------------------------------------------------------------------

    def _query(self, sql: str, parameters: dict[str, Any] | None = None, **kw: Any) -> Any:
        with self._lock:
            return self._client.query(sql, parameters=parameters, **kw)

    def high_water(self, table: str) -> dict[int, int]:
        if table not in ("events", "rejected_events"):
            raise ValueError(table)
        result = self._query(f"SELECT partition, max(offset) FROM {table} GROUP BY partition")
        return {int(p): int(o) for p, o in result.result_rows}

    def get(self, event_id: str) -> LoggedEvent | None:
        result = self._query(
            "SELECT event_id, thread_id, raw, partition, offset FROM events "
            "WHERE event_id = {e:String} LIMIT 1",
            {"e": event_id},
            column_formats={"raw": "bytes"},
        )
        if not result.result_rows:
            return None
        return LoggedEvent(*result.result_rows[0])

    def thread_tail(self, thread_id: str, after: int, limit: int) -> list[LoggedEvent]:
        result = self._query(
            "SELECT event_id, thread_id, raw, partition, offset FROM events "
            "WHERE thread_id = {t:String} AND offset > {o:Int64} ORDER BY offset DESC LIMIT {n:UInt32}",
            {"t": thread_id, "o": after, "n": limit},
            column_formats={"raw": "bytes"},
        )
        return [LoggedEvent(*row) for row in reversed(result.result_rows)]

    def replay(self, thread_id: str | None = None, page: int = REPLAY_PAGE) -> Iterator[LoggedEvent]:
        """Every logged event (or one thread's) in sort-key order, read in pages.

        The lock is held per page, never across a ``yield``: a replay writes pair rows
        through this same store between pages (holding it across the stream deadlocked
        ``rebuild`` at its first flush). Paging by the sort key ``(thread_id, partition,
        offset)`` reads each page from its own range of the table, and holds one page in
        memory, however long the log.
        """
        where = "thread_id = {t:String} AND " if thread_id else ""
        sql = (
            "SELECT event_id, thread_id, raw, partition, offset FROM events "
            f"WHERE {where}thread_id >= {{at_t:String}} "
            "AND (thread_id, partition, offset) > ({at_t:String}, {at_p:UInt32}, {at_o:Int64}) "
            "ORDER BY thread_id, partition, offset LIMIT {n:UInt32}"
        )
        after: tuple[str, int, int] = ("", 0, -1)
        while True:
            params = {"t": thread_id or "", "at_t": after[0], "at_p": after[1], "at_o": after[2], "n": page}
            rows = self._query(sql, params, column_formats={"raw": "bytes"}).result_rows
            for row in rows:
                yield LoggedEvent(*row)
            if len(rows) < page:
                return
            last = rows[-1]
            after = (last[1], int(last[3]), int(last[4]))

    def append_memory(self, candidates: Sequence[dict[str, Any]], facts: Sequence[dict[str, Any]]) -> None:
        self._insert_json("memory_candidates", candidates)
        self._insert_json("memory_facts", facts)

    def memory_high_water(self) -> tuple[int, int]:
        """(highest candidate seq, highest view version) already mirrored."""
        seq = self._query("SELECT max(seq) FROM memory_candidates").result_rows[0][0]
        version = self._query("SELECT max(version) FROM memory_facts").result_rows[0][0]
        return int(seq or 0), int(version or 0)

    def existing(self, event_ids: Sequence[str]) -> list[str]:
        """Which of ``event_ids`` the log already holds (idempotent writers skip them)."""
        result = self._query(
            "SELECT DISTINCT event_id FROM events WHERE event_id IN {ids:Array(String)}", {"ids": list(event_ids)}
        )
        return [r[0] for r in result.result_rows]

    def rejected(self) -> list[tuple[bytes, str]]:
        """Every dead-lettered record, its original bytes and its reason, oldest first."""
        result = self._query(
            "SELECT raw, reason FROM rejected_events ORDER BY partition, offset",
            column_formats={"raw": "bytes"},
        )
        return [(bytes(r), str(why)) for r, why in result.result_rows]

    def count_events(self) -> int:
        return int(self._query("SELECT count() FROM events").result_rows[0][0])

    def query(self, sql: str, readonly: bool = True) -> QueryResult:
        try:
            result = self._query(sql, settings={"readonly": 1} if readonly else None)
        except ClickHouseError as error:
            raise StoreError(str(error).strip().splitlines()[0][:2000]) from error
        return QueryResult(list(result.column_names), [tuple(r) for r in result.result_rows])

    def truncate_derived(self) -> None:
        with self._lock:
            self._client.command("TRUNCATE TABLE tool_calls")

    def close(self) -> None:
        with self._lock:
            self._client.close()


def rejected_row(raw: bytes, reason: str, partition: int, offset: int, at: float) -> dict[str, Any]:
    """A row of ``rejected_events``; ``at`` is when the record was dead-lettered (epoch s)."""
    return {
        "raw": raw,
        "reason": reason,
        "rejected_at": datetime.fromtimestamp(at, timezone.utc),
        "partition": partition,
        "offset": offset,
    }


__all__ = ["ClickHouseLogStore", "rejected_row"]
