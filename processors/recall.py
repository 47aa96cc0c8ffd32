"""Recall's rules (SPEC §4, issue 14): what to ask, where, and what a model is shown.

- The query: the caller's, else the latest user message and the goal, stop words dropped
  and identifiers (``ERR_CACHE_MISS``, ``src/app/main.py``, ``E1234``) kept whole, so the
  index matches them exactly and ranks those hits first.
- Where: the thread and its child threads (``agents[].thread_id``, from ``agent_spawn``'s
  ``child_thread_id``), always within the thread's own project.
- What: whole units. A hit on a tool call or result brings both, as one entry; a result
  whose call cannot be found is never shown (an orphan); a call without a result says so.
- Nothing twice: a unit any of whose events the context already holds (the raw window, the
  latest user message, the pinned goal and constraints; the events the rendered summary
  cites, checked at assembly) is left out, and so is an orphan.

Pure: the adapter (``agentlog.streams.api.recall``) runs the searches and reads.
"""

from __future__ import annotations

import re
from collections.abc import Container, Iterable, Mapping
from functools import lru_cache
from typing import Any

from agentlog.processors.fold import digest
from agentlog.processors.records import searchable
from agentlog.processors.truncation import clip_at_word
from agentlog.processors.textsearch import identifiers, snippet, tokenize
from agentlog.processors.words import is_one_character_word
from agentlog.schemas.events import Envelope

FAILURE_SNIPPET_CHARS = 320
"""What a recalled failed result shows: its first line, error lines and last line, clipped."""
RECALL_LIMIT = 8
"""Units recalled at most (each search asks for this many hits)."""
MAX_CHILD_THREADS = 8
"""Child threads searched at most (the newest spawned): recall's cost stays bounded."""
MAX_QUERY_TERMS = 32

STOP_WORDS = frozenset("""
a about above after again all also am an and any are as at be been before being below
between both but by can could did do does doing done down during each else few for from
further get got had has have having he her here hers him his how i if in into is it its
just let me more most my no nor not now of off on once only or other our out over own
please same she should so some such than that the their them then there these they this
those through to too under until up very was we were what when where which while who whom
why will with would yes you your yours tell show say said says give find look see check
again earlier before last latest happened happen output result results
""".split())  # fmt: skip
"""Words that would match most events: asked about, they only add noise."""


CJK_STOP_CHARACTERS = frozenset("的了是吗呢吧啊这那个我你他她它们请什么哪怎样")
"""Chinese characters of grammar and pronouns: in a question, they match most messages."""
_HIRAGANA = re.compile("[\u3041-\u309f]")


def _telling(word: str) -> bool:
    """Whether a word of a question is worth searching for: not a stop word, and not a lone
    letter or digit, unless it is a CJK character (a word of its own there: 東, 京). Not a
    lone hiragana: in a Japanese question those are particles and endings (の, は, です),
    and the meaning is in its kanji and katakana; a question of hiragana alone keeps them."""
    if word in STOP_WORDS or word in CJK_STOP_CHARACTERS:
        return False
    return len(word) > 1 or (is_one_character_word(word) and not _HIRAGANA.fullmatch(word))


def _question_words(text: str) -> list[str]:
    """The words of a question recall searches for, each once, in order."""
    words = tokenize(text)
    telling = [t for t in words if _telling(t)]
    if not telling and any(_HIRAGANA.fullmatch(t) for t in words):
        telling = [t for t in words if t not in CJK_STOP_CHARACTERS]  # all kana: nothing else to go on
    return list(dict.fromkeys(telling))


def recall_query(state: Mapping[str, Any], latest_text: str | None, query: str | None) -> str:
    """What recall searches for: ``query`` if given, else the latest user message and the
    goal, without stop words, identifiers whole (an empty string: nothing to recall)."""
    if query:
        return query
    goal = (state.get("goal") or {}).get("text") or ""
    text = f"{latest_text or ''}\n{goal}"
    words = _question_words(text)
    kept = list(dict.fromkeys([*identifiers(text), *words]))
    return " ".join(kept[:MAX_QUERY_TERMS])


FAILURE_WORDS = frozenset("""
error errors fail failed failing fails failure failures crash crashed exception broke broken
""".split())  # fmt: skip
"""A question with one of these asks about a failure: failures are searched for by kind too,
so a long failing log is not outranked by every short message that shares a word."""
FAILURE_NOISE = frozenset({"code", "codes", "status", "exit", "message", "reason", "why"})


REMEMBERED_CHARS = 4096
"""Texts up to this long have their search terms remembered (``_terms``): every context
of a thread asks them of the same latest message and goal, twice (its searches are begun
early, then read). A longer one is read each time: a cache of them would hold megabytes."""


def _terms(text: str) -> str:
    return _remembered_terms(text) if len(text) <= REMEMBERED_CHARS else _terms_of(text)


