"""Which deployment answers a command: a running server over HTTP (it holds the data
directory), on Kafka the worker's HTTP API or, with no worker answering, the log and the
index opened here, else the data directory's stores in this process under its lock."""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from agentlog.sinks.base import StoreError
from agentlog.streams.api.client import RemoteService, answers, server_url
from agentlog.streams.api.service import Service
from agentlog.streams.cli.render import progress
from agentlog.streams.config import Settings
from agentlog.streams.embedded.publisher import LocalPublisher
from agentlog.streams.embedded.dir_lock import DataDirLock
from agentlog.streams.embedded.service import EmbeddedService
from agentlog.streams.kafka.offline import OfflineService
from agentlog.streams.publish_check import Publisher


@contextmanager
def _offline(settings: Settings, url: str) -> Iterator[Service]:
    """Kafka with no worker answering: the log and the index, opened here."""
    print(f"agentlog: no worker answers at {url}; answering from the log and the index "
          "(events a worker has not processed yet are not included)", file=sys.stderr)  # fmt: skip
    lock = DataDirLock(settings)
    if not lock.acquire(timeout=300):
        raise StoreError(f"another agentlog process is using {settings.data_dir}; wait for it to finish")
    try:
        service = OfflineService(settings)
        try:
            yield service
        finally:
            service.close()
    finally:
        lock.release()


@contextmanager
def backend(settings: Settings) -> Iterator[Service]:
    """The running server's API if one holds the data directory, else the stores here."""
    url = server_url(settings)
    if settings.distributed:  # the faust worker holds the stores and serves the queries
        url = f"http://{settings.http_host}:{settings.worker_port}"
        if not answers(url, settings.api_token):
            with _offline(settings, url) as service:
                yield service
            return
    if url:
        remote = RemoteService(url, settings.api_token)
        try:
            yield remote
        finally:
            remote.close()
        return
    lock = DataDirLock(settings)
    if not lock.acquire(timeout=300):
        url = server_url(settings)
        if not url:
            raise StoreError(f"another agentlog process is using {settings.data_dir}; wait for it to finish")
        yield RemoteService(url, settings.api_token)
        return
    try:
        with progress("rebuilding from the topic") as update:  # only if a store needs it
            service = EmbeddedService(settings, update)
    except BaseException:
        lock.release()
        raise
    try:
        yield service
    finally:
        service.close()
        lock.release()


@contextmanager
def reading(settings: Settings) -> Iterator[Settings]:
    """The settings a query command runs with: ``settings``, or, when the embedded data
    directory does not exist, an empty one made for the query and removed after it. The
    query answers (and refuses its arguments) exactly as over an empty data directory, and
    creates nothing where the user pointed: a read never writes, and a mistyped
    AGENTLOG_DATA_DIR does not leave a directory behind."""
    if settings.distributed or Path(settings.data_dir).exists():
        yield settings
        return
    print(f"agentlog: {settings.data_dir} does not exist (nothing was published there): answering as an "
          "empty data directory (check AGENTLOG_DATA_DIR; the default is ./.agentlog)", file=sys.stderr)  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="agentlog-empty-") as empty:
        yield replace(settings, data_dir=Path(empty))


def publish(settings: Settings, data: bytes) -> dict[str, Any]:
    """Send a body to the topic: Kafka's, a running server's, or the topic file here."""
    url = server_url(settings)
    publisher: Publisher
    if settings.distributed:
        # Deferred: only Kafka deployments load the Kafka client (embedded commands start faster).
        from agentlog.streams.kafka.publisher import KafkaPublisher  # noqa: PLC0415

        publisher = KafkaPublisher(settings)
    elif url:
        return RemoteService(url, settings.api_token).publish(data).as_dict()
    else:  # the topic is a SQLite file: appending needs no lock on the other stores
        publisher = LocalPublisher(settings)
    try:
        return publisher.publish(data).as_dict()
    finally:
        publisher.close()


__all__ = ["backend", "publish", "reading"]
