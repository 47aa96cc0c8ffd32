"""``agentlog.Client``: publish an agent's events and read what agentlog makes of them,
the same way whichever deployment answers (see ``agentlog.client.targets``)."""

from __future__ import annotations

import atexit
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from agentlog.client.buffer import BatchPolicy, Buffer
from agentlog.client.errors import ClientError, DeliveryFailed, transient
from agentlog.client.events import EventIds
from agentlog.client.results import (
    Context, LoggedEvent, SearchAnswer, SqlResult, State, ThreadList, search_from, state_from, threads_from,
)  # fmt: skip
from agentlog.client.targets import connect
from agentlog.client.thread import Thread, ToolCallBase
from agentlog.schemas.events import MAX_EVENT_BYTES
from agentlog.streams.api.service import Service
from agentlog.streams.config import Settings

T = TypeVar("T")
log = logging.getLogger("agentlog.client")

TIMEOUT_OUTPUT = "no result before the client closed"


class Client:
    """Publishes events in batches from a bounded buffer and reads through the
    deployment's ``Service``.

    ``Client("./data")`` works in this process on a data directory (or through the
    ``agentlog run`` that holds it); ``Client("http://127.0.0.1:8787", token=...)`` talks to
    a server; ``Client(kafka="host:9092", worker="http://...")`` produces to Kafka and reads
    from a worker; ``Client()`` follows the ``AGENTLOG_*`` settings. Use it as a context
    manager (or call ``close()``): closing publishes everything still buffered.
    """

    def __init__(self, target: str | Path | Service | None = None, *, token: str | None = None,
                 kafka: str | None = None, worker: str | None = None, settings: Settings | None = None,
                 batch_size: int = 500, capacity: int = 10_000, flush_interval: float = 0.2,
                 retry_seconds: float = 120.0, max_batch_bytes: int = 8 * 1024 * 1024,
                 capacity_bytes: int = 256 * 1024 * 1024, id_prefix: str | None = None,
                 max_event_bytes: int = MAX_EVENT_BYTES) -> None:  # fmt: skip
        self.policy = BatchPolicy(capacity=capacity, batch_size=batch_size, interval_s=flush_interval,
                                  retry_seconds=retry_seconds, max_batch_bytes=max_batch_bytes,
                                  capacity_bytes=capacity_bytes)  # fmt: skip
        self.connection = connect(target, token=token, kafka=kafka, worker=worker, settings=settings)
        self.service: Service = self.connection.service
        self.ids = EventIds(id_prefix)
        self.max_event_bytes = max_event_bytes  # the deployment's AGENTLOG_MAX_EVENT_BYTES: bigger fields are cut
        self._open_calls: dict[str, ToolCallBase] = {}
        self._buffer = Buffer(self.service.publish, self.policy)
        self._closed = False
        # A client never closed still publishes its buffer when the interpreter exits
        # normally (the sender is a daemon thread: it would die with events in hand). The
        # hook holds the client until then, even if the program dropped it.
        atexit.register(self._close_at_exit)

    def __repr__(self) -> str:
        return f"<agentlog.Client {self.connection.where}>"

    # -- publishing ------------------------------------------------------------------------------

    def thread(self, thread_id: str, project: str | None = None, agent_id: str | None = None,
               window_id: str | None = None) -> Thread:  # fmt: skip
        """A handle on one thread (nothing is sent until it publishes)."""
        return Thread(self, thread_id, project, agent_id, window_id)

    def _send(self, event_id: str, raw: bytes) -> str:
        self._buffer.put(raw)
        return event_id

    def publish_raw(self, data: bytes) -> None:
        """Events you encoded yourself (JSON lines), through the same buffer and retries."""
        for line in data.splitlines():
            if line.strip():
                self._buffer.put(line)

    @property
    def pending(self) -> int:
        """Events buffered or being sent."""
        return self._buffer.pending

    def flush(self, timeout: float | None = None) -> None:
        """Publish everything buffered so far and wait for the deployment's answer; raise
        ``PublishRefused`` (with the rejected records' reasons) or ``DeliveryFailed`` (the
        events are kept for the next flush) for what went wrong since the last flush."""
        self._buffer.flush(timeout)

    def close(self) -> None:
        """Give open tool calls a ``timeout`` result, publish the buffer, release the target."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self._close_at_exit)
        try:
            for call in list(self._open_calls.values()):
                call._result(TIMEOUT_OUTPUT, "timeout", None)
            self._buffer.close()
        finally:
            self.connection.close()

    def _close_at_exit(self) -> None:
        try:
            self.close()
        except Exception as error:  # noqa: BLE001 - at exit there is no caller left to raise to
            log.error("agentlog client: closing at exit failed: %s", error)

    def __enter__(self) -> Client:
        """The client itself; leaving the block closes it."""
        return self

    def __exit__(self, *exc: object) -> None:
        """``close()``."""
        self.close()

    # -- reads (each flushes first: read your writes) --------------------------------------------

    def _read(self, call: Callable[[], T]) -> T:
        """A read after a flush, retried on transient errors like a publish."""
        if self._closed:
            raise ClientError("the client is closed")
        self.flush()
        deadline = time.monotonic() + self.policy.retry_seconds
        delay = self.policy.backoff_s
        while True:
            try:
                return call()
            except Exception as error:
                if not transient(error):
                    raise
                if time.monotonic() + delay > deadline:
                    raise DeliveryFailed(f"no answer after {self.policy.retry_seconds:g} s: {error}") from error
                time.sleep(delay)
                delay = min(delay * 2, self.policy.backoff_max_s)

    def state(self, thread_id: str) -> State:
        """The thread's working state (``NotFound`` if it has no events)."""
        return state_from(self._read(lambda: self.service.state(thread_id)), getattr(self.service, "in_process", False))

    def context(self, thread_id: str, budget: int, query: str | None = None, model: str | None = None,
                format: str = "generic") -> Context:  # noqa: A002 # fmt: skip
        """The model's working set for the thread within ``budget`` tokens; ``format``
        ``openai`` or ``anthropic`` gives it as that provider's request payload."""
        return Context.model_validate(self._read(lambda: self.service.context(thread_id, budget, query, model,
                                                                              format=format)))  # fmt: skip

    def search(self, query: str, thread_id: str | None = None, kind: str | None = None,
               tool_name: str | None = None, project: str | None = None, limit: int = 10,
               **filters: Any) -> SearchAnswer:  # fmt: skip
        """Full-text search (``filters``: ``window_id``, ``after``, ``since_ms``, ``until_ms``)."""
        answer = self._read(lambda: self.service.search(query, thread_id=thread_id, kind=kind, tool_name=tool_name,
                                                        project=project, limit=limit, **filters))  # fmt: skip
        return search_from(answer)

    def read(self, event_id: str) -> LoggedEvent:
        """One event as logged (``NotFound`` if it was never accepted)."""
        return LoggedEvent.model_validate(self._read(lambda: self.service.read(event_id)))

    def sql(self, statement: str) -> SqlResult:
        """One read-only analyst query (tables ``events``, ``tool_calls``, ``rejected_events``)."""
        result = self._read(lambda: self.service.sql(statement))
        return SqlResult(columns=list(result.columns), rows=[list(row) for row in result.rows])

    def threads(self, project: str | None = None, status: str | None = None, limit: int = 100) -> ThreadList:
        """The threads, newest activity first (``agentlog threads``)."""
        return threads_from(self._read(lambda: self.service.thread_list(project, status, limit)))


__all__ = ["Client"]
