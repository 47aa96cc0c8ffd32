"""The client's copy of each thread's state sections, so a state read over HTTP brings only
what changed (``agentlog.processors.state_sections``).

A read sends the digests of the sections kept from the thread's last answer, and takes
patches: the server leaves out those still current and names them (taken from here), and
sends a list section changed in a few items as those items (applied to the copy here).
Kept sections are read-only (``agentlog.processors.read_only``), as an in-process read's
are: the same objects are handed to every later read while they do not change, so a
caller that tried to change one in place would change the next answers too; it gets a
``TypeError`` instead.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any

from agentlog.processors.read_only import ReadOnlyList, read_only
from agentlog.processors.state_sections import (
    ACCEPT_PATCHES_HEADER, KNOWN_HEADER, PATCHED_HEADER, SECTIONS, SECTIONS_HEADER, UNCHANGED_HEADER, header_of, merged,
    names_of, parse_known,
)  # fmt: skip
from agentlog.sinks.base import StoreError

THREADS_KEPT = 64
"""Threads whose sections a client keeps (the least recently read out first; 0: none, as
for a Kafka worker passing a read on to the thread's owner)."""

Headers = Any
"""A response's headers: ``.get(name)``, case-insensitive (httpx's, or ``http.client``'s)."""
Read = Callable[[dict[str, str]], tuple[dict[str, Any], Headers]]
"""One state request with these extra headers: its JSON and its headers."""
AsyncRead = Callable[[dict[str, str]], Awaitable[tuple[dict[str, Any], Headers]]]


@dataclass(frozen=True, slots=True)
class Kept:
    """One thread's sections as last answered, and their digests."""

    digests: Mapping[str, str]
    sections: Mapping[str, Any]


class KeptStates:
    """The last answered sections of the ``threads`` threads read most recently, safe to
    share between the threads of one client (each read merges with the copy it named)."""

    def __init__(self, threads: int = THREADS_KEPT) -> None:
        self.threads = threads
        self._kept: OrderedDict[str, Kept] = OrderedDict()
        self._lock = threading.Lock()

    def read(self, thread_id: str, request: Read) -> dict[str, Any]:
        """The thread's whole state, each request sent by ``request`` (``reading``)."""
        steps = self.reading(thread_id)
        state, headers = None, next(steps)
        while headers is not None:
            state, headers = _advance(steps, _outcome(request, headers))
        return state  # type: ignore[return-value]

    async def read_async(self, thread_id: str, request: AsyncRead) -> dict[str, Any]:
        """``read`` for an asyncio client: each request awaited."""
        steps = self.reading(thread_id)
        state, headers = None, next(steps)
        while headers is not None:
            state, headers = _advance(steps, await _outcome_async(request, headers))
        return state  # type: ignore[return-value]

    def reading(self, thread_id: str) -> Reading:
        """A state read without its I/O: yields the extra headers of each request to send,
        takes back its ``(state, headers)`` (or the ``StoreError`` it raised, thrown in) and
        returns the thread's whole state. The kept digests go first; a section the answer
        leaves out is taken from the copy they named, a patched one is that copy with the
        patch's items. Should the answer name one not kept, or a patch not fit its copy
        (neither can come from a server that keeps to the protocol), or the server refuse
        the digests (a proxy that doubled the header, a server that takes fewer names), the
        state is read again in full. With ``threads`` 0 nothing is kept: the answer as sent."""
        if self.threads == 0:
            return (yield {})[0]
        with self._lock:
            kept = self._kept.get(thread_id)
        if kept is None:
            state, headers = yield {}
        else:
            try:
                state, headers = yield {KNOWN_HEADER: header_of(kept.digests), ACCEPT_PATCHES_HEADER: "true"}
            except StoreError:  # a refusal: of the digests, or of the read itself (asked again)
                self._forget(thread_id)
                state, headers = yield {}
                kept = None
        unchanged, patched = names_of(headers.get(UNCHANGED_HEADER)), names_of(headers.get(PATCHED_HEADER))
        if unchanged or patched:
            whole = merged(state, unchanged, patched, kept.sections) if kept is not None else None
            if whole is None:  # not what this client holds: read in full
                state, headers = yield {}
                unchanged = []
                if headers.get(UNCHANGED_HEADER) or headers.get(PATCHED_HEADER):
                    self._forget(thread_id)
                    raise StoreError("the server left sections out of a state read that named none it may leave out; "
                                     "it does not keep to docs/http-api.md")  # fmt: skip
        self._keep(thread_id, state, headers.get(SECTIONS_HEADER), kept, set(unchanged))
        return state

    def _forget(self, thread_id: str) -> None:
        with self._lock:
            self._kept.pop(thread_id, None)

    def _keep(self, thread_id: str, state: dict[str, Any], sections: str | None, kept: Kept | None,
              unchanged: set[str]) -> None:  # fmt: skip
        """Keep the answer's sections (read-only, in ``state`` too) under their digests;
        an answer without them (an older server) keeps nothing for the thread."""
        try:
            digests = parse_known([sections]) if sections else {}
        except ValueError:
            digests = {}
        named = {n: d for n, d in digests.items() if n in SECTIONS and n in state}
        for name in named:
            if name not in unchanged and type(state[name]) is not ReadOnlyList:  # a patched one is already
                state[name] = read_only(state[name])
        with self._lock:
            if not named:
                self._kept.pop(thread_id, None)
                return
            self._kept[thread_id] = Kept(named, {n: state[n] for n in named})
            self._kept.move_to_end(thread_id)
            while len(self._kept) > self.threads:
                self._kept.popitem(last=False)


Outcome = tuple[dict[str, Any], Headers] | StoreError
"""A request's answer, or the refusal it raised."""
Reading = Generator[dict[str, str], Outcome, dict[str, Any]]


def _outcome(request: Read, headers: dict[str, str]) -> Outcome:
    try:
        return request(headers)
    except StoreError as error:
        return error


async def _outcome_async(request: AsyncRead, headers: dict[str, str]) -> Outcome:
    try:
        return await request(headers)
    except StoreError as error:
        return error


def _advance(steps: Reading, outcome: Outcome) -> tuple[dict[str, Any] | None, dict[str, str] | None]:
    """``outcome`` given to the read (a refusal thrown in): the state when it is done,
    else the next request's headers."""
    try:
        return None, steps.throw(outcome) if isinstance(outcome, StoreError) else steps.send(outcome)
    except StopIteration as done:
        return done.value, None


__all__ = ["THREADS_KEPT", "Kept", "KeptStates"]
