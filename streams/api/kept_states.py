"""The client's copy of each thread's state sections, so a state read over HTTP brings only
what changed (``agentlog.processors.state_sections``).

A read sends the digests of the sections kept from the thread's last answer; the server
leaves out those still current and names them, and they are taken from here. Kept sections
are read-only (``agentlog.processors.read_only``), as an in-process read's are: the same
objects are handed to every later read while they do not change, so a caller that tried to
change one in place would change the next answers too; it gets a ``TypeError`` instead.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agentlog.processors.read_only import read_only
from agentlog.processors.state_sections import (
    KNOWN_HEADER, SECTIONS, SECTIONS_HEADER, UNCHANGED_HEADER, header_of, parse_known,
)  # fmt: skip

THREADS_KEPT = 64
"""Threads whose sections a client keeps (the least recently read out first)."""

Headers = Any
"""A response's headers: ``.get(name)``, case-insensitive (httpx's, or ``http.client``'s)."""
Read = Callable[[dict[str, str]], tuple[dict[str, Any], Headers]]
"""One state request with these extra headers: its JSON and its headers."""


@dataclass(frozen=True, slots=True)
class Kept:
    """One thread's sections as last answered, and their digests."""

    digests: Mapping[str, str]
    sections: Mapping[str, Any]


class KeptStates:
    def __init__(self, threads: int = THREADS_KEPT) -> None:
        self.threads = threads
        self._kept: OrderedDict[str, Kept] = OrderedDict()
        self._lock = threading.Lock()

    def read(self, thread_id: str, request: Read) -> dict[str, Any]:
        """The thread's whole state: ``request`` sends the kept digests; a section the
        answer leaves out is taken from the copy they named. Should the answer leave out
        one not kept (it cannot, from a server that keeps to the protocol), the state is
        read again in full."""
        with self._lock:
            kept = self._kept.get(thread_id)
        state, headers = request({KNOWN_HEADER: header_of(kept.digests)} if kept else {})
        unchanged = [n for n in (headers.get(UNCHANGED_HEADER) or "").split(",") if n]
        if unchanged and (kept is None or any(n not in kept.sections for n in unchanged)):
            state, headers = request({})
            unchanged = []
        for name in unchanged:
            state[name] = kept.sections[name]  # type: ignore[union-attr]
        self._keep(thread_id, state, headers.get(SECTIONS_HEADER), kept, set(unchanged))
        return state

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
            if name not in unchanged:
                state[name] = read_only(state[name])
        with self._lock:
            if not named:
                self._kept.pop(thread_id, None)
                return
            self._kept[thread_id] = Kept(named, {n: state[n] for n in named})
            self._kept.move_to_end(thread_id)
            while len(self._kept) > self.threads:
                self._kept.popitem(last=False)


__all__ = ["THREADS_KEPT", "Kept", "KeptStates"]
