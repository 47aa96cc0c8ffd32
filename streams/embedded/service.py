"""What the CLI and the HTTP API do, on the embedded deployment, in one facade.

``EmbeddedService`` owns the stores of a data directory. chDB and tantivy lock their
files to one process, so a process takes ``agentlog.lock`` before opening them;
``agentlog run`` keeps it while serving, and other commands then go through its HTTP
API (``agentlog.streams.api.client``).
"""

from __future__ import annotations

import fcntl
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson

from agentlog.processors.compaction import Summariser
from agentlog.processors.records import active_hits
from agentlog.processors.redaction import redact_if
from agentlog.processors.textsearch import identifiers, tokenize
from agentlog.processors.thread_list import select_rows, thread_row
from agentlog.processors.validation import validate
from agentlog.schemas.events import Envelope
from agentlog.schemas.requests import DEFAULT_THREAD_LIMIT, check_search_limit, thread_list_query
from agentlog.schemas.search import Hit, SearchFilters
from agentlog.schemas.state import DEFAULT_WINDOW
from agentlog.sinks.base import MemoryStore, QueryResult, Topic
from agentlog.sinks.sqlite_state import SqliteStateStore
from agentlog.streams.embedded.topic import SqliteEventBus
from agentlog.streams.api.context import context_for
from agentlog.streams.api.context_cache import cache_for
from agentlog.streams.api.service import NotFound
from agentlog.streams.config import Settings
from agentlog.streams.embedded.datadir import count_damage, derived_behind, open_derived, open_memory, open_sqlite, topic_help
from agentlog.streams.embedded.driver import EmbeddedDriver
from agentlog.streams.embedded.publisher import publish_to
from agentlog.streams.memory.jobs import MemoryOperations
from agentlog.streams.publish_check import PublishReport
from agentlog.streams.rebuild import replay_log
from agentlog.streams.wiring import open_log_store, open_search_index
from agentlog.streams.metrics import METRICS
from agentlog.streams.sink_guard import StoreUnavailable

log = logging.getLogger("agentlog.service")

RETRY_MAX_S = 30.0
"""The longest wait between retries of a store that is down."""


class DataDirLock:
    """An exclusive ``flock`` on the data directory's stores."""

    def __init__(self, settings: Settings) -> None:
        self.path = settings.path("agentlog.lock")
        self._fd: int | None = None

    def acquire(self, timeout: float) -> bool:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self._fd = fd
                return True
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    return False
                time.sleep(0.05)

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


