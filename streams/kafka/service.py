"""The queries a Kafka worker answers for the threads it owns: state, read, search with
read-your-writes, and context. The same operations as ``agentlog.streams.embedded.service`` over the
worker's stores: the faust state table, the log (which trails the processor by the
sink's lag), the search index (which trails the log by a refresh), and the events the
processor has applied that the sink has not logged yet (``Unlogged``).

``StoreQueries`` answers from the stores as they stand (also the offline service's base);
``WorkerService``, the ``Service`` of a running worker, first waits until the processor
has applied what the broker holds (read-your-writes), and hands a thread's queries to the
worker that owns the thread's partition."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from agentlog.processors.compaction import Summariser
from agentlog.processors.records import active_hits
from agentlog.processors.redaction import redact_if
from agentlog.processors.textsearch import identifiers, with_query_warning
from agentlog.processors.words import query_words
from agentlog.schemas.snapshot import ThreadSnapshot
from agentlog.processors.thread_list import log_row, log_ts, select_rows, thread_row
from agentlog.processors.validation import validate
from agentlog.schemas.events import Envelope
from agentlog.schemas.requests import DEFAULT_THREAD_LIMIT, check_search_limit, thread_list_query
from agentlog.schemas.search import Hit, SearchFilters
from agentlog.sinks.base import LogStore, LoggedEvent, MemoryStore, QueryResult, SearchIndex, StoreError
from agentlog.streams.config import Settings
from agentlog.streams.embedded.datadir import open_memory
from agentlog.streams.api.context import context_for
from agentlog.streams.api.context_cache import cache_for
from agentlog.streams.api.client import RemoteService
from agentlog.streams.api.service import NotFound, NotServedHere, Progress

if TYPE_CHECKING:
    from agentlog.streams.kafka.processor import KafkaProcessor

T = TypeVar("T")

RECENT = 1000
"""How many of a thread's newest logged events are checked against the index for
read-your-writes: more than one refresh interval of any one thread's traffic."""


class Unlogged:
    """Events the processor forwarded to the sink that the log does not hold yet."""

    def __init__(self) -> None:
        self.events: dict[str, LoggedEvent] = {}
        self.by_thread: dict[str, set[str]] = {}

    def add(self, events: Iterable[LoggedEvent]) -> None:
        for e in events:
            self.events[e.event_id] = e
            self.by_thread.setdefault(e.thread_id, set()).add(e.event_id)

    def logged(self, event_ids: Iterable[str]) -> None:
        """Ids the sink has written."""
        for event_id in event_ids:
            e = self.events.pop(event_id, None)
            if e is not None:
                waiting = self.by_thread[e.thread_id]
                waiting.discard(event_id)
                if not waiting:
                    del self.by_thread[e.thread_id]

    def of(self, thread_id: str) -> list[LoggedEvent]:
        return sorted((self.events[i] for i in self.by_thread.get(thread_id, ())), key=lambda e: e.offset)

    def find(self, event_id: str) -> LoggedEvent | None:
        return self.events.get(event_id)

    def clear(self) -> None:
        self.events.clear()
        self.by_thread.clear()


