"""Events and pairs as store records: a row of ``events``, a search document, a pair row.

Pure mappings used by every adapter, so ClickHouse and chDB get the same rows and the
embedded index and OpenSearch get the same documents.
"""

from __future__ import annotations

import heapq

from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from typing import Any

import orjson

from agentlog.processors.redaction import REDACTED, is_secret_name, mask_secret_keys, redact
from agentlog.processors.pipeline import Applied
from agentlog.processors.textsearch import (
    EXACT_BOOST, MAX_IDENTIFIERS, Scorable, filters_match, hit_of, identifiers, pair_term, scorable, score_of,
)  # fmt: skip
from agentlog.processors.truncation import WORD_SLACK, clip_at_word
from agentlog.schemas.events import Envelope, ToolCallPayload
from agentlog.schemas.search import Hit, SearchFilters

MAX_INDEXED_CHARS = 32_000
"""Tool outputs beyond this are indexed by head and tail; the log keeps them whole."""


def log_row(event: Envelope, raw: bytes, partition: int, offset: int, window_id: str) -> dict[str, Any]:
    """What is sent for a row of ``events`` (``agentlog.schemas.tables.EVENTS_INSERT_COLUMNS``):
    ``raw`` as received plus what only the pipeline knows; the store derives the rest."""
    return {
        "raw": raw.decode("utf-8"),
        "ts": event.ts.upper(),  # ClickHouse's parser wants the upper-case T and Z
        "window_id": window_id,
        "source": event.effective_source,
        "partition": partition,
        "offset": offset,
    }


def _clip(text: str) -> str:
    """Head and tail of a long text, each cut at a word where one is near (the text is
    redacted after the cut: half a secret would pass for a word)."""
    if len(text) <= MAX_INDEXED_CHARS:
        return text
    half = MAX_INDEXED_CHARS // 2
    tail = text[-half:]
    starts = [i for i in (tail.find(" "), tail.find("\n")) if 0 <= i < WORD_SLACK]
    return clip_at_word(text, half) + " … " + (tail[min(starts) + 1 :] if starts else tail)


def searchable(event: Envelope) -> tuple[str, str, str]:
    """(text, path, error_code) of an event: what keyword search looks at."""
    p: Any = event.payload
    kind = event.kind
    path = error = ""
    if kind == "message":
        text = p.text
    elif kind == "tool_call":
        args = p.arguments
        if not isinstance(args, str):  # a key that names a secret loses its whole value
            args = orjson.dumps(mask_secret_keys(args)).decode()
        text = f"{p.tool_name} {args}"
        if isinstance(p.arguments, dict):
            path = str(p.arguments.get("path") or p.arguments.get("file") or "")
    elif kind == "tool_result":
        text = f"{p.tool_name or ''} {p.status} {_clip(p.output)}"
        if p.status != "ok" or p.exit_code not in (None, 0):
            error = p.status if p.exit_code is None else f"{p.status} exit_code:{p.exit_code}"
    elif kind in ("tool_progress", "goal"):
        text = p.text
    elif kind == "constraint":
        text = f"{p.constraint_id} {p.text}"
    elif kind == "plan":
        text = " ".join(f"{s.step_id} {s.text or ''} {s.status}" for s in p.steps)
    elif kind == "task":
        text = f"{p.task_id} {p.text or ''} {p.owner or ''} {p.status}"
    elif kind == "file_change":
        text, path = f"{p.change} {p.path}", p.path
    elif kind == "approval_request":
        text = f"{p.approval_id} {p.action} {p.detail or ''}"
    elif kind == "approval_decision":
        text = f"{p.approval_id} {p.decision} {p.by or ''}"
    elif kind in ("agent_spawn", "agent_exit"):
        text = f"{p.child_agent_id} {getattr(p, 'role', None) or getattr(p, 'status', None) or ''}"
    elif kind == "window_switch":
        text = f"{p.new_window_id} {p.reason or ''}"
    elif kind == "compaction":
        text = orjson.dumps(mask_secret_keys(p.summary)).decode()
    elif kind == "fact":
        if is_secret_name(p.key):  # db.password: the value goes whatever it looks like
            value = REDACTED
        else:
            value = p.value if isinstance(p.value, str) else orjson.dumps(mask_secret_keys(p.value)).decode()
        text = f"{p.key} {value}"
    elif kind == "revoke":
        text = f"{p.target_event_id} {p.reason or ''}"
    elif kind == "error":
        text = p.message
        error = "" if p.code is None else str(p.code)
    else:  # pragma: no cover - every kind is listed above
        text = ""
    return redact(text), redact(path), error


