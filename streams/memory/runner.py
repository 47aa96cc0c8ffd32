"""Memory that runs on its own: phase 1 for each thread idle for
``AGENTLOG_MEMORY_IDLE_SECONDS``, then phase 2, with the same claims, leases and fencing
as ``agentlog memory ...``.

It runs beside ``agentlog run``'s loop (embedded) and in each Kafka worker, in a daemon
thread with its own connections, never in the processor's loop: a run costs the hot path
nothing but SQLite's locks. Idle means the thread's last offset in the topic has not
moved for the idle time by this process's clock (event timestamps are the agents' and
may lie). On Kafka each pass first copies new events from the topic and adopts the newest
view committed to the memory topic; the publication itself is fenced by the broker
(``agentlog.streams.memory.kafka_view``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from agentlog.sinks.base import StaleToken
from agentlog.streams.config import Settings
from agentlog.streams.memory.jobs import Memory, default_owner
from agentlog.streams.metrics import METRICS

log = logging.getLogger("agentlog.memory")

Clock = Callable[[], float]

BACKGROUND_REST = 3.0
"""On Kafka, the runner's copy of the topic rests three times as long as each batch took:
at most a quarter of a core, so a large catch-up (a backlog just drained) never takes the
processor's CPU in one burst."""
GAUGES_EVERY_S = 30.0
"""How often an idle runner refreshes the memory gauges (at once after a run)."""


def every_s(idle_s: float) -> float:
    """How often a runner looks: a quarter of the idle time, within [0.2 s, 30 s] (on
    Kafka a look copies new events and reads the memory topic)."""
    return min(max(idle_s / 4, 0.2), 30.0)


class MemoryRunner:
    def __init__(self, settings: Settings, clock: Clock = time.monotonic, busy: Callable[[], bool] | None = None) -> None:
        self.settings = settings
        self.clock = clock
        self.busy = busy or (lambda: False)
        """True while the processor has a backlog: runs wait for the worker to be idle."""
        self.owner = default_owner("memory-runner")
        self.last_moved: dict[str, tuple[int, float]] = {}
        """thread -> (its end offset, when this runner first saw it there)."""
        self.consolidation_owed = False
        self.topic_end = -1
        self.stale = True
        """Set after a run: the watermarks moved, so the pending threads are read again."""
        self.pending: set[str] = set()
        self.retry_at: dict[str, float] = {}
        self.gauges_at = float("-inf")

    def due(self, job: Memory) -> list[str]:
        """Threads idle for the idle time with events not extracted yet. The threads'
        ends and watermarks are read again only when the topic grew or after a run: an
        idle deployment costs one ``max(offset)`` per pass."""
        now = self.clock()
        end = job.bus.end_offsets()[0]
        if end != self.topic_end or self.stale:
            self.topic_end, self.stale = end, False
            ends = job.bus.thread_ends()
            rows = job.store.extraction_rows()
            watermarks = {r["thread_id"]: r["watermark"] for r in rows}
            # A failed thread waits for its back-off (in the store's wall-clock time), and
            # one past its last attempt waits for a command: no pass spins on it.
            self.retry_at = {r["thread_id"]: r["retry_at"] for r in rows if r["retry_at"]}
            for thread_id, latest in ends.items():
                if self.last_moved.get(thread_id, (None,))[0] != latest:
                    self.last_moved[thread_id] = (latest, now)
            self.pending = {t for t, latest in ends.items() if watermarks.get(t, 0) < latest}
        idle_s = self.settings.memory_idle_seconds
        wall = job.clock()
        return sorted(t for t in self.pending
                      if now - self.last_moved[t][1] >= idle_s and self.retry_at.get(t, 0) <= wall)  # fmt: skip

    def run_once(self) -> dict[str, Any]:
        """One pass: extract the idle threads, consolidate if anything was extracted (or a
        consolidation is owed from a failed pass), refresh the gauges."""
        job = Memory(self.settings)
        try:
            return self._pass(job)
        finally:
            job.close()

    def _pass(self, job: Memory) -> dict[str, Any]:
        outcome: dict[str, Any] = {}
        try:
            return self._work(job, outcome)
        finally:
            if outcome or self.clock() - self.gauges_at >= GAUGES_EVERY_S:
                self.gauges_at = self.clock()
                METRICS.memory_status(job.status(pull=False)["phases"])

    def _work(self, job: Memory, outcome: dict[str, Any]) -> dict[str, Any]:
        lease_s = self.settings.memory_lease_seconds
        if self.settings.distributed:
            job.pull(self.busy, BACKGROUND_REST)
            if self.busy():  # the copy stopped early: no thread is judged idle on part of it
                return outcome
        due = self.due(job)
        # A scrape during a run (an LLM extractor may take minutes) sees it under way: the
        # full refresh from the store comes after the run.
        METRICS.memory_pending.labels("extract").set(len(self.pending))
        if due:
            outcome["extracted"] = []
            METRICS.memory_running.labels("extract").set(len(due))
            report = job.extract(self.owner, lease_s, only=due)
            outcome["extracted"] = report.extracted_threads
            self.consolidation_owed |= bool(report.extracted_threads)
            self.stale = True
        if self.consolidation_owed:
            outcome.setdefault("consolidated", {"published": False})
            METRICS.memory_running.labels("consolidate").set(1)
            try:
                outcome["consolidated"] = job.consolidate(
                    self.owner, lease_s, pause_before_publish=self.settings.memory_pause_before_publish_seconds)
            except StaleToken as error:  # logged and counted by consolidate; the next pass retries
                outcome["consolidated"] = {"published": False, "reason": str(error)}
            else:
                self.consolidation_owed = outcome["consolidated"].get("reason", "").startswith("lease held")
        elif self.settings.distributed:
            job.adopt(lease_s)  # another worker's newer view, committed to the memory topic
        return outcome

    def run(self, stop: threading.Event) -> None:
        period = every_s(self.settings.memory_idle_seconds)
        while not stop.wait(period):
            try:
                if self.busy():
                    continue
                self.run_once()
            except Exception:  # noqa: BLE001 - the runner must not die: the next pass retries
                log.exception("a memory pass failed; retrying in %.1f s", period)


def start(settings: Settings, stop: threading.Event, busy: Callable[[], bool] | None = None) -> Callable[[], None]:
    """Start a runner in a daemon thread unless ``AGENTLOG_MEMORY_IDLE_SECONDS`` is 0;
    returns a join."""
    if settings.memory_idle_seconds <= 0:
        return lambda: None
    runner = MemoryRunner(settings, busy=busy)
    worker = threading.Thread(target=runner.run, args=(stop,), name="agentlog-memory", daemon=True)
    worker.start()
    return lambda: worker.join(timeout=5.0)


__all__ = ["MemoryRunner", "every_s", "start"]
