"""One pass over a thread's events that finds what phase 1 may remember besides ``fact``
events: user statements, tool observations tied to their call, approval decisions. It
also follows the code version: an event's ``repo_commit``, or the hash a ``git rev-parse``
or ``git log`` call printed, stands for the events after it. Pure and deterministic: the
same events give the same findings, so a replay extracts the same candidates."""

from __future__ import annotations

import glob
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from agentlog.processors.memory_extract import approvals, origin, tool_observations, user_statements
from agentlog.processors.redaction import is_secret_name, redact_value
from agentlog.schemas.events import Envelope

_GIT_HEAD = re.compile(r"^\s*git\s+(?:rev-parse\s+(?:--short\s+)?HEAD|log\s+-1\b.*(?:%H|%h))")
_HASH = re.compile(r"^\s*([0-9a-f]{7,40})\s*$")


@dataclass(frozen=True, slots=True)
class Finding:
    """Something one event says that memory may keep, before redaction and scoping."""

    event: Envelope
    key: str
    value: str
    evidence_type: str
    origin: str  # "user_statement" | "confirmed_claim" | "tool_observation" | "approval" | "llm"
    commit: str | None
    recheck_when: str | None = None


@dataclass(slots=True)
class Scan:
    findings: list[Finding] = field(default_factory=list)
    commits: list[tuple[str, float]] = field(default_factory=list)
    """(commit, event time in ms) each time the thread's code version changed."""
    commit_at: dict[str, str] = field(default_factory=dict)
    """The code version each scanned event was seen at (events with one known)."""


@dataclass(slots=True)
class _Walk:
    calls: dict[str, tuple[str, Any]] = field(default_factory=dict)
    actions: dict[str, str] = field(default_factory=dict)
    commit: str | None = None
    said: Envelope | None = None
    """The latest message, if an assistant's: what a user's "yes, remember that" confirms."""


def _recheck(key: str, commit: str | None) -> str | None:
    """A test status holds for the code it ran on; a file's existence until that path changes."""
    if key.startswith("tests.") and commit:
        return orjson.dumps({"commits": f"{commit}..{commit}"}).decode()
    if key.startswith("file."):  # the listed name itself, even one holding '"', '*' or '['
        return orjson.dumps({"path": glob.escape(key[5:])}).decode()
    return None


def _result(e: Envelope, walk: _Walk, out: list[Finding] | None) -> None:
    p: Any = e.payload
    tool, arguments = walk.calls.get(p.call_id, (p.tool_name or "", {}))
    command = tool_observations.command_of(arguments)
    ok = p.status == "ok" and p.exit_code in (None, 0)
    if ok and _GIT_HEAD.match(command) and (m := _HASH.match(p.output)):
        walk.commit = m[1]
    if out is None or origin.result_evidence(e, tool, command) != "tool_observed":
        return  # context only, or fetched from outside: content, never an observation of ours
    for o in tool_observations.observations(tool, arguments, p.output, ok, p.exit_code):
        out.append(Finding(e, o.key, o.value, "tool_observed", "tool_observation", walk.commit,
                           _recheck(o.key, walk.commit)))  # fmt: skip


def _message(e: Envelope, walk: _Walk, out: list[Finding] | None) -> None:
    # An assistant's words are inferred, never a fact, until the user confirms them in the
    # next message; outside content is never a statement.
    evidence = origin.message_evidence(e)
    said = walk.said
    walk.said = e if evidence == "model_inferred" and e.payload.role == "assistant" else None  # type: ignore[attr-defined]
    if out is None or evidence != "user_confirmed":
        return
    text: str = e.payload.text  # type: ignore[attr-defined]
    if said is not None and user_statements.confirms(text):
        for s in user_statements.claims(said.payload.text):  # type: ignore[attr-defined]
            out.append(Finding(e, s.key, s.value, "user_confirmed", "confirmed_claim", walk.commit))
        return
    for s in user_statements.statements(text):
        out.append(Finding(e, s.key, s.value, "user_confirmed", "user_statement", walk.commit))