class StoreQueries:
    """``agentlog.streams.api.context.ContextSource``: the queries, from a worker's stores."""

    def __init__(self, settings: Settings, load: Callable[[str], ThreadSnapshot | None], log: LogStore,
                 index: SearchIndex, unlogged: Unlogged, owned: Callable[[], Iterable[bytes]] = tuple) -> None:  # fmt: skip
        self.settings = settings
        self.owned = owned  # the snapshots (table values) of the threads this worker holds
        self.load = load
        self.log = log
        self.index = index
        self.unlogged = unlogged
        self.summariser: Summariser | None = None
        if settings.summary_url:
            from agentlog.streams.llm_summary import LlmSummariser  # noqa: PLC0415 - optional

            self.summariser = LlmSummariser(settings.summary_url, settings.summary_model)
        self._publisher: Any = None
        self._memory: MemoryStore | None = None

    def _snapshot(self, thread_id: str) -> ThreadSnapshot:
        snapshot = self.load(thread_id)
        if snapshot is None:
            raise NotFound(f"no events for thread {thread_id!r}")
        return snapshot

    def state(self, thread_id: str) -> dict[str, Any]:
        return redact_if(self.settings.redact, self._snapshot(thread_id).state.public(), cache_for(self).items)

    def orphans(self, thread_id: str) -> set[str]:
        return set(self._snapshot(thread_id).pairing.orphans)

    def _tail(self, thread_id: str, after: int, limit: int) -> list[LoggedEvent]:
        """The newest accepted events of a thread, logged or not, oldest first. The unlogged
        ones are taken first: an event leaves them only once the log holds it, so read in
        this order none can slip between the two while the sink writes."""
        pending = [e for e in self.unlogged.of(thread_id) if e.offset > after]
        merged = {e.event_id: e for e in self.log.thread_tail(thread_id, after, limit)}
        merged.update((e.event_id, e) for e in pending)
        return sorted(merged.values(), key=lambda e: e.offset)[-limit:]

    def _logged(self, event_id: str) -> tuple[LoggedEvent, str] | None:
        # Unlogged first, as in _tail: an event leaves it only after the log has it.
        pending = self.unlogged.find(event_id)
        if pending is not None:
            return pending, "active"
        found = self.log.get(event_id)
        return (found, "log") if found is not None else None

    def window(self, thread_id: str, after: Sequence[str], limit: int) -> list[Envelope]:
        start = -1
        for marker in after:
            found = self._logged(marker)
            start = max(start, found[0].offset if found is not None else -1)
        events = (cache_for(self).parse(e.raw, validate) for e in self._tail(thread_id, start, limit))
        return [e for e in events if isinstance(e, Envelope)]

    def read(self, event_id: str) -> dict[str, Any]:
        found = self._logged(event_id)
        if found is None:
            raise NotFound(
                f"event {event_id!r} is neither in the log nor pending: it was never accepted "
                "(check `agentlog sql \"SELECT reason FROM rejected_events\"` for rejections)"
            )
        event, source = found
        return {"event": orjson.loads(event.raw), "source": source, "offset": event.offset}

    def read_event(self, event_id: str) -> Envelope | None:
        found = self._logged(event_id)
        event = validate(found[0].raw) if found is not None else None
        return event if isinstance(event, Envelope) else None

    def search(self, query: str, thread_id: str | None = None, kind: str | None = None,
               tool_name: str | None = None, window_id: str | None = None, project: str | None = None,
               after: str | None = None, since_ms: int | None = None, until_ms: int | None = None,
               limit: int = 10) -> dict[str, Any]:  # fmt: skip
        check_search_limit(limit)  # the index allocates for limit up front
        filters = SearchFilters(thread_id, window_id, kind, tool_name, project, since_ms, until_ms)
        own_thread = thread_id
        if own_thread is None and after is not None:
            named = self._logged(after)
            own_thread = named[0].thread_id if named is not None else None
        # The active hits first, the index after: an event the index shows by the time it
        # is searched is in its hits, and one it did not show yet is among the active
        # ones; searched the other way round, an event the index showed in between slipped
        # past both (a read-your-writes search missed a just-published event).
        active = self._active_hits(query, own_thread, filters) if own_thread else []
        index_error = None
        try:
            hits = self.index.search(query, filters, limit)
        except StoreError as error:  # the index is down: the thread's own events still answer
            hits, index_error = [], str(error)
        known = {h.event_id for h in hits}
        merged = sorted(hits + [h for h in active if h.event_id not in known],
                        key=lambda h: (-h.score, -h.offset))[:limit]  # fmt: skip
        out: dict[str, Any] = {"query": query, "hits": [h.as_dict() for h in merged]}
        if index_error is not None:
            out["index_error"] = index_error
        if self.index.warnings:  # an index made with an older word rule says so
            out["warnings"] = list(self.index.warnings)
        return with_query_warning(out)

    def _active_hits(self, query: str, thread_id: str, filters: SearchFilters) -> list[Hit]:
        """The thread's matching events that the index cannot show yet (read-your-writes)."""
        snapshot = self.load(thread_id)
        if snapshot is None:
            return []
        try:
            recent = self._tail(thread_id, -1, RECENT)
        except StoreError:  # the log is out of reach (a sink process down): the pending ones still answer
            recent = self.unlogged.of(thread_id)[-RECENT:]
        events = ((e, logged.offset) for logged in recent if isinstance(e := validate(logged.raw), Envelope))
        matches = active_hits(events, query_words(query), filters, snapshot.state.window_id, set(),
                              snapshot.state.closed_windows, identifiers(query))  # fmt: skip
        try:
            visible = self.index.visible_ids([h.event_id for h in matches])
        except StoreError:
            visible = set()
        return [h for h in matches if h.event_id not in visible]

    def thread_list(self, project: str | None = None, status: str | None = None,
                    limit: int = DEFAULT_THREAD_LIMIT) -> dict[str, Any]:  # fmt: skip
        """The listing on a worker: full rows for the threads whose snapshots it holds
        (``owned()``, its table's values), and for every other logged thread a row from the
        log alone (project, events, last activity; the rest ``None``), since its state
        lives on the worker that owns it. Such an answer says ``partial``; a ``status``
        filter matches owned threads only."""
        q = thread_list_query(project, status, limit)
        now_ms = time.time() * 1000.0
        states = (ThreadSnapshot.model_validate_json(raw).state for raw in self.owned() if raw is not None)
        rows = {s.thread_id: thread_row(s, now_ms, self.settings.redact) for s in states}
        warnings: list[str] = []
        logged: Sequence[tuple[Any, ...]] = []
        try:
            logged = self.log.thread_summaries()
        except StoreError as error:
            warnings.append(f"the log did not answer ({error}): only this worker's threads are listed")
        others = [log_row(t, p, int(n), log_ts(ts)) for t, p, n, ts in logged if t not in rows]
        if others:
            warnings.append(f"{len(others)} threads are owned by other workers: their rows come from the log "
                            "(no open calls, failures, approvals or status)")  # fmt: skip
        result = select_rows([*rows.values(), *others], q.project, q.status, q.limit)
        return {**result, "partial": bool(others or warnings), "warnings": warnings}

    def context(self, thread_id: str, budget: int, query: str | None = None,
                model: str | None = None, format: str = "generic") -> dict[str, Any]:  # noqa: A002 # fmt: skip
        return context_for(self, thread_id, budget, query, model, format)

    def memory_facts(self, project: str) -> list[dict[str, Any]]:
        if self._memory is None:
            self._memory = open_memory(self.settings.path("memory.db"))
        _version, facts = self._memory.published()
        return [f for f in facts.values() if f["project"] == project]

    def publish(self, data: bytes, dead_letters: Sequence[tuple[bytes, str]] = ()) -> Any:
        if self._publisher is None:
            from agentlog.streams.kafka.publisher import KafkaPublisher  # noqa: PLC0415

            self._publisher = KafkaPublisher(self.settings)
        return self._publisher.publish(data, dead_letters)

    def sql(self, statement: str) -> QueryResult:
        return self.log.query(statement)

    def close(self) -> None:
        if self._publisher is not None:
            self._publisher.close()
        self.index.close()
        self.log.close()


