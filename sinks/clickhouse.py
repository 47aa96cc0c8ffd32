"""The immutable log in ClickHouse: a server over HTTP or chDB in-process, one adapter.

clickhouse-connect speaks to both (``interface="chdb"`` runs the ClickHouse engine in
this process), so the DDL, the inserts and every analyst query are the same SQL.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import clickhouse_connect
import orjson
from clickhouse_connect.driver.exceptions import ClickHouseError

from agentlog.schemas.tables import DDL, MEMORY_DDL, REJECTED_COLUMNS
from agentlog.sinks.base import LoggedEvent, LogStore, QueryResult, StoreError, redact_url
from agentlog.sinks.sql_sandbox import (
    EXPLAIN_FORMAT, FunctionCatalogue, SqlBusy, SqlLimits, SqlPolicy, SqlRefused, user_syntax_error,
)  # fmt: skip

_RESULT_FORMAT = "JSONCompact"
"""Analyst results come back as bytes first, so their size is checked before decoding."""

_MAX_DECODED_VALUES = 5_000_000
"""Python objects a result may decode to (a 64 MiB body of empty arrays would be 21 million
lists, gigabytes in Python): counted from the body's separators, before decoding."""

REPLAY_PAGE = 5000
"""Rows a replay reads per query (one page is held in memory at a time)."""

_INSERT_SETTINGS = {"date_time_input_format": "best_effort", "input_format_skip_unknown_fields": 1}
# An agent's group commit is a few dozen rows: parsed on the writing thread, not fanned out
# to a pool (under `agentlog run` the pool's threads took 0.7 s of CPU per 2,000 agent steps
# from the core the server answers on). A catch-up's or a Kafka batch's thousands keep the
# parallel parsing: without it the Kafka deployment's end-to-end rate halved (9,201 -> 4,860
# events/s, measured side by side).
_SMALL_INSERT_SETTINGS = {**_INSERT_SETTINGS, "input_format_parallel_parsing": 0, "max_insert_threads": 1,
                          "max_threads": 1}
SMALL_INSERT_ROWS = 1000
"""Inserts of fewer rows than this are parsed on the writing thread."""


_OWN_FORMAT = re.compile(rf"\n ?FORMAT (?:{EXPLAIN_FORMAT}|{_RESULT_FORMAT})\b")


