"""A thread snapshot's JSON, checkpoint after checkpoint, from the pieces that did not change.

A checkpoint writes each changed thread's ``ThreadSnapshot`` whole, and the processor's
lock is held while it is written (nothing may change it half-way). A long thread's
snapshot is mostly collections that only grow: its plan's steps, its finished calls.
At 20,000 events of the step benchmark's traffic that is 315 KB, which pydantic wrote in
1.5-2.2 ms, holding the interpreter lock: a request that landed on it waited as long.

The items of those collections never change in place: the state's items are frozen
dataclasses (``agentlog.schemas.state``) and the pairing's maps hold strings. So each run
of ``CHUNK_ITEMS`` consecutive entries of a large collection is written once and its JSON
kept, with the entries it was written from; the next checkpoint reuses it while the same
keys hold the same objects (an identity check, in C, that reads no item), and writes
again only the runs where an entry was added, replaced or removed.

The bytes are ``ThreadSnapshot.model_dump_json()``'s for every snapshot the processors
make (orjson writes these dataclasses as pydantic does; a test holds the two equal on
random threads). An int in a float field would be written ``5`` where pydantic writes
``5.0``: the same value once loaded, and the processors keep those fields floats. A
snapshot orjson cannot write (a string that is not valid Unicode) is left to pydantic,
its answer or its error. A thread's first snapshot here is pydantic's too: runs are made
from its second on.

Pure: no I/O. One ``SnapshotJson`` per store, for the threads it checkpoints most recently.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import fields
from typing import Any

import orjson

from agentlog.schemas.snapshot import PairingState, ThreadSnapshot
from agentlog.schemas.state import WorkingState

CHUNK_ITEMS = 64
"""Entries per kept run: a change rewrites at most this many (about 30 microseconds of
frozen items), and a 3,000-step plan is 47 runs to compare."""
THREADS_KEPT = 64
"""Threads whose runs are kept (least recently checkpointed out first): a service
checkpoints the threads that are busy now, and a kept run holds its entries alive."""

KEPT_STATE_FIELDS = frozenset({"closed_windows", "constraints", "plan", "tasks", "files", "approvals", "agents",
                               "pending_calls"})  # fmt: skip
"""``WorkingState``'s maps whose values are frozen items or strings: only these are kept."""
KEPT_PAIRING_FIELDS = frozenset({"done", "orphans"})
"""``PairingState``'s maps of strings (its open calls and early results change in place)."""

_STATE_NAMES = [f.name for f in fields(WorkingState)]
_PAIRING_NAMES = [f.name for f in fields(PairingState)]


class _Run:
    """One run of a map's entries as last written: its keys, its values, and its JSON
    without braces. Lists of them compare element by element, each by identity first
    (the common case, which reads no item), else by value (an equal item writes the same)."""

    __slots__ = ("json", "keys", "values")

    def __init__(self, keys: list[Any], values: list[Any]) -> None:
        self.keys, self.values = keys, values
        self.json = orjson.dumps(dict(zip(keys, values)))[1:-1]


class _ThreadRuns:
    """One thread's kept runs, per map, by the position of the run."""

    def __init__(self) -> None:
        self.runs: dict[str, dict[int, _Run]] = {}

    def map_json(self, name: str, mapping: dict[str, Any]) -> bytes:
        if len(mapping) < CHUNK_ITEMS:
            self.runs.pop(name, None)  # a map that shrank lets its runs (and their items) go
            return orjson.dumps(mapping)
        runs = self.runs.setdefault(name, {})
        keys, values = list(mapping), list(mapping.values())
        parts = []
        for start in range(0, len(keys), CHUNK_ITEMS):
            run_keys, run_values = keys[start : start + CHUNK_ITEMS], values[start : start + CHUNK_ITEMS]
            kept = runs.get(start)
            if kept is None or kept.keys != run_keys or kept.values != run_values:
                kept = runs[start] = _Run(run_keys, run_values)
            parts.append(kept.json)
        for start in [k for k in runs if k >= len(keys)]:
            del runs[start]
        return b"{" + b",".join(parts) + b"}"

    def object_json(self, obj: Any, names: list[str], kept: frozenset[str], prefix: str) -> bytes:
        """``obj``'s JSON as orjson writes a dataclass, its ``kept`` maps from runs."""
        parts = []
        for name in names:
            value = getattr(obj, name)
            if name in kept and isinstance(value, dict):
                body = self.map_json(prefix + name, value)
            else:
                body = orjson.dumps(value)
            parts.append(b'"' + name.encode() + b'":' + body)
        return b"{" + b",".join(parts) + b"}"


class SnapshotJson:
    """``ThreadSnapshot.model_dump_json()`` as bytes, from the runs each thread's earlier
    snapshots left (``THREADS_KEPT`` threads)."""

    def __init__(self, threads_kept: int = THREADS_KEPT) -> None:
        self.threads_kept = threads_kept
        self._threads: OrderedDict[str, _ThreadRuns] = OrderedDict()

    def dumps(self, snapshot: ThreadSnapshot) -> bytes:
        thread_id = snapshot.state.thread_id
        runs = self._threads.pop(thread_id, None)
        self._threads[thread_id] = runs or _ThreadRuns()
        if len(self._threads) > self.threads_kept:
            self._threads.popitem(last=False)
        if runs is None:
            # A thread's first snapshot here: making runs costs more than writing it whole,
            # and a catch-up across more threads than are kept would make them every time.
            return snapshot.model_dump_json().encode()
        try:
            return b"".join((
                b'{"state":', runs.object_json(snapshot.state, _STATE_NAMES, KEPT_STATE_FIELDS, "state."),
                b',"pairing":', runs.object_json(snapshot.pairing, _PAIRING_NAMES, KEPT_PAIRING_FIELDS, "pairing."),
                b',"positions":', orjson.dumps(snapshot.positions, option=orjson.OPT_NON_STR_KEYS),
                b',"window":', orjson.dumps(snapshot.window), b"}",
            ))  # fmt: skip
        except TypeError:  # orjson refused it (a lone surrogate): pydantic's answer, or its error
            self._threads.pop(thread_id, None)
            return snapshot.model_dump_json().encode()

    def forget(self) -> None:
        """Let every kept run go (a reset store, a rebuilt state)."""
        self._threads.clear()


__all__ = ["CHUNK_ITEMS", "KEPT_PAIRING_FIELDS", "KEPT_STATE_FIELDS", "THREADS_KEPT", "SnapshotJson"]
