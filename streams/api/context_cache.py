"""What one service remembers between context requests, so that a request does not redo
the work of the one before: the redacted texts of the window's events, the events recall
reads, the redaction of the state's lists. Each is the result of a pure function of
something that does not change (an accepted event never changes; a list is keyed by its
own JSON), so a cached
answer is byte for byte the one a cold request computes. In memory only: a read still
writes nothing durable, and a restart starts cold.

Bounded: at most ``CONTEXT_CACHE_BYTES`` per cache (a string counts its length, an
event its JSON, a search document its values) and ``CONTEXT_CACHE_ENTRIES`` entries per cache, least
recently used out first. One ``ContextCache`` per service instance (``cache_for``), never
shared between services, so tests and deployments stay apart."""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from collections import OrderedDict
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from agentlog.processors.active_set import ActiveSet
from agentlog.processors.context import WindowParts
from agentlog.processors.textsearch import Scorable
from agentlog.schemas.events import Envelope

CONTEXT_CACHE_ENTRIES = 20_000
"""Entries one cache holds at most (each of the three caches of a service)."""
CONTEXT_CACHE_BYTES = 32 * 1024 * 1024
"""Characters (or bytes) one cache holds at most: a bound on its memory, whatever the events."""

V = TypeVar("V")


class BoundedCache(MutableMapping[Any, V], Generic[V]):
    """A least-recently-used mapping bounded in entries and in total size (``size_of``).
    Thread-safe: HTTP requests assemble contexts on several threads at once."""

    def __init__(self, max_entries: int = CONTEXT_CACHE_ENTRIES, max_bytes: int = CONTEXT_CACHE_BYTES,
                 size_of: Any = None) -> None:  # fmt: skip
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self._size_of = size_of or _size
        self._items: OrderedDict[Any, tuple[V, int]] = OrderedDict()
        self.bytes = 0
        self._lock = threading.Lock()

    def get(self, key: Any, default: Any = None) -> Any:  # the hot path: one lookup, no exception
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return default
            self._items.move_to_end(key)
            return item[0]

    def __getitem__(self, key: Any) -> V:
        with self._lock:
            value, _ = self._items[key]
            self._items.move_to_end(key)
            return value

    def __setitem__(self, key: Any, value: V) -> None:
        self.put(key, value, self._size_of(key) + self._size_of(value))

    def put(self, key: Any, value: V, size: int) -> None:
        """``self[key] = value``, its size (key and value) known to the caller."""
        with self._lock:
            if key in self._items:
                self.bytes -= self._items.pop(key)[1]
            if size > self.max_bytes:
                return  # larger than the whole cache: computed again next time, never kept
            self._items[key] = (value, size)
            self.bytes += size
            while len(self._items) > self.max_entries or self.bytes > self.max_bytes:
                self.bytes -= self._items.popitem(last=False)[1][1]

    def __delitem__(self, key: Any) -> None:
        with self._lock:
            self.bytes -= self._items.pop(key)[1]

    def __iter__(self) -> Iterator[Any]:
        with self._lock:
            return iter(list(self._items))

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.bytes = 0


@dataclass(frozen=True, slots=True)
class WindowTail:
    """A thread's newest records after a start, as a context request read them: ``last``
    the newest offset read, ``records`` (offset, parsed event, record size) oldest first."""

    last: int
    records: list[tuple[int, Any, int]]
    chars: int


def _size(value: Any) -> int:
    """About what ``value`` holds, by its text: an event by its JSON, a search document by
    its values (an event of 1 MiB counts 1 MiB, not a flat guess)."""
    if isinstance(value, (str, bytes)):
        return len(value) + 64
    if isinstance(value, (tuple, list)):
        return sum(_size(v) for v in value) + 64
    if isinstance(value, dict):
        return sum(_size(v) for v in value.values()) + 64
    if isinstance(value, WindowTail):  # its records by their size as received
        return value.chars + 64 * len(value.records) + 64
    if isinstance(value, WindowParts):  # the window's shown texts
        return value.chars + 64
    if isinstance(value, Scorable):  # a token and its count per distinct token
        return 32 * len(value.counts) + 64
    if isinstance(value, BaseModel):
        return len(value.model_dump_json()) + 256
    return 64


class ActiveSets:
    """Each thread's ``ActiveSet`` (its events not indexed yet, prepared, and the searches
    asked of them), least recently used out first once the sets together hold more than
    ``max_bytes`` of text or there are more than ``max_sets``. The caller holds ``lock``
    while it reads or extends a set (HTTP requests search on several threads at once)."""

    def __init__(self, max_sets: int = 256, max_bytes: int = CONTEXT_CACHE_BYTES) -> None:
        self.max_sets, self.max_bytes = max_sets, max_bytes
        self.lock = threading.RLock()
        self._sets: OrderedDict[str, ActiveSet] = OrderedDict()

    def get(self, thread_id: str) -> ActiveSet | None:
        found = self._sets.get(thread_id)
        if found is not None:
            self._sets.move_to_end(thread_id)
        return found

    def put(self, thread_id: str, active: ActiveSet | None) -> None:
        """Keep ``active`` for the thread (``None``: keep none), then the bounds."""
        self._sets.pop(thread_id, None)
        if active is not None:
            self._sets[thread_id] = active
        while len(self._sets) > self.max_sets or (len(self._sets) > 1 and self.chars() > self.max_bytes):
            self._sets.popitem(last=False)

    def chars(self) -> int:
        return sum(s.chars for s in self._sets.values())

    def __len__(self) -> int:
        return len(self._sets)

    def clear(self) -> None:
        with self.lock:
            self._sets.clear()