def _terms_of(text: str) -> str:
    words = _question_words(text)
    return " ".join(list(dict.fromkeys([*identifiers(text), *words]))[:MAX_QUERY_TERMS])


_remembered_terms = lru_cache(maxsize=1024)(_terms_of)


def recall_searches(state: Mapping[str, Any], latest_text: str | None,
                    query: str | None) -> list[tuple[str, str | None]]:  # fmt: skip
    """The searches recall runs, most telling first, as ``(query, kind)``: the caller's
    query alone; else the latest user message (first among the errors and tool results
    when it asks about a failure), then the goal. Their hits are taken in this order."""
    if query:
        return [(query, None)]
    asked = _terms(latest_text or "")
    goal = _terms((state.get("goal") or {}).get("text") or "")
    searches: list[tuple[str, str | None]] = []
    if asked and asks_about_failure(latest_text):
        # Within failures, "error" or "code" match all of them: what failed is the rest.
        what = " ".join(t for t in asked.split() if t not in FAILURE_WORDS and t not in FAILURE_NOISE) or asked
        searches += [(what, "error"), (what, "tool_result")]
    searches += [(q, None) for q in dict.fromkeys((asked, goal)) if q]
    return searches


def asks_about_failure(text: str | None) -> bool:
    text = text or ""
    return _remembered_failure(text) if len(text) <= REMEMBERED_CHARS else _about_failure(text)


def _about_failure(text: str) -> bool:
    return bool(FAILURE_WORDS.intersection(tokenize(text)))


_remembered_failure = lru_cache(maxsize=1024)(_about_failure)


def _failed(event: Envelope) -> bool:
    p: Any = event.payload
    return event.kind == "error" or (event.kind == "tool_result" and (p.status != "ok" or p.exit_code not in (None, 0)))


def evidence_class(event: Envelope | None, about_failure: bool, what_failed: bool = True) -> int:
    """How directly an event answers the question, 0 first: what failed when the question
    is about a failure (``what_failed``: the event was found by what the question says
    failed, not only by a word such as "error" that every failure holds); then facts (what
    the user said, what tools and errors reported); the model's own words last (a guess
    is not a fact)."""
    if event is None:  # a tool call (what its result says is not known here)
        return 1
    guess = event.kind == "message" and getattr(event.payload, "role", None) != "user"
    return _evidence(guess, _failed(event), about_failure, what_failed)


def _evidence(guess: bool, failed: bool, about_failure: bool, what_failed: bool) -> int:
    if about_failure:
        return 0 if what_failed and failed else 2 if guess else 1
    return 1 if guess else 0


def needs_event(hit: Mapping[str, Any]) -> bool:
    """Whether a hit's class takes its event: a message or tool result whose hit does not
    carry its role or status (an index built before they were kept)."""
    kind = hit["kind"]
    return (kind == "message" and not hit.get("role")) or (kind == "tool_result" and not hit.get("status"))


def hit_class(hit: Mapping[str, Any], event: Envelope | None, about_failure: bool, what_failed: bool = True) -> int:
    """``evidence_class`` of a hit: an ``error`` is a failed fact by its kind alone; a
    message's role and a result's status and exit code are the hit's own when it carries
    them (``event`` is then not looked at), else ``event``'s."""
    kind = hit["kind"]
    if kind == "error":
        return 0 if what_failed or not about_failure else 1
    if needs_event(hit) or kind not in ("message", "tool_result"):
        return evidence_class(event, about_failure, what_failed)
    if kind == "message":
        return _evidence(hit["role"] != "user", False, about_failure, what_failed)
    failed = hit["status"] != "ok" or hit.get("exit_code") not in (None, 0)
    return _evidence(False, failed, about_failure, what_failed)


