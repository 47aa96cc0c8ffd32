"""The working state as users read it, kept from one read to the next.

A long thread's state holds thousands of plan steps, files and failures. Dumping and
redacting all of them on every read made the agent's step (publish, then read the state)
cost more the longer the thread. The reducer replaces an item that changes instead of
editing it (the items are frozen), so an item that is the same object as at the last read
renders the same: a read dumps and redacts only the items that are new since then. A view
that its thread processor tells which sections each event touched (``touched``) does not
even look at the others: a read costs what changed since the last one, not the plan's length.

Same value as ``redact_if(redact, state.public())``, key order included (a property test
checks it after every event of generated threads). A read shares its sections, their items
and the summary with the next reads, read-only (``agentlog.processors.read_only``): a
caller that tries to change one gets a ``TypeError``; its copies are plain and changeable.

``render_json`` is the same state for a caller that only sends it on (the HTTP route): each
section's JSON is kept as bytes beside its items and spliced in (``orjson.Fragment``), so
an unchanged section costs no second serialisation.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import fields
from itertools import compress
from operator import is_, is_not
from typing import Any

import orjson
from pydantic import TypeAdapter

from agentlog.processors.read_only import ReadOnlyDict, ReadOnlyList, read_only
from agentlog.processors.redaction import redact_reusing, redact_value
from agentlog.processors.state_sections import digest as digest_of
from agentlog.schemas.state import (
    AgentItem,
    ApprovalItem,
    ConstraintItem,
    Failure,
    FileItem,
    PendingCall,
    Pinned,
    StepItem,
    TaskItem,
    WorkingState,
)

KEYED_SECTIONS = frozenset({"constraints", "plan", "tasks", "files", "agents", "pending_calls"})
"""Kept as dicts by their id, shown as lists."""

_ITEM_ADAPTERS: dict[type, TypeAdapter[Any]] = {
    cls: TypeAdapter(cls)
    for cls in (Pinned, ConstraintItem, StepItem, TaskItem, FileItem, ApprovalItem, AgentItem, PendingCall, Failure)
}
_SUMMARY_ADAPTER: TypeAdapter[dict[str, Any] | None] = TypeAdapter(dict[str, Any] | None)
_PLAIN_ONLY = (orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
               | orjson.OPT_PASSTHROUGH_SUBCLASS)
"""Serialising with these fails (``TypeError``) on any value that is not plain JSON, where
pydantic's dump and orjson could differ (a datetime's zone, a dataclass, a str subclass)."""
_FIELDS = tuple(f.name for f in fields(WorkingState))
_APPROVAL_QUEUE_HIDES = ("decision", "decided_by")
_QUEUES = ("pending_approvals", "decided_approvals")


class Rendering(ReadOnlyList):
    """A section's items as ``PublicView`` rendered them, never changed once made: a
    section that changes renders into a new one. So the very same ``Rendering`` holds the
    very same items, and a reader may remember what it derived from one by its identity
    alone (``agentlog.processors.context``)."""

    __slots__ = ()


class PublicView:
    """One thread's rendered sections, each with the items it rendered.

    ``told``: the view's owner calls ``touched`` with the sections each event may have
    changed (``ThreadProcessor`` does, with what ``reduce`` returns), so a section not
    touched since its last rendering is answered as it is. Otherwise (a view over a state
    changed by others) each read compares a section's items with those it rendered, by
    identity (in C). Either way a section that changed renders its new and replaced items only.
    """

    __slots__ = ("_sections", "_summary", "_summary_entries", "_redact", "_json", "_told", "_fresh", "_digests",
                 "_summary_digest", "_moves", "_patches")

    def __init__(self, told: bool = False) -> None:
        self._sections: dict[str, tuple[tuple[object, ...], Rendering, Any]] = {}
        """Per section: the items as last read (held, so no other object takes their ids),
        their renderings, and what the section derived from them (the approval queues)."""
        self._summary: tuple[object, Any, bytes | None] = (_UNREAD, None, None)
        """The summary as last read, what it was shown as (read-only, redacted) and that's JSON."""
        self._summary_digest: tuple[bytes | None, str] = (None, "")
        """The shown summary's JSON as last digested, and its digest."""
        self._summary_entries: dict[int, tuple[Any, Any]] = {}
        """The entries of the summary's lists as last shown (id -> (entry, shown)): a fold
        keeps the unchanged ones of a record of hundreds as the same objects."""
        self._redact: bool | None = None
        self._json: dict[str, tuple[object, orjson.Fragment, str]] = {}
        """Per shown section: the rendering it was serialised from (held: compared by
        identity, as a section that changed renders into a new list), its JSON and digest."""
        self._digests: dict[str, str] = {}
        """The digest of each section ``render_json`` last gave (``digests``)."""
        self._moves: dict[str, tuple[Rendering, Rendering, tuple[int, ...]]] = {}
        """Per section whose last rendering replaced or added a few items: the rendering
        before, the one after, and the positions of the items that differ."""
        self._patches: dict[str, tuple[str, tuple[int, ...]]] = {}
        """Per section whose JSON was last made from a rendering a move led to from the one
        serialised before: that one's digest and the positions that differ (``patches``)."""
        self._told = told
        self._fresh: set[str] = set()
        """The sections rendered and not touched since (consulted only when ``told``)."""

    def touched(self, sections: Iterable[str]) -> None:
        """An event may have changed these sections (the names of ``WorkingState``'s fields)."""
        self._fresh.difference_update(sections)

    def render(self, state: WorkingState, redact: bool) -> dict[str, Any]:
        """The public state: a fresh top-level dict whose sections, items and summary are
        read-only and shared with the next reads while they do not change."""
        return self._render(state, redact, lambda _name, rendered: rendered, self._shown_summary)

    def render_json(self, state: WorkingState, redact: bool) -> dict[str, Any]:
        """The public state with its sections as JSON fragments: ``orjson.dumps`` of it is
        ``orjson.dumps(self.render(state, redact))``, byte for byte. Only for serialising."""
        self._digests = {}
        return self._render(state, redact, self._fragment, self._summary_fragment)

    def patches(self) -> dict[str, tuple[str, Rendering, tuple[int, ...]]]:
        """For the sections of the last ``render_json`` that differ from their JSON before
        it in a few items: the digest before, the rendering now and the positions of the
        items that differ (the rest, up to the old length, are the same). A reader holding
        the section at that digest needs only those items."""
        return {name: (base, self._json[name][0], positions) for name, (base, positions) in self._patches.items()
                if name in self._digests}  # fmt: skip

    def digests(self) -> dict[str, str]:
        """The digest of each section in the state ``render_json`` last gave
        (``agentlog.processors.state_sections``), made with its JSON: a reader that holds a
        section with the same digest need not be sent it again."""
        return dict(self._digests)

    def _render(self, state: WorkingState, redact: bool, shown: Callable[[str, Rendering], Any],
                summary: Callable[[dict[str, Any] | None], Any]) -> dict[str, Any]:  # fmt: skip
        """``shown(name, rendered)`` is what a section's renderings become in the answer,
        ``summary(state.summary)`` what the summary does."""
        if redact is not self._redact:  # rendered under the other setting: start over
            self._sections, self._summary, self._redact, self._json = {}, (_UNREAD, None, None), redact, {}
            self._summary_entries, self._fresh, self._moves, self._patches = {}, set(), {}, {}
        out: dict[str, Any] = {}
        for name in _FIELDS:
            value = getattr(state, name)
            if name in KEYED_SECTIONS:
                out[name] = shown(name, self._section(name, value.values())[0])
            elif name == "failures":
                out[name] = shown(name, self._section(name, value)[0])
            elif name == "approvals":
                queues = self._section(name, value.values(), _approval_queues)[1]
            elif name == "goal":
                out[name] = None if value is None else shown(name, self._section(name, (value,))[0])[0]
            elif name == "summary":
                out[name] = summary(value)
            else:  # scalars and the small map of closed windows (a fresh dict: the caller's)
                out[name] = self._plain(dict(value) if isinstance(value, dict) else value)
        out["pending_approvals"], out["decided_approvals"] = (shown(n, q) for n, q in zip(_QUEUES, queues))
        return out

    def _fragment(self, name: str, rendered: Rendering) -> Any:
        """The section's JSON, serialised again only when its renderings changed. The goal,
        a section of one item shown as that item, is shown as a list of its one fragment."""
        held, fragment, digest = self._json.get(name, (None, None, ""))
        if held is not rendered:
            json = orjson.dumps(rendered[0] if name == "goal" else list(rendered))
            move = self._moves.get(name)
            if move is not None and move[0] is held and move[1] is rendered and name != "goal":
                self._patches[name] = (digest, move[2])
            else:
                self._patches.pop(name, None)
            fragment, digest = orjson.Fragment(json), digest_of(json)
            self._json[name] = (rendered, fragment, digest)
        self._digests[name] = digest
        return [fragment] if name == "goal" else fragment

    def _section(self, name: str, values: Collection[object],
                 derive: Callable[[Rendering], Any] = lambda _: None) -> tuple[Rendering, Any]:  # fmt: skip
        """``values``: the section's items (a dict's values are compared as they are: a
        tuple of them is made only when something changed)."""
        held, rendered, derived = self._sections.get(name, ((), _NOTHING, None))
        if self._told and name in self._fresh:
            return rendered, derived  # not touched since its last rendering: not even looked at
        kept = len(held)
        if len(values) == kept and derived is not None and all(map(is_, values, held)):
            self._fresh.add(name)
            return rendered, derived  # nothing in it changed
        items = values if isinstance(values, tuple) else tuple(values)
        if len(items) >= kept:  # the reducer adds at the end and replaces in place
            changed = list(compress(range(kept), map(is_not, items, held)))
            if len(changed) <= _FEW:
                renderings = list(rendered)
                for i in changed:
                    renderings[i] = self._item(items[i])
                renderings.extend(self._item(item) for item in items[kept:])
                now = Rendering(renderings)
                self._moves[name] = (rendered, now, (*changed, *range(kept, len(items))))
                return self._keep(name, items, now, derive)
        # Items removed (a closed call, a removed constraint, old failures) or many replaced.
        self._moves.pop(name, None)
        by_id = dict(zip(map(id, held), rendered))
        return self._keep(name, items, Rendering(by_id.get(id(item)) or self._item(item) for item in items), derive)

    def _keep(self, name: str, items: tuple[object, ...], rendered: Rendering,
              derive: Callable[[Rendering], Any]) -> tuple[Rendering, Any]:  # fmt: skip
        derived = derive(rendered)
        self._sections[name] = (items, rendered, True if derived is None else derived)
        self._fresh.add(name)
        return rendered, derived

    def _item(self, item: object) -> ReadOnlyDict:
        return ReadOnlyDict(self._plain(_ITEM_ADAPTERS[type(item)].dump_python(item, mode="json")))

    def _shown_summary(self, summary: dict[str, Any] | None) -> Any:
        """The summary as shown (read-only, redacted), made again only when the fold (or a
        compaction event) replaced it, from the entries it shares with the last one."""
        held, shown, _ = self._summary
        if held is summary:
            return shown
        json: bytes | None = None
        if summary is not None:
            try:  # plain JSON already (the fold's record, an event's payload): shown as it is
                json = orjson.dumps(summary, option=_PLAIN_ONLY)
                plain = summary
            except TypeError:
                plain = _SUMMARY_ADAPTER.dump_python(summary, mode="json")
            kept: dict[int, tuple[Any, Any]] = {}
            shown = redact_reusing(plain, bool(self._redact), self._summary_entries, kept, read_only)
            self._summary_entries = kept
            if self._redact:
                json = None  # the redacted summary's own JSON, made when asked
        else:
            shown = None
        self._summary = (summary, shown, json)
        return shown

    def _summary_fragment(self, summary: dict[str, Any] | None) -> orjson.Fragment:
        """The shown summary's JSON, serialised once for each new summary."""
        shown = self._shown_summary(summary)
        held, _, json = self._summary
        if json is None:
            json = orjson.dumps(shown)
            self._summary = (held, shown, json)
        if self._summary_digest[0] is not json:
            self._summary_digest = (json, digest_of(json))
        self._digests["summary"] = self._summary_digest[1]
        return orjson.Fragment(json)

    def _plain(self, value: Any) -> Any:
        return redact_value(value) if self._redact else value


_NOTHING = Rendering()
_UNREAD = object()
"""What ``_summary`` holds before the first read (``None`` is a summary: there is none)."""
_FEW = 16
"""Past this many replaced items in one section, match them by identity instead."""


def _approval_queues(approvals: list[dict[str, Any]]) -> tuple[Rendering, Rendering]:
    pending = Rendering(ReadOnlyDict({k: v for k, v in a.items() if k not in _APPROVAL_QUEUE_HIDES})
                        for a in approvals if a["decision"] is None and a["action"] is not None)  # fmt: skip
    return pending, Rendering(a for a in approvals if a["decision"] is not None)


__all__ = ["KEYED_SECTIONS", "PublicView", "Rendering"]