PARSED_EXTRA = 512
"""A parsed record counts its bytes twice (the key, and the event: as large as the JSON it
was read from, sized so instead of serialising it again on every step) and this: the
fields left to their defaults that the event holds (an envelope's dozen), and overheads."""


class ContextCache:
    """The caches of one service: ``texts`` (event id, part) -> redacted text, for
    ``agentlog.processors.context.build_units``; ``events`` event id -> the accepted
    ``Envelope`` (read by recall; frozen); ``parsed`` an accepted record's raw bytes -> its
    ``Envelope`` (the window's records, parsed once); ``items`` a state list (or list
    item)'s JSON -> its redaction's JSON, for the service's state reads (``agentlog.processors.redaction.redact_value``'s memo); ``docs`` the search
    document of an event not yet indexed and its tokens (``agentlog.processors.records.active_hits``);
    ``derived`` what pure parts of assembly gave (``agentlog.processors.context.assemble``);
    ``active`` each thread's events not yet indexed as read-your-writes searches them
    (``agentlog.processors.active_set``)."""

    def __init__(self, max_entries: int = CONTEXT_CACHE_ENTRIES, max_bytes: int = CONTEXT_CACHE_BYTES) -> None:
        self.texts: BoundedCache[str] = BoundedCache(max_entries, max_bytes)
        self.events: BoundedCache[Envelope] = BoundedCache(max_entries, max_bytes)
        self.parsed: BoundedCache[Envelope] = BoundedCache(max_entries, max_bytes)
        self.items: BoundedCache[bytes] = BoundedCache(max_entries, max_bytes)
        self.docs: BoundedCache[tuple[dict[str, Any], Scorable]] = BoundedCache(max_entries, max_bytes)
        self.derived: BoundedCache[Any] = BoundedCache(max_entries, max_bytes)
        self.active = ActiveSets(max_bytes=max_bytes)

    def clear(self) -> None:
        """Forget everything: the next request works it all out again (gives the same)."""
        for part in (self.texts, self.events, self.parsed, self.items, self.docs, self.derived, self.active):
            part.clear()

    def parse(self, raw: bytes, validate: Callable[[bytes], Any]) -> Any:
        """``validate(raw)``, remembered by the record's bytes when it is an ``Envelope``
        (a pure function of them; a rejection is not kept)."""
        event = self.parsed.get(raw)
        if event is None:
            event = validate(raw)
            if isinstance(event, Envelope):
                self.parsed.put(raw, event, 2 * len(raw) + PARSED_EXTRA)
        return event

    def read_event(self, source: Any, event_id: str) -> Envelope | None:
        """``source.read_event``, remembered: an accepted event never changes (not found is
        not remembered: it may be accepted later)."""
        event = self.events.get(event_id)
        if event is None:
            event = source.read_event(event_id)
            if event is not None:
                self.events[event_id] = event
        return event


    def read_events(self, source: Any, event_ids: list[str]) -> dict[str, Envelope | None]:
        """``read_event`` of each, remembered; those not remembered in one call of the
        source's ``read_events`` when it has one (one query instead of one per event)."""
        out = {i: self.events.get(i) for i in event_ids}
        missing = [i for i, e in out.items() if e is None]
        batch = getattr(source, "read_events", None)
        if missing and batch is not None:
            for event_id, event in batch(missing).items():
                out[event_id] = event
                if event is not None:
                    self.events[event_id] = event
        else:
            for event_id in missing:
                out[event_id] = self.read_event(source, event_id)
        return out


_CACHES: weakref.WeakKeyDictionary[Any, ContextCache] = weakref.WeakKeyDictionary()
_MAKING = threading.Lock()  # two first requests at once still share one cache


def cache_for(service: Any) -> ContextCache:
    """The service's own cache, made on its first context request and gone with it (a view
    of a service names it in ``cache_owner``: one set of caches per service)."""
    service = getattr(service, "cache_owner", service)
    try:
        cache = _CACHES.get(service)
        if cache is None:
            with _MAKING:
                cache = _CACHES.get(service) or _CACHES.setdefault(service, ContextCache())
    except TypeError:  # a service that cannot be weakly referenced: every request starts cold
        return ContextCache()
    return cache


__all__ = ["CONTEXT_CACHE_BYTES", "CONTEXT_CACHE_ENTRIES", "ActiveSets", "BoundedCache", "WindowTail", "ContextCache", "cache_for"]
