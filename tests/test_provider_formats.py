"""Issue 16, item 3 (pure part): OpenAI Chat Completions, OpenAI Responses and Anthropic
Messages histories become agentlog events, and an assembled context renders as either
provider's request payload, validated by the providers' own request types."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agentlog.processors.formats import anthropic, openai_chat, openai_responses
from agentlog.processors.formats.common import IMAGE_MARKER
from agentlog.processors.formats.render import render_context
from agentlog.processors.formats.paired import no_result_text
from agentlog.schemas.events import Envelope
from tests.provider_payloads import (
    ANTHROPIC_MESSAGES, OPENAI_MESSAGES, RESPONSES_INPUT, anthropic_pairs, anthropic_request, openai_pairs,
    openai_request, validated,
)  # fmt: skip

PNG = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}

OPENAI_HISTORY: list[dict[str, Any]] = [
    {"role": "developer", "content": "You fix failing tests."},
    {"role": "user", "content": [{"type": "text", "text": "Why does CI fail? Screenshot:"},
                                 {"type": "image_url", "image_url": {"url": "https://example.com/ci.png"}}]},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_a1", "type": "function", "function": {"name": "run_tests", "arguments": '{"path": "tests/"}'}},
        {"id": "call_b2", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "ci.yml"}'}},
    ]},
    {"role": "tool", "tool_call_id": "call_a1", "content": "FAILED tests/test_login.py::test_ttl"},
    {"role": "tool", "tool_call_id": "call_b2", "content": [{"type": "text", "text": "python: 3.11"}]},
    {"role": "assistant", "content": "The session TTL test fails.", "refusal": None},
]  # fmt: skip

ANTHROPIC_HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": [{"type": "text", "text": "Clean the build directory."},
                                 {"type": "image", "source": PNG}]},
    {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "rm is risky", "signature": "sig"},
        {"type": "text", "text": "I will delete it."},
        {"type": "tool_use", "id": "toolu_01", "name": "bash", "input": {"command": "rm -rf build"}},
        {"type": "text", "text": "And list what is left."},
        {"type": "tool_use", "id": "toolu_02", "name": "bash", "input": {"command": "ls"}},
    ]},
    {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_01", "is_error": True, "content": "refused by the user"},
        {"type": "tool_result", "tool_use_id": "toolu_02",
         "content": [{"type": "text", "text": "src\ntests"}, {"type": "image", "source": PNG}]},
        {"type": "text", "text": "Do not delete anything."},
    ]},
]  # fmt: skip

RESPONSES_HISTORY: list[dict[str, Any]] = [
    {"role": "system", "content": "Answer briefly."},
    {"role": "user", "content": [{"type": "input_text", "text": "Weather in Paris and Oslo?"},
                                 {"type": "input_image", "image_url": "https://example.com/map.png", "detail": "auto"}]},
    {"type": "reasoning", "id": "rs_1", "summary": []},
    {"type": "function_call", "call_id": "call_p", "name": "weather", "arguments": '{"city": "Paris"}'},
    {"type": "function_call", "call_id": "call_o", "name": "weather", "arguments": '{"city": "Oslo"}'},
    {"type": "function_call_output", "call_id": "call_p", "output": "18C"},
    {"type": "function_call_output", "call_id": "call_o", "output": [{"type": "input_text", "text": "4C"}]},
    {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "oslo"}},
    {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
     "content": [{"type": "output_text", "text": "Paris 18C, Oslo 4C.", "annotations": []}]},
]  # fmt: skip


def _shape(events: list[Envelope]) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for e in events:
        p: Any = e.payload
        out.append({"message": lambda: (e.kind, p.role, p.text), "tool_call": lambda: (e.kind, p.call_id, p.tool_name, p.arguments),
                    "tool_result": lambda: (e.kind, p.call_id, p.status, p.output)}[e.kind]())  # fmt: skip
    return out


def test_the_hand_written_histories_are_what_the_providers_own_types_accept() -> None:
    validated(OPENAI_MESSAGES, OPENAI_HISTORY)
    validated(ANTHROPIC_MESSAGES, ANTHROPIC_HISTORY)
    validated(RESPONSES_INPUT, RESPONSES_HISTORY)


def test_an_openai_chat_history_becomes_messages_parallel_tool_calls_and_their_results() -> None:
    events = openai_chat.to_events(OPENAI_HISTORY, "t-oai", "billing", at="2026-12-01T09:00:00Z")
    assert _shape(events) == [
        ("message", "developer", "You fix failing tests."),
        ("message", "user", f"Why does CI fail? Screenshot:\n\n{IMAGE_MARKER}"),
        ("tool_call", "call_a1", "run_tests", {"path": "tests/"}),
        ("tool_call", "call_b2", "read_file", {"path": "ci.yml"}),
        ("tool_result", "call_a1", "ok", "FAILED tests/test_login.py::test_ttl"),
        ("tool_result", "call_b2", "ok", "python: 3.11"),
        ("message", "assistant", "The session TTL test fails."),
    ]
    assert {(e.thread_id, e.project) for e in events} == {("t-oai", "billing")}


def test_an_anthropic_history_keeps_text_between_calls_marks_a_refused_tool_as_an_error_and_drops_images_visibly() -> None:
    events = anthropic.to_events(ANTHROPIC_HISTORY, "t-ant", system="Be careful.")
    assert _shape(events) == [
        ("message", "system", "Be careful."),
        ("message", "user", f"Clean the build directory.\n\n{IMAGE_MARKER}"),
        ("message", "assistant", "I will delete it."),  # the thinking block is not imported
        ("tool_call", "toolu_01", "bash", {"command": "rm -rf build"}),
        ("message", "assistant", "And list what is left."),
        ("tool_call", "toolu_02", "bash", {"command": "ls"}),
        ("tool_result", "toolu_01", "error", "refused by the user"),
        ("tool_result", "toolu_02", "ok", f"src\ntests\n\n{IMAGE_MARKER}"),
        ("message", "user", "Do not delete anything."),
    ]


def test_a_responses_item_list_becomes_function_calls_outputs_and_messages_with_markers() -> None:
    events = openai_responses.to_events(RESPONSES_HISTORY, "t-resp")
    assert _shape(events) == [
        ("message", "system", "Answer briefly."),
        ("message", "user", f"Weather in Paris and Oslo?\n\n{IMAGE_MARKER}"),
        ("tool_call", "call_p", "weather", {"city": "Paris"}),
        ("tool_call", "call_o", "weather", {"city": "Oslo"}),
        ("tool_result", "call_p", "ok", "18C"),
        ("tool_result", "call_o", "ok", "4C"),
        ("message", "assistant", "[web search call omitted]"),
        ("message", "assistant", "Paris 18C, Oslo 4C."),
    ]


def test_responses_custom_and_shell_calls_pair_with_their_outputs() -> None:
    items = [
        {"type": "custom_tool_call", "call_id": "c1", "name": "patch", "input": "*** Begin Patch"},
        {"type": "custom_tool_call_output", "call_id": "c1", "output": "applied"},
        {"type": "shell_call", "call_id": "s1", "action": {"commands": ["ls"]}, "status": "completed"},
        {"type": "shell_call_output", "call_id": "s1", "output": [{"stdout": "a", "stderr": ""}]},
    ]
    assert _shape(openai_responses.to_events(items, "t-custom")) == [
        ("tool_call", "c1", "patch", "*** Begin Patch"),
        ("tool_result", "c1", "ok", "applied"),
        ("tool_call", "s1", "shell", {"action": {"commands": ["ls"]}}),
        ("tool_result", "s1", "ok", '{"stdout":"a","stderr":""}'),
    ]


def test_importing_the_same_history_twice_gives_the_same_events_and_appended_turns_keep_the_earlier_ids() -> None:
    first = anthropic.to_events(ANTHROPIC_HISTORY[:2], "t-dedup", at="2026-12-01T09:00:00Z")
    again = anthropic.to_events(ANTHROPIC_HISTORY[:2], "t-dedup", at="2026-12-01T09:00:00Z")
    longer = anthropic.to_events(ANTHROPIC_HISTORY, "t-dedup", at="2026-12-01T09:00:00Z")
    assert [e.model_dump() for e in again] == [e.model_dump() for e in first]
    assert [e.model_dump() for e in longer[: len(first)]] == [e.model_dump() for e in first]
    assert len({e.event_id for e in longer}) == len(longer)
    # Another thread, or the same item with other content, is another event.
    assert not {e.event_id for e in first} & {e.event_id for e in anthropic.to_events(ANTHROPIC_HISTORY[:2], "t-other")}
    edited = [{"role": "user", "content": "Clean the dist directory."}, ANTHROPIC_HISTORY[1]]
    assert anthropic.to_events(edited, "t-dedup")[0].event_id != first[0].event_id
    # Importing only the new tail, told where it starts, gives the same ids as the whole history.
    tail = anthropic.to_events(ANTHROPIC_HISTORY[2:], "t-dedup", start=2)
    assert [e.event_id for e in tail] == [e.event_id for e in longer[len(first):]]


def test_event_times_are_the_callers_spaced_by_the_step_never_the_clock() -> None:
    events = openai_chat.to_events(OPENAI_HISTORY, "t-time", at="2026-12-01T09:00:00Z", step_ms=250)
    assert [e.ts for e in events[:3]] == ["2026-12-01T09:00:00.000Z", "2026-12-01T09:00:00.250Z",
                                          "2026-12-01T09:00:00.500Z"]  # fmt: skip
    assert openai_chat.to_events(OPENAI_HISTORY, "t-time")[0].ts == openai_chat.to_events(OPENAI_HISTORY, "t-time")[0].ts


GENERIC: list[dict[str, Any]] = [
    {"role": "system", "content": "Goal: fix CI"},
    {"role": "user", "content": "go"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call:1", "type": "function", "function": {"name": "pytest", "arguments": '{"k": "ttl"}'}}]},
    {"role": "tool", "tool_call_id": "call:1", "content": "[status: error] 1 failed"},
    {"role": "system", "content": "A reminder inside the conversation."},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c2", "type": "function", "function": {"name": "fs.list", "arguments": "not json"}}]},
    {"role": "tool", "tool_call_id": "c2", "content": "a b"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c3", "type": "function", "function": {"name": "deploy", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "c9", "content": "output of a call not shown"},
    {"role": "assistant", "content": ""},
]  # fmt: skip


def test_a_call_without_its_result_is_never_a_dangling_tool_call_in_either_payload() -> None:
    messages = openai_request(render_context({"messages": GENERIC}, "openai")["messages"])["messages"]
    assert [c for c, _ in openai_pairs(messages)] == ["call:1", "c2"]
    texts = [m["content"] for m in messages if isinstance(m.get("content"), str)]
    assert no_result_text(GENERIC[7]["tool_calls"][0]) in texts
    assert any(t.startswith("[tool result of call c9") for t in texts)
    answer = render_context({"messages": GENERIC}, "anthropic")
    request = anthropic_request(answer)
    pairs = anthropic_pairs(request["messages"])
    assert [use for use, _ in pairs] == [anthropic.tool_id("call:1"), "c2"]
    assert [r.get("is_error", False) for _, r in pairs] == [True, False]
    blocks = [b for m in request["messages"] for b in m["content"]]
    assert {"type": "text", "text": "[system] A reminder inside the conversation."} in blocks
    assert any(b["type"] == "text" and b["text"].startswith("[tool call c3 deploy") for b in blocks)
    assert answer["system"] == "Goal: fix CI"
    assert blocks[1]["input"] == {"k": "ttl"} and blocks[4]["input"] == {"arguments": "not json"}
    # A tool name the APIs would refuse (an MCP server's dotted name) is rewritten, in both.
    assert blocks[4]["name"] == "fs_list" == messages[5]["tool_calls"][0]["function"]["name"]


def test_call_ids_the_anthropic_api_would_refuse_are_rewritten_alike_in_use_and_result_and_never_collide() -> None:
    assert anthropic.tool_id("toolu_01A-b") == "toolu_01A-b"
    rewritten = {anthropic.tool_id(i) for i in ("a:b", "a.b", "a_b", "a b")}
    assert len(rewritten) == 4 and all(anthropic._ID.match(i) for i in rewritten)


def test_the_generic_format_is_the_answer_unchanged_and_an_unknown_format_is_refused() -> None:
    answer = {"messages": GENERIC, "meta": {}}
    assert render_context(answer, "generic") is answer
    try:
        render_context(answer, "gemini")
    except ValueError as error:
        assert "generic, openai, anthropic" in str(error)
    else:
        raise AssertionError("an unknown format was accepted")


# -- any generic message list renders as valid payloads (property) ---------------------------

ids = st.sampled_from(["c1", "c2", "c3", "call:4", "toolu 5"])
text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
call = st.fixed_dictionaries({"id": ids, "type": st.just("function"), "function": st.fixed_dictionaries(
    {"name": st.sampled_from(["ls", "pytest"]), "arguments": st.sampled_from(["{}", '{"a": 1}', "raw"])})})
message = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "assistant"]), "content": text}),
    st.fixed_dictionaries({"role": st.just("assistant"), "content": st.none(), "tool_calls": st.lists(call, min_size=1, max_size=3)}),
    st.fixed_dictionaries({"role": st.just("tool"), "tool_call_id": ids, "content": st.one_of(text, st.just("[status: timeout] x"))}),
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(message, max_size=14))
def test_any_message_list_renders_as_payloads_the_providers_accept_with_every_call_answered(
    messages: list[dict[str, Any]],
) -> None:
    openai = render_context({"messages": messages}, "openai")["messages"]
    if openai:  # (the context builder always has its pinned system message)
        openai_request(openai)
    openai_pairs(openai)
    answer = anthropic_request(render_context({"messages": messages}, "anthropic"))
    anthropic_pairs(answer["messages"])
    # Each call of the list is either paired in both payloads or said to have no result in both.
    assert len(openai_pairs(openai)) == len(anthropic_pairs(answer["messages"]))