def prefer(hits: list[dict[str, Any]], events: Mapping[str, Envelope | None], about_failure: bool,
           what_failed: Container[str] | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """``hits`` (in rank order) by their class, rank order within a class. ``what_failed``:
    the ids the failure searches found (``recall_searches``); a failure found only by the
    question's other words ranks as the fact it is, so a question about a failure and a
    fact together gets both (default: every hit)."""
    return sorted(hits, key=lambda h: hit_class(h, events.get(h["event_id"]), about_failure,
                                                what_failed is None or h["event_id"] in what_failed))


def family_threads(state: Mapping[str, Any]) -> list[str]:
    """The thread and its child threads (newest spawned last, at most ``MAX_CHILD_THREADS``)."""
    own = state["thread_id"]
    named = (a.get("child_thread_id") or a.get("thread_id") for a in state.get("agents", []))
    children = [t for t in named if t and t != own]
    return [own, *list(dict.fromkeys(children))[-MAX_CHILD_THREADS:]]


def held_ids(state: Mapping[str, Any], window_ids: Iterable[str]) -> set[str]:
    """Events whose content the context holds whatever its budget: the raw window, the
    latest user message, the pinned goal and constraints. Not the summary's cited events:
    under a tight budget the summary shows only some of them, so assembly drops a recalled
    unit only when the summary it rendered cites it."""
    held = set(window_ids)
    for key in ("latest_user_message_id", "window_started_by"):
        if state.get(key):
            held.add(state[key])
    if state.get("goal") and state["goal"].get("event_id"):
        held.add(state["goal"]["event_id"])
    held.update(c["event_id"] for c in state.get("constraints", []) if c.get("event_id"))
    return held


def rank(hit_lists: Iterable[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One list from several searches' hits, each event once: highest score first (an
    exact identifier match scores above any text match in every engine), then newest."""
    best: dict[str, dict[str, Any]] = {}
    for hits in hit_lists:
        for h in hits:
            if h["event_id"] not in best or h["score"] > best[h["event_id"]]["score"]:
                best[h["event_id"]] = h
    return sorted(best.values(), key=lambda h: (-h["score"], -h.get("offset", 0)))


def partner_kind(event: Envelope) -> str | None:
    """The kind of the event that completes ``event``'s unit, or ``None`` for a message."""
    return {"tool_call": "tool_result", "tool_result": "tool_call"}.get(event.kind)


def is_partner(event: Envelope, candidate: Envelope) -> bool:
    """Whether ``candidate`` is the other half of ``event``'s tool unit (same thread and call)."""
    return (candidate.thread_id == event.thread_id and candidate.kind == partner_kind(event)
            and getattr(candidate.payload, "call_id", None) == getattr(event.payload, "call_id", None))  # fmt: skip


def first_partner(event: Envelope, candidates: Iterable[tuple[Envelope, int]]) -> Envelope | None:
    """The partner among ``(candidate, offset)``: the earliest, as the first result wins."""
    found = sorted(((off, c.event_id, c) for c, off in candidates if is_partner(event, c)), key=lambda t: t[:2])
    return found[0][2] if found else None


def unit_entry(hit: Mapping[str, Any], call: Envelope | None, result: Envelope | None,
               query: str) -> dict[str, Any] | None:  # fmt: skip
    """One recall entry for a hit: the hit as is for anything but a tool event, else the
    whole unit (call, then result) as one entry, so the two are kept or dropped together.
    ``None``: a result without its call (an orphan is never shown)."""
    if hit["kind"] not in ("tool_call", "tool_result"):
        return {**hit, "event_ids": [hit["event_id"]]}
    if call is None:
        return None
    terms = tokenize(query)
    call_text = searchable(call)[0]
    line = f"call {snippet(terms, call_text)}"
    ids = [call.event_id]
    if result is None:
        line += " → no result yet"
    else:
        p: Any = result.payload
        exit_code = "" if p.exit_code is None else f" exit_code {p.exit_code}"
        failed = p.status != "ok" or p.exit_code not in (None, 0)
        # A failure's log says why in lines far from where the query's words first appear.
        output = clip_at_word(digest(p.output), FAILURE_SNIPPET_CHARS) if failed else snippet(terms, p.output)
        line += f" → result {result.event_id} [{p.status}{exit_code}]: {output}"
        ids.append(result.event_id)
    return {**hit, "event_id": call.event_id, "kind": "tool_call", "ts": call.ts, "snippet": line, "event_ids": ids}


def error_entry(hit: Mapping[str, Any], event: Envelope | None) -> dict[str, Any]:
    """An ``error`` hit's entry: its message with its code (the code is a field of its own
    that a snippet of the text leaves out)."""
    code = getattr(event.payload, "code", None) if event is not None else None
    line = hit["snippet"] if code is None else f"[code {code}] {hit['snippet']}"
    return {**hit, "snippet": line, "event_ids": [hit["event_id"]]}


def fresh(entries: Iterable[dict[str, Any] | None], held: set[str], orphans: set[str],
          limit: int = RECALL_LIMIT) -> list[dict[str, Any]]:  # fmt: skip
    """The entries the context does not hold yet, each unit once, at most ``limit``."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for entry in entries:
        if entry is None:
            continue
        ids = set(entry["event_ids"])
        if ids & (held | seen | orphans):
            continue
        seen |= ids
        out.append(entry)
        if len(out) == limit:
            break
    return out


__all__ = [
    "FAILURE_SNIPPET_CHARS", "FAILURE_WORDS", "asks_about_failure", "evidence_class", "hit_class", "needs_event", "prefer", "MAX_CHILD_THREADS", "RECALL_LIMIT", "STOP_WORDS", "error_entry", "family_threads", "first_partner", "fresh", "held_ids",
    "is_partner", "partner_kind", "rank", "recall_query", "recall_searches", "unit_entry",
]  # fmt: skip
