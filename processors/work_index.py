"""A thread's plan steps and tasks by the event that last changed them, kept beside its state.

At each fold (``processors/fold.py``) the handoff record needs the steps and tasks that the
folded events finished, and the step that comes next. Scanning the whole plan for both made a
fold cost more the longer the thread (a 20,000-event thread has about 1,600 plan steps; a fold
takes a few events). This index answers both in time bounded by what the fold takes and by what
changed since, with the same answer as the scans (a property test checks it after every event).

It is derived from the state alone (each item names the event that last changed it), so it is
never persisted: a restored thread builds it again from its snapshot's plan and tasks. It
relies on what the reducer guarantees: items change only through ``plan`` and ``task`` events,
are replaced (never edited, never removed), and a new key goes to the end of its section.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from heapq import heappop, heappush
from typing import Generic, TypeVar

from agentlog.schemas.events import Envelope
from agentlog.schemas.state import StepItem, TaskItem, WorkingState

_Item = TypeVar("_Item", StepItem, TaskItem)
WATCHED = ("running", "pending")
"""The statuses whose first item is asked for (the next step: the first running, else the first pending)."""


class SectionIndex(Generic[_Item]):
    """One section (the plan, or the tasks): each key's place, the keys each event last
    changed, and the places of the items that were seen in a watched status."""

    __slots__ = ("_place", "_keys", "_seen", "_by_event", "_waiting", "_open")

    def __init__(self) -> None:
        self._place: dict[str, int] = {}
        """Each key's place in the section: the dict's insertion order, as no key is removed."""
        self._keys: list[str] = []
        self._seen: dict[str, _Item] = {}
        """Each key's item when the index last looked (items are replaced when they change)."""
        self._by_event: dict[str, list[str]] = {}
        """Event id -> the keys whose current item it changed last: the exact inverse of the
        items' ``event_id`` (lists, not sets: most hold one or two keys, and a thread's
        index lives as long as the thread)."""
        self._waiting: dict[str, tuple[list[int], set[int]]] = {s: ([], set()) for s in WATCHED}
        """Per watched status, a heap of places holding every item in that status (and, until
        it is looked at, some that left it), with the places it holds."""
        self._open: set[int] = set()
        """The places of the items in a watched status now (exact)."""

    @classmethod
    def of(cls, items: dict[str, _Item]) -> SectionIndex[_Item]:
        """The index of a whole section, built from scratch (a restored thread's)."""
        index: SectionIndex[_Item] = cls()
        index.update(items, items)
        return index

    def update(self, items: dict[str, _Item], keys: Iterable[str]) -> None:
        """Take in the items of ``keys`` after an event changed (or added) them, in the order
        the reducer added them."""
        for key in keys:
            item = items.get(key)
            old = self._seen.get(key)
            if item is None or item is old:
                continue
            place = self._place.get(key)
            if place is None:
                place = self._place[key] = len(self._keys)
                self._keys.append(key)
            if old is not None:  # it leaves the keys of the event that changed it before
                others = self._by_event[old.event_id]
                others.remove(key)
                if not others:
                    del self._by_event[old.event_id]
            # Never listed twice: a key is taken in once per change, after leaving its last list.
            self._by_event.setdefault(item.event_id, []).append(key)
            self._seen[key] = item
            waiting = self._waiting.get(item.status)
            if waiting is None:
                self._open.discard(place)
                continue
            self._open.add(place)
            if place not in waiting[1]:
                heappush(waiting[0], place)
                waiting[1].add(place)

    def changed_by(self, items: dict[str, _Item], event_ids: Iterable[str]) -> list[_Item]:
        """The items, in section order, whose last change came with one of ``event_ids``."""
        places = sorted(self._place[key] for e in event_ids for key in self._by_event.get(e, ()))
        return [items[self._keys[p]] for p in places]

    def open_items(self, items: dict[str, _Item]) -> list[_Item]:
        """The items in a watched status (pending or running), in section order."""
        return [items[self._keys[p]] for p in sorted(self._open)]

    def first(self, items: dict[str, _Item], status: str) -> _Item | None:
        """The first item in section order whose status is ``status`` (one of ``WATCHED``)."""
        heap, held = self._waiting[status]
        while heap:
            item = items[self._keys[heap[0]]]
            if item.status == status:
                return item
            held.discard(heappop(heap))  # it left the status: if it ever comes back, it is pushed again
        return None


@dataclass(slots=True)
class WorkIndex:
    """The plan's and the tasks' indexes of one thread."""

    plan: SectionIndex[StepItem]
    tasks: SectionIndex[TaskItem]

    @classmethod
    def of(cls, state: WorkingState) -> WorkIndex:
        return cls(SectionIndex.of(state.plan), SectionIndex.of(state.tasks))

    def applied(self, state: WorkingState, event: Envelope) -> None:
        """Take in what ``event``, just reduced into ``state``, changed."""
        if event.kind == "plan":
            self.plan.update(state.plan, [s.step_id for s in event.payload.steps])  # type: ignore[attr-defined]
        elif event.kind == "task":
            self.tasks.update(state.tasks, (event.payload.task_id,))  # type: ignore[attr-defined]

    def next_step(self, state: WorkingState) -> StepItem | None:
        """The first running step, else the first pending one."""
        running = self.plan.first(state.plan, "running")
        return running if running is not None else self.plan.first(state.plan, "pending")


__all__ = ["WATCHED", "SectionIndex", "WorkIndex"]