def search_doc(
    event: Envelope, offset: int, window_id: str, tool_name: str | None = None
) -> dict[str, Any]:
    """The search document of an event (fields: ``agentlog.schemas.tables.SEARCH_FIELDS``).

    ``tool_name`` names the tool of a result whose payload leaves it out (from its call).
    """
    text, path, error = searchable(event)
    if event.kind in ("tool_call", "tool_result", "tool_progress"):
        tool_name = getattr(event.payload, "tool_name", None) or tool_name or ""
    else:
        tool_name = ""
    role, status, exit_code = outcome_of(event)
    return {
        "event_id": event.event_id,
        "thread_id": event.thread_id,
        "window_id": window_id,
        "kind": event.kind,
        "role": role,
        "status": status,
        "exit_code": exit_code,
        "tool_name": tool_name,
        "project": event.project,
        "agent_id": event.agent_id,
        "repo_commit": event.repo_commit or "",
        "error_code": error,
        "ts": event.ts,
        "ts_ms": int(event.epoch_ms),
        "offset": offset,
        "path": path,
        "text": text,
        "terms": exact_terms(event, text, path, error),
    }


def outcome_of(event: Envelope) -> tuple[str, str, str]:
    """``(role, status, exit_code)`` of a search document: a message's role, a tool
    result's status and exit code (decimal text); empty for what the event has not."""
    p: Any = event.payload
    if event.kind == "message":
        return p.role, "", ""
    if event.kind == "tool_result":
        return "", p.status, "" if p.exit_code is None else str(p.exit_code)
    return "", "", ""


def exact_terms(event: Envelope, text: str, path: str, error: str) -> list[str]:
    """The ``terms`` keyword field: the identifiers, paths and error codes of the text, as
    written, and a tool event's ``call:<call_id>`` (so a call and its result find each other)."""
    call_id = getattr(event.payload, "call_id", None) if event.kind.startswith("tool_") else None
    found = identifiers(" ".join((path, text)))
    # Capped as identifiers are: a keyword term has a size limit (32 KB in OpenSearch).
    extra = [t for t in (path, error, call_id and pair_term(call_id)) if t and len(t) <= 256 and t not in found]
    return found[: MAX_IDENTIFIERS - len(extra)] + extra


def log_rows(applied: Iterable[Applied], logged: Callable[[Applied], bool]) -> list[dict[str, Any]]:
    """The ``events`` rows of applied events. ``logged`` says an event is already in the
    log (a replay after a crash): it gets no second row."""
    return [log_row(a.event, a.record.value, a.record.partition, a.record.offset, a.window_id)
            for a in applied if not logged(a)]  # fmt: skip


def search_docs(applied: Iterable[Applied]) -> list[dict[str, Any]]:
    """The search documents of applied events (upserts by ``event_id``: replays are harmless)."""
    return [search_doc(a.event, a.record.offset, a.window_id, a.tool_name) for a in applied]


def windows_of(events: Sequence[Envelope], current_window: str, closed_windows: Mapping[str, str]) -> list[str]:
    """The window each of a thread's newest ``events`` (in order, each once) was applied
    in, as the pipeline decided it: the event's own ``window_id``, else the thread's window
    then. Read backwards from the current window: before a switch, the window it closed."""
    windows: list[str] = []
    window = current_window
    for event in reversed(events):
        if event.kind == "window_switch" and event.event_id in closed_windows:
            window = closed_windows[event.event_id]  # the switch itself belongs to the window it closed
        windows.append(event.window_id or window)
    return windows[::-1]


Prepared = tuple[dict[str, Any], Scorable]
"""An event as read-your-writes searches it: its search document and that text's tokens."""


