"""The live loops of ``agentlog run`` on the embedded deployment: the processor, the
sink stage (on a thread, or watched in its own process), and how a failing store is
reported and retried.

``LiveLoops`` is a part of ``EmbeddedService`` (``agentlog.streams.embedded.service``),
kept here so the service reads as its operations; the attributes below are the service's.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from agentlog.streams import gc_heap, summary_job
from agentlog.streams.memory import runner as memory_runner
from agentlog.streams.metrics import METRICS
from agentlog.streams.sink_guard import StoreUnavailable

if TYPE_CHECKING:
    from agentlog.processors.compaction import Summariser
    from agentlog.streams.config import Settings
    from agentlog.streams.embedded.sink_process import SinkProcess

log = logging.getLogger("agentlog.service")

RETRY_MAX_S = 30.0
"""The longest wait between retries of a store that is down."""
SETTLE_AFTER_EVENTS = 10_000
"""Events the processor's loop applies before, once idle, what they built joins the frozen
heap (``gc_heap.settle``): a long-running server's threads would otherwise be walked by
every full collection, a pause that grows with them."""


class LiveLoops:
    """The background loops ``agentlog run`` runs beside its HTTP server."""

    settings: Settings
    lock: threading.RLock
    sink_lock: threading.RLock
    sinks: Any
    driver: Any
    sink_process: SinkProcess | None
    summariser: Summariser | None
    failing: dict[str, str]
    serving: bool
    interrupted: bool
    _frozen: bool
    _flush_now: threading.Event

    if TYPE_CHECKING:  # the service's own (declared for the type checker only, so none shadows it)
        def _new_driver(self) -> Any: ...
        def _new_sinks(self) -> Any: ...
        def _apply(self, step: Callable[[], int]) -> int: ...
        def _run_until_idle(self, on_progress: Callable[[int, int], None] | None = None) -> tuple[int, int]: ...
        def mirror_memory(self) -> dict[str, int]: ...
        def _restart_dead_sinks(self) -> None: ...
        def _poll_sinks(self) -> None: ...

    def run_forever(self, stop: threading.Event, idle_sleep: float = 0.005) -> None:
        """The live loops of ``agentlog run`` (background threads of the server): the
        processor here, the sink stage beside it (on a thread, or watched in its own
        process after ``split_sinks``)."""
        self.serving = True
        # The LLM summariser, when configured, runs beside these loops, never in them.
        join_summaries = summary_job.start(self, self.summariser, stop)
        # So does memory, for threads idle long enough, while the processor has no backlog.
        join_memory = memory_runner.start(self.settings, stop, busy=self._backlog)
        sinks = self._watch_sinks if self.sink_process is not None else self._sink_loop
        sink_loop = threading.Thread(target=sinks, args=(stop,), name="sinks", daemon=True)
        sink_loop.start()
        delay = 0.0
        rebuild = False
        unsettled = 0  # events applied since what they built last joined the frozen heap
        while not stop.is_set():
            try:
                if rebuild:
                    with self.lock:
                        # The failed batch is applied in memory but maybe not handed off:
                        # start again from the checkpoint, replaying into the same queue rows.
                        self.driver = self._new_driver()
                    rebuild = False
                with self.lock:
                    n = self.driver.step()
                unsettled += n
                if n == 0 and unsettled >= SETTLE_AFTER_EVENTS and self._frozen:
                    gc_heap.settle()  # idle: one collection now spares every later full pass
                    unsettled = 0
                if n == 0:
                    stop.wait(idle_sleep)
            except Exception as error:  # noqa: BLE001 - state.db failed: back off, resume from the checkpoint
                delay = self._store_failed(error, delay, "pipeline")
                rebuild = True
                stop.wait(delay)
            else:
                if self.failing:
                    self._store_recovered(("state", "pipeline"))
                delay = 0.0
        sink_loop.join()
        try:
            with self.lock:
                if rebuild:
                    self.driver = self._new_driver()
            if self.interrupted:
                pass
            elif self.sink_process is not None:
                with self.lock:  # the sink process writes the rest when it is stopped (close)
                    self._apply(lambda: self.driver.run_until_idle().processed)
            else:
                self._run_until_idle()
        except Exception as error:  # noqa: BLE001 - stopping: the topic keeps what is not written
            log.error("stopped with a store still failing (the rest is processed on the next start): %s", error)
        join_summaries()
        join_memory()

    def _backlog(self) -> bool:
        with self.lock:
            return self.driver.pending() > 0

    def _sink_loop(self, stop: threading.Event, idle_sleep: float = 0.01) -> None:
        """The sink stage of ``agentlog run``: group commits off the read path; a failed
        write is retried from the stage's committed positions, with back-off."""
        last_mirror = delay = 0.0
        retry = False
        while not stop.is_set():
            try:
                with self.sink_lock:
                    if retry:
                        self.sinks = self._new_sinks()
                    if retry or self._flush_now.is_set():
                        self._flush_now.clear()
                        n = self.sinks.drain()
                    else:
                        n = self.sinks.step()
                    if time.monotonic() - last_mirror > self.settings.checkpoint_seconds:
                        self.mirror_memory()
                        last_mirror = time.monotonic()
            except Exception as error:  # noqa: BLE001 - a store failed: back off, retry from the commit
                delay = self._store_failed(error, delay, "sinks")
                retry = True
                stop.wait(delay)
                continue
            if retry:
                self._store_recovered(("log", "index", "sinks"))
            retry, delay = False, 0.0
            if n == 0:
                stop.wait(idle_sleep)

    def _watch_sinks(self, stop: threading.Event, every: float = 0.2) -> None:
        """The sink process's health into this one's, and the memory mirror on its cadence."""
        last_mirror = 0.0
        while not stop.wait(every):
            try:
                self._restart_dead_sinks()
                self._poll_sinks()
                if time.monotonic() - last_mirror > self.settings.checkpoint_seconds:
                    self.mirror_memory()
                    last_mirror = time.monotonic()
            except Exception as error:  # noqa: BLE001 - reported; the sink process restarts nothing here
                self.failing["sinks"] = str(error).strip()[:500] or type(error).__name__
                METRICS.store_failed("sinks", self.failing["sinks"])

    def _sink_lag(self) -> int:
        lag = self.sinks.lag()  # the sink process's: as last polled
        METRICS.sink_lag.set(lag)
        return lag

    def _store_failed(self, error: Exception, delay: float, default: str) -> float:
        """Report a failing store (``/healthz``, ``/metrics``) and the next back-off."""
        store = error.store if isinstance(error, StoreUnavailable) else default
        message = str(error).strip()[:500] or type(error).__name__
        self.failing[store] = message
        METRICS.store_failed(store, message)
        delay = min(max(1.0, delay * 2), RETRY_MAX_S)
        log.exception("the %s store failed; retrying from the last checkpoint in %.0f s", store, delay)
        return delay

    def _store_recovered(self, stores: Sequence[str]) -> None:
        back = [s for s in stores if s in self.failing]
        if back:
            log.warning("stores back: %s", ", ".join(back))
        for store in back:
            self.failing.pop(store, None)
            METRICS.store_recovered(store)

    def warnings(self) -> list[str]:
        """Why an answer may be stale right now (empty when it is not)."""
        return [f"{store} failing (the answer may be stale): {error}" for store, error in self.failing.items()]
