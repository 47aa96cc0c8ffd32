"""What a word is, for every engine that searches: the read-your-writes scan (Python),
the embedded index (tantivy, a Rust regex) and OpenSearch (a Java regex). All three are
made here from one table, so an ``active`` hit matches what the index would.

A word is a run of letters and digits (Unicode categories L and N), lowercased, of at
most ``MAX_WORD_BYTES`` bytes in UTF-8, with one exception: Chinese, Japanese kana and
kanji are written without spaces, so each of those characters is a word of its own (as
Lucene's standard tokenizer does for ideographs). "東京に行きました" is then searchable by
東 and 京, where it used to be one word that no query but the whole sentence matched.
Korean (Hangul) is written with spaces and keeps its words.

``WORDS_VERSION`` names this rule in what each index records of its analyzer: an index
made with another rule is rebuilt (tantivy, from the topic) or reported until
``agentlog rebuild`` makes it again (OpenSearch).
"""

from __future__ import annotations

import re
from collections import Counter

WORDS_VERSION = 2
"""1: runs of letters and digits, CJK included (a whole Japanese sentence was one word)."""

MAX_WORD_BYTES = 40
"""Longer words are not indexed (a hash, a base64 run): tantivy counts UTF-8 bytes, and the
Python rule counts them too. OpenSearch's length filter counts UTF-16 units, so a word of
21 to 40 letters of two or three bytes (11 to 20 of four) is indexed there and not here.
The other known differences: each engine knows the letters of its own Unicode version
(tantivy's is newer than Python's, OpenSearch's JDK 17 older); and Lucene lowercases the
Turkish İ to "i" where Python and tantivy give "i̇" (on OpenSearch, a search for İstanbul
misses an indexed "İstanbul": search "istanbul")."""

MAX_QUERY_WORDS = 256
"""Distinct words a search looks for, the first ones of its query: OpenSearch refuses a
query of more than 1,024 clauses (two text fields a word, and the identifiers)."""

ONE_CHARACTER_WORDS: tuple[tuple[int, int], ...] = (
    (0x3005, 0x3007),  # 々 〆 〇
    (0x3031, 0x3035),  # kana repeat marks 〱 to 〵
    (0x303B, 0x303C),  # 〻 〼
    (0x3041, 0x309F),  # hiragana
    (0x30A1, 0x30FF),  # katakana
    (0x3100, 0x312F),  # bopomofo
    (0x31A0, 0x31BF),  # bopomofo extended
    (0x31F0, 0x31FF),  # katakana phonetic extensions
    (0x3400, 0x4DBF),  # CJK unified ideographs extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFF66, 0xFF9F),  # halfwidth katakana
    (0x1AFF0, 0x1B16F),  # kana extended, kana supplement, small kana
    (0x20000, 0x323AF),  # CJK unified ideographs extensions B to H, and compatibility supplement
)
"""Code point ranges whose letters are each one word. Only letters and digits among them
count (a katakana middle dot "・" is punctuation, not a word)."""


def _ranges(escape: str) -> str:
    """The table as a regex class body, each code point written as ``escape`` formats it."""
    return "".join(f"{escape.format(lo)}-{escape.format(hi)}" for lo, hi in ONE_CHARACTER_WORDS)


_PY_CJK = _ranges("\\U{:08X}")
_BRACED_CJK = _ranges("\\x{{{:X}}}")  # \x{3041}: both Rust's and Java's syntax
_LETTER_OR_DIGIT = "\\p{L}\\p{N}"

_OTHER_WORD = re.compile(f"[^\\W_{_PY_CJK}]+")
_ONE_CHARACTER = re.compile(f"(?=[^\\W_])[{_PY_CJK}]")
PYTHON_WORD = re.compile(f"{_OTHER_WORD.pattern}|{_ONE_CHARACTER.pattern}")
"""Python's ``[^\\W_]`` is a letter or digit (``str.isalnum``): categories L and N."""

RUST_WORD = f"[[{_LETTER_OR_DIGIT}]--[{_BRACED_CJK}]]+|[[{_BRACED_CJK}]&&[{_LETTER_OR_DIGIT}]]"
"""For tantivy's regex tokenizer (the ``regex`` crate: ``--`` is a class difference, ``&&``
an intersection)."""

JAVA_WORD = f"[{_LETTER_OR_DIGIT}&&[^{_BRACED_CJK}]]+|[{_BRACED_CJK}&&[{_LETTER_OR_DIGIT}]]"
"""For OpenSearch's pattern tokenizer (``java.util.regex``), each match a word (``group: 0``)."""


def is_one_character_word(word: str) -> bool:
    """Whether ``word`` is one of the characters that are words on their own."""
    return len(word) == 1 and any(lo <= ord(word) <= hi for lo, hi in ONE_CHARACTER_WORDS)


_ASCII_WORD = re.compile(r"[A-Za-z0-9]+")
_SHORT = MAX_WORD_BYTES // 4
"""A word of this many characters or fewer fits in ``MAX_WORD_BYTES`` whatever they are."""


def tokenize(text: str) -> list[str]:
    """The words of ``text``, lowercased, in order (repeats kept)."""
    if text.isascii():  # most text an agent logs: no CJK, a character is a byte (a third faster)
        return [w.lower() for w in _ASCII_WORD.findall(text) if len(w) <= MAX_WORD_BYTES]
    lower = _lower if "Σ" in text else str.lower
    return [lower(w) for w in PYTHON_WORD.findall(text) if len(w) <= _SHORT or _fits(w)]


def word_counts(text: str) -> Counter[str]:
    """``Counter(tokenize(text))``, faster where CJK is: its characters are counted as
    characters (in C), and only the other words are matched one by one; each distinct
    word is lowercased and measured once. A megabyte of kanji is a third of a million
    words of a few thousand kinds."""
    if text.isascii():
        return Counter(tokenize(text))
    counts: Counter[str] = Counter()
    for word, n in Counter(_OTHER_WORD.findall(text)).items():
        if len(word) <= _SHORT or _fits(word):
            counts[_lower(word)] += n
    if _ONE_CHARACTER.search(text):
        for char, n in Counter(text).items():
            if _ONE_CHARACTER.fullmatch(char):
                counts[char.lower()] += n
    return counts


def _fits(word: str) -> bool:
    return len(word) <= MAX_WORD_BYTES and (word.isascii() or len(word.encode()) <= MAX_WORD_BYTES)


def _lower(word: str) -> str:
    """``word`` lowercased one character at a time, as tantivy's filter does: Python's
    ``str.lower`` alone makes a capital sigma at a word's end a final sigma (ΟΔΟΣ: οδος),
    which tantivy does not (οδοσ), and the query would miss the indexed word."""
    return word.lower() if "Σ" not in word else "".join(c.lower() for c in word)


def query_words(query: str) -> list[str]:
    """The words a search looks for: each once (a repeated word counts once in every
    engine's score), the first ``MAX_QUERY_WORDS`` of them."""
    return list(dict.fromkeys(tokenize(query)))[:MAX_QUERY_WORDS]


__all__ = ["JAVA_WORD", "MAX_QUERY_WORDS", "MAX_WORD_BYTES", "ONE_CHARACTER_WORDS", "PYTHON_WORD", "RUST_WORD",
           "WORDS_VERSION", "is_one_character_word", "query_words", "tokenize", "word_counts"]  # fmt: skip
