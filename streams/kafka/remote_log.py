"""The log as a processor with its sinks elsewhere reads it when the log is chDB.

chDB keeps its files in the sink process's data directory and opens them in one process
only, so a processor (``agentlog run --role processor``) asks the sink process instead:
``RemoteLog`` is the reading half of ``LogStore`` over the sink process's HTTP API
(``agentlog.streams.kafka.sinks_role`` serves ``/sinks/log/...`` and ``/sql``). With a
ClickHouse server (``AGENTLOG_CLICKHOUSE_URL``) the processor opens the server itself.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from agentlog.sinks.base import LoggedEvent, QueryResult, StoreError
from agentlog.streams.api.client import RemoteService
from agentlog.streams.api.service import NotServedHere

WRITES_ELSEWHERE = "the log is written by the sink processes (`agentlog run --role sinks`), not by a processor"


def logged_event(row: dict[str, Any]) -> LoggedEvent:
    return LoggedEvent(row["event_id"], row["thread_id"], row["raw"].encode(), int(row["partition"]),
                       int(row["offset"]))  # fmt: skip


def event_row(event: LoggedEvent) -> dict[str, Any]:
    """A logged event as JSON (the raw bytes are the event as received: valid UTF-8 JSON)."""
    return {"event_id": event.event_id, "thread_id": event.thread_id, "raw": event.raw.decode(),
            "partition": event.partition, "offset": event.offset}  # fmt: skip


class RemoteLog:
    """What a processor reads of the log, asked of the sink process at ``url``."""

    def __init__(self, url: str, token: str | None = None) -> None:
        self.url = url
        self.remote = RemoteService(url, token, busy_seconds=0)

    def _ask(self, path: str, **params: Any) -> Any:
        try:
            return self.remote._get(path, **params)
        except StoreError as error:
            raise StoreError(f"the log is chDB in the sink process at {self.url}, which did not answer ({error}); "
                             "start it with `agentlog run --role sinks`, or set AGENTLOG_SINKS_URL") from error

    def get(self, event_id: str) -> LoggedEvent | None:
        row = self._ask("/sinks/log/event", id=event_id)["event"]
        return None if row is None else logged_event(row)

    def thread_tail(self, thread_id: str, after: int, limit: int) -> list[LoggedEvent]:
        rows = self._ask("/sinks/log/tail", thread=thread_id, after=after, limit=limit)["events"]
        return [logged_event(r) for r in rows]

    def thread_summaries(self) -> list[tuple[str, str, int, str]]:
        return [tuple(r) for r in self._ask("/sinks/log/threads")["threads"]]  # type: ignore[misc]

    def query(self, sql: str) -> QueryResult:
        return self.remote.sql(sql)  # the sink process's SQL sandbox, with its limits

    def replay(self, thread_id: str | None = None) -> Iterator[LoggedEvent]:
        raise NotServedHere("replaying the log runs where the log is: `agentlog rebuild` with every worker stopped")

    def count_events(self) -> int:
        return int(self.query("SELECT count() FROM events").rows[0][0])

    def existing(self, event_ids: Sequence[str]) -> list[str]:
        return [i for i in event_ids if self.get(i) is not None]

    def append_events(self, rows: Sequence[dict[str, Any]]) -> None:
        raise NotServedHere(WRITES_ELSEWHERE)

    def upsert_pairs(self, rows: Sequence[dict[str, Any]]) -> None:
        raise NotServedHere(WRITES_ELSEWHERE)

    def append_rejected(self, rows: Sequence[dict[str, Any]]) -> None:
        raise NotServedHere(WRITES_ELSEWHERE)

    def close(self) -> None:
        self.remote.close()


__all__ = ["RemoteLog", "event_row", "logged_event"]
