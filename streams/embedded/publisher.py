"""Publishing without a server: validate, then append to the embedded topic."""

from __future__ import annotations

import logging

from agentlog.streams.config import Settings
from agentlog.streams.embedded.topic import SqliteEventBus
from agentlog.streams.metrics import METRICS
from agentlog.streams.publish_check import PublishReport, check_records, split_records

log = logging.getLogger("agentlog.service")


def publish_to(bus: SqliteEventBus, data: bytes, max_bytes: int) -> PublishReport:
    """Validate before send, then append accepted records and dead letters to the topic."""
    records = split_records(data)
    METRICS.published.inc(len(records))
    accepted, rejected, report = check_records(records, max_bytes, bus.first_copies)
    report.last_offset = bus.append(accepted, rejected)
    for raw, reason in rejected[:20]:
        log.warning("rejected record: %s (%d bytes)", reason, len(raw))
    return report


class LocalPublisher:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.bus = SqliteEventBus(str(settings.path("topic.db")))

    def publish(self, data: bytes) -> PublishReport:
        return publish_to(self.bus, data, self.settings.max_event_bytes)

    def close(self) -> None:
        self.bus.close()


__all__ = ["LocalPublisher", "publish_to"]
