"""A thread's events not yet indexed, kept between searches (``ActiveSet``), answer every
search exactly as scanning them all again does (``active_hits``), step after step of a
thread that grows, switches windows, redelivers events and pairs calls with results."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from agentlog.processors.active_set import ActiveSet, _contenders
from agentlog.processors.pipeline import Pipeline, Record
from agentlog.processors.records import active_hits
from agentlog.processors.textsearch import document_filter, filters_match, identifiers, tokenize
from agentlog.processors.validation import validate
from agentlog.schemas.events import Envelope
from agentlog.schemas.search import SearchFilters
from tests.helpers import raw

WORDS = ["deploy", "cache", "error", "ERR_42", "login"]
STEP = st.one_of(
    st.tuples(st.just("note"), st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join)),
    st.tuples(st.just("own"), st.sampled_from(["x1", "x2"])),
    st.tuples(st.just("switch"), st.sampled_from(["w1", "w2"])),
    st.tuples(st.just("call"), st.sampled_from(["c1", "c2"])),
    st.tuples(st.just("result"), st.sampled_from(["c1", "c2"])),
    st.tuples(st.just("again"), st.integers(0, 30)),  # a redelivery of an earlier record
)
QUERIES = [("deploy cache", None), ("ERR_42", None), ("bash", "tool_result"), ("call:c1", "tool_call"),
           ("", None), ("error", "message")]  # fmt: skip


def _records(steps: list[tuple[str, object]]) -> list[Record]:
    out: list[Record] = []
    for i, (what, arg) in enumerate(steps):
        if what == "again" and out:
            out.append(Record(0, i, out[int(arg) % len(out)].value))  # type: ignore[call-overload]
            continue
        if what == "switch":
            data = raw(f"e{i}", "window_switch", {"new_window_id": arg}, i)
        elif what == "call":
            data = raw(f"e{i}", "tool_call", {"call_id": arg, "tool_name": "bash", "arguments": {"cmd": "ls"}}, i)
        elif what == "result":
            data = raw(f"e{i}", "tool_result", {"call_id": arg, "output": "cache error", "status": "error"}, i)
        elif what == "own":
            data = raw(f"e{i}", "message", {"role": "user", "text": "deploy"}, i, window_id=arg)
        else:
            data = raw(f"e{i}", "message", {"role": "user", "text": str(arg)}, i)
        out.append(Record(0, i, data))
    return out


def _hits(hits: list) -> list[dict]:
    return [h.as_dict() for h in hits]


@settings(max_examples=200, deadline=None)
@given(steps=st.lists(STEP, min_size=1, max_size=30), visible=st.integers(-1, 3),
       cuts=st.lists(st.integers(1, 4), min_size=1, max_size=8), limit=st.integers(1, 4))  # fmt: skip
# An event naming its own window, added to a kept set.
@example(steps=[("own", "x1"), ("own", "x1")], visible=-1, cuts=[1, 1], limit=1)
# A switch the index shows, delivered again after it: it names the window of the events before it.
@example(steps=[("note", "deploy"), ("switch", "w1"), ("note", "deploy"), ("again", 1)], visible=1, cuts=[3, 1],
         limit=2)  # fmt: skip
def test_a_kept_active_set_answers_every_search_as_a_full_scan_of_the_thread_does(steps, visible, cuts, limit) -> None:
    records = _records(steps)
    pipeline = Pipeline()
    active: ActiveSet | None = None
    end = 0
    for cut in cuts:
        new, end = records[end:end + cut], min(len(records), end + cut)
        pipeline.process(new)
        state = pipeline.threads["t1"].state if "t1" in pipeline.threads else None
        window, closed = (state.window_id, dict(state.closed_windows)) if state else ("w0", {})
        tail = [(e, r.offset) for r in records[:end] if r.offset > visible
                and isinstance(e := validate(r.value), Envelope)]  # fmt: skip
        if active is None or not active.fits(window, closed, visible):
            active = ActiveSet(visible, window, closed)
        fresh = [(e, o) for e, o in tail if o > active.last]
        if not active.add(fresh, len(fresh), max([active.last] + [o for _, o in fresh])):
            active = ActiveSet(visible, window, closed)
            assert active.add(tail, len(tail), max([visible] + [o for _, o in tail]))
        for query, kind in QUERIES:
            filters = SearchFilters("t1", kind=kind)
            want = active_hits(tail, tokenize(query), filters, window, set(), closed, identifiers(query),
                               keep=2 * limit)  # fmt: skip
            assert _hits(active.hits(tokenize(query), filters, identifiers(query), 2 * limit)) == _hits(want)


VALUES = st.sampled_from(["t1", "t2", "w0", "w1", "message", "tool_call", "bash", "p", ""])


@settings(max_examples=300, deadline=None)
@given(doc=st.fixed_dictionaries({"thread_id": VALUES, "window_id": VALUES, "kind": VALUES, "tool_name": VALUES,
                                  "project": VALUES, "ts_ms": st.integers(0, 10)}),
       filters=st.builds(SearchFilters, st.one_of(st.none(), VALUES), st.one_of(st.none(), VALUES),
                         st.one_of(st.none(), VALUES), st.one_of(st.none(), VALUES), st.one_of(st.none(), VALUES),
                         st.one_of(st.none(), st.integers(0, 10)), st.one_of(st.none(), st.integers(0, 10))))  # fmt: skip
def test_a_filter_made_once_for_many_documents_passes_exactly_the_documents_the_filters_match(doc, filters) -> None:
    assert document_filter(filters)(doc) == filters_match(doc, filters)


@settings(max_examples=150, deadline=None)
@given(fillers=st.lists(st.integers(0, 300), min_size=1, max_size=60), codes=st.lists(st.booleans(), max_size=60),
       keep=st.integers(1, 6))  # fmt: skip
def test_a_new_query_over_many_close_scores_answers_what_a_full_scan_answers(fillers, codes, keep) -> None:
    # Lengths a token apart give scores within a rounding step of each other, and the exact
    # identifier adds its boost to some: the best few are found among unrounded scores first.
    texts = [f"deploy cache{' ERR_42' if i < len(codes) and codes[i] else ''}{' filler' * n}"
             for i, n in enumerate(fillers)]  # fmt: skip
    events = [(validate(raw(f"e{i}", "message", {"role": "user", "text": t}, i)), i) for i, t in enumerate(texts)]
    active = ActiveSet(-1, "w0", {})
    assert active.add(events, len(events), len(events) - 1)
    for query in ("deploy", "deploy cache ERR_42", "cache filler"):
        filters = SearchFilters("t1")
        want = active_hits(events, tokenize(query), filters, "w0", set(), {}, identifiers(query), keep=keep)
        assert _hits(active.hits(tokenize(query), filters, identifiers(query), keep)) == _hits(want)


def test_a_new_query_rounds_and_ranks_only_the_documents_that_can_be_among_the_best() -> None:
    positions = list(range(200))
    totals = {p: 1.0 + p / 100 for p in positions}  # far apart: only the best three contend
    assert _contenders(positions, totals, {}, 3) == [197, 198, 199]
    boosted = _contenders(positions, totals, {5: 1}, 3)  # an exact identifier ranks first
    assert boosted == [5, 198, 199]
    # Scores a rounding step apart are all kept: rounding may make them equal.
    close = {p: 1.0 + p * 1e-7 for p in positions}
    assert len(_contenders(positions, close, {}, 3)) > 3


@settings(max_examples=20, deadline=None)
@given(texts=st.lists(st.lists(st.sampled_from(WORDS + ["ok", "component", "7"]), min_size=1, max_size=30),
                      min_size=200, max_size=1200),
       cut=st.integers(1, 199), keep=st.integers(1, 40))  # fmt: skip
def test_a_query_of_common_words_over_a_thousand_unindexed_events_scores_each_as_a_full_scan_does(texts, cut, keep) -> None:
    # Every document holds several of the query's words: thousands of postings are added
    # up term by term, and each sum must be the float a scan of the document adds up.
    events = [(validate(raw(f"e{i}", "message", {"role": "user", "text": " ".join(t)}, i)), i)
              for i, t in enumerate(texts)]  # fmt: skip
    active = ActiveSet(-1, "w0", {})
    assert active.add(events[:cut], cut, cut - 1)
    for query in ("component ok 7 deploy", "ERR_42 cache ok"):
        active.hits(tokenize(query), SearchFilters("t1"), identifiers(query), keep)  # scored up to ``cut`` first
    assert active.add(events[cut:], len(events) - cut, len(events) - 1)
    for query in ("component ok 7 deploy", "ERR_42 cache ok", "login"):
        filters = SearchFilters("t1")
        want = active_hits(events, tokenize(query), filters, "w0", set(), {}, identifiers(query), keep=keep)
        assert _hits(active.hits(tokenize(query), filters, identifiers(query), keep)) == _hits(want)

