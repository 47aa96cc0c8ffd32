"""Every store, the embedded topic and each publisher declares its interface (issue 13:
``sinks/base.py``, ``streams/publish_check.py``) and defines each of its operations
itself: a class that subclasses a Protocol would otherwise inherit a forgotten method
as a silent no-op."""

from __future__ import annotations

import pytest

from agentlog.sinks.base import LogReader, LogStore, LogWriter, MemoryStore, SearchIndex, StateStore, Topic
from agentlog.sinks.clickhouse import ClickHouseLogStore
from agentlog.sinks.memory_sqlite import SqliteMemoryStore
from agentlog.sinks.opensearch_index import OpenSearchIndex
from agentlog.sinks.sqlite_state import SqliteStateStore
from agentlog.sinks.tantivy_index import TantivySearchIndex
from agentlog.streams.embedded.publisher import LocalPublisher
from agentlog.streams.embedded.topic import SqliteEventBus
from agentlog.streams.kafka.publisher import KafkaPublisher
from agentlog.streams.publish_check import Publisher

IMPLEMENTATIONS = [
    (LogStore, ClickHouseLogStore), (SearchIndex, TantivySearchIndex), (SearchIndex, OpenSearchIndex),
    (StateStore, SqliteStateStore), (MemoryStore, SqliteMemoryStore), (Topic, SqliteEventBus),
    (Publisher, LocalPublisher), (Publisher, KafkaPublisher),
]  # fmt: skip


def _operations(interface: type) -> set[str]:
    return {
        name for base in interface.__mro__ if base not in (object,) and getattr(base, "_is_protocol", False)
        for name, value in vars(base).items() if callable(value) and not name.startswith("_")
    }  # fmt: skip


@pytest.mark.parametrize(("interface", "implementation"), IMPLEMENTATIONS, ids=lambda c: c.__name__)
def test_each_implementation_declares_its_interface_and_defines_every_operation(
    interface: type, implementation: type
) -> None:
    assert interface in implementation.__mro__  # declared, not only shaped alike
    missing = sorted(n for n in _operations(interface) if getattr(implementation, n) is getattr(interface, n))
    assert missing == []


def test_the_log_store_is_the_union_of_what_writers_and_readers_use() -> None:
    assert _operations(LogStore) == _operations(LogWriter) | _operations(LogReader) | {"close"}
    assert _operations(LogWriter) & _operations(LogReader) == set()
