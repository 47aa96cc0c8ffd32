"""The stores' schemas, declared once: ClickHouse tables (server and chDB run the same
DDL) and the search document, whose fields both search adapters map from here."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Literal

EVENTS_INSERT_COLUMNS: tuple[str, ...] = ("raw", "ts", "window_id", "source", "partition", "offset")
"""What a writer sends for an event; the envelope columns are derived from ``raw`` by
ClickHouse itself (DEFAULT expressions), which parses JSON far faster than Python."""

TOOL_CALLS_COLUMNS: tuple[str, ...] = (
    "thread_id", "call_id", "orphan_event_id", "tool_name", "status", "synthetic",
    "latency_ms", "output_bytes", "call_event_id", "result_event_id", "call_ts", "result_ts",
    "window_id", "turn_id", "project", "version",
)  # fmt: skip

REJECTED_COLUMNS: tuple[str, ...] = ("raw", "reason", "rejected_at", "partition", "offset")


def rejected_row(raw: bytes, reason: str, partition: int, offset: int, at: float) -> dict[str, Any]:
    """A row of ``rejected_events``; ``at`` is when the record was dead-lettered (epoch s)."""
    return {
        "raw": raw,
        "reason": reason,
        "rejected_at": datetime.fromtimestamp(at, timezone.utc),
        "partition": partition,
        "offset": offset,
    }


# `events` is append-only (MergeTree: nothing is updated or deleted). Its sort key serves
# analysts (per thread, in time) and replay (per thread, in offset order); a projection
# sorted by event_id serves `read`. `raw` is the event as received; the envelope columns
# and `payload` (as received) are extracted from it on insert.
DDL: tuple[str, ...] = (
    """
    CREATE TABLE IF NOT EXISTS events (
        event_id String DEFAULT JSONExtractString(raw, 'event_id'),
        thread_id String DEFAULT JSONExtractString(raw, 'thread_id'),
        kind LowCardinality(String) DEFAULT JSONExtractString(raw, 'kind'),
        ts DateTime64(6, 'UTC'),
        window_id String,
        turn_id Nullable(String) DEFAULT JSONExtract(raw, 'turn_id', 'Nullable(String)'),
        agent_id LowCardinality(String) DEFAULT ifNull(JSONExtract(raw, 'agent_id', 'Nullable(String)'), 'main'),
        project LowCardinality(String) DEFAULT ifNull(JSONExtract(raw, 'project', 'Nullable(String)'), 'default'),
        source LowCardinality(String),
        repo_commit Nullable(String) DEFAULT JSONExtract(raw, 'repo_commit', 'Nullable(String)'),
        schema_version UInt16 DEFAULT ifNull(JSONExtract(raw, 'schema_version', 'Nullable(UInt16)'), 1),
        payload String DEFAULT JSONExtractRaw(raw, 'payload'),
        raw String,
        partition UInt32,
        offset UInt64,
        ingested_at DateTime64(6, 'UTC') DEFAULT now64(6),
        PROJECTION by_event_id (SELECT * ORDER BY event_id)
    ) ENGINE = MergeTree
    ORDER BY (thread_id, partition, offset)
    """,
    """
    CREATE TABLE IF NOT EXISTS tool_calls (
        thread_id String,
        call_id String,
        orphan_event_id String,
        tool_name LowCardinality(String),
        status LowCardinality(String),
        synthetic Bool,
        latency_ms Nullable(Float64),
        output_bytes UInt64,
        call_event_id String,
        result_event_id String,
        call_ts Nullable(DateTime64(6, 'UTC')),
        result_ts Nullable(DateTime64(6, 'UTC')),
        window_id String,
        turn_id Nullable(String),
        project LowCardinality(String),
        version UInt64,
        updated_at DateTime64(6, 'UTC') DEFAULT now64(6)
    ) ENGINE = ReplacingMergeTree(version)
    ORDER BY (thread_id, call_id, orphan_event_id)
    """,
    """
    CREATE TABLE IF NOT EXISTS rejected_events (
        raw String,
        reason String,
        rejected_at DateTime64(6, 'UTC'),
        partition UInt32,
        offset UInt64
    ) ENGINE = MergeTree
    ORDER BY (rejected_at, partition, offset)
    """,
)

# Long-term memory, mirrored here for analysts from the memory store (which owns leases
# and fencing): every candidate with its provenance, and every published view version.
MEMORY_DDL: tuple[str, ...] = (
    """
    CREATE TABLE IF NOT EXISTS memory_candidates (
        seq UInt64,
        source_event_id String,
        source_thread_id String,
        project LowCardinality(String),
        scope String,
        key String,
        value String,
        evidence_type LowCardinality(String),
        observed_at DateTime64(6, 'UTC'),
        recheck_when Nullable(String)
    ) ENGINE = ReplacingMergeTree(seq)
    ORDER BY source_event_id
    """,
    """
    CREATE TABLE IF NOT EXISTS memory_facts (
        version UInt64,
        project LowCardinality(String),
        scope String,
        key String,
        value Nullable(String),
        status LowCardinality(String),
        evidence_type LowCardinality(String),
        observed_at DateTime64(6, 'UTC'),
        source_event_id String,
        source_thread_id String,
        supporting Array(String),
        contradicting Array(String),
        revoked Array(String),
        flags Array(String),
        note String
    ) ENGINE = MergeTree
    ORDER BY (version, project, key)
    """,
    # Columns added since the first release: a log written before them gains them on open.
    "ALTER TABLE memory_candidates ADD COLUMN IF NOT EXISTS observed_commit Nullable(String)",
    "ALTER TABLE memory_candidates ADD COLUMN IF NOT EXISTS origin LowCardinality(String) DEFAULT 'fact'",
    "ALTER TABLE memory_facts ADD COLUMN IF NOT EXISTS last_verified_at Nullable(DateTime64(6, 'UTC'))",
    "ALTER TABLE memory_facts ADD COLUMN IF NOT EXISTS observed_commit Nullable(String)",
)

FieldType = Literal["keyword", "text", "date", "long"]


@dataclass(frozen=True, slots=True)
class IndexField:
    name: str
    type: FieldType
    stored: bool = True


SEARCH_FIELDS: tuple[IndexField, ...] = (
    IndexField("event_id", "keyword"),
    IndexField("thread_id", "keyword"),
    IndexField("window_id", "keyword"),
    IndexField("kind", "keyword"),
    IndexField("role", "keyword"),
    IndexField("status", "keyword"),
    IndexField("exit_code", "keyword"),
    IndexField("tool_name", "keyword"),
    IndexField("project", "keyword"),
    IndexField("agent_id", "keyword"),
    IndexField("repo_commit", "keyword"),
    IndexField("error_code", "keyword"),
    IndexField("ts", "date"),
    IndexField("ts_ms", "long"),
    IndexField("offset", "long"),
    IndexField("path", "text"),
    IndexField("text", "text"),
    IndexField("terms", "keyword", stored=False),
)
"""The search document. ``text`` holds the searchable body (message text, tool output,
arguments, paths, error codes, tool names); keyword fields are exact-match filters.
``role`` (a message's), ``status`` and ``exit_code`` (a tool result's, the code as
decimal text; empty when it has none) let a hit say whether it is a fact or a guess and
whether a tool failed without reading its event (recall ranks on them every step).
``terms`` (many values) holds the text's identifiers, paths and error codes as written
(``agentlog.processors.textsearch.identifiers``): a query naming one matches it exactly
and ranks that hit first."""

SEARCH_INDEX_NAME = "agentlog-events"

__all__ = [
    "DDL", "EVENTS_INSERT_COLUMNS", "IndexField", "MEMORY_DDL", "REJECTED_COLUMNS", "SEARCH_FIELDS",
    "SEARCH_INDEX_NAME", "TOOL_CALLS_COLUMNS", "rejected_row",
]  # fmt: skip
