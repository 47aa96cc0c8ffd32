"""The sink side of the embedded service: waiting for the sink stage, and the sink
process that ``agentlog run`` moves it into (the second core).

``SinkSupervision`` is a part of ``EmbeddedService`` (``agentlog.streams.embedded.service``),
kept here so the service reads as its operations; the attributes below are the service's.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from agentlog.sinks.base import StoreError
from agentlog.streams.embedded.sink_process import Remote, RemoteSinks, SinkProcess, index_of
from agentlog.streams.metrics import METRICS
from agentlog.streams.wiring import open_log_store, open_search_index

if TYPE_CHECKING:
    from agentlog.streams.embedded.accepted import AcceptedQueue
    from agentlog.streams.embedded.sink_stage import SinkStage
    from agentlog.streams.config import Settings

log = logging.getLogger("agentlog.service")


class SinkSupervision:
    """Where the sink stage runs (here, or in its own process) and how a reader waits for it."""

    settings: Settings
    lock: threading.RLock
    sink_lock: threading.RLock
    queue: AcceptedQueue
    sinks: SinkStage
    sink_process: SinkProcess | None
    failing: dict[str, str]
    _flush_now: threading.Event
    bus: Any
    log: Any
    index: Any
    driver: Any

    if TYPE_CHECKING:  # the service's own (declared for the type checker only, so none shadows it)
        def _settle(self) -> None: ...
        def _new_sinks(self) -> SinkStage: ...
        def _store_recovered(self, stores: Any) -> None: ...

    def _wait_sinks(self, committed: bool, timeout: float = 10.0) -> None:
        """Serving: wait until the sink stage has written (and, ``committed``, made
        searchable) what the processor applied so far. A failing store answers now, with
        warnings, not late."""
        self._settle()
        target = self.queue.end()
        dlq_end = self.bus.end_offsets()[1]
        deadline = time.monotonic() + timeout
        hurried = False
        while time.monotonic() < deadline and not self.failing:
            done = self.sinks.committed() if committed else self.sinks.written()
            if done[0] >= target and done[1] >= dlq_end:
                return
            if not hurried:
                self._hurry_sinks()
                hurried = True
            time.sleep(0.002)

    def _hurry_sinks(self) -> None:
        if isinstance(self.sinks, RemoteSinks):
            self.sinks.hurry()
        else:
            self._flush_now.set()

    # -- the sink process (``agentlog run``) ----------------------------------------------

    def split_sinks(self) -> None:
        """Move the sink stage, the log and the index into a process of their own (the
        second core); this process keeps the topic, the processor and the state. Queries
        on the log and the index are forwarded to it."""
        with self.lock, self.sink_lock:
            self.driver.checkpoint()
            self.sinks.drain()
            description = self.log.description
            self.log.close()
            self.index.close()
            self._start_sink_process(description)

    def _start_sink_process(self, log_description: str, attempts: int = 3) -> None:
        for attempt in range(1, attempts + 1):
            process = SinkProcess(self.settings)
            try:
                process.start()
                sinks = RemoteSinks(process, self.bus)
                break
            except (StoreError, OSError, EOFError):  # killed while it started: another one resumes
                process.stop()
                if attempt == attempts:
                    raise
        self.sink_process = process
        self.log = Remote(process, "log", {"description": log_description})  # type: ignore[assignment]
        self.index = index_of(process, self.settings)  # type: ignore[assignment]
        self.sinks = sinks  # type: ignore[assignment]

    def _join_sinks(self) -> None:
        """Stop the sink process (it writes what is queued first) and open its stores here."""
        if self.sink_process is None:
            return
        self.sink_process.stop()
        self.sink_process = None
        self.log = open_log_store(self.settings)
        self.index = open_search_index(self.settings)
        self.sinks = self._new_sinks()

    def _restart_dead_sinks(self) -> None:
        """A sink process that died (killed, out of memory) is started again: it resumes
        from its committed positions and writes the rest again, idempotently."""
        process = self.sink_process
        if process is None or process.process.is_alive():
            return
        log.error("the sink process exited (code %s); starting it again", process.process.exitcode)
        with self.sink_lock:
            if self.sink_process is not process:
                return
            process.stop()
            self._start_sink_process(self.log.description)

    def _poll_sinks(self) -> None:
        """The sink process's failing stores and lag into health and metrics."""
        if not isinstance(self.sinks, RemoteSinks):
            return  # joined into this process for a moment (a rebuild)
        status = self.sinks.status()
        failing = status["failing"]
        for store in ("log", "index", "sinks"):
            if store in failing:
                self.failing[store] = failing[store]
                METRICS.store_failed(store, failing[store])
            elif store in self.failing:
                self._store_recovered((store,))
        METRICS.sink_lag.set(status["lag"])
