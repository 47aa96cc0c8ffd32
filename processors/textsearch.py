"""Keyword matching shared by the read-your-writes fallback and snippet making.

Words are ``agentlog.processors.words``' (the same rule the engines' analyzers are made
from), so an ``active`` hit matches what the index would.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from operator import itemgetter
from dataclasses import dataclass
from typing import Any

from agentlog.processors.words import MAX_QUERY_WORDS, tokenize, word_counts
from agentlog.schemas.search import Hit, SearchFilters, exit_code_of

SNIPPET_CHARS = 160

_IDENTIFIER = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_./:\-]*[A-Za-z0-9])?")
_LETTER = re.compile(r"[A-Za-z]")
MAX_IDENTIFIERS = 256
"""Identifiers kept per document: a huge log's first ones (its head names the command)."""
EXACT_BOOST = 1000.0
"""What an exact identifier match adds to a hit's score, in every engine: far above any
text score, so an exact match ranks ahead of loosely related hits."""


def _is_identifier(token: str) -> bool:
    """``ERR_CACHE_MISS``, ``src/app/main.py``, ``E1234``, ``ENOENT``: a token with a
    letter and a digit, an inner ``_ / . : -``, or four or more capitals. Plain words are
    left to the analysed text."""
    if token.isalpha():  # most tokens: a plain word, or a code in capitals
        return len(token) >= 4 and token.isupper()
    # Not all letters: a digit or an inner separator is there; it needs a letter too.
    return len(token) <= 128 and _LETTER.search(token) is not None


def pair_term(call_id: str) -> str:
    """The exact term a tool call and its results share (``call:<call_id>``): searching it
    finds a hit's partner. The ``:`` makes it an identifier whatever the call id is."""
    return f"call:{call_id}"


def identifiers(text: str) -> list[str]:
    """The identifiers, paths and error codes of ``text``, as written, each once: what the
    ``terms`` keyword field holds and what a query matches exactly (case included)."""
    # Each distinct token is judged once (a log repeats its words).
    found = [t for t in dict.fromkeys(_IDENTIFIER.findall(text)) if _is_identifier(t)]
    return found[:MAX_IDENTIFIERS]


@dataclass(frozen=True, slots=True)
class Scorable:
    """A text as ``score`` reads it: how often each token occurs, and how many there are;
    ``terms``: a search document's exact terms (``scorable``). Tokenizing is most of
    scoring's cost; a document searched again keeps this."""

    counts: Counter[str]
    length: int
    terms: frozenset[str] = frozenset()

    @classmethod
    def of(cls, text: str, terms: frozenset[str] = frozenset()) -> Scorable:
        counts = word_counts(text)
        return cls(counts, sum(counts.values()), terms)

    def length_norm(self) -> float:
        return 1.0 + 0.25 * (self.length / 50.0)


def score(query_terms: list[str], text: str | Scorable) -> float:
    """A small BM25-like score of ``text`` for ``query_terms`` (0.0: no term matches)."""
    if not query_terms:
        return 0.0
    return score_of(set(query_terms), text if isinstance(text, Scorable) else Scorable.of(text))


def score_of(unique_terms: set[str], doc: Scorable) -> float:
    """``score`` for the distinct terms of a query, made once for many documents (summed in
    the set's order, so the same set gives the same float)."""
    if not doc.length:
        return 0.0
    total = 0.0
    length_norm = doc.length_norm()
    counts = doc.counts
    for term in unique_terms:
        tf = counts.get(term)
        if tf:
            total += term_weight(tf, length_norm)
    return final_score(total)


def term_weight(tf: int, length_norm: float) -> float:
    """What one query term found ``tf`` times adds to a document's score before
    ``final_score``: a property of the document alone, so a kept set can hold it."""
    return tf * 2.2 / (tf + 1.2 * length_norm)


def final_score(total: float) -> float:
    """A document's score from the sum of its terms' ``term_weight`` (added in the order
    of the query's term set: the same set gives the same float)."""
    return round(total * LN2, 6)


LN2 = math.log(2.0)
MAX_TERM_SCORE = 2.2 * LN2
"""What one distinct query term adds to an active score at most (``term_weight`` is under
2.2): a query of fewer than ``EXACT_BOOST / MAX_TERM_SCORE`` terms cannot reach
``EXACT_BOOST`` by its text."""


