"""Which adapter plays which role: the one place a deployment is chosen."""

from __future__ import annotations

from agentlog.sinks.base import LogStore, SearchIndex
from agentlog.sinks.clickhouse import ClickHouseLogStore
from agentlog.streams.config import Settings
from agentlog.streams.kafka.security import clickhouse_options, opensearch_options


def open_log_store(settings: Settings) -> LogStore:
    """A ClickHouse server if ``AGENTLOG_CLICKHOUSE_URL`` names one, else chDB in the data directory."""
    return ClickHouseLogStore.open(
        settings.clickhouse_url, str(settings.path("log")), settings.sql_limits,
        settings.clickhouse_analyst_url, None if settings.clickhouse_url else settings.path("tmp-inserts"),
        **clickhouse_options(settings),
    )  # fmt: skip


def open_search_index(settings: Settings) -> SearchIndex:
    """OpenSearch if ``AGENTLOG_OPENSEARCH_URL`` names it, else tantivy in the data directory."""
    if settings.opensearch_url:
        from agentlog.sinks.opensearch_index import OpenSearchIndex  # noqa: PLC0415 - optional dependency

        return OpenSearchIndex(settings.opensearch_url, settings.opensearch_index, **opensearch_options(settings))
    from agentlog.sinks.tantivy_index import TantivySearchIndex  # noqa: PLC0415

    return TantivySearchIndex(str(settings.path("index")))


__all__ = ["open_log_store", "open_search_index"]
