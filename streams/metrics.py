"""Prometheus metrics of the pipeline, in one registry served at ``GET /metrics``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from agentlog.processors.pipeline import BatchResult


@dataclass
class Metrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self.published = Counter("agentlog_published_total", "Records offered to publish", registry=r)
        self.accepted = Counter("agentlog_events_applied_total", "Events applied by the processors", registry=r)
        self.rejected = Counter("agentlog_events_rejected_total", "Records dead-lettered", registry=r)
        self.duplicates = Counter("agentlog_events_duplicate_total", "Duplicate events ignored", registry=r)
        self.pairs = Counter("agentlog_tool_pairs_total", "Tool-call pair rows written", ["status"], registry=r)
        self.batch_seconds = Histogram("agentlog_batch_seconds", "Time to process one batch", registry=r)
        self.index_lag = Gauge("agentlog_index_lag_events", "Events processed but not yet searchable", registry=r)
        self.sink_lag = Gauge("agentlog_sink_lag_events", "Events applied (visible to state and context) but "
                              "not yet written to the log and index (embedded sink stage)", registry=r)
        self.sink_seconds = Histogram("agentlog_sink_write_seconds", "Time to write one group to the log, pairs "
                                      "and index (embedded sink stage)", registry=r)  # fmt: skip
        self.requests = Histogram("agentlog_http_request_seconds", "HTTP request latency", ["route"], registry=r)
        self.dedup_ids = Gauge("agentlog_dedup_ids", "Event ids a Kafka worker remembers to drop duplicates "
                               "(bounded by AGENTLOG_DEDUP_HORIZON)", registry=r)  # fmt: skip
        self.summaries = Counter("agentlog_llm_summaries_total", "LLM summaries by outcome (accepted, rejected, "
                                 "failed; the log names the thread and the reason)", ["outcome"], registry=r)  # fmt: skip
        self.memory_runs = Counter("agentlog_memory_runs_total", "Memory runs by phase (extract, consolidate) and "
                                   "outcome (ok, failed, fenced: refused by the lease or the broker)",
                                   ["phase", "outcome"], registry=r)  # fmt: skip
        self.memory_pending = Gauge("agentlog_memory_pending", "Memory work waiting, per phase: threads with "
                                    "events not extracted; candidates not in the published view", ["phase"], registry=r)
        self.memory_running = Gauge("agentlog_memory_running", "Live extraction claims / consolidation lease",
                                    ["phase"], registry=r)  # fmt: skip
        self.memory_failed = Gauge("agentlog_memory_failed", "Memory work failing now, per phase: threads whose "
                                   "extraction failed; 1 if the last consolidation failed", ["phase"], registry=r)
        self.memory_last_run = Gauge("agentlog_memory_last_run_timestamp_seconds", "When a memory phase last ran "
                                     "(its last error: `agentlog memory status`)", ["phase"], registry=r)  # fmt: skip
        self.memory_error = Gauge("agentlog_memory_failing", "1 while a memory phase fails (label error: its last "
                                  "error); absent when it works", ["phase", "error"], registry=r)  # fmt: skip
        self._memory_errors: dict[str, str] = {}

        self.store_degraded = Gauge("agentlog_store_degraded", "1 while a store fails (label error: its last "
                                    "error); absent when every store is healthy", ["store", "error"], registry=r)
        self._degraded: dict[str, str] = {}

    def store_failed(self, store: str, error: str) -> None:
        """One series per failing store, labelled with its last error."""
        error = error[:200]
        old = self._degraded.get(store)
        if old is not None and old != error:
            self.store_degraded.remove(store, old)
        self._degraded[store] = error
        self.store_degraded.labels(store, error).set(1)

    def store_recovered(self, store: str) -> None:
        old = self._degraded.pop(store, None)
        if old is not None:
            self.store_degraded.remove(store, old)

    def stores_recovered(self) -> None:
        for store in list(self._degraded):
            self.store_recovered(store)

    def memory_status(self, phases: dict[str, dict[str, Any]]) -> None:
        """The gauges from ``memory status``'s ``phases``."""
        for name, phase in phases.items():
            self.memory_pending.labels(name).set(phase["pending"])
            self.memory_running.labels(name).set(phase["running"])
            self.memory_failed.labels(name).set(phase["failed"])
            if phase["last_run"] is not None:
                self.memory_last_run.labels(name).set(phase["last_run"])
            old = self._memory_errors.pop(name, None)
            if old is not None:
                self.memory_error.remove(name, old)
            if phase["failed"] and phase["last_error"]:
                self._memory_errors[name] = phase["last_error"][:200]
                self.memory_error.labels(name, self._memory_errors[name]).set(1)

    def processed(self, result: BatchResult) -> None:
        """Count a batch's outcome (both deployments' processors)."""
        self.accepted.inc(len(result.applied))
        self.duplicates.inc(len(result.duplicates))
        for pair in result.pairs:
            self.pairs.labels(pair.status).inc()


METRICS = Metrics()

__all__ = ["METRICS", "Metrics"]
