"""The LLM summariser's background job, off the hot path (embedded deployment).

The stream processor folds with the deterministic summariser only. This job, run beside
``agentlog run``'s loop when ``AGENTLOG_SUMMARY_URL`` is set, takes the threads whose
fold-made summary advanced, sends the LLM the state, that summary and the events folded
since the job's last try, and checks the answer (``agentlog.processors.compaction.verdict``).
A record that passes is published as a ``compaction`` event: the processor applies it as
is, so the live state, a replay and ``rebuild`` all hold it. One that fails is logged with
its reason and the deterministic summary stays. A context read never comes here.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import orjson
from pydantic import ValidationError

from agentlog.processors.compaction import Summariser, compaction_event, verdict
from agentlog.processors.redaction import redact_value
from agentlog.processors.validation import validate
from agentlog.schemas.events import Envelope
from agentlog.schemas.handoff import HandoffRecord
from agentlog.streams.metrics import METRICS

log = logging.getLogger("agentlog.summary")

FOLDED_EVENTS = 300
"""At most this many of the newest folded events go to the LLM; the summary it is given
covers the older ones."""
EVERY_S = 1.0
"""How often the job looks for threads whose summary advanced."""


class SummaryJob:
    """Runs over an ``EmbeddedService`` (its live threads, topic and publisher)."""

    def __init__(self, service: Any, summariser: Summariser) -> None:
        self.service = service
        self.summariser = summariser
        self.tried: dict[str, str] = {}
        """thread -> the cover the job last summarised (accepted or not): not tried twice."""

    def due(self) -> list[str]:
        """Threads whose summary the fold advanced since the job last looked."""
        with self.service.lock:
            threads = self.service.driver.pipeline.threads.items()
            return [t for t, tp in threads if tp.state.summary is not None and tp.state.summary_event_id is None
                    and tp.state.summary_covers_through != self.tried.get(t)]  # fmt: skip

    def run_once(self) -> dict[str, str]:
        """One pass: thread -> outcome (``accepted``, or why it was rejected or failed)."""
        return {thread_id: self.summarise(thread_id) for thread_id in self.due()}

    def run(self, stop: threading.Event, every_s: float = EVERY_S) -> None:
        while not stop.wait(every_s):
            try:
                self.run_once()
            except Exception:  # noqa: BLE001 - the job must not die: the next pass retries
                log.exception("the summary job failed; retrying in %.0f s", every_s)

    def summarise(self, thread_id: str) -> str:
        state, previous, orphans, cover = self._read_state(thread_id)
        folded = self._folded(thread_id, self.tried.get(thread_id), cover)
        self.tried[thread_id] = cover
        if not folded or folded[-1].event_id != cover:
            return self._outcome(thread_id, "failed", f"the covered event {cover!r} is not in the topic")
        try:
            answer = self.summariser(state, folded, previous)
        except Exception as error:  # noqa: BLE001 - a remote service may fail in any way
            return self._outcome(thread_id, "failed", f"the summariser failed: {str(error)[:300] or type(error).__name__}")
        record, reason = verdict(answer, state, folded, previous, orphans)
        if record is None:
            return self._outcome(thread_id, "rejected", reason)
        clean = HandoffRecord.model_validate(redact_value(record.model_dump(mode="json")))
        event = compaction_event(thread_id, state["project"], clean, folded[-1], state["window_id"], "llm")
        report = self.service.publish(orjson.dumps(event))
        if report.accepted != 1:
            return self._outcome(thread_id, "failed", f"the compaction was not accepted: {report.rejections}")
        return self._outcome(thread_id, "accepted", event["event_id"])

    def _read_state(self, thread_id: str) -> tuple[dict[str, Any], HandoffRecord | None, set[str], str]:
        """(the state redacted, as the LLM sees it; the summary; the orphans; its cover)."""
        with self.service.lock:
            tp = self.service.driver.pipeline.threads[thread_id]
            public = tp.state.public()
            orphans = set(tp.pairer.state.orphans)
        try:
            previous = HandoffRecord.model_validate(public["summary"])
        except ValidationError:
            previous = None
        # The LLM is an outside service: it is sent redacted text only (ids stay as they are).
        state = {**redact_value(public), **{k: public[k] for k in ("project", "window_id", "summary_covers_through")}}
        return state, previous, orphans, public["summary_covers_through"]

    def _folded(self, thread_id: str, after: str | None, cover: str) -> list[Envelope]:
        """The thread's events after ``after`` through ``cover``, first copies, in topic
        order (the newest ``FOLDED_EVENTS``)."""
        bus = self.service.bus
        end = bus.find(cover)
        if end is None:
            return []
        start = bus.find(after) if after is not None else None
        records = bus.thread_records(thread_id, start.offset if start is not None else -1, end.offset)
        events: dict[str, Envelope] = {}
        for r in records:
            if isinstance(e := validate(r.value), Envelope):
                events.setdefault(e.event_id, e)
        return list(events.values())[-FOLDED_EVENTS:]

    @staticmethod
    def _outcome(thread_id: str, outcome: str, detail: str) -> str:
        METRICS.summaries.labels(outcome).inc()
        if outcome == "accepted":
            log.info("thread %s: the LLM summary is published as %s", thread_id, detail)
            return outcome
        log.warning("thread %s: LLM summary %s: %s", thread_id, outcome, detail)
        return f"{outcome}: {detail}"


def start(service: Any, summariser: Summariser | None, stop: threading.Event) -> Callable[[], None]:
    """Start the job in a daemon thread when a summariser is configured; returns a join."""
    if summariser is None:
        return lambda: None
    worker = threading.Thread(target=SummaryJob(service, summariser).run, args=(stop,), name="agentlog-summary",
                              daemon=True)  # fmt: skip
    worker.start()
    return lambda: worker.join(timeout=5.0)


__all__ = ["EVERY_S", "FOLDED_EVENTS", "SummaryJob", "start"]
