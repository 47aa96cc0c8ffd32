"""The working state as users read it, kept from one read to the next.

A long thread's state holds thousands of plan steps, files and failures. Dumping and
redacting all of them on every read made the agent's step (publish, then read the state)
cost more the longer the thread. The reducer replaces an item that changes instead of
editing it (the items are frozen), so an item that is the same object as at the last read
renders the same: a read dumps and redacts only the items that are new since then.

Same value as ``redact_if(redact, state.public())``, key order included (a property test
checks it after every event of generated threads). Every read returns fresh dicts and
lists: a caller may change what it gets without touching the next read's.

``render_json`` is the same state for a caller that only sends it on (the HTTP route): each
section's JSON is kept as bytes beside its items and spliced in (``orjson.Fragment``), so
an unchanged section costs neither a copy nor a second serialisation.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import fields
from itertools import compress
from operator import is_, is_not
from typing import Any

import orjson
from pydantic import TypeAdapter

from agentlog.processors.redaction import redact_value, redacted_json
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


class Rendering(list):  # type: ignore[type-arg]
    """A section's items as ``PublicView`` rendered them, never changed once made: a
    section that changes renders into a new one. So the very same ``Rendering`` holds the
    very same items, and a reader of ``render(copy=False)`` may remember what it derived
    from one by its identity alone (``agentlog.processors.context``)."""

    __slots__ = ()


class PublicView:
    """One thread's rendered sections, each with the items it rendered.

    A section that did not change since the last read costs a comparison by identity (in C)
    and a copy of its dicts; one that did renders its new and replaced items only.
    """

    __slots__ = ("_sections", "_summary", "_summary_memo", "_redact", "_json", "_shared_summary")

    def __init__(self) -> None:
        self._sections: dict[str, tuple[tuple[object, ...], list[dict[str, Any]], Any]] = {}
        """Per section: the items as last read (held, so no other object takes their ids),
        their renderings, and what the section derived from them (the approval queues)."""
        self._summary: tuple[object, bytes | None] = (None, None)
        self._summary_memo: dict[bytes, bytes] = {}
        """The summary's lists and list items as last redacted (their JSON -> the
        redaction's): a fold changes a few entries of a record of hundreds."""
        self._redact: bool | None = None
        self._json: dict[str, tuple[object, orjson.Fragment]] = {}
        """Per shown section: the rendering it was serialised from (held: compared by
        identity, as a section that changed renders into a new list) and its JSON."""
        self._shared_summary: tuple[bytes | None, Any] = (None, None)
        """The summary's JSON as ``render(copy=False)`` last loaded it, and what it loaded."""

    def render(self, state: WorkingState, redact: bool, copy: bool = True) -> dict[str, Any]:
        """The public state. ``copy=False`` shares the sections' lists, their item dicts and
        the summary with the next reads: for a caller that only reads them (context
        assembly), never for one that hands them out or changes them. A section's rendering
        is never changed once made (a changed section renders into a new list), so what
        such a reader holds stays what it read."""
        if copy:
            return self._render(state, redact, lambda _name, rendered: _copies(rendered), orjson.loads)
        return self._render(state, redact, lambda _name, rendered: rendered, self._loaded_summary)

    def _loaded_summary(self, rendered: bytes) -> Any:
        """``orjson.loads(rendered)``, loaded again only when the summary's JSON is not the
        very bytes loaded last (``_rendered_summary`` keeps them while the summary is the same)."""
        held, loaded = self._shared_summary
        if held is not rendered:
            loaded = orjson.loads(rendered)
            self._shared_summary = (rendered, loaded)
        return loaded

    def render_json(self, state: WorkingState, redact: bool) -> dict[str, Any]:
        """The public state with its sections as JSON fragments: ``orjson.dumps`` of it is
        ``orjson.dumps(self.render(state, redact))``, byte for byte. Only for serialising."""
        return self._render(state, redact, self._fragment, orjson.Fragment)

    def _render(self, state: WorkingState, redact: bool, shown: Callable[[str, list[dict[str, Any]]], Any],
                summary: Callable[[bytes], Any]) -> dict[str, Any]:  # fmt: skip
        """``shown(name, rendered)`` is what a section's renderings become in the answer,
        ``summary(json)`` what the summary's JSON does."""
        if redact is not self._redact:  # rendered under the other setting: start over
            self._sections, self._summary, self._redact, self._json = {}, (None, None), redact, {}
            self._summary_memo, self._shared_summary = {}, (None, None)
        out: dict[str, Any] = {}
        for name in _FIELDS:
            value = getattr(state, name)
            if name in KEYED_SECTIONS:
                out[name] = shown(name, self._section(name, value.values())[0])
            elif name == "failures":
                out[name] = shown(name, self._section(name, tuple(value))[0])
            elif name == "approvals":
                queues = self._section(name, value.values(), _approval_queues)[1]
            elif name == "goal":
                out[name] = None if value is None else shown(name, self._section(name, (value,))[0])[0]
            elif name == "summary":
                out[name] = summary(self._rendered_summary(value))
            else:  # scalars and the small map of closed windows
                out[name] = self._plain(dict(value) if isinstance(value, dict) else value)
        out["pending_approvals"], out["decided_approvals"] = (shown(n, q) for n, q in zip(_QUEUES, queues))
        return out

    def _fragment(self, name: str, rendered: list[dict[str, Any]]) -> Any:
        """The section's JSON, serialised again only when its renderings changed. The goal,
        a section of one item shown as that item, is shown as a list of its one fragment."""
        held, fragment = self._json.get(name, (None, None))
        if held is not rendered:
            fragment = orjson.Fragment(orjson.dumps(rendered[0] if name == "goal" else list(rendered)))
            self._json[name] = (rendered, fragment)
        return [fragment] if name == "goal" else fragment

    def _section(self, name: str, values: Collection[object],
                 derive: Callable[[list[dict[str, Any]]], Any] = lambda _: None) -> tuple[list[dict[str, Any]], Any]:  # fmt: skip
        """``values``: the section's items (a dict's values are compared as they are: a
        tuple of them is made only when something changed)."""
        held, rendered, derived = self._sections.get(name, ((), [], None))
        kept = len(held)
        if len(values) == kept and derived is not None and all(map(is_, values, held)):
            return rendered, derived  # the common read: nothing in it changed
        items = values if isinstance(values, tuple) else tuple(values)
        if len(items) >= kept:  # the reducer adds at the end and replaces in place
            changed = list(compress(range(kept), map(is_not, items, held)))
            if len(changed) <= _FEW:
                rendered = Rendering(rendered)
                for i in changed:
                    rendered[i] = self._item(items[i])
                rendered.extend(self._item(item) for item in items[kept:])
                return self._keep(name, items, rendered, derive)
        # Items removed (a closed call, a removed constraint, old failures) or many replaced.
        by_id = dict(zip(map(id, held), rendered))
        return self._keep(name, items, Rendering(by_id.get(id(item)) or self._item(item) for item in items), derive)

    def _keep(self, name: str, items: tuple[object, ...], rendered: Rendering,
              derive: Callable[[list[dict[str, Any]]], Any]) -> tuple[list[dict[str, Any]], Any]:  # fmt: skip
        derived = derive(rendered)
        self._sections[name] = (items, rendered, True if derived is None else derived)
        return rendered, derived

    def _item(self, item: object) -> dict[str, Any]:
        return self._plain(_ITEM_ADAPTERS[type(item)].dump_python(item, mode="json"))

    def _rendered_summary(self, summary: dict[str, Any] | None) -> bytes:
        """The summary's JSON (``render`` loads it: a fresh deep copy for each read)."""
        # The fold replaces the summary dict whenever it changes (never edits it in place).
        held, rendered = self._summary
        if held is not summary or rendered is None:
            try:  # plain JSON already (the fold's dump, an event's payload): the adapter's dump is itself
                rendered = orjson.dumps(summary, option=_PLAIN_ONLY)
                dumped = summary
            except TypeError:
                dumped = _SUMMARY_ADAPTER.dump_python(summary, mode="json")
                rendered = orjson.dumps(dumped)
            if self._redact:  # its lists' entries as last redacted, new ones redacted now
                rendered, self._summary_memo = redacted_json(dumped, self._summary_memo)
            self._summary = (summary, rendered)
        return rendered

    def _plain(self, value: Any) -> Any:
        return redact_value(value) if self._redact else value


_FEW = 16
"""Past this many replaced items in one section, match them by identity instead."""


def _copies(rendered: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Fresh dicts for the caller (items hold scalars only: a shallow copy is a whole one)."""
    return list(map(dict.copy, rendered))


def _approval_queues(approvals: list[dict[str, Any]]) -> tuple[Rendering, Rendering]:
    pending = Rendering({k: v for k, v in a.items() if k not in _APPROVAL_QUEUE_HIDES}
                        for a in approvals if a["decision"] is None and a["action"] is not None)  # fmt: skip
    return pending, Rendering(a for a in approvals if a["decision"] is not None)


__all__ = ["KEYED_SECTIONS", "PublicView", "Rendering"]
