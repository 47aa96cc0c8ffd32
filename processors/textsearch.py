"""Keyword matching shared by the read-your-writes fallback and snippet making.

The tokenizer mirrors the search engines' default analyzers (split on anything that is
not a letter or digit, lowercase), so an ``active`` hit matches what the index would.
"""

from __future__ import annotations

import math
import re

_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)
SNIPPET_CHARS = 160


def tokenize(text: str) -> list[str]:
    return [t.lower() for t in _TOKEN.findall(text) if len(t) <= 40]


def score(query_terms: list[str], text: str) -> float:
    """A small BM25-like score of ``text`` for ``query_terms`` (0.0: no term matches)."""
    if not query_terms:
        return 0.0
    tokens = tokenize(text)
    if not tokens:
        return 0.0
    total = 0.0
    length_norm = 1.0 + 0.25 * (len(tokens) / 50.0)
    for term in set(query_terms):
        tf = tokens.count(term)
        if tf:
            total += tf * 2.2 / (tf + 1.2 * length_norm)
    return round(total * math.log(2.0), 6)


def snippet(query_terms: list[str], text: str, width: int = SNIPPET_CHARS) -> str:
    """A window of ``text`` around the first query term, ``…`` where it was cut."""
    lowered = text.lower()
    positions = [lowered.find(t) for t in query_terms if t and lowered.find(t) >= 0]
    start = max(0, min(positions) - width // 3) if positions else 0
    end = min(len(text), start + width)
    piece = " ".join(text[start:end].split())
    return ("…" if start > 0 else "") + piece + ("…" if end < len(text) else "")


__all__ = ["SNIPPET_CHARS", "score", "snippet", "tokenize"]
