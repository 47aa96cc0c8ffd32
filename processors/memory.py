"""Long-term memory logic (SPEC §6), pure: extraction of candidates, and consolidation of
candidates into a view. Claims, leases, fencing and storage are the adapters' business.

- Confirmed ``fact`` events become candidates, redacted, one per source event; so do
  what ``agentlog.processors.memory_extract`` finds in raw events (user statements, tool
  observations tied to their call, approval decisions), one per source event and key,
  each with the evidence type of its origin, the commit and the observed (event) time.
- A fact's ``last_verified_at`` is the latest observed time of a live source that agrees
  with its value; ``observed_commit`` the code version its winning source was seen at.
- Conflicts on a key go to the strongest evidence, then the latest *observed* time.
- A revoked source is left out; a fact that falls back to an older value is marked
  ``needs_refresh`` (``unknown`` for high-risk keys); ``recheck_when`` conditions that
  fire mark ``needs_refresh`` too.
- ``external_content`` is never promoted to a preference or instruction, and an event
  with ``source: "external"`` gives ``external_content`` evidence whatever it claims.
- Scope: a thread belongs to the project of its first event; its ``fact`` and ``revoke``
  events write and withdraw only that project's facts. One that names another project
  is refused (``Extraction.refused``, with its reason), and a revocation only withdraws
  sources of its own project.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson

from agentlog.processors.memory_extract.proposals import Rejected, validate
from agentlog.processors.memory_extract.thread import Finding, scan
from agentlog.processors.path_glob import glob_matches
from agentlog.processors.redaction import REDACTED, is_secret_name, mask_secret_keys, redact
from agentlog.schemas.events import Envelope

STRENGTH: dict[str, int] = {
    "user_confirmed": 4,
    "tool_observed": 3,
    "model_inferred": 2,
    "external_content": 1,
}
PRIVILEGED_PREFIXES = ("preference", "instruction", "policy", "rule")
"""Key namespaces that steer an agent: only non-external evidence may fill them."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """A fact extracted from one ``fact`` event: the unit of provenance."""

    source_event_id: str
    source_thread_id: str
    project: str
    scope: str
    key: str
    value: str
    evidence_type: str
    observed_at: str
    observed_ms: float
    recheck_when: str | None = None
    observed_commit: str | None = None
    origin: str = "fact"
    """``fact`` (a ``fact`` event), ``user_statement``, ``tool_observation``, ``approval`` or ``llm``."""

    @property
    def strength(self) -> int:
        return STRENGTH[self.evidence_type]

    @property
    def candidate_id(self) -> str:
        """Its identity in phase 1's deduplication: a ``fact`` event gives one candidate,
        a raw event one per key it speaks of."""
        return self.source_event_id if self.origin == "fact" else f"{self.source_event_id}#{self.key}"


@dataclass(frozen=True, slots=True)
class Revocation:
    target_event_id: str
    revoke_event_id: str
    reason: str | None = None
    project: str | None = None
    """The project whose sources it may withdraw (``None``: stored before scoping)."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """A ``fact`` or ``revoke`` event that memory ignored, and why."""

    event_id: str
    thread_id: str
    kind: str
    reason: str


@dataclass(frozen=True, slots=True)
class FileTouch:
    """A file change seen after a fact: may fire a ``recheck_when`` path condition."""

    project: str
    path: str
    at_ms: float


@dataclass(frozen=True, slots=True)
class CommitSighting:
    """A project's code seen at ``commit`` from ``at_ms`` on: may fire a commit-range recheck."""

    project: str
    commit: str
    at_ms: float


@dataclass(slots=True)
class Extraction:
    candidates: list[Candidate] = field(default_factory=list)
    revocations: list[Revocation] = field(default_factory=list)
    file_touches: list[FileTouch] = field(default_factory=list)
    refused: list[Refusal] = field(default_factory=list)
    commits: list[CommitSighting] = field(default_factory=list)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def _value(key: str, value: Any) -> str:
    """A fact's value as stored: gone if its key names a secret (``db.password``), else
    redacted text (secret-named keys inside an object value masked first)."""
    return REDACTED if is_secret_name(key) else redact(_text(mask_secret_keys(value)))


