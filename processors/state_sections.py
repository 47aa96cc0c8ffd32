"""A state read that leaves out the sections its reader already holds.

An agent reads its thread's state after every event it publishes. Over HTTP a long thread's
state is mostly sections that did not change since the last read (the step benchmark's
thread at 20,000 events: 1,600 plan steps and an 18 KB summary, 160 KB a read), and the
client spent more time parsing them than the server spent answering. So each section a
reader may keep is named with a digest of its JSON (``SECTIONS_HEADER``); a reader that
sends back the digests it holds (``KNOWN_HEADER``) gets the state without the sections whose
digest is the same (``null`` in their place) and their names (``UNCHANGED_HEADER``). A
reader that also takes patches (``ACCEPT_PATCHES_HEADER``) gets a list section that changed
in a few items since the digest it holds as those items alone (``PATCHED_HEADER``). The
digest is of the content (BLAKE2b of the section's JSON), so a section is left out only
when the reader's copy is byte for byte the current one, whichever server, restart or
thread gave it.

Pure, both sides: the server's answer (``StateBody``) and the reader's merge (``merged``);
the HTTP routes and the client (``agentlog.streams.api.kept_states``) move the bytes.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from agentlog.processors.read_only import ReadOnlyList, read_only

SECTIONS = ("goal", "constraints", "plan", "tasks", "files", "pending_approvals", "decided_approvals", "agents",
            "pending_calls", "failures", "summary")  # fmt: skip
"""The sections a reader may keep (the scalars are always sent: they change with every event)."""
KNOWN_HEADER = "Agentlog-Known-Sections"
"""Request: ``name=digest`` pairs, comma-separated, as an earlier answer's ``SECTIONS_HEADER`` gave them."""
SECTIONS_HEADER = "Agentlog-Sections"
"""Answer: the digest of each of ``SECTIONS`` in the state it answers."""
UNCHANGED_HEADER = "Agentlog-Unchanged"
"""Answer: the sections left out (comma-separated): the reader's copy is the current one."""
ACCEPT_PATCHES_HEADER = "Agentlog-Accept-Patches"
"""Request: ``true``: a list section changed in a few items may come as a patch."""
PATCHED_HEADER = "Agentlog-Patched"
"""Answer (only to a reader that accepts patches): the sections sent as their changed items
only (comma-separated), each as ``{"length": n, "items": [[position, item], ...]}``: the
reader's copy with those items replaced or added, ``n`` long, is the current one."""
DIGEST_CHARS = 16
MAX_KNOWN_CHARS = 1024
"""A ``KNOWN_HEADER`` is at most this long (every section named: about 300 characters)."""
_PAIR = re.compile(rf"([A-Za-z0-9_.-]{{1,64}})=([A-Za-z0-9_-]{{{DIGEST_CHARS}}})")


def digest(json: bytes) -> str:
    """A section's digest: 12 bytes of BLAKE2b, URL-safe base64 (16 characters)."""
    return base64.urlsafe_b64encode(hashlib.blake2b(json, digest_size=12).digest()).decode()


