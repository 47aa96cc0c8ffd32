"""Publishing without a server: validate, then append to the embedded topic."""

from __future__ import annotations

from agentlog.streams.embedded.topic import SqliteEventBus
from agentlog.streams.config import Settings
from agentlog.streams.embedded.service import PublishReport, publish_to


class LocalPublisher:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.bus = SqliteEventBus(str(settings.path("topic.db")))

    def publish(self, data: bytes) -> PublishReport:
        return publish_to(self.bus, data, self.settings.max_event_bytes)

    def close(self) -> None:
        self.bus.close()


__all__ = ["LocalPublisher"]
