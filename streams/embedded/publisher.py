"""Publishing without a server: validate, then append to the embedded topic (a SQLite
file: appending needs no lock on the other stores)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from agentlog.sinks.base import Topic
from agentlog.streams.config import Settings
from agentlog.streams.embedded.topic import SqliteEventBus
from agentlog.streams.metrics import METRICS
from agentlog.streams.publish_check import PublishReport, Publisher, check_records, split_records, with_letters

log = logging.getLogger("agentlog.publish")


def publish_to(bus: Topic, data: bytes, max_bytes: int,
               dead_letters: Sequence[tuple[bytes, str]] = ()) -> PublishReport:  # fmt: skip
    """Validate before send, then append accepted records and dead letters to the topic."""
    records = split_records(data)
    METRICS.published.inc(len(records))
    accepted, rejected, report = check_records(records, max_bytes, bus.first_copies)
    rejected = with_letters(rejected, report, dead_letters, max_bytes)
    report.last_offset = bus.append(accepted, rejected)
    for raw, reason in rejected[:20]:
        log.warning("rejected record: %s (%d bytes)", reason, len(raw))
    return report


class LocalPublisher(Publisher):
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.bus = SqliteEventBus(str(settings.path("topic.db")))

    def publish(self, data: bytes, dead_letters: Sequence[tuple[bytes, str]] = ()) -> PublishReport:
        return publish_to(self.bus, data, self.settings.max_event_bytes, dead_letters)

    def close(self) -> None:
        self.bus.close()


__all__ = ["LocalPublisher", "publish_to"]