def _decision(e: Envelope, walk: _Walk, out: list[Finding] | None) -> None:
    p: Any = e.payload
    if out is None:
        return
    action = walk.actions.get(p.approval_id)
    evidence = approvals.decision_evidence(e)
    key = approvals.decision_key(action) if action else None
    if key and evidence:
        out.append(Finding(e, key, p.decision, evidence, "approval", walk.commit))


def scan(events: Sequence[Envelope], start: int = 0) -> Scan:
    """Findings of ``events[start:]``; the events before ``start`` (already extracted)
    only give context: the calls results answer, the requests decisions answer, the commit."""
    walk, result = _Walk(), Scan()
    for i, e in enumerate(events):
        p: Any = e.payload
        if e.repo_commit:
            walk.commit = e.repo_commit
        # Events before ``start`` only move the walk on: their findings were kept before.
        found: list[Finding] | None = [] if i >= start else None
        if e.kind == "tool_call":
            walk.calls[p.call_id] = (p.tool_name, p.arguments)
        elif e.kind == "approval_request":
            walk.actions[p.approval_id] = p.action
        elif e.kind == "tool_result":
            _result(e, walk, found)
        elif e.kind == "message":
            _message(e, walk, found)
        elif e.kind == "approval_decision":
            _decision(e, walk, found)
        if found is None:
            continue
        result.findings += found
        if walk.commit:
            result.commit_at[e.event_id] = walk.commit
        if walk.commit and (not result.commits or result.commits[-1][0] != walk.commit):
            result.commits.append((walk.commit, e.epoch_ms))
    return result


def context(events: Sequence[Envelope]) -> list[int]:
    """The indexes, in order, of the events of ``events`` a later run needs in their place
    (``scan(kept + new, len(kept))`` finds what ``scan(events + new, len(events))`` finds):
    the last call of each call id and request of each approval id (what later results and
    decisions answer), the last message (what a "yes, remember that" confirms) and the
    event that last set the code version, with the call it answered."""
    walk = _Walk()
    calls: dict[str, int] = {}
    requests: dict[str, int] = {}
    keep: set[int] = set()
    setter: set[int] = set()
    message: int | None = None
    for i, e in enumerate(events):
        p: Any = e.payload
        before = walk.commit
        if e.repo_commit:
            walk.commit = e.repo_commit
        if e.kind == "tool_call":
            walk.calls[p.call_id] = (p.tool_name, p.arguments)
            calls[p.call_id] = i
        elif e.kind == "approval_request":
            requests[p.approval_id] = i
        elif e.kind == "tool_result":
            _result(e, walk, None)
        elif e.kind == "message":
            message = i
        if walk.commit != before:
            answered = calls.get(p.call_id) if e.kind == "tool_result" else None
            setter = {i} if answered is None else {i, answered}
    keep |= set(calls.values()) | set(requests.values()) | setter | ({message} if message is not None else set())
    return sorted(keep)


KEPT_RULE = 1
"""The version of ``kept_record``'s rule. Contexts kept by an older one (before it redacted:
version 0) are rewritten by the next extraction run, every thread's at once, not only
those with new events (``MemoryStore.rewrite_contexts``)."""


def kept_record(record: bytes) -> bytes:
    """A record of :func:`context` as a run keeps it for the next one, redacted: memory
    holds no secret a thread's events carried (the topic and the log keep the originals).
    What the next run makes of a redacted value (a "[REDACTED]" in a fact) it refuses as a
    secret. The envelope and the payload's ids (``call_id``, ``approval_id``) stay as they
    were: later results and decisions find their call and request by them."""
    event = orjson.loads(record)
    payload = event.get("payload")
    if isinstance(payload, dict):
        masked = redact_value(payload)
        ids = {k: v for k, v in payload.items() if k.endswith("_id") and isinstance(v, str) and not is_secret_name(k)}
        event = {**event, "payload": {**masked, **ids}}
    return orjson.dumps(event)


__all__ = ["KEPT_RULE", "Finding", "Scan", "context", "kept_record", "scan"]