def prepare(events: Iterable[tuple[Envelope, int]], current_window: str, known: set[str],
            closed_windows: Mapping[str, str], docs: MutableMapping[Any, Any] | None = None) -> list[Prepared]:  # fmt: skip
    """The search documents of a thread's recent ``(event, offset)`` not in ``known``, each
    event once (its first record), in topic order. ``docs`` remembers each event's document
    and its tokens (a pure function of what keys it) across searches: the events not yet
    indexed are searched again on every request until the sinks catch up."""
    unique: dict[str, tuple[Envelope, int]] = {}
    for event, offset in events:
        unique.setdefault(event.event_id, (event, offset))  # a redelivery, which the pipeline dropped
    ordered = list(unique.values())
    windows = windows_of([e for e, _ in ordered], current_window, closed_windows)
    prepared: list[Prepared] = []
    calls: dict[str, str] = {}
    for (event, offset), window in zip(ordered, windows):
        tool_name = tool_of(event, calls)
        if event.event_id not in known:
            prepared.append(prepared_doc(event, offset, window, tool_name, docs))
    return prepared


def tool_of(event: Envelope, calls: dict[str, str]) -> str | None:
    """The tool a thread's next event names, ``calls`` the open calls met so far (updated):
    a result names its call's tool, as the pipeline indexes it: the open call's, which the
    first result closes (later ones, and results before their call, name none)."""
    call_id = str(getattr(event.payload, "call_id", ""))
    if isinstance(event.payload, ToolCallPayload):
        calls.setdefault(call_id, event.payload.tool_name)
    return calls.pop(call_id, None) if event.kind == "tool_result" else calls.get(call_id)


def prepared_doc(event: Envelope, offset: int, window: str, tool_name: str | None,
                 docs: MutableMapping[Any, Any] | None = None) -> Prepared:  # fmt: skip
    """``event``'s search document and tokens, from ``docs`` when it holds them."""
    key = (event.event_id, offset, window, tool_name)
    kept = None if docs is None else docs.get(key)
    if kept is None:
        doc = search_doc(event, offset, window, tool_name)
        kept = (doc, scorable(doc))
        if docs is not None:
            docs[key] = kept
    return kept


Match = tuple[float, dict[str, Any]]


def matches_of(prepared: Iterable[Prepared], terms: list[str], filters: SearchFilters,
               exact: Sequence[str] = ()) -> list[Match]:  # fmt: skip
    """``(score, doc)`` of each prepared document that matches, in their order: what
    ``active_score`` gives each, with the query's terms made a set once for them all."""
    unique, wanted = set(terms), frozenset(exact)
    matches: list[Match] = []
    for doc, scored in prepared:
        if not filters_match(doc, filters):
            continue
        s = score_of(unique, scored) if terms else 0.0 if wanted else 1.0  # as ``active_score``
        score = s + EXACT_BOOST * len(wanted & scored.terms) if wanted else s + 0.0
        if score:
            matches.append((score, doc))
    return matches


def best_of(matches: list[Match], keep: int | None) -> list[Match]:
    """The best ``keep`` of ``matches`` (by score, then newest), still in their order."""
    if keep is None or len(matches) <= keep:
        return matches
    best = {id(m) for m in heapq.nsmallest(keep, matches, key=lambda m: (-m[0], -m[1]["offset"]))}
    return [m for m in matches if id(m) in best]


def active_hits(events: Iterable[tuple[Envelope, int]], terms: list[str], filters: SearchFilters,
                current_window: str, known: set[str], closed_windows: Mapping[str, str],
                exact: Sequence[str] = (), docs: MutableMapping[Any, Any] | None = None,
                keep: int | None = None) -> list[Hit]:  # fmt: skip
    """Read-your-writes: hits among a thread's recent ``(event, offset)`` that are not in
    ``known`` (what the index returned), each event once; ``exact``: the query's
    identifiers, matched against ``terms`` as the index does; ``docs``: see ``prepare``.
    ``keep``: only the best this many (by score, then newest), as a search of ``keep // 2``
    hits needs: its index hits can stand in for at most half of them."""
    prepared = prepare(events, current_window, known, closed_windows, docs)
    return [hit_of(doc, terms, score) for score, doc in best_of(matches_of(prepared, terms, filters, exact), keep)]


__all__ = ["MAX_INDEXED_CHARS", "Match", "Prepared", "active_hits", "best_of", "matches_of", "prepare", "prepared_doc", "tool_of", "exact_terms", "windows_of", "log_row", "log_rows", "outcome_of", "search_doc", "search_docs", "searchable"]
