"""Which adapter plays which role: the one place a deployment is chosen."""

from __future__ import annotations

import logging

from agentlog.sinks.base import LogStore, OutdatedStore, SearchIndex
from agentlog.sinks.clickhouse import ClickHouseLogStore
from agentlog.streams.config import Settings
from agentlog.streams.kafka.security import clickhouse_options, opensearch_options

log = logging.getLogger("agentlog")


def open_log_store(settings: Settings) -> LogStore:
    """A ClickHouse server if ``AGENTLOG_CLICKHOUSE_URL`` names one, else chDB in the data directory."""
    return ClickHouseLogStore.open(
        settings.clickhouse_url, str(settings.path("log")), settings.sql_limits,
        settings.clickhouse_analyst_url, None if settings.clickhouse_url else settings.path("tmp-inserts"),
        **clickhouse_options(settings),
    )  # fmt: skip


def open_search_index(settings: Settings, remake_outdated: bool = False) -> SearchIndex:
    """OpenSearch if ``AGENTLOG_OPENSEARCH_URL`` names it, else tantivy in the data directory;
    ``remake_outdated`` (a rebuild, which fills it again): a tantivy index made by an older
    version is moved aside (``index.outdated-<time>``) and an empty one opened."""
    if settings.opensearch_url:
        from agentlog.sinks.opensearch_index import OpenSearchIndex  # noqa: PLC0415 - optional dependency

        return OpenSearchIndex(settings.opensearch_url, settings.opensearch_index, **opensearch_options(settings))
    from agentlog.sinks.tantivy_index import TantivySearchIndex  # noqa: PLC0415

    if remake_outdated and outdated_index(settings) is not None:
        from agentlog.streams.embedded.datadir import move_aside  # noqa: PLC0415

        aside = move_aside(settings.path("index"), "outdated")
        log.warning("the search index was made by an older version: moved to %s, made again", aside.name)
    return TantivySearchIndex(str(settings.path("index")))


def outdated_index(settings: Settings) -> str | None:
    """Why the data directory's tantivy index was made by an older version (its schema or
    word rule), ``None`` when it was not (or the index is OpenSearch's)."""
    if settings.opensearch_url:
        return None
    from agentlog.sinks.tantivy_index import check_schema  # noqa: PLC0415

    try:
        check_schema(str(settings.path("index")))
    except OutdatedStore as error:
        return str(error)
    return None


__all__ = ["open_log_store", "open_search_index", "outdated_index"]
