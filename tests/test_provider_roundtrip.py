"""Issue 16, item 3's bar: OpenAI and Anthropic histories -> events -> a running service ->
context -> a provider payload that the provider's own request type accepts, with every tool
call followed by its result and no orphan: for generated histories (property test) and for
hand-written real-world shapes (parallel tool calls, a refused tool, an image block dropped
with a marker); through the service, the HTTP route and the command line."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentlog.processors.formats import anthropic, openai_chat, openai_responses
from agentlog.processors.formats.common import IMAGE_MARKER
from agentlog.schemas.events import Envelope
from agentlog.sinks.base import StoreError
from agentlog.streams.api.client import RemoteService
from agentlog.streams.api.http import build_app
from agentlog.streams.config import Settings
from agentlog.streams.embedded.service import EmbeddedService
from tests.conftest import free_port
from tests.provider_payloads import (
    ANTHROPIC_MESSAGES, OPENAI_MESSAGES, RESPONSES_INPUT, anthropic_pairs, anthropic_request, openai_pairs,
    openai_request, validated,
)  # fmt: skip
from tests.test_provider_formats import ANTHROPIC_HISTORY, OPENAI_HISTORY, RESPONSES_HISTORY

BUDGET = 100_000  # room for the whole history: what is checked is its shape, not the budget's cuts
THREADS = itertools.count()


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedService]:
    svc = EmbeddedService(Settings(data_dir=tmp_path_factory.mktemp("providers") / "data"))
    yield svc
    svc.close()


def jsonl(events: list[Envelope]) -> bytes:
    return b"\n".join(e.model_dump_json().encode() for e in events)


def publish(service: EmbeddedService, events: list[Envelope]) -> None:
    report = service.publish(jsonl(events))
    assert report.rejected == 0, report.rejections
    service.catch_up()


def payloads(context: Callable[[str], dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The thread's context in both provider formats, each validated by the provider's own
    request type and checked for pairing; the OpenAI messages and the Anthropic request."""
    openai = openai_request(context("openai")["messages"])["messages"]
    openai_pairs(openai)
    answer = context("anthropic")
    assert answer["format"] == "anthropic"
    request = anthropic_request(answer)
    anthropic_pairs(request["messages"])
    return openai, request


def texts(openai: list[dict[str, Any]]) -> str:
    return "\n".join(m["content"] for m in openai if isinstance(m.get("content"), str))


# -- hand-written real-world shapes ----------------------------------------------------------


def test_parallel_openai_tool_calls_come_back_each_followed_by_its_result_in_both_payloads(
    service: EmbeddedService,
) -> None:
    publish(service, openai_chat.to_events(OPENAI_HISTORY, "rt-openai", at="2026-12-01T09:00:00Z"))
    openai, request = payloads(lambda f: service.context("rt-openai", BUDGET, format=f))
    assert openai_pairs(openai) == [("call_a1", "FAILED tests/test_login.py::test_ttl"), ("call_b2", "python: 3.11")]
    assert [(u, r.get("content"), r.get("is_error", False)) for u, r in anthropic_pairs(request["messages"])] == [
        ("call_a1", "FAILED tests/test_login.py::test_ttl", False), ("call_b2", "python: 3.11", False)]
    assert IMAGE_MARKER in texts(openai)
    assert "You fix failing tests." in request["system"]


def test_a_refused_anthropic_tool_is_an_error_result_and_the_dropped_image_leaves_its_marker(
    service: EmbeddedService,
) -> None:
    publish(service, anthropic.to_events(ANTHROPIC_HISTORY, "rt-anthropic", system="Be careful."))
    openai, request = payloads(lambda f: service.context("rt-anthropic", BUDGET, format=f))
    pairs = anthropic_pairs(request["messages"])
    assert [(u, r.get("is_error", False)) for u, r in pairs] == [("toolu_01", True), ("toolu_02", False)]
    assert "refused by the user" in pairs[0][1]["content"]
    assert dict(openai_pairs(openai))["toolu_01"].startswith("[status: error]")
    shown = [b["text"] for m in request["messages"] for b in m["content"] if b["type"] == "text"]
    assert any(IMAGE_MARKER in t for t in shown) and "Do not delete anything." in shown
    assert service.state("rt-anthropic")["failures"][0]["tool_name"] == "bash"


def test_a_responses_history_with_parallel_function_calls_round_trips(service: EmbeddedService) -> None:
    publish(service, openai_responses.to_events(RESPONSES_HISTORY, "rt-responses"))
    openai, request = payloads(lambda f: service.context("rt-responses", BUDGET, format=f))
    assert openai_pairs(openai) == [("call_p", "18C"), ("call_o", "4C")]
    assert [u for u, _ in anthropic_pairs(request["messages"])] == ["call_p", "call_o"]


