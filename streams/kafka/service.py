"""The queries a Kafka worker answers for the threads it owns: state, read, search with
read-your-writes, and context. The same operations as ``agentlog.streams.embedded.service`` over the
worker's stores: the faust state table, the log (which trails the processor by the
sink's lag), the search index (which trails the log by a refresh), and the events the
processor has applied that the sink has not logged yet (``Unlogged``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict
from typing import Any

import orjson

from agentlog.processors.compaction import Summariser
from agentlog.processors.records import active_hits
from agentlog.processors.redaction import redact_if
from agentlog.processors.textsearch import tokenize
from agentlog.schemas.snapshot import ThreadSnapshot
from agentlog.processors.thread_list import log_row, log_ts, select_rows, thread_row
from agentlog.processors.validation import validate
from agentlog.schemas.events import Envelope
from agentlog.schemas.requests import DEFAULT_THREAD_LIMIT, check_search_limit, thread_list_query
from agentlog.schemas.search import Hit, SearchFilters
from agentlog.sinks.base import LogStore, LoggedEvent, MemoryStore, SearchIndex, StoreError
from agentlog.streams.config import Settings
from agentlog.streams.embedded.datadir import open_memory
from agentlog.streams.api.context import context_for
from agentlog.streams.api.service import NotFound

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


class WorkerService:
    """``agentlog.streams.api.context.ContextSource`` and the query routes, on a worker."""

    def __init__(self, settings: Settings, load: Callable[[str], ThreadSnapshot | None], log: LogStore,
                 index: SearchIndex, unlogged: Unlogged) -> None:  # fmt: skip
        self.settings = settings
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
        return redact_if(self.settings.redact, self._snapshot(thread_id).state.public())

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
        events = (validate(e.raw) for e in self._tail(thread_id, start, limit))
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
        index_error = None
        try:
            hits = self.index.search(query, filters, limit)
        except StoreError as error:  # the index is down: the thread's own events still answer
            hits, index_error = [], str(error)
        own_thread = thread_id
        if own_thread is None and after is not None:
            named = self._logged(after)
            own_thread = named[0].thread_id if named is not None else None
        active = self._active_hits(query, own_thread, filters, {h.event_id for h in hits}) if own_thread else []
        merged = sorted(hits + active, key=lambda h: (-h.score, -h.offset))[:limit]
        out: dict[str, Any] = {"query": query, "hits": [asdict(h) for h in merged]}
        if index_error is not None:
            out["index_error"] = index_error
        return out

    def _active_hits(self, query: str, thread_id: str, filters: SearchFilters, known: set[str]) -> list[Hit]:
        """The thread's matching events that the index cannot show yet (read-your-writes)."""
        snapshot = self.load(thread_id)
        if snapshot is None:
            return []
        events = ((e, logged.offset) for logged in self._tail(thread_id, -1, RECENT)
                  if isinstance(e := validate(logged.raw), Envelope))  # fmt: skip
        matches = active_hits(events, tokenize(query), filters, snapshot.state.window_id, known)
        try:
            visible = self.index.visible_ids([h.event_id for h in matches])
        except StoreError:
            visible = set()
        return [h for h in matches if h.event_id not in visible]

    def thread_list(self, owned: Iterable[bytes], project: str | None = None, status: str | None = None,
                    limit: int = DEFAULT_THREAD_LIMIT) -> dict[str, Any]:  # fmt: skip
        """The listing on a worker: full rows for the threads whose snapshots it holds
        (``owned``, its table's values), and for every other logged thread a row from the
        log alone (project, events, last activity; the rest ``None``), since its state
        lives on the worker that owns it. Such an answer says ``partial``; a ``status``
        filter matches owned threads only."""
        q = thread_list_query(project, status, limit)
        now_ms = time.time() * 1000.0
        states = (ThreadSnapshot.model_validate_json(raw).state for raw in owned if raw is not None)
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
                model: str | None = None) -> dict[str, Any]:  # fmt: skip
        return context_for(self, thread_id, budget, query, model)

    def memory_facts(self, project: str) -> list[dict[str, Any]]:
        if self._memory is None:
            self._memory = open_memory(self.settings.path("memory.db"))
        _version, facts = self._memory.published()
        return [f for f in facts.values() if f["project"] == project]

    def publish(self, data: bytes) -> Any:
        if self._publisher is None:
            from agentlog.streams.kafka.publisher import KafkaPublisher  # noqa: PLC0415

            self._publisher = KafkaPublisher(self.settings)
        return self._publisher.publish(data)


__all__ = ["RECENT", "Unlogged", "WorkerService"]