def _holds_secret(f: Finding) -> bool:
    """Whether what a raw event says names or carries a secret ("the api key is sk-...",
    a listing's ``secrets.env``): redacted, it would be a memory of nothing that a context
    still shows as a fact, so it is no candidate at all. (A ``fact`` event is the
    producer's explicit choice: it stays, redacted.)"""
    if f.origin == "approval":
        return False  # "approved" or "denied", whatever the action is named
    if redact(f.key) != f.key or _value(f.key, f.value) != f.value or REDACTED in f.value:
        return True  # the last: a value from a context a former run kept redacted
    # A value cut from a secret ("postgres://admin:pw" of a URL whose "!@host" ended the
    # sentence) no longer looks like one alone: it must survive its text's redaction.
    p: Any = f.event.payload
    text = getattr(p, "text", None) or getattr(p, "output", None) or ""
    return f.value in text and f.value not in redact(text)


def _found(f: Finding, project: str) -> Candidate:
    e = f.event
    return Candidate(
        source_event_id=e.event_id, source_thread_id=e.thread_id, project=project, scope="",
        # A decision is "approved" or "denied", never a secret, whatever its action is named.
        key=redact(f.key), value=f.value if f.origin == "approval" else _value(f.key, f.value),
        evidence_type=f.evidence_type,
        observed_at=e.ts, observed_ms=e.epoch_ms, recheck_when=f.recheck_when,
        observed_commit=f.commit, origin=f.origin,
    )  # fmt: skip


def extract(events: Sequence[Envelope], thread_project: str | None = None, start: int = 0) -> Extraction:
    """Phase 1 for one thread's new events ``events[start:]``: candidates (from ``fact``
    events and from raw events), revocations, file touches and commit sightings. The
    events before ``start`` were extracted before; they only give context (the call a
    result answers, the request a decision answers, the commit).

    ``thread_project`` is the project of the thread's first event (default: of the first
    event given); a fact or revoke naming another project is refused."""
    out = Extraction()
    project = thread_project if thread_project is not None else (events[0].project if events else "default")
    scanned = scan(events, start)
    commit_at = scanned.commit_at
    out.candidates += [_found(f, project) for f in scanned.findings if not _holds_secret(f)]
    out.commits += [CommitSighting(project, c, at) for c, at in scanned.commits]
    for e in events[start:]:
        p: Any = e.payload
        if e.kind in ("fact", "revoke") and e.project != project:
            out.refused.append(Refusal(e.event_id, e.thread_id, e.kind, (
                f"names project {e.project!r} but thread {e.thread_id!r} belongs to project {project!r}: "
                "a thread writes and revokes only its own project's facts")))  # fmt: skip
        elif e.kind == "fact" and p.confirmed:
            # Content from outside cannot vouch for itself: its evidence is external at most.
            evidence = "external_content" if e.source == "external" else p.evidence_type
            out.candidates.append(Candidate(
                source_event_id=e.event_id, source_thread_id=e.thread_id, project=project,
                scope=redact(p.scope or ""), key=redact(p.key), value=_value(p.key, p.value),
                evidence_type=evidence, observed_at=e.ts, observed_ms=e.epoch_ms,
                recheck_when=None if p.recheck_when is None else _text(p.recheck_when),
                observed_commit=e.repo_commit or commit_at.get(e.event_id),
            ))  # fmt: skip
        elif e.kind == "revoke":
            out.revocations.append(Revocation(p.target_event_id, e.event_id, p.reason, project))
        elif e.kind == "file_change" and p.confirmed:
            out.file_touches.append(FileTouch(e.project, p.path, e.epoch_ms))
    return out


def proposed(events: Sequence[Envelope], answer: Any, thread_project: str | None = None,
             start: int = 0) -> tuple[list[Candidate], list[Rejected]]:  # fmt: skip
    """An LLM extractor's answer for ``events[start:]``: the proposals that pass the check
    against the events they cite (``memory_extract.proposals``), as candidates of origin
    ``llm``, and the rejected ones with their reason."""
    project = thread_project if thread_project is not None else (events[0].project if events else "default")
    found, rejected = validate(answer, events, start)
    return [_found(f, project) for f in found if not _holds_secret(f)], rejected


