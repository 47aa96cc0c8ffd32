"""What the client raises, and which failures it retries."""

from __future__ import annotations

import sqlite3
from typing import Any

from agentlog.streams.api.client import Unreachable
from agentlog.streams.api.service import Unavailable


class ClientError(RuntimeError):
    """Something the client could not do; the message says what and why."""


class PublishRefused(ClientError):
    """The deployment refused what was published: a bad request (HTTP 400 and the like,
    never retried) or records rejected by validation (``rejections``: each record's
    ``reason``; the deployment keeps them in ``rejected_events``)."""

    def __init__(self, message: str, rejections: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.rejections = rejections or []


class DeliveryFailed(ClientError):
    """Events could not be delivered within ``retry_seconds`` (the deployment stayed down);
    they stay buffered and the next ``flush()`` tries again."""


_KAFKA_TRANSIENT = {"KafkaTimeoutError", "NoBrokersAvailable", "KafkaConnectionError", "RequestTimedOutError"}


def transient(error: BaseException) -> bool:
    """Whether the same request may succeed later: the server unreachable or timing out,
    busy (503), a broker away, a store file locked for a moment. A refusal never is."""
    if isinstance(error, (Unreachable, Unavailable, TimeoutError, ConnectionError)):
        return True
    if isinstance(error, sqlite3.OperationalError):
        return "locked" in str(error) or "busy" in str(error)
    if type(error).__module__.startswith("kafka"):
        return bool(getattr(error, "retriable", False)) or type(error).__name__ in _KAFKA_TRANSIENT
    return False


__all__ = ["ClientError", "DeliveryFailed", "PublishRefused", "transient"]