def test_importing_the_same_history_twice_stores_every_event_once(service: EmbeddedService) -> None:
    events = anthropic.to_events(ANTHROPIC_HISTORY, "rt-twice", at="2026-12-01T09:00:00Z")
    publish(service, events)
    publish(service, anthropic.to_events(ANTHROPIC_HISTORY, "rt-twice", at="2026-12-01T09:00:00Z"))
    rows = service.sql("SELECT event_id FROM events WHERE thread_id = 'rt-twice' ORDER BY event_id").rows
    assert [r[0] for r in rows] == sorted(e.event_id for e in events)
    assert service.state("rt-twice")["event_count"] == len(events)


# -- generated histories (property) ----------------------------------------------------------


@dataclass(frozen=True)
class Tool:
    call_id: str
    name: str
    arguments: dict[str, Any]
    outcome: str  # ok, error, or none (the history holds no result)
    output: str


words = st.text(st.sampled_from("abcdefgh ijk"), min_size=1, max_size=20).filter(str.strip)
tool = st.builds(Tool, st.just(""), st.sampled_from(["pytest", "read_file", "bash"]),
                 st.dictionaries(st.sampled_from("xyz"), st.integers(0, 9), max_size=2),
                 st.sampled_from(["ok", "ok", "error", "none"]), words)  # fmt: skip
turn = st.one_of(
    st.tuples(st.just("user"), words, st.booleans()),  # text, and whether an image goes with it
    st.tuples(st.just("assistant"), words),
    st.tuples(st.just("calls"), st.lists(tool, min_size=1, max_size=3)),  # parallel calls
)


def numbered(turns: list[tuple[Any, ...]], prefix: str) -> list[tuple[Any, ...]]:
    """The turns with unique call ids (as providers give them), some of them with characters
    the Anthropic API does not take in an id."""
    n = itertools.count()
    return [("calls", [replace(c, call_id=f"{prefix}{next(n)}") for c in t[1]]) if t[0] == "calls" else t
            for t in turns]  # fmt: skip


