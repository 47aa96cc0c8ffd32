"""Context assembly remembers what earlier requests worked out (parsed events, redacted
texts, the redacted state, recall's reads): the answer is byte for byte the one a cold
request gives, and the memory it takes stays under its bound."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
import orjson

from agentlog.processors.validation import validate
from agentlog.processors.public_state import PublicView
from agentlog.streams.api.context import context_for
from agentlog.streams.api import context_cache
from agentlog.streams.api.context_cache import BoundedCache, ContextCache, cache_for
from agentlog.streams.embedded.service import EmbeddedService
from tests.helpers import raw

SECRET = "sk-live-" + "Zq8" * 12


def session(start: int, n: int) -> list[bytes]:
    """Messages, tool pairs (some failing, some with secrets in arguments and outputs)."""
    lines = [raw("g", "goal", {"text": f"ship the release, token={SECRET}"}, 0),
             raw("k", "constraint", {"constraint_id": "k", "text": "never push to main"}, 1)] if start == 0 else []  # fmt: skip
    for i in range(start, start + n):
        t = 10 + 4 * i
        lines.append(raw(f"u{i}", "message", {"role": "user", "text": f"step {i}: deploy the build, password: hunter{i}x"}, t))
        lines.append(raw(f"c{i}", "tool_call", {"call_id": f"c{i}", "tool_name": "bash",
                                                "arguments": {"cmd": f"make deploy {i}", "api_key": SECRET}}, t + 1))  # fmt: skip
        status = "error" if i % 5 == 0 else "ok"
        lines.append(raw(f"r{i}", "tool_result", {"call_id": f"c{i}", "status": status,
                                                  "output": f"Authorization: Bearer {SECRET}\n" + "build log\n" * (3 + i % 40)}, t + 2))  # fmt: skip
        lines.append(raw(f"a{i}", "message", {"role": "assistant", "text": f"deployed step {i}"}, t + 3))
    return lines


def feed(services: list[EmbeddedService], lines: list[bytes]) -> None:
    for s in services:
        s.publish(b"\n".join(lines))
        s.catch_up()


def test_a_context_is_byte_identical_with_warm_caches_and_cold(service: EmbeddedService) -> None:
    rng = random.Random(14)
    requests = [(b, q) for b in (400, 900, 2000, 8000, 30_000) for q in (None, "deploy", "make deploy 3", "hunter")]
    cache = cache_for(service)
    compared = 0
    for batch in range(3):  # the thread grows between rounds: the state and the window change
        feed([service], session(batch * 40, 40))
        rng.shuffle(requests)  # warm: each request after others of other budgets and queries
        warm = {r: orjson.dumps(context_for(service, "t1", *r)) for r in requests}
        assert len(cache.texts) and len(cache.parsed)  # the warm side used them
        for r in rng.sample(requests, len(requests)):
            cache.clear()  # as a fresh service: nothing remembered
            service.driver.pipeline.thread("t1").view = PublicView()  # nor the state as last read
            assert orjson.dumps(context_for(service, "t1", *r)) == warm[r], (batch, r)
            compared += 1
    assert compared == 3 * len(requests)
    assert SECRET.encode() not in b"".join(warm.values())


def test_the_cache_stays_bounded_however_many_events_pass_through_it(service: EmbeddedService) -> None:
    lines = session(0, 150)
    feed([service], lines)
    cache = ContextCache(max_entries=40, max_bytes=16_384)
    for n, line in enumerate(lines):
        event = cache.parse(line, validate)
        assert event == validate(line)
        cache.read_event(service, event.event_id)
        cache.texts[(event.event_id, "text")] = line.decode()
        for part in (cache.parsed, cache.events, cache.texts):
            assert len(part) <= 40 and part.bytes <= 16_384, n
    assert len(cache.parsed) > 0 and len(cache.events) > 0  # bounded, not empty


def test_a_bounded_cache_forgets_the_least_recently_used_first() -> None:
    cache: BoundedCache[str] = BoundedCache(max_entries=3, max_bytes=10**6)
    for key in "abc":
        cache[key] = key * 10
    assert cache.get("a") == "a" * 10  # a was used last: b is now the oldest
    cache["d"] = "d"
    assert sorted(cache) == ["a", "c", "d"]
    cache["huge"] = "x" * (2 * 10**6)  # larger than the whole cache: never kept
    assert "huge" not in cache and cache.bytes <= 10**6


def test_contexts_assembled_on_many_threads_at_once_are_those_of_one_thread(service: EmbeddedService) -> None:
    feed([service], session(0, 60))
    requests = [(b, q) for b in (600, 3000, 8000, 20_000) for q in (None, "deploy", "password")] * 4
    cache = ContextCache(max_entries=30, max_bytes=32_768)  # small: eviction runs all the time
    context_cache._CACHES[service] = cache  # noqa: SLF001 (this service's cache, made small)
    with ThreadPoolExecutor(max_workers=6) as pool:
        parallel = list(pool.map(lambda r: orjson.dumps(context_for(service, "t1", *r)), requests))
    for r, got in zip(requests, parallel):
        cache.clear()
        assert got == orjson.dumps(context_for(service, "t1", *r)), r
    for part in (cache.texts, cache.parsed, cache.events):
        assert len(part) <= 30 and part.bytes <= 32_768


def test_a_state_read_redacts_with_its_list_item_memo_exactly_as_without_it() -> None:
    from agentlog.processors.redaction import redact_value

    state = {
        "goal": {"text": "deploy with token=ghp_abcdefghijklmnopqrstuvwxyz0123456789"},
        "plan": [{"step_id": f"s{i}", "text": f"step {i} password=hunter{i}2xyz", "status": "done"} for i in range(50)],
        "files": [{"path": "a.env", "env": [{"name": "API_KEY", "value": "sk-live-1234567890abcdef"}]}],
        "failures": [{"tool_name": "curl", "output": "Authorization: Bearer abc.def.ghi"}, "plain text"],
        "api_key": "top-secret-value",
    }
    plain = redact_value(state)
    memo: dict[bytes, bytes] = {}
    cold, warm = redact_value(state, memo), redact_value(state, memo)
    assert cold == warm == plain
    assert memo and "hunter" not in orjson.dumps(warm).decode() and "sk-live" not in orjson.dumps(warm).decode()
    warm["plan"][0]["text"] = "changed by a caller"
    assert redact_value(state, memo) == plain  # a hit is a fresh copy: a caller's change never leaks


def test_the_cache_bound_counts_a_large_event_and_a_search_document_by_their_text() -> None:
    from agentlog.streams.api.context_cache import BoundedCache
    from agentlog.processors.validation import validate

    big = validate(raw("big", "message", {"role": "user", "text": "x" * 200_000}, 0))
    cache: BoundedCache[object] = BoundedCache(max_entries=100, max_bytes=300_000)
    cache["a"] = big
    cache["b"] = {"text": "y" * 200_000, "event_id": "b"}
    assert len(cache) == 1 and cache.bytes <= 300_000  # the second pushed the first out



def test_a_parsed_record_counts_its_bytes_and_its_event_in_the_bound() -> None:
    """Each record the window parses is remembered by its bytes, sized from them (not by
    serialising the event again on every step): a large one still pushes others out."""
    from agentlog.streams.api.context_cache import ContextCache
    from agentlog.processors.validation import validate

    cache = ContextCache(max_entries=100, max_bytes=500_000)
    big = raw("big", "message", {"role": "user", "text": "x" * 200_000}, 0)
    assert cache.parse(big, validate).event_id == "big"
    assert cache.parsed.bytes >= 2 * 200_000  # the record's bytes and its event
    cache.parse(raw("big2", "message", {"role": "user", "text": "y" * 200_000}, 1), validate)
    assert len(cache.parsed) == 1 and cache.parsed.bytes <= 500_000

def test_the_caches_on_or_off_benchmark_runs_and_both_sides_answer_the_same() -> None:
    from agentlog.bench import context_cache as bench

    rows = bench.run((300,), rounds=2, calls=2)  # it asserts the two sides' answers are equal
    assert [r["events"] for r in rows] == [300] and {"cached", "uncached"} <= set(rows[0])
