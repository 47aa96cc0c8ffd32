"""The Python client: ``Client`` and ``AsyncClient`` publish an agent's events through a
bounded, batching buffer with retries, and read state, context, search, events and SQL
from any deployment (a data directory, ``agentlog run`` over HTTP, or Kafka).
``docs/client.md`` documents it."""

from __future__ import annotations

from agentlog.client.aio import AsyncClient, AsyncThread, AsyncToolCall
from agentlog.client.buffer import BatchPolicy
from agentlog.client.client import Client
from agentlog.client.errors import ClientError, DeliveryFailed, PublishRefused
from agentlog.client.results import Context, LoggedEvent, SearchAnswer, SqlResult, State, ThreadList
from agentlog.client.thread import Thread, ToolCall

__all__ = [
    "AsyncClient", "AsyncThread", "AsyncToolCall", "BatchPolicy", "Client", "ClientError", "Context",
    "DeliveryFailed", "LoggedEvent", "PublishRefused", "SearchAnswer", "SqlResult", "State", "Thread",
    "ThreadList", "ToolCall",
]  # fmt: skip
