"""Where a client's events go and its reads come from: one ``Service`` per deployment.

- a data directory: the embedded deployment in this process (``EmbeddedService``, under
  the directory's lock), or the ``agentlog run`` that holds it, over HTTP, if one does;
- an ``http(s)://`` URL: ``agentlog run`` or a Kafka worker (``RemoteService``);
- Kafka: events produced to the brokers (``KafkaPublisher``), reads through a worker's
  URL if one is given.

Engines load only for the target chosen: an HTTP client never loads chDB or tantivy.
"""

from __future__ import annotations

import dataclasses
import os
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from agentlog.sinks.base import QueryResult, StoreError
from agentlog.streams.api.client import RemoteService
from agentlog.streams.api.service import NotServedHere, Service, Unavailable
from agentlog.streams.config import Settings
from agentlog.streams.publish_check import Publisher, PublishReport


class Connection:
    """The ``Service`` a client talks to, and what to release when it closes."""

    def __init__(self, service: Service, where: str, stack: ExitStack | None = None) -> None:
        self.service = service
        self.where = where  # for messages: "embedded ./data", "http://...", "kafka ..."
        self._stack = stack

    def close(self) -> None:
        if self._stack is not None:
            self._stack.close()
        else:
            self.service.close()


def _embedded(data_dir: Path, settings: Settings | None, token: str | None) -> Connection:
    from agentlog.streams.cli.backend import backend  # noqa: PLC0415 - loads the engines

    # The directory's settings as the command line reads them: AGENTLOG_* and its agentlog.toml.
    base = settings or Settings.from_env({**os.environ, "AGENTLOG_DATA_DIR": str(data_dir)})
    base = dataclasses.replace(base, data_dir=data_dir, kafka_bootstrap=None, api_token=token or base.api_token)
    stack = ExitStack()
    service = stack.enter_context(backend(base))
    return Connection(service, f"embedded {data_dir}", stack)


class KafkaTarget:
    """Publishes to Kafka; reads go to a worker's HTTP API (``worker``), if named."""

    def __init__(self, settings: Settings, reader: Service | None) -> None:
        self.settings = settings
        self.publisher: Publisher | None = None  # connected at the first publish, by the sender
        self.reader = reader

    def publish(self, data: bytes) -> PublishReport:
        if self.publisher is None:
            # Here, not in the constructor: brokers away when the agent starts are a
            # transient failure the sender retries, not a client that cannot be built.
            from agentlog.streams.kafka.publisher import KafkaPublisher  # noqa: PLC0415 - Kafka users only

            try:
                self.publisher = KafkaPublisher(self.settings)
            except StoreError as error:  # no broker answered the bootstrap
                raise Unavailable(str(error)) from error
        return self.publisher.publish(data)

    def _reads(self) -> Service:
        if self.reader is None:
            raise NotServedHere("this client publishes to Kafka only; give it `worker=` (a worker's URL) to read")
        return self.reader

    def __getattr__(self, name: str) -> Any:  # every read: state, context, search, read, sql, ...
        if name.startswith("_") or name in ("publisher", "reader", "settings"):
            raise AttributeError(name)
        return getattr(self._reads(), name)

    def sql(self, statement: str) -> QueryResult:
        return self._reads().sql(statement)

    def catch_up(self, on_progress: Any = None) -> dict[str, Any]:
        return self._reads().catch_up(on_progress) if self.reader is not None else {"ok": True}

    def close(self) -> None:
        if self.publisher is not None:
            self.publisher.close()
        if self.reader is not None:
            self.reader.close()


def connect(target: str | Path | Service | None, token: str | None = None, kafka: str | None = None,
            worker: str | None = None, settings: Settings | None = None) -> Connection:  # fmt: skip
    """The connection a ``Client(target, ...)`` means (see the module's docstring); no
    target and no ``kafka``: ``AGENTLOG_*`` settings decide (``AGENTLOG_KAFKA_BOOTSTRAP``,
    else ``AGENTLOG_DATA_DIR``, default ``./.agentlog``)."""
    if target is not None and not isinstance(target, (str, Path)):
        return Connection(target, type(target).__name__, ExitStack())  # the caller's service: theirs to close
    env = settings or Settings.from_env()
    token = token or env.api_token
    if isinstance(target, str) and target.startswith(("http://", "https://")):
        return Connection(RemoteService(target.rstrip("/"), token, busy_seconds=0.0), target)
    kafka = kafka or (env.kafka_bootstrap if target is None else None)
    if kafka:
        reader = RemoteService(worker.rstrip("/"), token, busy_seconds=0.0) if worker else None
        kafka_settings = dataclasses.replace(env, kafka_bootstrap=kafka)
        return Connection(KafkaTarget(kafka_settings, reader), f"kafka {kafka}")  # type: ignore[arg-type]
    return _embedded(Path(target) if target is not None else env.data_dir, settings, token)


__all__ = ["Connection", "KafkaTarget", "connect"]