def snippet(query_terms: list[str], text: str, width: int = SNIPPET_CHARS) -> str:
    """A window of ``text`` around the first query term, ``…`` where it was cut."""
    first = _first_of(query_terms, text.lower())
    start = max(0, first - width // 3) if first is not None else 0
    end = min(len(text), start + width)
    piece = " ".join(text[start:end].split())
    return ("…" if start > 0 else "") + piece + ("…" if end < len(text) else "")


def _first_of(terms: Sequence[str], lowered: str) -> int | None:
    """Where the first of ``terms`` (each anywhere in ``lowered``) begins, ``None``: none is
    there. Once one is found, the others are looked for only before it: most of a snippet's
    cost was scanning the whole text for every term."""
    best = -1
    for t in terms:
        if t:
            p = lowered.find(t) if best < 0 else lowered.find(t, 0, best - 1 + len(t))  # starting before ``best``
            if p >= 0:
                best = p
    return best if best >= 0 else None


def filters_match(doc: dict[str, Any], f: SearchFilters) -> bool:
    """Whether a search document passes the filters (as the index's term filters would)."""
    return (
        (f.thread_id is None or doc["thread_id"] == f.thread_id)
        and (f.kind is None or doc["kind"] == f.kind)
        and (f.tool_name is None or doc["tool_name"] == f.tool_name)
        and (f.window_id is None or doc["window_id"] == f.window_id)
        and (f.project is None or doc["project"] == f.project)
        and (f.since_ms is None or doc["ts_ms"] >= f.since_ms)
        and (f.until_ms is None or doc["ts_ms"] <= f.until_ms)
    )


_KEYWORD_FILTERS = ("thread_id", "window_id", "kind", "tool_name", "project")


def document_filter(f: SearchFilters) -> Callable[[dict[str, Any]], bool]:
    """``filters_match`` made once for many documents: the keyword fields it compares are
    fetched together (``itemgetter``, in C) and compared as one tuple."""
    if f.since_ms is not None or f.until_ms is not None:
        return lambda doc: filters_match(doc, f)
    pairs = [(name, value) for name in _KEYWORD_FILTERS if (value := getattr(f, name)) is not None]
    if not pairs:
        return lambda _doc: True
    names, values = zip(*pairs)
    fetch, wanted = itemgetter(*names), (values if len(values) > 1 else values[0])
    return lambda doc: bool(fetch(doc) == wanted)


def scorable(doc: dict[str, Any]) -> Scorable:
    """What ``active_hit`` scores of a search document: its text and path, and its exact terms."""
    return Scorable.of(doc["text"] + " " + doc["path"], frozenset(doc.get("terms", ())))


def active_score(doc: dict[str, Any], terms: list[str], filters: SearchFilters,
                 exact_terms: Sequence[str] = (), scored: Scorable | None = None) -> float:  # fmt: skip
    """How a document the index cannot see yet matches (0.0: it does not). ``scored``:
    ``scorable(doc)``, when the caller keeps it between searches."""
    if not filters_match(doc, filters):
        return 0.0
    # A query of neither words nor identifiers matches every document; one of identifiers
    # alone (a sha256 is too long a word to index), only those that hold one.
    s = score(terms, scored or scorable(doc)) if terms else 0.0 if exact_terms else 1.0
    # As the index: an identifier of the query held exactly by the document matches it
    # (even with no word of the text in common) and ranks it first.
    exact = set(exact_terms) & set(doc.get("terms", ()))
    return s + EXACT_BOOST * len(exact)


def hit_of(doc: dict[str, Any], terms: list[str], score: float) -> Hit:
    """The ``active`` hit of a matching document, with its snippet."""
    return Hit(
        event_id=doc["event_id"], thread_id=doc["thread_id"], window_id=doc["window_id"],
        kind=doc["kind"], tool_name=doc["tool_name"], ts=doc["ts"], repo_commit=doc["repo_commit"],
        score=score, snippet=snippet(terms, doc["text"]), source="active", offset=doc["offset"],
        role=doc["role"], status=doc["status"], exit_code=exit_code_of(doc["exit_code"]),
    )  # fmt: skip


def active_hit(doc: dict[str, Any], terms: list[str], filters: SearchFilters,
               exact_terms: Sequence[str] = (), scored: Scorable | None = None) -> Hit | None:  # fmt: skip
    """A hit for a document the index cannot see yet, or ``None`` if it does not match."""
    s = active_score(doc, terms, filters, exact_terms, scored)
    return hit_of(doc, terms, s) if s else None


def query_warnings(query: str) -> list[str]:
    """What a search answer says of its query: one that holds no word the index keeps and
    no identifier (only punctuation, or one word over 40 bytes) lists every event under
    the filters, like an empty query, which its asker may not expect; one of more distinct
    words than a search looks for (``query_words``) was searched for its first ones only."""
    if not query.strip():
        return []
    distinct = len(set(tokenize(query)))
    if distinct == 0 and not identifiers(query):
        return [f"the query {query[:60]!r} holds no word to search for (punctuation is not indexed, nor a "
                "word over 40 bytes): every event under the filters is listed, newest first"]
    if distinct > MAX_QUERY_WORDS:
        return [f"the query holds {distinct:,} distinct words: only its first {MAX_QUERY_WORDS} were searched for"]
    return []


def with_query_warning(answer: dict[str, Any]) -> dict[str, Any]:
    """A search answer (a new one) with the warnings its query calls for, if any."""
    found = query_warnings(str(answer.get("query", "")))
    if not found:
        return answer
    return {**answer, "warnings": [*answer.get("warnings", []), *found]}


__all__ = ["EXACT_BOOST", "MAX_IDENTIFIERS", "MAX_TERM_SCORE", "LN2", "SNIPPET_CHARS", "Scorable", "active_hit", "active_score", "document_filter", "final_score", "hit_of", "scorable", "identifiers", "pair_term", "filters_match", "score", "score_of", "query_warnings", "snippet", "term_weight", "tokenize", "with_query_warning"]