@dataclass(slots=True)
class Fact:
    """One key of the memory view, with the chain of sources behind it."""

    project: str
    scope: str
    key: str
    value: str | None
    status: str  # "ok" | "needs_refresh" | "unknown"
    evidence_type: str
    observed_at: str
    source_event_id: str
    source_thread_id: str
    supporting: list[str] = field(default_factory=list)
    contradicting: list[str] = field(default_factory=list)
    revoked: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    note: str = ""
    last_verified_at: str | None = None
    """The latest observed time of a live source that agrees with ``value``."""
    observed_commit: str | None = None
    """The code version the value was seen at (its winning source's, else the latest agreeing one's)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _same_commit(a: str, b: str) -> bool:
    """Two names of one commit (a short hash is a prefix of the full one)."""
    return bool(a) and bool(b) and (a.startswith(b) or b.startswith(a))


def _left_range(commit_range: str, c: Candidate, commits: Sequence[CommitSighting]) -> str | None:
    """Why the project's code left ``A..B`` after the fact was observed, or ``None``.

    The range holds the commits the project was seen at from the first sighting of ``A``
    (or the first sighting at all) to the last sighting of ``B`` (open while ``B`` was
    never seen); a later sighting of any other commit fires."""
    low, _, high = commit_range.partition("..")
    seen = sorted((s for s in commits if s.project == c.project), key=lambda s: (s.at_ms, s.commit))
    first = next((i for i, s in enumerate(seen) if not low or _same_commit(s.commit, low)), None)
    if first is None:
        return None  # the range's start was never seen: nothing to compare with
    last = max((i for i, s in enumerate(seen) if high and _same_commit(s.commit, high)), default=len(seen) - 1)
    inside = {s.commit for s in seen[first : last + 1]}
    for s in seen[last + 1 :]:
        if s.commit not in inside and s.at_ms > c.observed_ms:
            return f"recheck: the code moved to {s.commit}, outside {commit_range}"
    return None


def _recheck_fires(condition: str | None, c: Candidate, touches: Sequence[FileTouch], now_ms: float,
                   commits: Sequence[CommitSighting] = ()) -> str | None:  # fmt: skip
    """Why a fact's ``recheck_when`` fired, or ``None``. Conditions: ``{"path": glob}`` (a
    confirmed change to a matching path after the fact), ``{"max_age_s": n}`` and
    ``{"commits": "A..B"}`` (the project's code seen outside that range after the fact)."""
    if not condition:
        return None
    try:
        spec = orjson.loads(condition)
    except orjson.JSONDecodeError:
        spec = {"path": condition}
    if not isinstance(spec, dict):
        return None
    pattern = spec.get("path")
    if isinstance(pattern, str):
        for t in touches:
            if t.project == c.project and t.at_ms > c.observed_ms and glob_matches(t.path, pattern):
                return f"recheck: {t.path} changed after the fact was observed"
    commit_range = spec.get("commits")
    if isinstance(commit_range, str) and (left := _left_range(commit_range, c, commits)):
        return left
    max_age = spec.get("max_age_s")
    if isinstance(max_age, (int, float)) and now_ms - c.observed_ms > max_age * 1000:
        return f"recheck: older than {max_age} s"
    return None


def _rank(c: Candidate) -> tuple[int, float, str]:
    # Strength first, then observed time; the event id only breaks exact ties, stably.
    return (c.strength, c.observed_ms, c.source_event_id)


def _verification(best: Candidate, live: Sequence[Candidate]) -> dict[str, Any]:
    """When the value was last confirmed, and the code version it was seen at: a later
    observation of the same value (of any strength) moves ``last_verified_at`` forward."""
    agreeing = sorted((c for c in live if c.value == best.value), key=lambda c: (c.observed_ms, c.source_event_id))
    latest = agreeing[-1]
    commit = best.observed_commit or next((c.observed_commit for c in reversed(agreeing) if c.observed_commit), None)
    return {"last_verified_at": latest.observed_at, "observed_commit": commit}


def fact_id(project: str, scope: str, key: str) -> str:
    """The view's key for a fact: ``project/scope/key`` (``project/key`` without a scope).

    Each part may itself hold "/", so "%" and "/" inside a part are escaped: project ``p``
    with key ``a/b`` and project ``p/a`` with key ``b`` stay two facts, never one
    overwriting the other across projects."""
    parts = (project, scope, key) if scope else (project, key)
    return "/".join(part.replace("%", "%25").replace("/", "%2F") for part in parts)


def consolidate(
    candidates: Iterable[Candidate],
    revocations: Iterable[Revocation],
    touches: Sequence[FileTouch] = (),
    now_ms: float = 0.0,
    high_risk_keys: Iterable[str] = (),
    commits: Sequence[CommitSighting] = (),
) -> dict[str, Fact]:
    """Phase 2: the memory view, keyed by :func:`fact_id`. Deterministic."""
    # A revocation withdraws only sources of its own project (legacy ones, of any).
    revoked = {(r.project, r.target_event_id) for r in revocations}
    risky = list(high_risk_keys)
    groups: dict[tuple[str, str, str], list[Candidate]] = {}
    for c in candidates:
        groups.setdefault((c.project, c.scope, c.key), []).append(c)
    view: dict[str, Fact] = {}
    for (project, scope, key), group in sorted(groups.items()):
        ranked = sorted(group, key=_rank, reverse=True)
        withdrawn = {c.source_event_id for c in ranked
                     if (project, c.source_event_id) in revoked or (None, c.source_event_id) in revoked}
        live = [c for c in ranked if c.source_event_id not in withdrawn]
        gone = [c.source_event_id for c in ranked if c.source_event_id in withdrawn]
        ident = fact_id(project, scope, key)
        if not live:
            continue  # every source withdrawn: the fact is gone from memory
        best = live[0]
        status, note, flags = "ok", "", []
        if ranked[0].source_event_id in withdrawn and ranked[0].value != best.value:
            # The winning source was withdrawn and an older value resurfaces: never trust it silently.
            status, note = "needs_refresh", f"fell back after revoking {ranked[0].source_event_id}"
            if any(glob_matches(key, pattern) for pattern in risky):
                status, note = "unknown", f"unknown, needs check (high-risk key; {note})"
        fired = _recheck_fires(best.recheck_when, best, touches, now_ms, commits)
        if fired and status == "ok":
            status, note = "needs_refresh", fired
        if best.evidence_type == "external_content":
            flags.append("external_content")
            if key.split(".")[0].lower() in PRIVILEGED_PREFIXES:
                # Content from outside may be remembered as an observation, never as
                # something that steers the agent.
                flags.append("not_promoted")
        view[ident] = Fact(
            project=project, scope=scope, key=key,
            value=None if status == "unknown" else best.value, status=status,
            evidence_type=best.evidence_type, observed_at=best.observed_at,
            source_event_id=best.source_event_id, source_thread_id=best.source_thread_id,
            supporting=[c.source_event_id for c in live if c.value == best.value],
            contradicting=[c.source_event_id for c in live if c.value != best.value],
            revoked=gone, flags=flags, note=note, **_verification(best, live),
        )  # fmt: skip
    return view


def is_instruction(fact: Fact) -> bool:
    """Whether a fact may steer the agent (a preference or instruction it should follow)."""
    return fact.key.split(".")[0].lower() in PRIVILEGED_PREFIXES and "not_promoted" not in fact.flags


def visible(view: dict[str, Fact], project: str, key: str | None = None) -> list[Fact]:
    """The facts a reader in ``project`` may see: scope isolation on every read path."""
    return [f for f in view.values() if f.project == project and (key is None or f.key == key)]


__all__ = [
    "Candidate", "CommitSighting", "Extraction", "Fact", "FileTouch", "PRIVILEGED_PREFIXES", "Refusal", "Revocation",
    "STRENGTH", "consolidate", "extract", "is_instruction", "proposed", "visible",
]  # fmt: skip