class EmbeddedService(MemoryOperations):
    """The embedded deployment's stores and the operations on them."""

    def __init__(self, settings: Settings, on_progress: Callable[[int, int], None] | None = None) -> None:
        """Open the data directory's stores; a derived one that is lost or corrupt is
        rebuilt from the topic here (``on_progress`` shows it), see ``agentlog.streams.embedded.datadir``."""
        self.settings = settings
        notes: list[str] = []
        self.bus: Topic = open_sqlite(settings.path("topic.db"), SqliteEventBus, topic_help)
        embedded_log = not settings.clickhouse_url
        self.log = open_derived(settings.path("log"), lambda _p: open_log_store(settings), notes) \
            if embedded_log else open_log_store(settings)  # fmt: skip
        self.index = open_search_index(settings) if settings.opensearch_url else \
            open_derived(settings.path("index"), lambda _p: open_search_index(settings), notes)  # fmt: skip
        self.states = open_derived(settings.path("state.db"), SqliteStateStore, notes)
        self.driver = self._new_driver()
        try:
            self._heal(notes, on_progress)
        except BaseException:
            self._close_stores()  # a damaged topic: nothing is served from this directory
            raise
        # Serialises the driver and readers of its in-memory state (the HTTP server
        # runs the driver in a background thread).
        self.lock = threading.RLock()
        self.serving = False
        # Stores the live loop cannot write right now: name -> last error (health, metrics).
        self.failing: dict[str, str] = {}
        self.stopping = threading.Event()  # set on SIGTERM: a running rebuild ends early
        self.rebuilding: tuple[int, int] | None = None  # (done, total) while one runs
        self.interrupted = False
        self._memory: MemoryStore | None = None
        self.summariser: Summariser | None = None
        if settings.summary_url:
            from agentlog.streams.llm_summary import LlmSummariser  # noqa: PLC0415 - optional

            self.summariser = LlmSummariser(settings.summary_url, settings.summary_model)

    def _new_driver(self) -> EmbeddedDriver:
        s = self.settings
        return EmbeddedDriver(
            self.bus, self.log, self.index, self.states, s.pairing,
            batch_size=s.batch_size, checkpoint_s=s.checkpoint_seconds, refresh_s=s.refresh_seconds,
            max_event_bytes=s.max_event_bytes,
        )  # fmt: skip

    def _heal(self, notes: list[str], on_progress: Callable[[int, int], None] | None) -> None:
        """Rebuild the derived stores from the topic when one was lost or corrupt; a topic
        that lost records already processed is a ``CorruptStore``."""
        topic_end = self.bus.end_offsets()[0]
        processed = self.driver.events_pos
        count_damage(processed, topic_end, Path(self.bus.path))
        logged = self.log.count_events()
        indexed = self.index.doc_count() if hasattr(self.index, "doc_count") else None  # tantivy only
        # Only an empty store can count as lost: the applied ids are counted only then.
        applied = self.states.applied_count() if 0 in (logged, indexed) else 0
        notes += derived_behind(applied, logged, indexed, processed, topic_end, notes)
        if not notes:
            return
        self.states.reset()
        self.index.clear()
        self.log.truncate_derived()
        self.driver = self._new_driver()
        done = self.driver.run_until_idle(on_progress).processed
        print(f"agentlog: {'; '.join(notes)}; rebuilt from the topic ({done:,} records)", file=sys.stderr)

    # -- writes -----------------------------------------------------------------------

    def publish(self, data: bytes) -> PublishReport:
        return publish_to(self.bus, data, self.settings.max_event_bytes)

    def catch_up(self, on_progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
        """Drain what is pending (``run --until-idle``), flush sinks and index, checkpoint.
        While serving, the live loop does that: wait until it has applied what the topic
        holds (``POST /flush``; a failing store answers at once, its warnings in health)."""
        if self.serving:
            self._settle()
            return {"ok": True}
        with self.lock:
            progress = self.driver.run_until_idle(on_progress)
            mirrored = self.mirror_memory()
        return {"processed": progress.processed, "memory_mirrored": mirrored}

    def wait_processed(self, offset: int, timeout: float = 10.0) -> None:
        """Read-your-writes for the live driver: wait until it has applied ``offset``."""
        if not self.serving:
            self._drain()
            return
        deadline = time.monotonic() + timeout
        # A failing store holds the position back: answer now, with warnings, not late.
        while self.driver.events_pos < offset and time.monotonic() < deadline and not self.failing:
            time.sleep(0.005)

    def _drain(self) -> None:
        """No server runs: process what is pending here before answering."""
        with self.lock:
            self.driver.run_until_idle()

    def _settle(self) -> None:
        self.wait_processed(self.bus.end_offsets()[0])

    # -- reads ------------------------------------------------------------------------

    def state(self, thread_id: str) -> dict[str, Any]:
        self._settle()
        with self.lock:
            tp = self.driver.pipeline.threads.get(thread_id)
            if tp is None and self.states.load(thread_id) is not None:
                tp = self.driver.pipeline.thread(thread_id)
            if tp is None:
                raise NotFound(f"no events for thread {thread_id!r}")
            public = redact_if(self.settings.redact, tp.state.public())
        if self.failing:  # the state may lag what was published while a store is down
            public["warnings"] = self.warnings()
        return public

    def thread_list(self, project: str | None = None, status: str | None = None,
                    limit: int = DEFAULT_THREAD_LIMIT) -> dict[str, Any]:  # fmt: skip
        """Every thread's summary row (``agentlog.processors.thread_list``), newest activity first."""
        q = thread_list_query(project, status, limit)
        self._settle()
        now_ms, redact = time.time() * 1000.0, self.settings.redact
        with self.lock:  # the threads in memory are the newest; the rest are as checkpointed
            rows = {t: thread_row(tp.state, now_ms, redact) for t, tp in self.driver.pipeline.threads.items()}
        for thread_id in self.states.threads():
            if thread_id not in rows and (snapshot := self.states.load(thread_id)) is not None:
                rows[thread_id] = thread_row(snapshot.state, now_ms, redact)
        return {**select_rows(rows.values(), q.project, q.status, q.limit), "partial": False,
                "warnings": self.warnings()}  # fmt: skip

    def context(self, thread_id: str, budget: int, query: str | None = None,
                model: str | None = None) -> dict[str, Any]:  # fmt: skip
        return context_for(self, thread_id, budget, query, model)

    def threads(self) -> list[str]:
        self._settle()
        with self.lock:
            return sorted(set(self.states.threads()) | set(self.driver.pipeline.threads))

    # -- what context assembly reads (``agentlog.streams.api.context.ContextSource``) ----------

    def orphans(self, thread_id: str) -> set[str]:
        with self.lock:
            return set(self.driver.pipeline.thread(thread_id).pairer.state.orphans)

    def window(self, thread_id: str, after: Sequence[str], limit: int) -> list[Envelope]:
        start = 0
        for marker in after:
            record = self.bus.find(marker)
            start = max(start, record.offset if record is not None else 0)
        # The topic holds every delivery; a redelivered event is in the window once.
        window: dict[str, Envelope] = {}
        for record in self.bus.thread_tail(thread_id, start, limit):
            event = cache_for(self).parse(record.value, validate)  # parsed once per record
            if isinstance(event, Envelope):
                window.setdefault(event.event_id, event)
        return list(window.values())

    def read_event(self, event_id: str) -> Envelope | None:
        record = self.bus.find(event_id)  # the common case, parsed once (recall reads many)
        if record is not None:
            event = validate(record.value, self.settings.max_event_bytes)
            if isinstance(event, Envelope):
                return event
        try:
            found = self.read(event_id)["event"]
        except NotFound:
            return None
        event = validate(orjson.dumps(found))
        return event if isinstance(event, Envelope) else None

    def read(self, event_id: str) -> dict[str, Any]:
        # The topic holds the same bytes as the log, indexed by event id (its first copy is
        # the one applied): a point lookup there costs far less than one in ClickHouse.
        # Everything at or below the driver's position is in the log already.
        record = self.bus.find(event_id)
        if record is not None and isinstance(validate(record.value, self.settings.max_event_bytes), Envelope):
            source = "log" if record.offset <= max(self.driver.events_pos, self.driver.log_events_hw) else "active"
            return {"event": orjson.loads(record.value), "source": source, "offset": record.offset}
        logged = self.log.get(event_id)  # a log written elsewhere (rebuilt, or by Kafka workers)
        if logged is not None:
            return {"event": orjson.loads(logged.raw), "source": "log", "offset": logged.offset}
        raise NotFound(
            f"event {event_id!r} is neither in the log nor pending: it was never accepted "
            "(check `agentlog sql \"SELECT reason FROM rejected_events\"` for rejections)"
        )

    def search(
        self,
        query: str,
        thread_id: str | None = None,
        kind: str | None = None,
        tool_name: str | None = None,
        window_id: str | None = None,
        project: str | None = None,
        after: str | None = None,
        since_ms: int | None = None,
        until_ms: int | None = None,
        limit: int = 10,
    ) -> dict[str, Any]:
        check_search_limit(limit)  # the index allocates for limit up front
        filters = SearchFilters(thread_id, window_id, kind, tool_name, project, since_ms, until_ms)
        if not self.serving:
            self._drain()
        own_thread = thread_id
        if after is not None:
            named = self.bus.find(after)
            if named is not None:
                event = validate(named.value)
                if isinstance(event, Envelope):
                    own_thread = own_thread or event.thread_id
        # The active hits first, the index after: what a refresh shows in between is then
        # in the index's hits instead of slipping past both.
        active = self._active_hits(query, own_thread, filters) if own_thread is not None else []
        hits = self.index.search(query, filters, limit)
        known = {h.event_id for h in hits}
        merged = sorted(hits + [h for h in active if h.event_id not in known],
                        key=lambda h: (-h.score, -h.offset))[:limit]  # fmt: skip
        visible = self.index.visible_offsets().get(0, 0)
        return {
            "query": query,
            "hits": [asdict(h) for h in merged],
            "index_visible_offset": visible,
            # The index may lack recent events (refresh interval) or a failing store's.
            "stale": bool(self.failing) or visible < self.driver.events_pos,
            "warnings": self.warnings(),
        }

    def _active_hits(self, query: str, thread_id: str, filters: SearchFilters) -> list[Hit]:
        """The thread's accepted events the index cannot see yet (read-your-writes)."""
        visible = self.index.visible_offsets().get(0, 0)
        terms = tokenize(query)
        with self.lock:
            tp = self.driver.pipeline.threads.get(thread_id)
            current_window = tp.state.window_id if tp is not None else DEFAULT_WINDOW
            closed = dict(tp.state.closed_windows) if tp is not None else {}
        events = ((e, r.offset) for r in self.bus.thread_tail(thread_id, visible)
                  if isinstance(e := validate(r.value), Envelope))  # fmt: skip
        return active_hits(events, terms, filters, current_window, set(), closed, identifiers(query))

    def sql(self, statement: str) -> QueryResult:
        self._settle()
        if not self.serving:  # the server mirrors memory in its loop
            with self.lock:
                self.mirror_memory()
        return self.log.query(statement)

    # -- maintenance ------------------------------------------------------------------

    def rebuild(self, on_progress: Callable[[int, int], None] | None = None) -> dict[str, int]:
        """Replay the immutable log into fresh state, pairs and index. Its progress is in
        ``health()`` (what a client of the server shows); ``stopping`` ends it early."""

        def progress(done: int, total: int) -> None:
            self.rebuilding = (done, total)
            if on_progress:
                on_progress(done, total)

        with self.lock:
            self.driver.run_until_idle()
            positions = {"events": self.driver.events_pos, "dlq": self.driver.dlq_pos}
            self.states.reset()
            try:
                replay = replay_log(self.log, self.index, self.settings.pairing, progress, self.stopping.is_set)
            except BaseException:
                # State is empty now: the next start rebuilds it from the topic (``_heal``),
                # and this process must not drain the whole topic again on its way out.
                self.interrupted = True
                self.driver = self._new_driver()
                raise
            finally:
                self.rebuilding = None
            threads = replay.pipeline.threads
            self.states.checkpoint(
                [tp.snapshot() for tp in threads.values()], list(replay.pipeline.seen.ids), positions  # type: ignore[attr-defined]
            )
            self.driver = self._new_driver()
        return {"events": replay.events, "threads": len(threads)}

    def _memory_store(self) -> MemoryStore:
        if self._memory is None:
            self._memory = open_memory(self.settings.path("memory.db"))
        return self._memory

    def memory_facts(self, project: str) -> list[dict[str, Any]]:
        """The published long-term memory of ``project`` (never another project's)."""
        _version, facts = self._memory_store().published()
        return [f for f in facts.values() if f["project"] == project]

    def mirror_memory(self) -> dict[str, int]:
        """Copy new memory candidates and published views into the log store's
        ``memory_candidates`` and ``memory_facts`` tables, for analysts."""
        store = self._memory_store()
        seq, version = self.log.memory_high_water()
        candidates = [{**asdict(c), "seq": s} for s, c in store.candidates_after(seq)]
        for row in candidates:
            del row["observed_ms"]
            row["observed_at"] = row["observed_at"].upper()
        facts = [{**f, "version": v} for v, view in store.published_after(version) for f in view.values()]
        self.log.append_memory(candidates, facts)
        return {"candidates": len(candidates), "facts": len(facts)}

    def health(self) -> dict[str, Any]:
        failing = dict(self.failing)
        return {
            "status": "degraded" if failing else "ok",
            "failing": failing,
            "deployment": "embedded",
            "log": self.log.description,
            "pending": self.driver.pending(),
            "processed_offset": self.driver.events_pos,
            "index_visible_offset": self.index.visible_offsets().get(0, 0),
            **({"rebuild": dict(zip(("done", "total"), self.rebuilding))} if self.rebuilding else {}),
        }

    # -- serving ----------------------------------------------------------------------

    def run_forever(self, stop: threading.Event, idle_sleep: float = 0.02) -> None:
        """The live driver loop of ``agentlog run`` (a background thread of the server)."""
        self.serving = True
        last_mirror = delay = 0.0
        rebuild = False
        while not stop.is_set():
            try:
                if rebuild:
                    with self.lock:
                        # The failed batch is applied in memory but maybe not written: start
                        # again from the checkpoint, replaying into the idempotent sinks.
                        self.driver = self._new_driver()
                    rebuild = False
                with self.lock:
                    n = self.driver.step()
                if n == 0:
                    with self.lock:
                        self.driver.maybe_flush()
                        if time.monotonic() - last_mirror > self.settings.checkpoint_seconds:
                            self.mirror_memory()
                            last_mirror = time.monotonic()
                    stop.wait(idle_sleep)
            except Exception as error:  # noqa: BLE001 - a store failed: back off, resume from the checkpoint
                delay = self._store_failed(error, delay)
                rebuild = True
                stop.wait(delay)
            else:
                if self.failing and n:
                    self._store_recovered()
                delay = 0.0
        try:
            with self.lock:
                if rebuild:
                    self.driver = self._new_driver()
                if not self.interrupted:
                    self.driver.run_until_idle()
        except Exception as error:  # noqa: BLE001 - stopping: the topic keeps what is not written
            log.error("stopped with a store still failing (the rest is processed on the next start): %s", error)

    def _store_failed(self, error: Exception, delay: float) -> float:
        """Report a failing store (``/healthz``, ``/metrics``) and the next back-off."""
        store = error.store if isinstance(error, StoreUnavailable) else "pipeline"
        message = str(error).strip()[:500] or type(error).__name__
        self.failing[store] = message
        METRICS.store_failed(store, message)
        delay = min(max(1.0, delay * 2), RETRY_MAX_S)
        log.exception("the %s store failed; retrying from the last checkpoint in %.0f s", store, delay)
        return delay

    def _store_recovered(self) -> None:
        log.warning("stores back: %s", ", ".join(self.failing))
        self.failing.clear()
        METRICS.stores_recovered()

    def warnings(self) -> list[str]:
        """Why an answer may be stale right now (empty when it is not)."""
        return [f"{store} failing: {error}" for store, error in self.failing.items()]

    def close(self) -> None:
        with self.lock:
            if not self.interrupted:
                self.driver.refresh()
                self.driver.checkpoint()
            if self._memory is not None:
                self._memory.close()
            self._close_stores()

    def _close_stores(self) -> None:
        self.index.close()
        self.states.close()
        self.bus.close()
        self.log.close()


__all__ = ["DataDirLock", "EmbeddedService"]
