"""The agent step (publish one event, then a context) keeps what earlier steps worked out:
the unindexed events prepared for search and each search's answer, the index's answers
until its next refresh, the raw window's records, units' token counts, the rendered
summary. None of it may ever answer stale: step after step the context is byte for byte
the one a service that remembers nothing gives, and what was just published is searched
and recalled on the very next step."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import orjson

from agentlog.bench.step import Traffic
from agentlog.processors.public_state import PublicView
from agentlog.streams.api import context_cache
from agentlog.streams.api.context_cache import cache_for
from agentlog.streams.embedded.service import EmbeddedService
from tests.helpers import raw


def _cold(service: EmbeddedService, thread_id: str, ask: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``ask()`` answered as by a service that remembers nothing (one chDB per process: the
    same service, with what it remembers set aside, then put back)."""
    index: Any = service.index
    tp = service.driver.pipeline.thread(thread_id)
    kept = (context_cache._CACHES[service], dict(index._answers), tp.view)
    context_cache._CACHES[service] = context_cache.ContextCache()
    index._answers.clear()
    tp.view = PublicView()
    try:
        return ask()
    finally:
        context_cache._CACHES[service], tp.view = kept[0], kept[2]
        index._answers.clear()
        index._answers.update(kept[1])


def test_step_after_step_a_context_is_byte_identical_to_one_that_remembers_nothing(service: EmbeddedService) -> None:
    traffic, rng = Traffic("loop", seed=3), random.Random(3)
    sent: list[bytes] = [orjson.dumps(e) for e in traffic.take(320)]
    service.publish(b"\n".join(sent))
    service.catch_up()
    seen = {"fold": set(), "refresh": 0, "again": 0, "switch": 0}
    for step in range(90):
        data = orjson.dumps(traffic.next())
        if step == 40:  # a new window: the unindexed events' windows are read again
            data = raw("switch", "window_switch", {"new_window_id": "w2"}, 1e6, thread="loop", project="bench")
            seen["switch"] += 1
        elif step % 17 == 5:  # an earlier event delivered again: dropped, never shown twice
            data = rng.choice(sent)
            seen["again"] += 1
        sent.append(data)
        service.publish(data)
        if step % 30 == 29:  # the index shows more: every kept search is asked again
            service.catch_up()
            seen["refresh"] += 1
        budget, query = (8_000, None) if step % 3 else (2_000, "ERR_007 component")
        got = service.context("loop", budget, query)
        assert orjson.dumps(got) == orjson.dumps(_cold(service, "loop", lambda: service.context("loop", budget, query)))
        search = lambda: service._answering.search("ERR_007 component turn", thread_id="loop", limit=3)  # noqa: E731
        assert search() == _cold(service, "loop", search), step
        kept = cache_for(service).active.get("loop")  # the warm side kept the events not indexed, only those
        assert kept is not None and kept.visible == service.index.visible_offsets().get(0, 0)
        seen["fold"].add(got["meta"]["summary_covers_through"])
    assert len(seen["fold"]) > 1 and seen["refresh"] == 3 and seen["again"] and seen["switch"]


def _recalled(context: dict[str, Any]) -> list[str]:
    return next((s["hits"] for s in context["sections"] if s["name"] == "recall"), [])


def test_an_event_just_published_is_searched_and_recalled_on_the_very_next_step(service: EmbeddedService) -> None:
    service.publish(b"\n".join([
        raw("g", "goal", {"text": "find why the cache misses"}, 0),
        raw("s", "agent_spawn", {"child_agent_id": "a1", "child_thread_id": "kid"}, 1),
        raw("u1", "message", {"role": "user", "text": "look at the cache"}, 2),
        raw("k0", "message", {"role": "assistant", "text": "starting on the cache"}, 3, thread="kid"),
    ]))  # fmt: skip
    service.catch_up()
    for _ in range(2):  # warm: the same search asked twice finds nothing new
        assert "kc" not in _recalled(service.context("t1", 4000, "ERR_CACHE_MISS"))
    # The child finds it: not indexed yet, recalled by the parent's very next context.
    service.publish(b"\n".join([
        raw("kc", "tool_call", {"call_id": "q1", "tool_name": "grep", "arguments": {"p": "miss"}}, 4, thread="kid"),
        raw("kr", "tool_result", {"call_id": "q1", "output": "ERR_CACHE_MISS in src/cache.py"}, 5, thread="kid"),
    ]))  # fmt: skip
    assert _recalled(service.context("t1", 4000, "ERR_CACHE_MISS"))[0] == "kc"
    hits = service._answering.search("ERR_CACHE_MISS", thread_id="kid")["hits"]
    assert [(h["event_id"], h["source"]) for h in hits][:1] == [("kr", "active")]
    # A user message saying it again is in the window: recall does not repeat it.
    service.publish(raw("u2", "message", {"role": "user", "text": "ERR_CACHE_MISS again"}, 6))
    assert service.context("t1", 4000, "ERR_CACHE_MISS")["messages"][-1]["content"] == "ERR_CACHE_MISS again"
