"""The client's bounded buffer: events wait here and a background thread publishes them
in batches (when ``batch_size`` are waiting, when the oldest has waited ``interval_s``,
or when ``flush()`` asks), retrying transient failures with exponential back-off.

Bounded: when ``capacity`` events wait, ``put`` blocks until the sender makes room
(back-pressure on the agent instead of memory that grows while a server is away).
Batches go out one at a time and in order; a batch is retried as the same bytes, so the
deployment's deduplication by ``event_id`` makes a retry of a batch it already stored a
no-op.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from agentlog.client.errors import ClientError, DeliveryFailed, PublishRefused, transient
from agentlog.streams.publish_check import PublishReport

log = logging.getLogger("agentlog.client")

KEPT_ERRORS = 100
"""Failures kept for the next ``flush()`` to raise (the first ones and the newest); past it
they are only counted, so an agent that never flushes does not grow a list forever."""


@dataclass(frozen=True)
class BatchPolicy:
    """How the client batches and retries (every field is a ``Client`` argument)."""

    capacity: int = 10_000
    """Events buffered at most; ``put`` waits for room beyond it."""
    capacity_bytes: int = 256 * 1024 * 1024
    """Bytes buffered at most (events of 1 MiB tool outputs fill it long before
    ``capacity``); ``put`` waits for room beyond it. An event alone is always taken."""
    batch_size: int = 500
    """Events per publish request."""
    interval_s: float = 0.2
    """The longest an event waits in the buffer before a (partial) batch goes out."""
    retry_seconds: float = 120.0
    """How long one batch is retried on transient errors before ``DeliveryFailed``."""
    backoff_s: float = 0.05
    """The first wait between retries; it doubles up to ``backoff_max_s``."""
    backoff_max_s: float = 2.0
    max_batch_bytes: int = 8 * 1024 * 1024
    """A batch stops growing at this size (one event bigger still goes alone): a server
    refuses a request over ``AGENTLOG_MAX_REQUEST_BYTES`` (64 MiB by default)."""

    def __post_init__(self) -> None:
        if self.capacity < 1 or self.batch_size < 1 or self.capacity_bytes < 1:
            raise ValueError("capacity, capacity_bytes and batch_size must be at least 1")


Send = Callable[[bytes], PublishReport]


class Buffer:
    """Events (encoded) waiting for the background sender."""

    def __init__(self, send: Send, policy: BatchPolicy) -> None:
        self.send = send
        self.policy = policy
        self._items: deque[bytes] = deque()
        self._bytes = 0  # what ``_items`` holds
        self._oldest = 0.0  # when the oldest waiting event arrived
        self._inflight = 0
        self._flushing = 0  # flush() calls waiting: send partial batches now
        self._stalled = False  # a batch gave up (DeliveryFailed): wait for the next flush()
        self._closed = False
        self._errors: list[ClientError] = []
        self._unkept = [0, 0]  # failures past KEPT_ERRORS: how many, how many were refusals
        self._lock = threading.Lock()  # ``put`` takes it directly: cheaper than the condition's wrapper
        self._cond = threading.Condition(self._lock)
        self.sent = 0  # events the deployment answered for (accepted or rejected)
        self._thread = threading.Thread(target=self._run, name="agentlog-client-sender", daemon=True)
        self._thread.start()

    # -- the agent's side ----------------------------------------------------------------

    def put(self, raw: bytes, timeout: float | None = None) -> None:
        """Queue one encoded event; waits while the buffer is full (``timeout``: at most
        so long, then ``ClientError``)."""
        with self._lock:
            if self._full() or self._closed:  # else the fast path: room now
                if not self._wait(lambda: not self._full() or self._stalled or self._closed, timeout):
                    raise ClientError(f"the client's buffer stayed full ({self.policy.capacity} events or "
                                      f"{self.policy.capacity_bytes} bytes) for {timeout} s")  # fmt: skip
                self._check_open()
            self._append(raw)

    def offer(self, raw: bytes) -> bool:
        """Queue one encoded event if there is room now, without waiting."""
        with self._cond:
            self._check_open()
            if self._full():
                return False
            self._append(raw)
            return True

    def _full(self) -> bool:
        return bool(self._items) and (len(self._items) >= self.policy.capacity
                                      or self._bytes >= self.policy.capacity_bytes)  # fmt: skip

    def _append(self, raw: bytes) -> None:
        self._bytes += len(raw)
        items = self._items
        if not items:
            self._oldest = time.monotonic()
            items.append(raw)
            self._cond.notify()  # the sender starts the interval's clock
        else:
            items.append(raw)
            if len(items) == self.policy.batch_size:
                self._cond.notify()

    def _check_open(self) -> None:
        if self._closed:
            raise ClientError("the client is closed")
        if self._stalled and self._full():
            raise self._errors[-1] if self._errors else DeliveryFailed("delivery failed and the buffer is full")

    @property
    def pending(self) -> int:
        """Events not yet answered for (waiting, or in a request under way)."""
        with self._cond:
            return len(self._items) + self._inflight

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every event queued so far is published; raise what went wrong since
        the last flush (a refusal, or ``DeliveryFailed`` with the events kept)."""
        with self._cond:
            self._flushing += 1
            self._stalled = False
            self._cond.notify_all()
            try:
                done = self._wait(lambda: (not self._items and not self._inflight) or self._stalled, timeout)
            finally:
                self._flushing -= 1
            errors, self._errors = self._errors, []
            unkept, self._unkept = self._unkept, [0, 0]
        if errors:
            raise errors[0] if len(errors) == 1 else _merged(errors, unkept)
        if not done:
            raise DeliveryFailed(f"{self.pending} events still unpublished after {timeout} s")

    def close(self, timeout: float | None = None) -> None:
        """Flush, then stop the sender."""
        try:
            self.flush(timeout)
        finally:
            with self._cond:
                self._closed = True
                self._cond.notify_all()
            self._thread.join(timeout=5.0)

    def _wait(self, ready: Callable[[], bool], timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not ready():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            self._cond.wait(left)
        return True

    # -- the sender ------------------------------------------------------------------------

    def _due(self) -> float:
        """0 if a batch should go now, else how long until one should (inf: nothing waits)."""
        if not self._items or self._stalled:
            return 0.0 if self._closed else float("inf")
        if len(self._items) >= self.policy.batch_size or self._flushing or self._closed:
            return 0.0
        return max(0.0, self._oldest + self.policy.interval_s - time.monotonic())

    def _run(self) -> None:
        while True:
            with self._cond:
                while (wait := self._due()) > 0:
                    self._cond.wait(None if wait == float("inf") else wait)
                if not self._items or self._stalled:
                    return  # closed, and empty or given up on (close() raised why)
                batch = self._take()
                self._inflight = len(batch)
                if self._items:
                    self._oldest = time.monotonic()
            failed: ClientError | None = None
            try:
                self._deliver(batch)
            except ClientError as error:
                failed = error
            except Exception as error:  # noqa: BLE001 - the sender thread must survive to report it
                failed = PublishRefused(f"publishing failed: {error}")
            with self._cond:
                self._inflight = 0
                if failed is not None:
                    if len(self._errors) >= KEPT_ERRORS:  # the newest stays last: ``_check_open`` raises it
                        dropped = self._errors.pop()
                        self._unkept[0] += 1
                        self._unkept[1] += isinstance(dropped, PublishRefused)
                    self._errors.append(failed)
                    log.warning("agentlog client: %s", failed)
                    if isinstance(failed, DeliveryFailed):
                        self._items.extendleft(reversed(batch))  # kept, in order, for the next flush
                        self._bytes += sum(map(len, batch))
                        self._stalled = True
                        if self._closed:
                            self._cond.notify_all()
                            return
                self.sent += 0 if isinstance(failed, DeliveryFailed) else len(batch)
                self._cond.notify_all()

    def _take(self) -> list[bytes]:
        """The next batch: up to ``batch_size`` events and ``max_batch_bytes``, at least one."""
        items = self._items
        batch = [items.popleft()]
        size = len(batch[0])
        while items and len(batch) < self.policy.batch_size and size + len(items[0]) < self.policy.max_batch_bytes:
            size += len(items[0]) + 1
            batch.append(items.popleft())
        self._bytes -= sum(map(len, batch))
        return batch

    def _deliver(self, batch: list[bytes]) -> None:
        data = b"\n".join(batch)
        p = self.policy
        deadline = time.monotonic() + p.retry_seconds
        delay = p.backoff_s
        while True:
            try:
                report = self.send(data)
                break
            except Exception as error:
                if not transient(error):
                    raise PublishRefused(f"the deployment refused {len(batch)} events: {error}") from error
                if time.monotonic() + delay > deadline:
                    raise DeliveryFailed(f"{len(batch)} events not delivered after {p.retry_seconds:g} s of "
                                         f"retries: {error}") from error  # fmt: skip
                log.info("agentlog client: retrying in %.2f s: %s", delay, error)
                time.sleep(delay * (0.5 + random.random() / 2))  # jitter: clients restarting together spread out
                delay = min(delay * 2, p.backoff_max_s)
        if report.rejected:
            reasons = "; ".join(str(r.get("reason", r)) for r in report.rejections[:3])
            raise PublishRefused(f"{report.rejected} of {len(batch)} events rejected: {reasons}", report.rejections)


def _merged(errors: list[ClientError], unkept: list[int]) -> ClientError:
    """One error for ``errors`` and the ``unkept`` ones counted past them (how many, how
    many of those were refusals)."""
    refused = [e for e in errors if isinstance(e, PublishRefused)]
    rejections = [r for e in refused for r in e.rejections]
    message = f"{len(errors) + unkept[0]} publish failures; first: {errors[0]}"
    all_refused = len(refused) == len(errors) and unkept[1] == unkept[0]
    return PublishRefused(message, rejections) if all_refused else DeliveryFailed(message)


__all__ = ["BatchPolicy", "Buffer"]
