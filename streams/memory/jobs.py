"""``agentlog memory``: phase 1 (per-thread extraction) and phase 2 (consolidation) as
jobs over the embedded topic and the memory store. The logic is ``agentlog.processors.memory``;
this module claims, retries, fences and publishes."""

from __future__ import annotations

import hashlib

import logging
import multiprocessing
import os
import time
import uuid
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

import orjson

from agentlog.processors import memory
from agentlog.processors.memory_extract.thread import KEPT_RULE, context, kept_record
from agentlog.processors.pipeline import Record
from agentlog.processors.redaction import redact_value
from agentlog.processors.validation import validate
from agentlog.schemas.events import Envelope
from agentlog.sinks.base import StaleToken, Topic
from agentlog.streams.embedded.topic import SqliteEventBus
from agentlog.streams.config import Settings
from agentlog.streams.embedded.datadir import open_memory
from agentlog.streams.api.service import NotFound
from agentlog.streams.embedded.publisher import publish_to
from agentlog.streams.metrics import METRICS

log = logging.getLogger("agentlog.memory")

Clock = Callable[[], float]


def default_owner(role: str) -> str:
    return f"{role}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


@dataclass
class ExtractReport:
    owner: str
    extracted_threads: list[str] = field(default_factory=list)
    skipped: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    candidates: int = 0
    refused: int = 0
    llm_rejected: int = 0
    """Proposals of the LLM extractor that their cited events did not back."""
    parsed: int = 0
    """Records read from the topic and parsed: a thread's new ones only, when its last run's
    position is stored (else the thread's whole history)."""


def revoke_event_id(event_id: str) -> str:
    """The id of the ``revoke`` event that withdraws ``event_id``: ``revoke.<id>``, or
    ``revoke.<digest>`` when that would pass the id limit (cutting it made two long ids
    with the same start withdraw each other's revocation)."""
    whole = f"revoke.{event_id}"
    return whole if len(whole) <= 128 else "revoke." + hashlib.sha256(event_id.encode()).hexdigest()[:40]


@dataclass
class ThreadRead:
    """A thread's events for one extraction: ``events[start:]`` are new, the ones before
    context; ``records`` their raw values; ``parsed`` how many records the topic gave."""

    events: list[Envelope]
    records: list[bytes]
    start: int
    parsed: int


COPY_FILE = "kafka_events.db"
"""Where a Kafka deployment's memory keeps its copy of the events topic (``kafka_feed``)."""