class AnalystSql:
    """Analyst queries through the sandbox (``agentlog.sinks.sql_sandbox``), on a connection of their
    own: nothing an analyst sends can leave state on the ingestion connection, and a slow
    query never holds the writers' lock."""

    def __init__(self, connect: Callable[[], Any], limits: SqlLimits, restricted_user: bool = False) -> None:
        self._connect = connect
        self._limits = limits
        self._clause = limits.settings_clause(readonly=not restricted_user)
        self._client: Any = None
        self._catalogue: FunctionCatalogue | None = None
        self._lock = threading.Lock()

    def run(self, sql: str) -> QueryResult:
        statement = sql.strip().rstrip(";").rstrip()
        if not statement:
            raise SqlRefused("the query is empty; write one SELECT over events, tool_calls or rejected_events")
        if len(statement) > self._limits.max_query_chars:
            raise SqlRefused(f"the query is over {self._limits.max_query_chars:,} characters")
        if "\x00" in statement:
            raise SqlRefused("the query holds a NUL character")
        # One analyst query at a time on the connection; a caller waits at most for one
        # query's time limit (plus a margin), then is told to come back.
        if not self._lock.acquire(timeout=self._limits.timeout_seconds + 5):
            raise SqlBusy("another analyst query is still running; try again in a few seconds")
        try:
            client = self._open()
            tree = self._explain(client, statement)
            self._policy_for(client).check(tree)
            try:
                body = client.raw_query(f"{statement}\n{self._clause}", fmt=_RESULT_FORMAT)
            except ClickHouseError as error:
                # A query stopped mid-stream can leave the handle answering nothing: the
                # next query gets a fresh one.
                self._reset()
                message = self._say(str(error))
                if "Syntax error" in message:  # at the sandbox's limits clause, after the user's text
                    raise SqlRefused(user_syntax_error(message, "", len(statement))) from error
                raise StoreError(message) from error
        finally:
            self._lock.release()
        return self._decode(bytes(body))

    def _decode(self, body: bytes) -> QueryResult:
        """The result as rows, once its size is known to be within the limit (the engine
        does not apply ``max_result_bytes`` to what it hands back in-process)."""
        too_large = self._limits.explain("TOO_MANY_ROWS_OR_BYTES") or "the result is too large"
        if len(body) > self._limits.max_result_bytes:
            raise StoreError(too_large)
        if body.count(b",") + body.count(b"[") + body.count(b"{") > _MAX_DECODED_VALUES:
            raise StoreError(f"{too_large} (it holds over {_MAX_DECODED_VALUES:,} values)")
        try:
            try:
                result = orjson.loads(body)
            except orjson.JSONDecodeError:  # an integer beyond 64 bits (UInt128, Int256), or deep nesting
                result = json.loads(body)
        except (RecursionError, ValueError) as error:
            raise StoreError(f"the result cannot be returned: {str(error)[:200]} (it nests too deeply?)") from error
        columns = [str(c["name"]) for c in result["meta"]]
        return QueryResult(columns, [tuple(row) for row in result["data"]])

    def _open(self) -> Any:
        if self._client is None:
            self._client = self._connect()
        return self._client

    def _reset(self) -> None:
        if self._client is not None:
            try:
                self._client.close()
            except Exception:  # noqa: BLE001 - a broken handle may fail to close; it is dropped anyway
                pass
            self._client = None

    def _explain(self, client: Any, statement: str) -> str:
        """The engine's own parse of ``statement`` (nothing runs)."""
        prefix = "EXPLAIN AST\n"
        try:
            raw = client.raw_query(f"{prefix}{statement}\nFORMAT {EXPLAIN_FORMAT}", fmt=EXPLAIN_FORMAT)
        except ClickHouseError as error:
            self._reset()  # a refused parse (two statements, say) can leave the handle mid-answer
            message = self._say(str(error))
            if "Syntax error" in message:
                message = user_syntax_error(message, prefix, len(statement))
            raise SqlRefused(message) from error
        if not raw:
            self._reset()
            raise StoreError("the engine returned no parse of the query; try again")
        return bytes(raw).decode("utf-8", "replace")

    def _policy_for(self, client: Any) -> SqlPolicy:
        """The engine's function catalogue is read once; its tables and databases on every
        query, since a table created later must not pass for a ``WITH`` name."""
        if self._catalogue is None:
            try:
                functions = client.query(
                    "SELECT name, is_aggregate, case_insensitive, alias_to, categories FROM system.functions"
                ).result_rows
            except ClickHouseError as error:  # a server too old to list categories
                raise StoreError(f"the SQL sandbox needs system.functions.categories: {self._say(str(error))}") from error
            combinators = [r[0] for r in client.query("SELECT name FROM system.aggregate_function_combinators").result_rows]
            self._catalogue = FunctionCatalogue.of(functions, combinators)
        try:
            database = str(client.query("SELECT currentDatabase()").result_rows[0][0])
            tables = client.query("SELECT name FROM system.tables WHERE database = currentDatabase()").result_rows
            databases = client.query("SELECT name FROM system.databases").result_rows
        except ClickHouseError as error:
            self._reset()
            raise StoreError(f"the SQL sandbox could not list the tables: {self._say(str(error))}; try again") from error
        return SqlPolicy(
            self._catalogue, database, frozenset(r[0] for r in tables), frozenset(r[0] for r in databases) - {database}
        )

    def _say(self, error: str) -> str:
        """The engine's first line, or what a limit means in the sandbox's words."""
        # The sandbox's own words: its limits clause, and the FORMAT of the parse and of the
        # result after the user's text (which the client appends once more, after "\n ").
        error = error.replace(f"\n{self._clause}", "").replace(f" {self._clause}", "")
        error = _OWN_FORMAT.sub("", error)
        first = error.strip().splitlines()[0][:2000] if error.strip() else "the query failed"
        code = first.rsplit("(", 1)[-1].rstrip(").") if first.endswith(")") else ""
        return self._limits.explain(code) or first

    def close(self) -> None:
        with self._lock:
            self._reset()


def _own_folder(folder: Path) -> None:
    """``folder`` (in the data directory) as a folder of the log's own, emptied of the insert
    files a process killed mid-insert left. Whatever else stands at its name is replaced,
    never followed: a symbolic link is removed (not what it points at, where inserts would
    otherwise go and whose ``tmp*`` files would be deleted), and so is a file; a folder
    inside it is left alone (clickhouse-connect makes files only)."""
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        folder.unlink()
    folder.mkdir(parents=True, exist_ok=True)
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.name.startswith("tmp") and not entry.is_dir(follow_symlinks=False):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)


_ADD_COLUMN = re.compile(r"ALTER TABLE (\w+) ADD COLUMN IF NOT EXISTS (\w+)")


def _declare_tables(client: Any) -> None:
    """The tables, as ``DDL`` and ``MEMORY_DDL`` declare them. A column the log has already
    is not added again: the engine rewrites the table's metadata file on every such ALTER,
    and opening the log for a read (``agentlog state`` without a server) must write nothing."""
    columns: set[tuple[str, str]] | None = None
    for statement in (*DDL, *MEMORY_DDL):
        added = _ADD_COLUMN.match(statement.strip())
        if added is not None:
            if columns is None:
                rows = client.query("SELECT table, name FROM system.columns WHERE database = currentDatabase()").result_rows
                columns = {(str(t), str(n)) for t, n in rows}
            if (added[1], added[2]) in columns:
                continue
        client.command(statement)


