"""What the CLI and the HTTP API do, on the embedded deployment, in one facade.

``EmbeddedService`` owns the stores of a data directory. chDB and tantivy lock their
files to one process, so a process takes ``agentlog.lock`` before opening them;
``agentlog run`` keeps it while serving, and other commands then go through its HTTP
API (``agentlog.streams.api.client``).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson

from agentlog.processors.active_set import ActiveSet, Pending
from agentlog.processors.compaction import Summariser
from agentlog.processors.public_state import PublicView
from agentlog.processors.records import active_hits
from agentlog.processors.state_sections import Held, Patch, StateBody
from agentlog.processors.textsearch import EXACT_BOOST, MAX_TERM_SCORE, identifiers, with_query_warning
from agentlog.processors.words import query_words
from agentlog.processors.thread_list import select_rows, thread_row
from agentlog.processors.validation import validate
from agentlog.schemas.events import Envelope
from agentlog.schemas.requests import DEFAULT_THREAD_LIMIT, check_search_limit, thread_list_query
from agentlog.schemas.search import Hit, SearchFilters
from agentlog.schemas.state import DEFAULT_WINDOW, WorkingState
from agentlog.sinks.base import MemoryStore, QueryResult, StoreError, Topic
from agentlog.sinks.sqlite_db import READ_CACHE_KIB
from agentlog.sinks.sqlite_state import SqliteStateStore
from agentlog.streams.embedded.topic import SqliteEventBus
from agentlog.streams.api.context import context_for
from agentlog.streams.api.context_cache import ContextCache, WindowTail, cache_for
from agentlog.streams.api.service import NotFound
from agentlog.streams import gc_heap
from agentlog.streams.config import Settings
from agentlog.streams.embedded.datadir import count_damage, derived_behind, open_derived, open_memory, open_sqlite, topic_help
from agentlog.streams.embedded.accepted import AcceptedQueue
from agentlog.streams.embedded.driver import EmbeddedDriver
from agentlog.streams.embedded.live_loops import LiveLoops
from agentlog.streams.embedded.sink_process import RemoteSinks, SinkProcess, wait_for_sink_process
from agentlog.streams.embedded.sink_supervisor import SinkSupervision
from agentlog.streams.embedded.sink_stage import FlushPolicy, SinkStage
from agentlog.streams.embedded.publisher import publish_to
from agentlog.streams.memory.jobs import MemoryOperations
from agentlog.streams.publish_check import PublishReport
from agentlog.streams.rebuild import replay_log
from agentlog.streams.wiring import open_log_store, open_search_index

log = logging.getLogger("agentlog.service")

ACTIVE_SCAN_LIMIT = 1000
"""How many of a thread's newest unindexed events read-your-writes scans at most: under
``agentlog run`` the sink process keeps the backlog far shorter, and in-process the
backlog is written before it grows past ``INLINE_WRITE_AFTER``, so none is past its reach."""

INLINE_WRITE_AFTER = 500
"""In-process (no server, so no sink stage running beside), a search that would not drain
(a context's recall) still writes the sinks first once more events than this wait for the
index: read-your-writes scores those events, and a new question (a new recall query)
scores all of them, so an agent loop that only publishes and reads contexts would
otherwise pay for a backlog that only grows. Smaller, more frequent group commits: a
step that writes stalls half as long as at 1,000, and a new question's scan is half as
long; the writing costs the same per event (``agentlog bench --only step``). Under
``agentlog run`` the sink process writes and no read ever does."""

STEP_RECORDS = 64
"""What an agent step publishes before it reads, at most: applied inline by a read that
answers on the HTTP event loop (a longer backlog is applied on a worker thread)."""


class EmbeddedService(MemoryOperations, SinkSupervision, LiveLoops):
    """The embedded deployment's stores and the operations on them."""

    in_process = True
    """Its answers are built in this process in their documented shape: the client SDK
    takes a state as it is instead of validating every item again (``Client.state``)."""

    def __init__(self, settings: Settings, on_progress: Callable[[int, int], None] | None = None,
                 sinks_apart: bool = False) -> None:  # fmt: skip
        """Open the data directory's stores; a derived one that is lost or corrupt is
        rebuilt from the topic here (``on_progress`` shows it), see ``agentlog.streams.embedded.datadir``.
        ``sinks_apart`` (``agentlog run``): the log and the index are opened by the sink
        process from the start, never here (chDB's engine, once loaded, keeps about 250 MiB
        resident in a process that no longer uses it), unless one of them must be rebuilt."""
        self.settings = settings
        notes: list[str] = []
        wait_for_sink_process(settings)  # a server's sink process that is still exiting
        self.sink_process: SinkProcess | None = None
        self.bus: Topic = open_sqlite(settings.path("topic.db"), SqliteEventBus, topic_help)
        try:
            # The processor and the sink stage read the topic in offset order on a connection
            # with a small page cache: on the publishers' one, a million records read once
            # would fill its cache with pages no lookup wants again.
            self.reader: Topic = SqliteEventBus(str(settings.path("topic.db")), READ_CACHE_KIB)
            apart = sinks_apart and not (settings.clickhouse_url or settings.opensearch_url) and self._open_apart()
            if not apart:
                self._open_sink_stores(notes)
            self.states = open_derived(settings.path("state.db"), SqliteStateStore, notes)
            # The processor and the sink stage each read and write the queue on a connection of their own.
            self.queue = AcceptedQueue(str(settings.path("state.db")))
            self.sink_queue = AcceptedQueue(str(settings.path("state.db")))
            self.driver = self._new_driver()
            if not apart:
                self.sinks = self._new_sinks()
            # One view for every context request (it reads the service's caches).
            self._answering = _Answering(self)
            # Serialises the processor and readers of its in-memory state (the HTTP server runs
            # the processor in a background thread); ``sink_lock`` serialises the sink stage.
            self.lock = threading.RLock()
            self.sink_lock = threading.RLock()
            self._heal(notes, on_progress)
        except BaseException:
            # A damaged topic or state, a lock, ^C during a long load: nothing is served
            # from this directory, and a sink process already started must not outlive it
            # (it is not a daemon: the interpreter would wait for it at exit).
            self._abandon_start()
            raise
        self.serving = False
        self._flush_now = threading.Event()  # asks the serving sink stage to write now
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
        self._frozen = settings.gc_freeze  # the heap it opened with: out of full collections
        if self._frozen:
            gc_heap.freeze()

    def _open_sink_stores(self, notes: list[str]) -> None:
        """The log and the index, in this process (one lost or corrupt is moved aside and noted)."""
        settings = self.settings
        embedded_log = not settings.clickhouse_url
        self.log = open_derived(settings.path("log"), lambda _p: open_log_store(settings), notes) \
            if embedded_log else open_log_store(settings)  # fmt: skip
        self.index = open_search_index(settings) if settings.opensearch_url else \
            open_derived(settings.path("index"), lambda _p: open_search_index(settings), notes)  # fmt: skip

    def _open_apart(self) -> bool:
        """Start the sink process on the log and the index as they are; False when it cannot
        open them (one is damaged: this process opens them, moves it aside and rebuilds it)."""
        try:
            self._start_sink_process(f"chDB {self.settings.path('log')}", attempts=1)
        except (StoreError, OSError, EOFError):
            return False
        return True

    def _abandon_start(self) -> None:
        """Stop the sink process and close what a failed start had opened."""
        if self.sink_process is not None:
            self.sink_process.stop()
            self.sink_process = None
        self._close_stores(quiet=True)

    def _new_driver(self) -> EmbeddedDriver:
        s = self.settings
        return EmbeddedDriver(
            self.reader, self.queue, self.states, s.pairing,
            batch_size=s.batch_size, checkpoint_s=s.checkpoint_seconds, max_event_bytes=s.max_event_bytes,
        )  # fmt: skip

    def _new_sinks(self) -> SinkStage:
        """The sink stage from its committed positions (a restart after a failed write
        writes the uncommitted groups again, idempotently)."""
        s = self.settings
        policy = FlushPolicy(s.sink_flush_rows, s.sink_flush_ms / 1000.0, s.refresh_seconds, s.max_event_bytes)
        return SinkStage(self.sink_queue, self.reader, self.log, self.index, policy, legacy=self.states)

    def _run_until_idle(self, on_progress: Callable[[int, int], None] | None = None) -> tuple[int, int]:
        """Apply everything pending, write it through every sink, checkpoint and commit:
        how many records were applied, and how many dead letters were logged."""
        with self.lock, self.sink_lock:
            total = self.driver.pending() + max(0, self.bus.end_offsets()[1] - self.sinks.dlq_pos)
            letters = self.sinks.letters_read
            done = 0
            while n := self._apply(self.driver.step):
                done += n
                self.sinks.step(force=True)  # the queue stays short on a long catch-up
                if on_progress:
                    on_progress(done, max(total, done))
            self.driver.checkpoint()
            self.sinks.drain()
        return done, self.sinks.letters_read - letters

    def _heal(self, notes: list[str], on_progress: Callable[[int, int], None] | None) -> None:
        """Rebuild the derived stores from the topic when one was lost or corrupt; a topic
        that lost records already processed is a ``CorruptStore``."""
        topic_end = self.bus.end_offsets()[0]
        processed = self.driver.events_pos
        count_damage(processed, topic_end, Path(self.bus.path))
        try:
            logged, indexed = self._sink_counts()
        except (EOFError, OSError, StoreError) as error:
            if self.sink_process is None:
                raise
            # The sink process died as the server started (killed, out of memory): the
            # stores are opened here instead, and ``agentlog run`` starts another one.
            log.warning("the sink process exited while the server started (%s); opening its stores here", error)
            self._join_sinks()
            logged, indexed = self._sink_counts()
        # Only an empty store can count as lost: the applied ids are counted only then. While
        # the sink stage has committed nothing and the queue holds every applied batch, empty
        # sinks are only behind (a crash before their first write), not lost.
        behind_only = self.sink_queue.positions().get("logged", 0) == 0 and self.sink_queue.end() > 0
        applied = self.states.applied_count() if 0 in (logged, indexed) and not behind_only else 0
        notes += derived_behind(applied, logged, indexed, processed, topic_end, notes)
        if not notes:
            return
        self._join_sinks()  # a rebuild writes the stores from here
        self.states.reset()
        self.sink_queue.reset()
        self.index.clear()
        self.log.truncate_derived()
        self.driver = self._new_driver()
        self.sinks = self._new_sinks()
        done = sum(self._run_until_idle(on_progress))
        print(f"agentlog: {'; '.join(notes)}; rebuilt from the topic ({done:,} records)", file=sys.stderr)

    def _sink_counts(self) -> tuple[int, int | None]:
        """Events in the log, and documents in the index (tantivy only)."""
        indexed = self.index.doc_count() if hasattr(self.index, "doc_count") else None
        return self.log.count_events(), indexed

    # -- writes -----------------------------------------------------------------------

    def publish(self, data: bytes, dead_letters: Sequence[tuple[bytes, str]] = ()) -> PublishReport:
        return publish_to(self.bus, data, self.settings.max_event_bytes, dead_letters)

    def catch_up(self, on_progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
        """Drain what is pending (``run --until-idle``) through every sink, checkpoint.
        While serving, the live loops do that: wait until the sink stage has written and
        committed what the topic holds (``POST /flush``; a failing store answers at once,
        its warnings in health)."""
        if self.serving:
            self._wait_sinks(committed=True)
            return {"ok": True}
        applied, letters = self._run_until_idle(on_progress)
        with self.sink_lock:
            mirrored = self.mirror_memory()
        if self._frozen:  # the threads it built are long-lived: out of full collections too
            gc_heap.settle()
        return {"processed": applied + letters, "rejected": letters, "memory_mirrored": mirrored}

    def _settle(self) -> None:
        """Apply what the topic holds before answering from the state. Only the processor
        runs here: its cost, never a sink write's (the sink stage writes on its own)."""
        with self.lock:
            try:
                # Served, the processor's loop takes the checkpoints (one of a long thread
                # costs milliseconds): never a request.
                self._apply(lambda: self.driver.apply_pending(checkpoint=not self.serving))
            except Exception as error:
                if not self.serving:
                    raise
                self._store_failed(error, 0.0, "pipeline")  # answered with warnings: it may lag

    def _apply(self, step: Callable[[], int]) -> int:
        """A processor step; one that fails may have applied its batch in memory without
        handing it to the sinks, so the processor starts again from its checkpoint."""
        try:
            return step()
        except BaseException:
            self.driver = self._new_driver()
            raise

    def _drain(self) -> None:
        """Everything the topic holds into the sinks: in this process when no server runs,
        else by the serving sink stage (read-your-writes for ``sql`` and ``search``)."""
        if self.serving:
            self._wait_sinks(committed=False)
            return
        self._settle()
        with self.sink_lock:
            self.sinks.drain()

    # -- reads ------------------------------------------------------------------------

    def state(self, thread_id: str) -> dict[str, Any]:
        """The thread's working state: its sections, items and summary are read-only and
        shared with later reads while they do not change (``PublicView.render``)."""
        return self._public(thread_id, lambda view, state: view.render(state, self.settings.redact))

    def state_json(self, thread_id: str, held: Held | None = None) -> StateBody:
        """``orjson.dumps(self.state(thread_id))``, byte for byte, without copying or
        serialising again the sections that did not change since the last read (the HTTP
        route sends it as it is); but for the sections the reader ``held`` (null, or a
        patch: ``agentlog.processors.state_sections``)."""
        return self._state_body(thread_id, held, settle=True)

    def state_json_now(self, thread_id: str, held: Held | None = None,
                       most: int = STEP_RECORDS) -> StateBody | None:  # fmt: skip
        """``state_json`` if it costs no wait: the processor is free, its thread in memory,
        at most ``most`` records (an agent step's) to apply first (a checkpoint is the loop's).
        ``None`` otherwise. The HTTP route answers this on its event loop, without the
        two thread hops of a blocking call, which cost more than the answer itself."""
        if not self.lock.acquire(blocking=False):
            return None
        try:
            driver = self.driver
            if thread_id not in driver.pipeline.threads:
                return None
            try:
                # One read of at most ``most`` records: what was published before this
                # request; what publishers append meanwhile is not waited for.
                if not self._apply(lambda: driver.apply_few(most)):
                    return None  # a backlog: applied on the thread pool
            except Exception:  # noqa: BLE001 - the thread-pool path applies again and reports it
                return None
            return self._state_body(thread_id, held, settle=False)
        finally:
            self.lock.release()

    def _state_body(self, thread_id: str, held: Held | None, settle: bool) -> StateBody:
        digests: dict[str, str] = {}
        patches: dict[str, Patch] = {}

        def render(view: PublicView, state: WorkingState) -> dict[str, Any]:
            public = view.render_json(state, self.settings.redact)
            digests.update(view.digests())  # under the lock, as rendered
            if held is not None and held.patches:
                patches.update(view.patches())
            return public

        return StateBody.of(self._public(thread_id, render, settle=settle), digests, held, patches)

    def _public(self, thread_id: str, render: Callable[[PublicView, WorkingState], dict[str, Any]],
                settle: bool = True) -> dict[str, Any]:  # fmt: skip
        if settle:
            self._settle()
        with self.lock:
            tp = self.driver.pipeline.threads.get(thread_id)
            if tp is None and self.states.load(thread_id) is not None:
                tp = self.driver.pipeline.thread(thread_id)
            if tp is None:
                raise NotFound(f"no events for thread {thread_id!r}")
            public = render(tp.view, tp.state)
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
                model: str | None = None, format: str = "generic") -> dict[str, Any]:  # noqa: A002 # fmt: skip
        # Recall searches the thread (and its children) with read-your-writes from the
        # active state: it never waits for the sinks either.
        return context_for(self._answering, thread_id, budget, query, model, format)

    def threads(self) -> list[str]:
        self._settle()
        with self.lock:
            return sorted(set(self.states.threads()) | set(self.driver.pipeline.threads))

    # -- what context assembly reads (``agentlog.streams.api.context.ContextSource``) ----------

    def orphans(self, thread_id: str) -> set[str]:
        with self.lock:
            return set(self.driver.pipeline.thread(thread_id).pairer.state.orphans)

    def window(self, thread_id: str, after: Sequence[str], limit: int) -> list[Envelope]:
        cache = cache_for(self)
        start = max((self._offset_of(marker, cache) for marker in after), default=0)
        # The thread's newest records after ``start`` as the last request read them, and
        # those appended since (one short read): the topic only grows, and a record never
        # changes, so these are the newest ``limit`` records a whole read would give.
        derived: Any = cache.derived if cache.derived is not None else {}  # None: a cache that keeps nothing
        key = ("window", thread_id, start, limit)
        kept = derived.get(key)
        last, records = (kept.last, kept.records) if isinstance(kept, WindowTail) else (start, [])
        new = [(r.offset, cache.parse(r.value, validate), len(r.value))
               for r in self.bus.thread_tail(thread_id, last, limit)]  # fmt: skip
        if new:
            records = (records + new)[-limit:]
            derived[key] = WindowTail(new[-1][0], records, sum(r[2] for r in records))
        # The topic holds every delivery; a redelivered event is in the window once.
        window: dict[str, Envelope] = {}
        for _offset, event, _size in records:
            if isinstance(event, Envelope):
                window.setdefault(event.event_id, event)
        return list(window.values())

    def _offset_of(self, event_id: str, cache: ContextCache) -> int:
        """The offset of the event's first record (0: not in the topic); found, it never changes."""
        derived: Any = cache.derived if cache.derived is not None else {}
        key = ("first", event_id)
        offset = derived.get(key)
        if offset is None:
            record = self.bus.find(event_id)
            if record is None:
                return 0
            offset = derived[key] = record.offset
        return int(offset)

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

    def read_events(self, event_ids: Sequence[str]) -> dict[str, Envelope | None]:
        """``read_event`` of each, the topic's copies in one query (recall reads a dozen)."""
        found = self.bus.first_copies(event_ids)
        out: dict[str, Envelope | None] = {}
        for event_id in event_ids:
            raw = found.get(event_id)
            event = validate(raw, self.settings.max_event_bytes) if raw is not None else None
            out[event_id] = event if isinstance(event, Envelope) else self.read_event(event_id)
        return out

    def read(self, event_id: str) -> dict[str, Any]:
        # The topic holds the same bytes as the log, indexed by event id (its first copy is
        # the one applied): a point lookup there costs far less than one in ClickHouse.
        # Everything at or below the sink stage's high-water mark is in the log already;
        # the rest is applied (or about to be) but not written yet.
        record = self.bus.find(event_id)
        if record is not None and isinstance(validate(record.value, self.settings.max_event_bytes), Envelope):
            source = "log" if record.offset <= self.sinks.logged else "active"
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
        drain: bool = True,
    ) -> dict[str, Any]:
        """``drain``: without a server, write what is pending into the index first (the
        active fallback covers a thread's own events either way; a search across threads
        needs the index)."""
        filters = SearchFilters(thread_id, window_id, kind, tool_name, project, since_ms, until_ms)
        return with_query_warning(self.search_begun(query, filters, limit, after, drain)())

    def search_begun(self, query: str, filters: SearchFilters, limit: int = 10, after: str | None = None,
                     drain: bool = True) -> Callable[[], dict[str, Any]]:  # fmt: skip
        """``search``, begun now: a thread's search starts on the index's engine (on the
        other core) and the returned function answers it, with the thread's events the
        index did not show when it began (read-your-writes) scored then. A caller that
        knows its query early (a context's recall) begins it before its other work."""
        check_search_limit(limit)  # the index allocates for limit up front
        if not self.serving and (drain or self._unindexed() > INLINE_WRITE_AFTER):
            self._drain()
        own_thread = filters.thread_id
        if after is not None:
            named = self.bus.find(after)
            if named is not None:
                event = validate(named.value)
                if isinstance(event, Envelope):
                    own_thread = own_thread or event.thread_id
        if own_thread is None:
            return lambda: self._answer(query, self.index.search(query, filters, limit), [], limit)
        # What the index shows first, its search after: what a refresh shows in between is
        # then in the index's hits instead of slipping past both.
        shown = self.index.visible_offsets().get(0, 0)
        later = getattr(self.index, "search_later", None)
        begun = later(query, filters, limit) if later is not None else None

        def answer() -> dict[str, Any]:
            active = self._active_hits(query, own_thread, filters, limit, shown)  # while the engine scores
            hits = begun() if begun is not None else self.index.search(query, filters, limit)
            return self._answer(query, hits, active, limit)

        return answer

    def _answer(self, query: str, hits: list[Hit], active: list[Hit | Pending], limit: int) -> dict[str, Any]:
        """The index's hits and the active ones merged, best first."""
        known = {h.event_id for h in hits}
        ranked = sorted([*hits, *(h for h in active if h.event_id not in known)],
                        key=lambda h: (-h.score, -h.offset))[:limit]  # fmt: skip
        with cache_for(self).active.lock:  # a Pending's snippet is kept in a dict other searches read
            merged = [h.hit() if isinstance(h, Pending) else h for h in ranked]  # snippets only for these
        visible = self.index.visible_offsets().get(0, 0)
        return {
            "query": query,
            "hits": [h.as_dict() for h in merged],
            "index_visible_offset": visible,
            # The index may lack recent events (refresh interval) or a failing store's.
            "stale": bool(self.failing) or visible < self.driver.events_pos,
            "warnings": [*self.warnings(), *self.index.warnings],  # an outdated OpenSearch index's too
        }

    def exact_holders(self, query: str, thread_id: str, kind: str | None = None, project: str | None = None,
                      limit: int = 10) -> list[tuple[str, int]] | None:  # fmt: skip
        """``(event_id, offset)`` of the hits of ``search(query, thread_id=..., kind=...,
        project=..., limit=limit)`` that score at least ``EXACT_BOOST`` (they hold an
        identifier of the query exactly), in no order, found without scoring any text (a
        tool event's partner is looked up so on every new recall); ``None`` when only that
        search can tell (more than ``limit`` of them, a long query, an index that cannot)."""
        check_search_limit(limit)
        holders = getattr(self.index, "exact_holders", None)
        if holders is None or len(query_words(query)) * MAX_TERM_SCORE >= EXACT_BOOST:
            return None
        if not self.serving and self._unindexed() > INLINE_WRITE_AFTER:
            return None  # the search writes the index first
        filters = SearchFilters(thread_id, None, kind, None, project, None, None)
        shown = self.index.visible_offsets().get(0, 0)  # as ``search``: what the index shows first
        indexed = holders(query, filters, limit)
        if indexed is None:
            return None
        with self.lock:
            tp = self.driver.pipeline.threads.get(thread_id)
            window = tp.state.window_id if tp is not None else DEFAULT_WINDOW
            closed = dict(tp.state.closed_windows) if tp is not None else {}
        cache = cache_for(self)
        with cache.active.lock:
            active = self._active_set(thread_id, shown, window, closed)
            pending = active.holders(identifiers(query), filters) if active is not None else None
        if pending is None:
            return None
        found = dict(indexed)  # the index's copy first, as a search merges them
        for event_id, offset in pending:
            found.setdefault(event_id, offset)
        return list(found.items()) if len(found) <= limit else None

    def _unindexed(self) -> int:
        return self.driver.events_pos - self.index.visible_offsets().get(0, 0)

    def _active_hits(self, query: str, thread_id: str, filters: SearchFilters, limit: int,
                     visible: int) -> list[Hit | Pending]:  # fmt: skip
        """The thread's accepted events after ``visible``, what the index shows (read-your-
        writes): the best ``2 * limit``, enough whatever the index answers."""
        terms = query_words(query)
        with self.lock:
            tp = self.driver.pipeline.threads.get(thread_id)
            current_window = tp.state.window_id if tp is not None else DEFAULT_WINDOW
            closed = dict(tp.state.closed_windows) if tp is not None else {}
        cache = cache_for(self)  # these events are searched again on every request until indexed
        exact = identifiers(query)
        with cache.active.lock:
            active = self._active_set(thread_id, visible, current_window, closed)
            if active is not None:
                return active.pending(terms, filters, exact, 2 * limit)
        events = ((e, r.offset) for r in self.bus.thread_tail(thread_id, visible, ACTIVE_SCAN_LIMIT)
                  if isinstance(e := cache.parse(r.value, validate), Envelope))  # fmt: skip
        return active_hits(events, terms, filters, current_window, set(), closed, exact, cache.docs, keep=2 * limit)

    def _active_set(self, thread_id: str, visible: int, window: str, closed: dict[str, str]) -> ActiveSet | None:
        """The thread's events after ``visible`` as read-your-writes searches them, kept
        from the last search and extended by the records appended since (one short read),
        or ``None`` when they are more than ``ACTIVE_SCAN_LIMIT`` records (only the newest
        that many are searched: the set would not be those)."""
        cache = cache_for(self)
        kept = cache.active.get(thread_id)
        for active in (kept, None) if kept is not None and kept.fits(window, closed, visible) else (None,):
            active = active or ActiveSet(visible, window, closed, cache.docs)
            room = ACTIVE_SCAN_LIMIT - active.records
            records = self.bus.thread_tail(thread_id, active.last, room + 1)
            if len(records) > room:
                cache.active.put(thread_id, None)
                return None
            events = [(e, r.offset) for r in records if isinstance(e := cache.parse(r.value, validate), Envelope)]
            if active.add(events, len(records), records[-1].offset if records else active.last):
                cache.active.put(thread_id, active)
                return active
        return None  # pragma: no cover - a new set takes any events

    def sql(self, statement: str) -> QueryResult:
        self._drain()
        if not self.serving:  # the server mirrors memory in its sink loop
            with self.sink_lock:
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

        split = self.sink_process is not None
        with self.lock, self.sink_lock:
            self._join_sinks()  # a rebuild writes the index and reads the log here
            try:
                return self._rebuild(progress)
            finally:
                if split and not self.interrupted:
                    self.split_sinks()

    def _rebuild(self, progress: Callable[[int, int], None]) -> dict[str, int]:
        with self.lock, self.sink_lock:
            self._run_until_idle()
            positions = {"events": self.driver.events_pos}
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
            self.sinks = self._new_sinks()
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
            "pending": self.driver.pending() + self.sinks.pending(),
            "processed_offset": self.driver.events_pos,
            # Applied (in state and context) but not yet in the log and index.
            "sink_lag": self._sink_lag(),
            "logged_offset": self.sinks.logged,
            "index_visible_offset": self.sinks.visible if isinstance(self.sinks, RemoteSinks)
            else self.index.visible_offsets().get(0, 0),
            **({"rebuild": dict(zip(("done", "total"), self.rebuilding))} if self.rebuilding else {}),
        }

    def close(self) -> None:
        """Checkpoint and write every applied event into the sinks, then close the stores
        (what the topic holds beyond it is applied on the next start)."""
        with self.lock, self.sink_lock:
            try:
                if not self.interrupted:
                    self.driver.checkpoint()
                    if self.sink_process is None:
                        self.sinks.drain()
            finally:  # a store that fails its last write still gets closed (the topic keeps it)
                if self.sink_process is not None:
                    self.sink_process.stop()  # it writes and commits what is queued, then exits
                    self.sink_process = None
                if self._memory is not None:
                    self._memory.close()
                if self._frozen:
                    self._frozen = False
                    gc_heap.thaw()
                self._close_stores()

    def _close_stores(self, quiet: bool = False) -> None:
        """Close every store this service opened (one a failed start never opened is
        skipped), each even when one before it fails; the first failure is raised after
        the rest are closed (``quiet``: logged instead, for a start that failed already)."""
        first: Exception | None = None
        for name in _STORES:
            store = self.__dict__.get(name)
            if store is None:  # a Remote's close leaves the store to the sink process
                continue
            try:
                store.close()
            except Exception as error:  # noqa: BLE001 - the others are closed first
                log.debug("closing %s failed", name, exc_info=True)
                first = first or error
        if first is not None and not quiet:
            raise first


_STORES = ("queue", "sink_queue", "index", "states", "reader", "bus", "log")
"""The service's stores, in the order they are closed."""


class _Answering:
    """The service as context assembly sees it: its searches never wait for the sinks."""

    def __init__(self, service: EmbeddedService) -> None:
        self._service = service
        self.cache_owner = service  # the service's own caches (``cache_for``), not a second set

    def __getattr__(self, name: str) -> Any:
        return getattr(self._service, name)

    def search(self, query: str, **kwargs: Any) -> dict[str, Any]:
        return self._service.search(query, drain=False, **kwargs)

    def search_begun(self, query: str, filters: SearchFilters, limit: int) -> Callable[[], dict[str, Any]]:
        return self._service.search_begun(query, filters, limit, drain=False)


__all__ = ["EmbeddedService"]