class Memory:
    """The memory jobs of one data directory."""

    def __init__(self, settings: Settings, clock: Clock = time.time) -> None:
        self.settings = settings
        self.clock = clock
        # On Kafka, the events topic's copy has a file of its own: an embedded service
        # opened on the same directory (an analyst's `agentlog sql`) must not take it for
        # its own topic and write its events into the log a second time.
        events = COPY_FILE if settings.distributed else "topic.db"
        self.bus: Topic = SqliteEventBus(str(settings.path(events)))
        self.store = open_memory(settings.path("memory.db"))
        self.llm = None
        if settings.memory_llm and settings.summary_url:
            from agentlog.streams.memory.llm_extract import LlmExtractor  # noqa: PLC0415 - optional

            self.llm = LlmExtractor(settings.summary_url, settings.summary_model)

    # -- phase 1 ------------------------------------------------------------------------

    def extract(self, owner: str | None = None, lease_s: float = 60.0,
                fail: Callable[[str], None] | None = None, only: Collection[str] | None = None) -> ExtractReport:  # fmt: skip
        """Extract every thread (of ``only``, when given) with new events that no one else
        holds. ``fail`` is a fault-injection hook for tests (called per thread before its commit)."""
        report = ExtractReport(owner or default_owner("extractor"))
        self.store.run_started("extract", self.clock())
        try:
            self.store.rewrite_contexts(kept_record, KEPT_RULE)  # kept by an older rule: redacted now
            self._extract(report, lease_s, fail, only)
        except BaseException as error:
            self.store.run_finished("extract", self.clock(), repr(error))
            METRICS.memory_runs.labels("extract", "failed").inc()
            raise
        failed = "; ".join(f"{t}: {e}" for t, e in sorted(report.failed.items())) or None
        self.store.run_finished("extract", self.clock(), failed)
        METRICS.memory_runs.labels("extract", "failed" if failed else "ok").inc()
        return report

    def _extract(self, report: ExtractReport, lease_s: float, fail: Callable[[str], None] | None,
                 only: Collection[str] | None) -> ExtractReport:  # fmt: skip
        for thread_id, latest in sorted(self.bus.thread_ends().items()):
            if only is not None and thread_id not in only:
                continue
            watermark = self.store.claim(thread_id, report.owner, latest, self.clock(), lease_s)
            if watermark is None:
                report.skipped += 1
                continue
            try:
                read = self.thread_events(thread_id, watermark, latest)
                report.parsed += read.parsed
                events, start = read.events, read.start
                project = self.thread_project(thread_id)
                found = memory.extract(events, project, start)
                report.llm_rejected += self.llm_candidates(events, start, project, found)
                if fail is not None:
                    fail(thread_id)
                committed = self.store.commit_extraction(
                    thread_id, report.owner, latest, found.candidates, found.revocations,
                    found.file_touches, self.clock(), found.refused, found.commits,
                    [kept_record(read.records[i]) for i in context(events)],
                )  # fmt: skip
            except Exception as error:  # noqa: BLE001 - recorded, retried with backoff
                attempts = self.store.fail_extraction(thread_id, report.owner, repr(error), self.clock())
                log.warning("extraction of thread=%s failed (attempt %d): %s", thread_id, attempts, error)
                report.failed[thread_id] = repr(error)
                continue
            if committed:
                report.extracted_threads.append(thread_id)
                report.candidates += len(found.candidates)
                report.refused += len(found.refused)
            else:
                report.failed[thread_id] = "claim lost (lease expired)"
        return report

    def llm_candidates(self, events: list[Envelope], start: int, project: str | None,
                       found: memory.Extraction) -> int:  # fmt: skip
        """Add the LLM extractor's checked proposals to ``found``; how many were rejected.
        A failing call fails the thread's extraction, which is retried (never skipped)."""
        if self.llm is None:
            return 0
        answer = self.llm(events, start)
        candidates, rejected = memory.proposed(events, answer, project, start)
        found.candidates += candidates
        for r in rejected:
            log.info("LLM proposal %s of %s rejected: %s", r.key, r.source_event_id, r.reason)
        return len(rejected)

    def thread_events(self, thread_id: str, watermark: int, latest: int) -> ThreadRead:
        """The thread's events up to ``latest``, first copy of each id, and the index of the
        first one after ``watermark``: the ones before are only context (the call a new
        result answers, the commit), so raw-event extraction is the same however the
        thread's runs were cut. Where the last run stopped at ``watermark``, the context is
        the few records it kept (``memory_extract.thread.context``) and only the records
        after it are read; else the thread is read from its start."""
        stored = self.store.resume(thread_id)
        if stored is None or stored[0] != watermark:  # never run, or stored before this field
            return self._parse(self.bus.thread_records(thread_id, 0, latest), watermark, set())
        kept = [(e, r) for r in stored[1] if isinstance(e := validate(r), Envelope)]
        read = self._parse(self.bus.thread_records(thread_id, watermark, latest), watermark, set())
        # A copy of an event the thread held before counts once, as a whole read would count it.
        earlier = self.bus.seen_before(thread_id, [e.event_id for e in read.events], watermark)
        new = [(e, r) for e, r in zip(read.events, read.records) if e.event_id not in earlier]
        return ThreadRead([e for e, _ in kept + new], [r for _, r in kept + new], len(kept), read.parsed)

    @staticmethod
    def _parse(records: list[Record], watermark: int, seen: set[str]) -> ThreadRead:
        read = ThreadRead([], [], 0, len(records))
        for record in records:
            e = validate(record.value)
            if isinstance(e, Envelope) and e.event_id not in seen:
                seen.add(e.event_id)
                read.events.append(e)
                read.records.append(record.value)
                read.start += record.offset <= watermark
        return read

    def thread_project(self, thread_id: str) -> str | None:
        """The project of a thread: its first event's (the one its state has too)."""
        first = self.bus.first_record(thread_id)
        event = validate(first.value) if first is not None else None
        return event.project if isinstance(event, Envelope) else None

    # -- phase 2 ------------------------------------------------------------------------

    def consolidate(self, owner: str | None = None, lease_s: float = 60.0,
                    high_risk: list[str] | None = None,
                    pause_before_publish: float = 0.0) -> dict[str, Any]:  # fmt: skip
        """Phase 2 under the data directory's lease; on Kafka, the view is published through
        the memory topic first, fenced by the broker (``agentlog.streams.memory.kafka_view``)."""
        owner = owner or default_owner("consolidator")
        token = self.store.acquire(owner, self.clock(), lease_s)
        if token is None:
            held = self.store.lease_row() or {}
            return {"published": False, "reason": f"lease held by {held.get('owner')}", "owner": owner}
        self.store.run_started("consolidate", self.clock())
        try:
            result = self._consolidate(owner, token, lease_s, high_risk, pause_before_publish)
        except StaleToken as error:
            log.warning("memory consolidation of %s refused: %s", owner, error)
            self.store.run_finished("consolidate", self.clock(), str(error), fenced=True)
            METRICS.memory_runs.labels("consolidate", "fenced").inc()
            raise
        except BaseException as error:
            self.store.run_finished("consolidate", self.clock(), repr(error))
            METRICS.memory_runs.labels("consolidate", "failed").inc()
            raise
        finally:
            self.store.release(owner, token)
        self.store.run_finished("consolidate", self.clock())
        METRICS.memory_runs.labels("consolidate", "ok").inc()
        return result

    def _consolidate(self, owner: str, token: int, lease_s: float, high_risk: list[str] | None,
                     pause_before_publish: float) -> dict[str, Any]:  # fmt: skip
        adopted = self._adopt(owner, token) if self.settings.distributed else None
        view = memory.consolidate(
            self.store.candidates(), self.store.revocations(), self.store.file_touches(),
            now_ms=self.clock() * 1000.0, high_risk_keys=high_risk or self.high_risk(),
            commits=self.store.commit_sightings(),
        )  # fmt: skip
        version, current = self.store.published()
        facts = {k: f.as_dict() for k, f in view.items()}
        if facts == current:
            return {"published": False, "reason": "no change", "version": version, "token": token}
        if not self.store.heartbeat(owner, token, self.clock(), lease_s):
            raise StaleToken(f"lease of {owner} (token {token}) expired while consolidating")
        extra: dict[str, Any] = {}
        if adopted is not None:  # Kafka: the broker's fence decides, before anything is local
            from agentlog.streams.memory import kafka_view  # noqa: PLC0415 - Kafka deployment only

            sent = kafka_view.publish_view(self.settings, facts, owner, adopted, lease_s, pause_before_publish)
            extra = {"kafka_version": sent.version, "epoch": sent.epoch}
            pause_before_publish = 0.0
        built = self.store.build(view, owner, token, self.clock())
        if pause_before_publish:
            time.sleep(pause_before_publish)  # a slow or paused worker, for crash drills
        self.store.publish(built, owner, token, self.clock())
        return {"published": True, "version": built, "token": token, "facts": len(view), "owner": owner, **extra}

    def _adopt(self, owner: str, token: int) -> int:
        """Kafka: make the newest committed view of the memory topic this data directory's
        published view; returns its version there (0 before the first)."""
        from agentlog.streams.memory import kafka_view  # noqa: PLC0415 - Kafka deployment only

        newest = kafka_view.latest_view(self.settings)
        if newest is None:
            return 0
        if newest.facts != self.store.published()[1]:
            built = self.store.build(newest.facts, owner, token, self.clock())
            self.store.publish(built, owner, token, self.clock())
        return newest.version

    def adopt(self, lease_s: float = 60.0) -> bool:
        """Kafka: adopt the newest committed view now, under the lease (``False`` if
        another run holds it: that run adopts it)."""
        owner = default_owner("reader")
        token = self.store.acquire(owner, self.clock(), lease_s)
        if token is None:
            return False
        try:
            self._adopt(owner, token)
            return True
        finally:
            self.store.release(owner, token)

    def _newest(self) -> tuple[int, dict[str, Any]]:
        """The published view: on Kafka, the newest one committed to the memory topic by any
        machine, read as it is (a read writes nothing here; the runner adopts it)."""
        if self.settings.distributed:
            from agentlog.streams.memory import kafka_view  # noqa: PLC0415 - Kafka deployment only

            newest = kafka_view.latest_view(self.settings)
            if newest is not None:
                return newest.version, newest.facts
        return self.store.published()

    def high_risk(self) -> list[str]:
        raw = os.environ.get("AGENTLOG_MEMORY_HIGH_RISK_KEYS", "credentials.*,secret.*,*.password,*.api_key")
        return [k.strip() for k in raw.split(",") if k.strip()]

    # -- reads and admin ----------------------------------------------------------------

    def pull(self, busy: Callable[[], bool] = lambda: False, rest: float = 0.0) -> int:
        """On the Kafka deployment, copy new events from the topic first (a no-op when
        embedded, where publishing writes the topic file itself); stops early while
        ``busy``, paced by ``rest`` (``agentlog.streams.memory.kafka_feed.pull_events``)."""
        if not self.settings.distributed:
            return 0
        from agentlog.streams.memory.kafka_feed import pull_events  # noqa: PLC0415 - Kafka deployment only

        return pull_events(self.settings, self.bus, busy, rest)

    def show(self, project: str | None = None, key: str | None = None) -> dict[str, Any]:
        version, facts = self._newest()
        items = [
            f for f in facts.values()
            if (project is None or f["project"] == project) and (key is None or f["key"] == key)
        ]  # fmt: skip
        # Redacted again as shown: a fact keyed db.password loses its value, and facts stored
        # before a pattern existed get it too.
        return {"version": version, "project": project, "facts": redact_value(items)}

    def revoke(self, event_id: str, reason: str | None = None, lease_s: float = 60.0) -> dict[str, Any]:
        """Withdraw a source: a ``revoke`` event in its thread (so the log has it), then a
        consolidation under the lease, so the published view is rebuilt without it at once
        (SPEC §6). If another consolidation holds the lease, the revocation waits for the
        next one, and ``view`` says so."""
        self.pull()
        target = self.bus.find(event_id)
        parsed = validate(target.value) if target is not None else None
        if not isinstance(parsed, Envelope):
            raise LookupError(f"event {event_id!r} was never accepted; nothing to revoke")
        revoke_id = revoke_event_id(event_id)
        earlier = self.bus.find(revoke_id)
        revoked = validate(earlier.value) if earlier is not None else None
        if isinstance(revoked, Envelope):
            # Revoked already: the log has its revoke (its reason stands), and one sent again
            # (its own time, so other bytes) would only be dead-lettered as a conflicting duplicate.
            first_reason = getattr(revoked.payload, "reason", None)
            project = self.thread_project(parsed.thread_id)
            self.store.add_revocation(memory.Revocation(event_id, revoke_id, first_reason, project))
            return {"revoked": event_id, "revoke_event_id": revoke_id, "already_revoked": True,
                    "view": self.consolidate(lease_s=lease_s)}  # fmt: skip
        now = datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")
        # The thread's project (its first event's), not the target's: a target that named
        # another project would make a revoke memory itself refuses as out of scope.
        project = self.thread_project(parsed.thread_id) or parsed.project
        body = orjson.dumps({"event_id": revoke_id, "thread_id": parsed.thread_id, "kind": "revoke",
                             "ts": now, "project": project, "source": "user",
                             "payload": {"target_event_id": event_id, "reason": reason}})  # fmt: skip
        if self.settings.distributed:  # the workers' state and log must see it too
            from agentlog.streams.kafka.publisher import KafkaPublisher  # noqa: PLC0415

            publisher = KafkaPublisher(self.settings)
            publisher.publish(body)
            publisher.close()
        else:
            publish_to(self.bus, body, self.settings.max_event_bytes)
        self.store.add_revocation(memory.Revocation(event_id, revoke_id, reason, project))
        view = self.consolidate(lease_s=lease_s)
        return {"revoked": event_id, "revoke_event_id": revoke_id, "view": view}

    def status(self, pull: bool = True) -> dict[str, Any]:
        if pull:
            self.pull()
        now = self.clock()
        ends = self.bus.thread_ends()
        rows = {r["thread_id"]: r for r in self.store.extraction_rows()}
        pending = [t for t, end in ends.items() if rows.get(t, {}).get("watermark", 0) < end]
        claims = [r for r in rows.values() if r["owner"]]
        version, facts = self.store.published()
        accounted = {s for f in facts.values() for s in f["supporting"] + f["contradicting"] + f["revoked"]}
        candidates = self.store.candidates()
        project_of = {c.source_event_id: c.project for c in candidates}
        revocations = self.store.revocations()
        revoked = {r.target_event_id for r in revocations
                   if r.project in (None, project_of.get(r.target_event_id))}  # fmt: skip
        waiting = [c.source_event_id for c in candidates
                   if c.source_event_id not in accounted and c.source_event_id not in revoked]  # fmt: skip
        lease = self.store.lease_row()
        refused = self.store.refused()
        # A revoke from another project's thread withdraws nothing: say so.
        ignored = [asdict(r) for r in revocations if r.project is not None
                   and project_of.get(r.target_event_id, r.project) != r.project]  # fmt: skip
        body = {
            "threads": len(ends),
            "not_extracted": sorted(pending),
            "extraction_claims": [
                {**r, "expired": r["lease_until"] < now} for r in claims
            ],
            "failing": {r["thread_id"]: {"attempts": r["attempts"], "error": r["last_error"]}
                        for r in rows.values() if r["attempts"]},  # fmt: skip
            "extracted_not_consolidated": waiting,
            "built_not_published": [v for v in self.store.unpublished() if v["version"] > version],
            "published_version": version,
            "lease": None if lease is None else {**lease, "expired": lease["expires_at"] < now},
            "refused": len(refused),
            "refused_recent": [asdict(r) for r in refused[-20:]],
            "revocations_out_of_scope": ignored,
        }
        return {**body, "phases": self._phases(body)}

    def _phases(self, status: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """Per phase: what is pending, running and failing now, and its runs (by command,
        HTTP, ``agentlog run`` or a worker) with the last one's time and error."""
        runs = self.store.run_rows()
        lease = status["lease"]

        def phase(name: str, pending: int, running: int, failing: int) -> dict[str, Any]:
            row = runs.get(name, {})
            return {"pending": pending, "running": running, "failed": failing, "runs": row.get("runs", 0),
                    "failures": row.get("failures", 0), "fenced": row.get("fenced", 0),
                    "last_run": row.get("last_run"), "last_ok": row.get("last_ok"), "last_error": row.get("last_error")}  # fmt: skip

        last = runs.get("consolidate", {})
        consolidate_failing = int(bool(last.get("last_error")) and (last.get("last_ok") or 0) < (last.get("last_run") or 0))
        return {
            "extract": phase("extract", len(status["not_extracted"]),
                             sum(not c["expired"] for c in status["extraction_claims"]), len(status["failing"])),
            "consolidate": phase("consolidate", len(status["extracted_not_consolidated"]) + len(status["built_not_published"]),
                                 int(lease is not None and bool(lease["owner"]) and not lease["expired"]), consolidate_failing),
        }  # fmt: skip

    def close(self) -> None:
        if self.llm is not None:
            self.llm.close()
        self.store.close()
        self.bus.close()


class MemoryOperations:
    """The memory operations of the ``Service`` protocol, for any service of a deployment
    (``settings`` names its data directory, and Kafka when distributed): each call opens
    the jobs, runs one, and closes them."""

    settings: Settings

    @contextmanager
    def _jobs(self) -> Iterator[Memory]:
        job = Memory(self.settings)
        try:
            yield job
        finally:
            job.close()

    def memory_show(self, project: str | None = None, key: str | None = None) -> dict[str, Any]:
        with self._jobs() as job:
            return job.show(project, key)

    def memory_status(self) -> dict[str, Any]:
        with self._jobs() as job:
            return job.status()

    def memory_extract(self, lease_seconds: float = 60.0) -> dict[str, Any]:
        with self._jobs() as job:
            job.pull()  # Kafka: copy new events first (embedded: nothing to do)
            return asdict(job.extract(lease_s=lease_seconds))

    def memory_consolidate(self, lease_seconds: float = 60.0,
                           high_risk: list[str] | None = None) -> dict[str, Any]:  # fmt: skip
        with self._jobs() as job:
            return job.consolidate(lease_s=lease_seconds, high_risk=high_risk)

    def memory_revoke(self, event_id: str, reason: str | None = None) -> dict[str, Any]:
        with self._jobs() as job:
            try:
                return job.revoke(event_id, reason)
            except LookupError as error:
                raise NotFound(str(error)) from error


def _extract_worker(settings: Settings, owner: str, lease_s: float) -> dict[str, Any]:
    job = Memory(settings)  # all of them: the LLM extractor's too
    try:
        return asdict(job.extract(owner, lease_s))
    finally:
        job.close()


def extract_parallel(settings: Settings, workers: int, lease_s: float = 60.0) -> list[dict[str, Any]]:
    """Phase 1 in ``workers`` processes; claims make each thread extracted once."""
    job = Memory(settings)
    try:
        job.pull()  # once, before the extractors share the copy
        if workers <= 1:
            return [asdict(job.extract(lease_s=lease_s))]
    finally:
        job.close()
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(workers) as pool:
        args = [(settings, default_owner(f"extractor{i}"), lease_s) for i in range(workers)]
        return pool.starmap(_extract_worker, args)


__all__ = ["ExtractReport", "Memory", "ThreadRead", "MemoryOperations", "StaleToken", "extract_parallel", "revoke_event_id"]
