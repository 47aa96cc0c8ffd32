"""Issue 15: a new recall query costs less. A tool event's partner is looked up by the
events holding its ``call:<call_id>`` term, without scoring any text, exactly as the search
found it; a context is the same either way."""

from __future__ import annotations

import os
import signal
import threading
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentlog.processors.textsearch import EXACT_BOOST, SNIPPET_CHARS, pair_term, snippet
from agentlog.processors.active_set import Pending
from agentlog.schemas.search import Hit
from agentlog.streams.api.context import context_for
from agentlog.streams.api.recall import PARTNER_LIMIT
from agentlog.streams.config import Settings
from agentlog.streams.embedded.service import EmbeddedService
from agentlog.streams.embedded.sink_process import IndexSearchedHere, Remote
from tests.helpers import raw

CALLS = ["c0", "c1", "c2", "many", "late"]


def _unit(i: int, call_id: str, t: float, project: str = "p1") -> list[bytes]:
    return [raw(f"call-{call_id}-{i}", "tool_call", {"call_id": call_id, "tool_name": "grep", "arguments": {"q": call_id}},
                t, project=project),
            raw(f"result-{call_id}-{i}", "tool_result", {"call_id": call_id, "output": f"grep found {call_id} here",
                                                         "status": "ok"}, t + 0.5, project=project)]  # fmt: skip


def _thread() -> tuple[list[bytes], list[bytes]]:
    """What the index shows (written, refreshed) and what it does not show yet."""
    indexed = [b for i, c in enumerate(CALLS[:3]) for b in _unit(i, c, float(i))]
    indexed += [b for i in range(3) for b in _unit(10 + i, "many", 10.0 + i)]  # holders: more than a search keeps
    indexed += _unit(20, "c0", 20.0, project="p2")  # another project's: never found
    later = [b for i in range(3) for b in _unit(30 + i, "many", 30.0 + i)]
    later += _unit(40, "late", 40.0) + _unit(41, "c1", 41.0)  # c1's second unit: its holders in both
    later.append(_unit(0, "c2", 2.0)[1])  # a redelivery: one event, held once
    return indexed, later


@pytest.fixture
def split(settings: Settings) -> Any:
    """A service whose index shows part of the thread; the rest only read-your-writes sees."""
    service = EmbeddedService(settings)
    indexed, later = _thread()
    service.publish(b"\n".join(indexed))
    service.catch_up()
    service._drain()  # written and refreshed: the index shows these
    service.publish(b"\n".join(later))
    service.state("t1")  # applied, not written: as an agent's step reads it
    yield service
    service.close()


def _searched(service: EmbeddedService, term: str, kind: str, project: str) -> list[tuple[str, int]]:
    hits = service._answering.search(term, thread_id="t1", kind=kind, project=project, limit=PARTNER_LIMIT)["hits"]
    return sorted((h["event_id"], h["offset"]) for h in hits if h["score"] >= EXACT_BOOST)


def test_a_tool_events_partner_is_found_without_a_search_exactly_as_the_search_finds_it(split: EmbeddedService) -> None:
    shown = split.index.visible_offsets().get(0, 0)
    assert 0 < shown < split.driver.events_pos  # the index shows some, read-your-writes the rest
    for call_id in CALLS:
        for kind in ("tool_call", "tool_result"):
            for project in ("p1", "p2"):
                term = pair_term(call_id)
                found = split.exact_holders(term, "t1", kind, project, PARTNER_LIMIT)
                if call_id == "many" and project == "p1":
                    assert found is None  # six hold it: which four the search keeps takes the scores
                    continue
                assert found is not None, (call_id, kind, project)
                assert sorted(found) == _searched(split, term, kind, project)
    assert sorted(split.exact_holders(pair_term("c1"), "t1", "tool_result", "p1", PARTNER_LIMIT) or []) == sorted(
        (f"result-c1-{i}", o) for i, o in _offsets(split, "c1"))  # one indexed, one not: both


def _offsets(service: EmbeddedService, call_id: str) -> list[tuple[int, int]]:
    hits = service._answering.search(pair_term(call_id), thread_id="t1", kind="tool_result", project="p1",
                                     limit=10)["hits"]  # fmt: skip
    return [(int(h["event_id"].rsplit("-", 1)[1]), h["offset"]) for h in hits if h["score"] >= EXACT_BOOST]


def test_a_long_query_is_left_to_the_search_its_text_could_score_as_an_exact_match(split: EmbeddedService) -> None:
    long_call = pair_term(" ".join(f"w{i}" for i in range(700)))
    assert split.exact_holders(long_call, "t1", "tool_result", "p1", PARTNER_LIMIT) is None
    assert split.exact_holders("plain words only", "t1", "tool_result", "p1", PARTNER_LIMIT) is None


class _SearchOnly:
    """The service as recall saw it before: every partner looked up by a search."""

    def __init__(self, service: EmbeddedService) -> None:
        self._service = service._answering

    def __getattr__(self, name: str) -> Any:
        if name in ("exact_holders", "cache_owner"):  # its own caches, no lookup apart
            raise AttributeError(name)
        return getattr(self._service, name)