class ClickHouseLogStore(LogStore):
    """``LogStore`` on ClickHouse. Thread-safe: one lock serialises the client."""

    def __init__(self, client: Any, description: str, analyst: AnalystSql, temp_dir: Path | None = None) -> None:
        self._client = client
        self._lock = threading.Lock()
        self._analyst = analyst
        self._temp_dir = temp_dir
        self.description = description
        _declare_tables(client)

    @classmethod
    def open(
        cls, url: str | None = None, path: str | None = None, limits: SqlLimits | None = None,
        analyst_url: str | None = None, temp_dir: Path | None = None, **kwargs: Any,
    ) -> ClickHouseLogStore:  # fmt: skip
        """A server when ``url`` is given (``http[s]://user:pass@host:port/db``), else chDB at
        ``path``. Analyst queries use ``analyst_url`` (a restricted user) when given; chDB
        inserts pass through files in ``temp_dir`` (``_writing``)."""
        limits = limits or SqlLimits()
        if url:
            def connect(dsn: str = analyst_url or url) -> Any:
                return clickhouse_connect.get_client(dsn=dsn, **({} if analyst_url else kwargs))

            try:
                client = clickhouse_connect.get_client(dsn=url, **kwargs)
            except Exception as error:  # noqa: BLE001 - the driver raises many kinds
                raise StoreError(
                    f"cannot reach ClickHouse at {redact_url(url)}: {error}. Check AGENTLOG_CLICKHOUSE_URL "
                    "or unset it to use the embedded chDB log."
                ) from error
            return cls(client, f"ClickHouse server {url.split('@')[-1]}", AnalystSql(connect, limits, bool(analyst_url)))
        if path is None:
            raise StoreError("the chDB log needs a data directory")
        try:
            client = clickhouse_connect.get_client(interface="chdb", path=path)
        except Exception as error:  # noqa: BLE001
            raise StoreError(f"cannot open the chDB log in {path}: {error}") from error
        # chDB serves any number of connections to its one engine, each with its own session.
        analyst = AnalystSql(lambda: clickhouse_connect.get_client(interface="chdb", path=path), limits)
        if temp_dir is not None:
            _own_folder(temp_dir)
        return cls(client, f"chDB {path}", analyst, temp_dir)

    # -- writes -----------------------------------------------------------------------

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """The client, for one write. clickhouse-connect hands a chDB insert over as a
        temporary file of event bodies, in the process's temporary folder: for the write,
        that folder is ``temp_dir`` (in the data directory), never the machine's /tmp."""
        with self._lock:
            if self._temp_dir is None:
                yield
                return
            previous, tempfile.tempdir = tempfile.tempdir, str(self._temp_dir)
            try:
                yield
            finally:
                tempfile.tempdir = previous

    def _insert_json(self, table: str, rows: Sequence[dict[str, Any] | orjson.Fragment]) -> None:
        if not rows:
            return
        body = b"\n".join(orjson.dumps(r) for r in rows)
        settings = _SMALL_INSERT_SETTINGS if len(rows) < SMALL_INSERT_ROWS else _INSERT_SETTINGS
        with self._writing():
            self._client.raw_insert(table, None, body, settings=settings, fmt="JSONEachRow")

    def append_events(self, rows: Sequence[dict[str, Any] | orjson.Fragment]) -> None:
        self._insert_json("events", rows)

    def upsert_pairs(self, rows: Sequence[dict[str, Any]]) -> None:
        self._insert_json("tool_calls", rows)

    def append_rejected(self, rows: Sequence[dict[str, Any]]) -> None:
        # Rejected bytes need not be UTF-8 (or JSON): insert them as binary column data.
        if not rows:
            return
        data = [[r[c] for c in REJECTED_COLUMNS] for r in rows]
        with self._writing():
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

    def thread_summaries(self) -> list[tuple[str, str, int, str]]:
        """Every logged thread's (thread_id, project, event count, newest event time): the
        store's own query, not an analyst's (no sandbox limits, no queue behind analysts)."""
        result = self._query(
            "SELECT thread_id, any(project), count(), toString(max(ts)) FROM events GROUP BY thread_id"
        )
        return [(str(t), str(p), int(n), str(ts)) for t, p, n, ts in result.result_rows]

    def count_events(self) -> int:
        return int(self._query("SELECT count() FROM events").result_rows[0][0])

    def query(self, sql: str) -> QueryResult:
        """An analyst's SQL, through the sandbox; refusals raise ``SqlRefused``."""
        return self._analyst.run(sql)

    def truncate_derived(self) -> None:
        with self._lock:
            self._client.command("TRUNCATE TABLE tool_calls")

    def close(self) -> None:
        self._analyst.close()
        with self._lock:
            self._client.close()


__all__ = ["ClickHouseLogStore"]