MEMORY_ELSEWHERE = ("a Kafka worker runs memory on its own for idle threads (AGENTLOG_MEMORY_IDLE_SECONDS) but does "
                    "not serve its routes: run `agentlog memory ...` with the worker's settings (it reads the events "
                    "topic and the view committed to the memory topic)")


class WorkerService:
    """The ``Service`` of a running worker (``agentlog run`` on Kafka), over its processor.

    Its methods are called from the HTTP server's threads; what must run on the faust
    event loop (the read-your-writes wait, asking faust who owns a thread) goes there
    through ``worker.run``. A thread's queries are answered by the worker owning the
    thread's partition: asked over HTTP with the API token when that is another worker."""

    def __init__(self, settings: Settings, worker: KafkaProcessor) -> None:
        self.settings = settings
        self.worker = worker
        self.stores = StoreQueries(settings, worker.load, worker.log_store, worker.index, worker.unlogged,
                                   owned=lambda: worker.run(worker.owned_snapshots()))  # fmt: skip
        # Threads of their own, so queued analyst queries never starve the worker's.
        self.sql_threads = ThreadPoolExecutor(max_workers=2, thread_name_prefix="analyst-sql")

    def catch_up(self, on_progress: Progress | None = None, timeout: float = 10.0) -> dict[str, Any]:
        """Wait until this worker has applied every event the broker held when called:
        ``Unavailable`` while it restores its tables, or when still behind after ``timeout``."""
        self.worker.run(self.worker.caught_up(timeout, busy_when_behind=True), timeout + 30)
        return {"processed": self.worker.written["processed"]}

    def _wait(self) -> None:
        """Read-your-writes before answering; answers anyway when still behind after a while."""
        self.worker.run(self.worker.caught_up(), 60)

    def _owner(self, thread_id: str) -> RemoteService | None:
        """The worker owning ``thread_id``'s partition, if that is not this one."""
        url = self.worker.owner(thread_id)
        return None if url is None else RemoteService(str(url), self.settings.api_token, busy_seconds=0, kept_threads=0)

    def publish(self, data: bytes, dead_letters: Sequence[tuple[bytes, str]] = ()) -> Any:
        return self.stores.publish(data, dead_letters)

    def thread_list(self, project: str | None = None, status: str | None = None,
                    limit: int = DEFAULT_THREAD_LIMIT) -> dict[str, Any]:  # fmt: skip
        self._wait()
        return self.stores.thread_list(project, status, limit)

    def state(self, thread_id: str) -> dict[str, Any]:
        if (owner := self._owner(thread_id)) is not None:
            return _asked(owner, lambda s: s.state(thread_id))
        self._wait()
        if self.worker.load(thread_id) is None:
            # Only a processor that has applied everything may say "no events": one that
            # is still behind (under load, past the wait above) answers 503, try again.
            self.catch_up(timeout=0.0)
        return self.stores.state(thread_id)

    def context(self, thread_id: str, budget: int, query: str | None = None,
                model: str | None = None, format: str = "generic") -> dict[str, Any]:  # noqa: A002 # fmt: skip
        if (owner := self._owner(thread_id)) is not None:
            return _asked(owner, lambda s: s.context(thread_id, budget, query, model, format))
        self._wait()
        return self.stores.context(thread_id, budget, query, model, format)

    def search(self, query: str, thread_id: str | None = None, kind: str | None = None,
               tool_name: str | None = None, window_id: str | None = None, project: str | None = None,
               after: str | None = None, since_ms: int | None = None, until_ms: int | None = None,
               limit: int = 10) -> dict[str, Any]:  # fmt: skip
        args = (query, thread_id, kind, tool_name, window_id, project, after, since_ms, until_ms, limit)
        if thread_id or after:  # a thread's unindexed events live on the worker that owns it
            self._wait()
        if thread_id and (owner := self._owner(thread_id)) is not None:
            return _asked(owner, lambda s: s.search(*args))
        return self.stores.search(*args)

    def read(self, event_id: str) -> dict[str, Any]:
        try:
            return self.stores.read(event_id)
        except NotFound:  # just published? then it is applied once caught up
            self._wait()
        return self.stores.read(event_id)

    def sql(self, statement: str) -> QueryResult:
        return self.sql_threads.submit(self.stores.sql, statement).result()

    def rebuild(self, on_progress: Progress | None = None) -> dict[str, Any]:
        raise NotServedHere("a running worker does not rebuild: stop every worker, then run "
                            "`agentlog rebuild` (it replays the log into the state changelog)")  # fmt: skip

    # The memory routes are served by `agentlog memory ...` beside the workers (same settings:
    # it reads the events topic and the memory topic); a worker runs the jobs on its own, in
    # a background thread (agentlog.streams.memory.runner), for idle threads only.
    def memory_show(self, project: str | None = None, key: str | None = None) -> dict[str, Any]:
        raise NotServedHere(MEMORY_ELSEWHERE)

    def memory_status(self) -> dict[str, Any]:
        raise NotServedHere(MEMORY_ELSEWHERE)

    def memory_extract(self, lease_seconds: float = 60.0) -> dict[str, Any]:
        raise NotServedHere(MEMORY_ELSEWHERE)

    def memory_consolidate(self, lease_seconds: float = 60.0, high_risk: list[str] | None = None) -> dict[str, Any]:
        raise NotServedHere(MEMORY_ELSEWHERE)

    def memory_revoke(self, event_id: str, reason: str | None = None) -> dict[str, Any]:
        raise NotServedHere(MEMORY_ELSEWHERE)

    def health(self) -> dict[str, Any]:
        return self.worker.health()  # counters and the assignment: safe from any thread, the loop's too

    def close(self) -> None:
        self.sql_threads.shutdown(wait=False, cancel_futures=True)
        self.stores.close()


def _asked(owner: RemoteService, ask: Callable[[RemoteService], T]) -> T:
    try:
        return ask(owner)
    finally:
        owner.close()


__all__ = ["RECENT", "StoreQueries", "Unlogged", "WorkerService"]