def test_contexts_with_partners_found_apart_are_the_contexts_a_search_alone_gives(split: EmbeddedService) -> None:
    asked = 0
    split.publish(raw("ws", "window_switch", {"new_window_id": "w2"}, 49.0))  # the units are recall's to bring
    for i, question in enumerate(["what did grep find for c1?", "and c0, c2 or late?", "grep found many"]):
        split.publish(raw(f"ask{i}", "message", {"role": "user", "text": question}, 50.0 + i))
        with_lookup = context_for(split._answering, "t1", 4000)
        assert orjson.dumps(with_lookup) == orjson.dumps(context_for(_SearchOnly(split), "t1", 4000))
        recall = next((s for s in with_lookup["sections"] if s["name"] == "recall"), {"hits": []})
        asked += sum(h.startswith("call-") for h in recall["hits"])
    assert asked  # tool units were recalled: their partners were looked up


def test_an_index_searched_in_another_process_is_never_asked_apart_from_its_searches() -> None:
    assert Remote.exact_holders is None  # a forwarded call would cost more than the search it saves


def test_a_remembered_hit_is_handed_out_as_a_copy_equal_field_by_field_to_the_one_replace_makes() -> None:
    values = {f.name: (f"{f.name}-value" if f.type in ("str", str) else 7 if f.type in ("int", int) else 2.5)
              for f in fields(Hit)}  # fmt: skip
    hit = Hit(**values)
    copy = hit.copy()
    assert copy is not hit and copy == replace(hit) and copy.as_dict() == values  # every field, none left default


def _snippet_term_by_term(query_terms: list[str], text: str, width: int = SNIPPET_CHARS) -> str:
    """``snippet`` as it was: each term looked for apart, the first found wins."""
    lowered = text.lower()
    positions = [lowered.find(t) for t in query_terms if t and lowered.find(t) >= 0]
    start = max(0, min(positions) - width // 3) if positions else 0
    end = min(len(text), start + width)
    piece = " ".join(text[start:end].split())
    return ("…" if start > 0 else "") + piece + ("…" if end < len(text) else "")


PIECES = ["err", "025", "ERR_025", "component", "comp", "onent", " ", "\n", "é", "İ", "日本", "a+b", "(x)", ".*", "|", "\\"]


@settings(max_examples=300, deadline=None)
@given(text=st.lists(st.sampled_from(PIECES + ["word "] * 4), max_size=120).map("".join),
       terms=st.lists(st.sampled_from(PIECES + [""]), max_size=8), many=st.booleans())  # fmt: skip
def test_a_snippet_found_looking_before_the_first_term_found_is_the_one_found_term_by_term(text: str, terms: list[str],
                                                                                         many: bool) -> None:  # fmt: skip
    terms = [t.lower() for t in terms] + (["absent", "err", "word"] if many else [])
    assert snippet(terms, text) == _snippet_term_by_term(terms, text)


def test_a_server_looks_a_partner_up_in_the_sink_process_s_index_itself_even_while_that_process_is_stopped(
    tmp_path: Path,
) -> None:
    served = EmbeddedService(Settings(data_dir=tmp_path / "data"), sinks_apart=True)
    if served.sink_process is None:
        served.split_sinks()
    try:
        assert isinstance(served.index, IndexSearchedHere)
        served.publish(b"\n".join(_unit(0, "c0", 0.0)))
        served.serving = True  # the sink stage writes and commits, as under agentlog run
        served.catch_up()
        assert served.sink_process is not None
        want = _searched(served, pair_term("c0"), "tool_result", "p1")
        assert [i for i, _ in want] == ["result-c0-0"]
        sinks = served.sink_process.process.pid
        os.kill(sinks, signal.SIGSTOP)  # a call to the sink process would wait until it runs again
        try:
            found: list[object] = []
            looking = threading.Thread(target=lambda: found.append(
                served.exact_holders(pair_term("c0"), "t1", "tool_result", "p1", PARTNER_LIMIT)))  # fmt: skip
            looking.start()
            looking.join(5.0)
            assert not looking.is_alive(), "a partner lookup waited for the stopped sink process"
            assert found == [want]
        finally:
            os.kill(sinks, signal.SIGCONT)
    finally:
        served.close()


def test_the_active_hits_a_search_hands_out_are_made_without_a_frozen_dataclass_s_setattr_per_field() -> None:
    # Every search of a thread's unindexed events hands out up to 32 of them, on every step.
    assert not Pending.__dataclass_params__.frozen  # type: ignore[attr-defined]
    pending = Pending("e1", 1.5, 3, lambda: None)  # type: ignore[arg-type, return-value]
    assert (pending.event_id, pending.score, pending.offset) == ("e1", 1.5, 3)


class _Logged:
    """The service as a context reads it, each call logged (``hide``: what it lacks)."""

    def __init__(self, service: EmbeddedService, hide: tuple[str, ...] = ()) -> None:
        self._service, self.calls, self._hide = service._answering, [], hide

    def __getattr__(self, name: str) -> Any:
        if name in self._hide or name == "cache_owner":  # caches of its own: nothing remembered from the other
            raise AttributeError(name)
        found = getattr(self._service, name)
        if not callable(found):
            return found

        def logged(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, args[:1], tuple(sorted(kwargs.items()))))
            return found(*args, **kwargs)

        return logged