def as_openai(turns: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for t in turns:
        if t[0] == "user":
            image = [{"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}] if t[2] else []
            out.append({"role": "user", "content": [{"type": "text", "text": t[1]}, *image]})
        elif t[0] == "assistant":
            out.append({"role": "assistant", "content": t[1]})
        else:
            out.append({"role": "assistant", "tool_calls": [
                {"id": c.call_id, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                for c in t[1]]})  # fmt: skip
            out += [{"role": "tool", "tool_call_id": c.call_id, "content": c.output} for c in t[1] if c.outcome != "none"]
    return out


def as_anthropic(turns: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    png = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}
    out: list[dict[str, Any]] = []
    for t in turns:
        if t[0] == "user":
            out.append({"role": "user", "content": [{"type": "text", "text": t[1]},
                                                    *([{"type": "image", "source": png}] if t[2] else [])]})  # fmt: skip
        elif t[0] == "assistant":
            out.append({"role": "assistant", "content": t[1]})
        else:
            out.append({"role": "assistant", "content": [
                {"type": "tool_use", "id": c.call_id, "name": c.name, "input": c.arguments} for c in t[1]]})
            results = [{"type": "tool_result", "tool_use_id": c.call_id, "content": c.output,
                        "is_error": c.outcome == "error"} for c in t[1] if c.outcome != "none"]  # fmt: skip
            if results:
                out.append({"role": "user", "content": results})
    return out


def as_responses(turns: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for t in turns:
        if t[0] == "user":
            image = [{"type": "input_image", "image_url": "https://example.com/a.png", "detail": "auto"}] if t[2] else []
            out.append({"role": "user", "content": [{"type": "input_text", "text": t[1]}, *image]})
        elif t[0] == "assistant":
            out.append({"role": "assistant", "content": t[1]})
        else:
            out += [{"type": "function_call", "call_id": c.call_id, "name": c.name,
                     "arguments": json.dumps(c.arguments)} for c in t[1]]  # fmt: skip
            out += [{"type": "function_call_output", "call_id": c.call_id, "output": c.output}
                    for c in t[1] if c.outcome != "none"]  # fmt: skip
    return out


FORMATS = {
    "openai": (as_openai, OPENAI_MESSAGES, openai_chat.to_events, "call_"),
    "anthropic": (as_anthropic, ANTHROPIC_MESSAGES, anthropic.to_events, "toolu:"),
    "responses": (as_responses, RESPONSES_INPUT, openai_responses.to_events, "fc."),
}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(source=st.sampled_from(sorted(FORMATS)), turns=st.lists(turn, min_size=1, max_size=8))
def test_generated_histories_round_trip_into_payloads_the_providers_accept_with_every_call_answered(
    service: EmbeddedService, source: str, turns: list[tuple[Any, ...]],
) -> None:
    shape, history_type, to_events, prefix = FORMATS[source]
    turns = numbered(turns, prefix)
    history = validated(history_type, shape(turns))  # a history the provider itself would take
    thread = f"gen-{next(THREADS)}"
    publish(service, to_events(history, thread, at="2026-12-01T09:00:00Z"))
    openai, request = payloads(lambda f: service.context(thread, BUDGET, format=f))
    calls = [c for t in turns if t[0] == "calls" for c in t[1]]
    # Every call of the history comes back once, answered: by its result, or by the
    # context's own "no result" (never a dangling call); an error stays an error.
    assert [c for c, _ in openai_pairs(openai)] == [c.call_id for c in calls]
    pairs = anthropic_pairs(request["messages"])
    assert [u for u, _ in pairs] == [anthropic.tool_id(c.call_id) for c in calls]
    for c, (_, result) in zip(calls, pairs):
        assert result.get("is_error", False) == (c.outcome == "none" or (c.outcome == "error" and source == "anthropic"))
        if c.outcome != "none":  # (an identical failure seen again points at its newest copy)
            assert c.output in result["content"] or "same output as" in result["content"]
    user_texts = texts(openai)
    assert all(t[1] in user_texts for t in turns if t[0] != "calls")
    assert (IMAGE_MARKER in user_texts) == any(t[0] == "user" and t[2] for t in turns)


# -- the HTTP route and the command line ----------------------------------------------------


@pytest.fixture(scope="module")
def remote(service: EmbeddedService) -> Iterator[RemoteService]:
    """The HTTP API over the module's service, served by uvicorn in a thread, and the
    client that talks to it."""
    server = uvicorn.Server(uvicorn.Config(build_app(service), host="127.0.0.1", port=free_port(), log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    client = RemoteService(f"http://127.0.0.1:{server.config.port}")
    yield client
    client.close()
    server.should_exit = True
    thread.join(timeout=10)


def test_the_http_route_and_the_remote_client_answer_in_the_format_asked_and_refuse_an_unknown_one(
    service: EmbeddedService, remote: RemoteService,
) -> None:
    publish(service, openai_chat.to_events(OPENAI_HISTORY, "rt-http"))
    openai, request = payloads(lambda f: remote.context("rt-http", BUDGET, format=f))
    assert [c for c, _ in openai_pairs(openai)] == ["call_a1", "call_b2"]
    assert request == anthropic_request(service.context("rt-http", BUDGET, format="anthropic"))
    generic = remote.context("rt-http", BUDGET)
    assert generic == service.context("rt-http", BUDGET) and "format" not in generic
    with pytest.raises(StoreError, match="format"):
        remote.context("rt-http", BUDGET, format="gemini")


def test_agentlog_context_format_prints_the_payload_ready_to_send(cli_env: dict[str, str], tmp_path: Path) -> None:
    history = tmp_path / "history.jsonl"
    history.write_bytes(jsonl(anthropic.to_events(ANTHROPIC_HISTORY, "rt-cli", system="Be careful.")))
    agentlog = [sys.executable, "-m", "agentlog"]
    subprocess.run([*agentlog, "publish", str(history)], env=cli_env, check=True, capture_output=True)
    payload = subprocess.run([*agentlog, "context", "rt-cli", "--budget", str(BUDGET), "--format", "anthropic"],
                             env=cli_env, capture_output=True, text=True, check=True)  # fmt: skip
    printed = json.loads(payload.stdout)
    assert set(printed) == {"system", "messages"}
    pairs = anthropic_pairs(anthropic_request(printed)["messages"])
    assert [(u, r.get("is_error", False)) for u, r in pairs] == [("toolu_01", True), ("toolu_02", False)]
    whole = subprocess.run([*agentlog, "context", "rt-cli", "--budget", str(BUDGET), "--format", "openai", "--json"],
                           env=cli_env, capture_output=True, text=True, check=True)  # fmt: skip
    answer = json.loads(whole.stdout)
    assert answer["format"] == "openai" and answer["meta"]["budget"] == BUDGET
    assert [c for c, _ in openai_pairs(openai_request(answer["messages"])["messages"])] == ["toolu_01", "toolu_02"]