def serialised(public: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """``public`` with each section serialised once (a JSON fragment), and their digests:
    for a state whose sections are not kept as JSON already (``PublicView`` keeps them)."""
    out, digests = dict(public), {}
    for name in SECTIONS:
        if name in out:
            json = orjson.dumps(out[name], default=str)
            out[name], digests[name] = orjson.Fragment(json), digest(json)
    return out, digests


def digests_of(public: Mapping[str, Any]) -> dict[str, str]:
    """Each section's digest (``serialised``)."""
    return serialised(public)[1]


def parse_known(values: Sequence[str]) -> dict[str, str]:
    """The ``KNOWN_HEADER``'s sections and digests (``values``: each time the header was
    sent). A ``ValueError`` that says what is wrong: sent twice, too long, not pairs, a name
    twice. Names this server does not keep are allowed (a newer client's) and never match."""
    if len(values) > 1:
        raise ValueError(f"{KNOWN_HEADER} was sent {len(values)} times; send it once")
    if not values:
        return {}
    value = values[0]
    if len(value) > MAX_KNOWN_CHARS:
        raise ValueError(f"{KNOWN_HEADER} is {len(value)} characters long, over the {MAX_KNOWN_CHARS} allowed")
    known: dict[str, str] = {}
    for part in value.split(","):
        if not part.strip():
            continue  # a trailing or doubled comma
        pair = _PAIR.fullmatch(part.strip())
        if pair is None:
            raise ValueError(f"{KNOWN_HEADER} must be name=digest pairs separated by commas, as the "
                             f"{SECTIONS_HEADER} header of an earlier state answer gives them; got {part.strip()[:64]!r}")  # fmt: skip
        if pair[1] in known:
            raise ValueError(f"{KNOWN_HEADER} names the section {pair[1]!r} twice")
        known[pair[1]] = pair[2]
    return known


def header_of(digests: Mapping[str, str]) -> str:
    return ",".join(f"{name}={d}" for name, d in digests.items())


@dataclass(frozen=True, slots=True)
class Held:
    """What a reader holds: the digest of each section it kept, and whether it takes a
    list section as a patch (``ACCEPT_PATCHES_HEADER``)."""

    digests: Mapping[str, str]
    patches: bool = False


def parse_held(known: Sequence[str], accept: Sequence[str]) -> Held | None:
    """A request's ``KNOWN_HEADER`` and ``ACCEPT_PATCHES_HEADER`` (each time each was sent),
    or ``None`` when it names no section; a ``ValueError`` that says what is wrong."""
    digests = parse_known(known)
    if len(accept) > 1:
        raise ValueError(f"{ACCEPT_PATCHES_HEADER} was sent {len(accept)} times; send it once")
    if accept and accept[0].strip().lower() != "true":
        raise ValueError(f"{ACCEPT_PATCHES_HEADER} takes only 'true'; got {accept[0][:64]!r}")
    return Held(digests, bool(accept)) if digests else None


Patch = tuple[str, Sequence[Any], tuple[int, ...]]
"""A section's patch: the digest it starts from, the section now, the positions that differ."""


@dataclass(frozen=True, slots=True)
class StateBody:
    """A state answer as sent: its JSON, the digest of each section in the state, the
    sections left out of the JSON because the reader holds them, and those sent as patches."""

    body: bytes
    digests: Mapping[str, str]
    unchanged: tuple[str, ...] = ()
    patched: tuple[str, ...] = ()

    @classmethod
    def of(cls, public: dict[str, Any], digests: Mapping[str, str], held: Held | None,
           patches: Mapping[str, Patch] | None = None) -> StateBody:  # fmt: skip
        """``public`` as JSON (``public`` is changed): the sections the reader holds shown
        as ``null``, each in its place, where the reader puts its copy back; to a reader
        that takes patches, a section it holds at the digest a patch starts from, as that
        patch's items."""
        digests = {n: digests[n] for n in SECTIONS if n in digests}  # one order, whoever made them
        if held is None:
            return cls(orjson.dumps(public, default=str), digests)
        known = held.digests
        unchanged = tuple(n for n in SECTIONS if n in digests and known.get(n) == digests[n])
        for name in unchanged:
            public[name] = None
        patched = []
        for name, (base, rendered, positions) in (patches or {}).items() if held.patches else ():
            if name not in unchanged and known.get(name) == base:
                public[name] = {"length": len(rendered), "items": [[i, rendered[i]] for i in positions]}
                patched.append(name)
        return cls(orjson.dumps(public, default=str), digests, unchanged, tuple(patched))

    def headers(self) -> dict[str, str]:
        out = {SECTIONS_HEADER: header_of(self.digests), "Vary": f"{KNOWN_HEADER}, {ACCEPT_PATCHES_HEADER}"}
        if self.unchanged:
            out[UNCHANGED_HEADER] = ",".join(self.unchanged)
        if self.patched:
            out[PATCHED_HEADER] = ",".join(self.patched)
        return out


def names_of(header: str | None) -> list[str]:
    """The section names of an ``UNCHANGED_HEADER`` or ``PATCHED_HEADER``."""
    return [n for n in (header or "").split(",") if n]


def merged(state: dict[str, Any], unchanged: Sequence[str], patched: Sequence[str],
           sections: Mapping[str, Any]) -> dict[str, Any] | None:  # fmt: skip
    """The reader's side of ``StateBody.of``: ``state`` (changed) with the sections left out
    taken from the reader's ``sections`` and the patched ones made from theirs (read-only,
    as a reader keeps them), or ``None`` when it cannot be: a section the reader does not
    hold, or a patch that does not fit its copy."""
    if any(n not in sections for n in (*unchanged, *patched)):
        return None
    for name in unchanged:
        state[name] = sections[name]
    for name in patched:
        now = _patched(sections[name], state[name])
        if now is None:
            return None
        state[name] = now
    return state


def _patched(base: Sequence[Any], patch: Any) -> ReadOnlyList | None:
    try:
        length, items = patch["length"], patch["items"]
        now = list(base[:length])
        for position, item in items:
            if type(position) is not int or not 0 <= position <= len(now):
                return None
            if position == len(now):
                now.append(read_only(item))
            else:
                now[position] = read_only(item)
    except (KeyError, TypeError, ValueError):
        return None
    return ReadOnlyList(now) if type(length) is int and len(now) == length else None


__all__ = ["ACCEPT_PATCHES_HEADER", "DIGEST_CHARS", "Held", "KNOWN_HEADER", "parse_held", "MAX_KNOWN_CHARS", "PATCHED_HEADER", "SECTIONS", "SECTIONS_HEADER",
           "UNCHANGED_HEADER", "Patch", "StateBody", "digest", "digests_of", "header_of", "merged", "names_of",
           "parse_known", "serialised"]  # fmt: skip