QUESTIONS = ["what did grep find for c1?", "why did late fail with an error?", "grep found many"]


def test_a_contexts_recall_searches_begin_before_its_window_is_read_and_answer_recall(split: EmbeddedService) -> None:
    split.publish(raw("ws", "window_switch", {"new_window_id": "w2"}, 49.0))
    for i, question in enumerate(QUESTIONS):
        split.publish(raw(f"ask{i}", "message", {"role": "user", "text": question}, 50.0 + i))
        service = _Logged(split)
        context_for(service, "t1", 4000)
        names = [name for name, _, _ in service.calls]
        begun = [call for call in service.calls if call[0] == "search_begun"]
        assert begun and names.index("search_begun") < names.index("window"), names
        first = {args for _, args, _ in begun}
        assert len(first) == 1  # the most telling query's searches, in each thread and kind
        assert not [args for name, args, _ in service.calls if name == "search" and args in first], "asked again"



def test_a_context_is_drafted_while_its_begun_searches_are_scored(split: EmbeddedService,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """All but the recalled evidence is assembled between beginning the searches and taking
    their answers: the index scores on the other core meanwhile (a new question's step)."""
    from agentlog.streams.api import context as api_context  # noqa: PLC0415

    order: list[str] = []
    drafting, answering = api_context.draft, api_context._CachedReads.search
    monkeypatch.setattr(api_context, "draft", lambda *a, **k: order.append("draft") or drafting(*a, **k))
    monkeypatch.setattr(api_context._CachedReads, "search",
                        lambda self, *a, **k: order.append("answer") or answering(self, *a, **k))  # fmt: skip
    split.publish(raw("ask", "message", {"role": "user", "text": "what did grep find for c1?"}, 50.0))
    service = _Logged(split)
    context_for(service, "t1", 4000)
    assert any(name == "search_begun" for name, _, _ in service.calls)
    assert order and order[0] == "draft" and "answer" in order, order

def test_contexts_whose_searches_began_early_are_the_contexts_of_searches_asked_in_turn(split: EmbeddedService) -> None:
    split.publish(raw("ws", "window_switch", {"new_window_id": "w2"}, 49.0))
    for i, question in enumerate(QUESTIONS):
        split.publish(raw(f"ask{i}", "message", {"role": "user", "text": question}, 50.0 + i))
        early = context_for(_Logged(split), "t1", 4000)
        assert orjson.dumps(early) == orjson.dumps(context_for(_Logged(split, hide=("search_begun",)), "t1", 4000))
        assert any(s["name"] == "recall" for s in early["sections"]), question  # recall had hits to compare


def test_a_service_that_cannot_begin_a_search_reads_nothing_before_its_window(split: EmbeddedService) -> None:
    """The Kafka worker's service: the question is read where recall reads it, as before."""
    split.publish(raw("ask", "message", {"role": "user", "text": "what did grep find for c1?"}, 50.0))
    service = _Logged(split, hide=("search_begun",))
    context_for(service, "t1", 4000)
    names = [name for name, _, _ in service.calls]
    assert names[: names.index("window")] == ["state", "orphans"], names


def test_a_contexts_search_terms_are_worked_out_once_per_text_and_never_remembered_for_a_long_one() -> None:
    from agentlog.processors import recall  # noqa: PLC0415

    state = {"goal": {"text": "keep the checkout healthy"}}
    question = "what did pytest say about component 77? ERR_007 failed"
    first = recall.recall_searches(state, question, None)
    before = recall._remembered_terms.cache_info().hits
    assert recall.recall_searches(state, question, None) == first  # the same searches, from memory
    assert recall._remembered_terms.cache_info().hits == before + 2  # the question's and the goal's
    long_question = "component " * (recall.REMEMBERED_CHARS // 10 + 1) + "ERR_007 failed"
    size = recall._remembered_terms.cache_info().currsize
    searches = recall.recall_searches(state, long_question, None)
    assert searches[0] == ("ERR_007 component err 007", "error")  # worked out as ever
    assert recall._remembered_terms.cache_info().currsize == size + 0  # only the goal, known already


def test_a_drafted_context_is_finished_once() -> None:
    from agentlog.processors.context import draft, finish  # noqa: PLC0415
    from agentlog.processors.tokens import counter  # noqa: PLC0415

    drafted = draft({"thread_id": "t1", "goal": {"text": "ship"}}, [], counter(), 400)
    first = finish(drafted, None)
    assert first.meta["budget"] == 400
    with pytest.raises(ValueError, match="finished already"):
        finish(drafted, None)  # its budget was spent: a second answer would count it twice
