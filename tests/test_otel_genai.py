"""Issue 16, item 5, the pure half: what each GenAI span means for its thread
(``agentlog.processors.otel_genai``), without a server."""

from __future__ import annotations

import json
from typing import Any

from agentlog.processors.otel_genai import Span, map_spans
from agentlog.processors.validation import validate
from agentlog.schemas.events import Envelope

T0 = 1_780_000_000_000_000_000  # ns


def span(span_id: str, start_ms: int, end_ms: int, parent: str = "", error: str = "", **attributes: Any) -> Span:
    attrs = {"gen_ai.conversation.id": "t1", **{k.replace("__", "."): v for k, v in attributes.items()}}
    return Span("ab" * 16, span_id, "s", T0 + start_ms * 1_000_000, T0 + end_ms * 1_000_000, parent,
                bool(error), error, attrs)  # fmt: skip


def kinds(spans: list[Span]) -> list[tuple[str, dict[str, Any]]]:
    mapped = map_spans(spans)
    for _, event in mapped.events:  # every event is a valid one of the wire format
        assert isinstance(validate(json.dumps(event).encode()), Envelope), event
    return [(e["kind"], e["payload"]) for _, e in mapped.events]


def test_a_chat_span_publishes_only_the_input_after_the_models_last_answer_and_the_outputs_text() -> None:
    history = [{"role": "system", "parts": [{"type": "text", "content": "be brief"}]},
               {"role": "user", "parts": [{"type": "text", "content": "hi"}]},
               {"role": "assistant", "parts": [{"type": "text", "content": "hello"}]},
               {"role": "user", "parts": [{"type": "text", "content": "what time"}, {"type": "text", "content": " is it?"}]}]  # fmt: skip
    output = [{"role": "assistant", "parts": [{"type": "text", "content": "noon"}]}]
    assert kinds([span("01", 0, 5, gen_ai__operation__name="chat", gen_ai__input__messages=json.dumps(history),
                       gen_ai__output__messages=output)]) == [  # structured attributes work as JSON text does
        ("message", {"role": "user", "text": "what time is it?"}), ("message", {"role": "assistant", "text": "noon"})]  # fmt: skip


def test_a_failed_chat_span_is_an_error_event_and_a_failed_agent_an_error_before_its_turn_end() -> None:
    chat = span("01", 0, 5, error="rate limited", gen_ai__operation__name="chat", error__type="RateLimitError")
    agent = span("02", 0, 9, error="gave up", gen_ai__operation__name="invoke_agent")
    assert kinds([agent, chat]) == [("error", {"message": "RateLimitError: rate limited", "code": "RateLimitError"}),
                                    ("error", {"message": "gave up"}), ("turn_end", {})]  # fmt: skip


def test_a_nested_agent_span_is_a_sub_agent_spawned_and_exited() -> None:
    child = span("03", 2, 4, parent="02", gen_ai__operation__name="invoke_agent", gen_ai__agent__name="researcher")
    assert kinds([child]) == [("agent_spawn", {"child_agent_id": "researcher"}),
                              ("agent_exit", {"child_agent_id": "researcher", "status": "ok"})]  # fmt: skip


def test_events_come_in_event_time_whatever_order_the_spans_arrive_in_and_ids_are_the_spans() -> None:
    spans = [span("0a", 10, 30, gen_ai__operation__name="execute_tool", gen_ai__tool__name="ls", gen_ai__tool__call__id="c"),
             span("0b", 0, 40, gen_ai__operation__name="invoke_agent")]  # fmt: skip
    forward, backward = map_spans(spans), map_spans(spans[::-1])
    assert [e for _, e in forward.events] == [e for _, e in backward.events]
    assert [e["event_id"] for _, e in forward.events] == [
        f"otel:{'ab' * 16}:0a:call", f"otel:{'ab' * 16}:0a:result", f"otel:{'ab' * 16}:0b:turn_end"]
    assert {e["turn_id"] for _, e in forward.events} == {"ab" * 16}


def test_spans_that_mean_nothing_here_are_unmapped_with_a_reason_each() -> None:
    spans = [span("01", 0, 1), span("02", 0, 1, gen_ai__operation__name="embeddings"),
             span("03", 0, 1, gen_ai__operation__name="execute_tool"),
             Span("ab" * 16, "04", "chat x", 0, 1, attributes={"gen_ai.operation.name": "chat"})]  # fmt: skip
    mapped = map_spans(spans)
    assert mapped.events == []
    reasons = dict(mapped.unmapped)
    assert "no gen_ai.operation.name" in reasons[0] and "'embeddings' is not mapped" in reasons[1]
    assert "no gen_ai.tool.name" in reasons[2] and "no gen_ai.conversation.id" in reasons[3]


def test_a_span_whose_operation_name_is_not_a_string_is_unmapped_not_a_crash() -> None:
    # An OTLP attribute may be an array or a key-value list; the operation is a name.
    spans = [span("01", 0, 1, gen_ai__operation__name=["chat"]), span("02", 0, 1, gen_ai__operation__name={"a": 1})]
    mapped = map_spans(spans)
    assert mapped.events == [] and [i for i, _ in mapped.unmapped] == [0, 1]
    assert all("gen_ai.operation.name" in why for _, why in mapped.unmapped)


def test_an_input_message_whose_role_is_not_a_string_ends_the_new_inputs_instead_of_crashing() -> None:
    history = [{"role": ["user"], "content": "odd"}, {"role": "user", "content": "hi"}]
    assert kinds([span("01", 0, 5, gen_ai__operation__name="chat", gen_ai__input__messages=json.dumps(history))]) == [
        ("message", {"role": "user", "text": "hi"})]


def test_spans_without_a_trace_or_span_id_are_unmapped_so_their_events_ids_cannot_collide() -> None:
    # Two different id-less spans would both be "otel:::turn_end": the second silently a duplicate.
    spans = [Span("", "", "a", 0, 1, attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.conversation.id": "t1"}),
             Span("ab" * 16, "", "b", 0, 1, attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.conversation.id": "t2"})]  # fmt: skip
    mapped = map_spans(spans)
    assert mapped.events == [] and [i for i, _ in mapped.unmapped] == [0, 1]
    assert all("trace id" in why for _, why in mapped.unmapped)


def test_a_chat_span_whose_messages_cannot_be_read_is_unmapped_with_the_reason_never_dropped() -> None:
    spans = [span("01", 0, 5, gen_ai__operation__name="chat", gen_ai__input__messages="[{not json"),
             span("02", 0, 5, gen_ai__operation__name="chat", gen_ai__output__messages="{{{"),
             span("03", 0, 5, gen_ai__operation__name="chat", gen_ai__input__messages=json.dumps({"role": "user", "content": "x"})),
             span("04", 0, 5, gen_ai__operation__name="chat",
                  gen_ai__input__messages=json.dumps([{"role": "user", "content": "readable"}]))]  # fmt: skip
    mapped = map_spans(spans)
    reasons = dict(mapped.unmapped)
    assert sorted(reasons) == [0, 1, 2]
    assert "gen_ai.input.messages that is not a JSON array" in reasons[0]
    assert "gen_ai.output.messages that is not a JSON array" in reasons[1] and "not a JSON array" in reasons[2]
    assert [(i, e["payload"]["text"]) for i, e in mapped.events] == [(3, "readable")]


def test_a_span_without_times_is_unmapped_and_one_that_ends_before_it_starts_keeps_its_result_after_its_call() -> None:
    timeless = Span("ab" * 16, "01", "chat x", 0, 0, attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.conversation.id": "t1"})  # fmt: skip
    skewed = span("02", 5_000, 0, gen_ai__operation__name="execute_tool", gen_ai__tool__name="ls")
    mapped = map_spans([timeless, skewed])
    assert [i for i, _ in mapped.unmapped] == [0] and "no start or no end time" in mapped.unmapped[0][1]
    call, result = (e for _, e in mapped.events)
    assert (call["kind"], result["kind"]) == ("tool_call", "tool_result") and call["ts"] == result["ts"]


def test_an_image_part_of_a_chat_message_is_shown_as_a_marker_as_the_provider_adapters_show_it() -> None:
    history = [{"role": "user", "parts": [{"type": "text", "content": "what is in this?"},
                                          {"type": "blob", "modality": "image", "mime_type": "image/png", "content": "iVBOR"}]},
               {"role": "user", "parts": [{"type": "uri", "modality": "video", "uri": "https://x/v.mp4"}]}]  # fmt: skip
    assert kinds([span("01", 0, 5, gen_ai__operation__name="chat", gen_ai__input__messages=json.dumps(history))]) == [
        ("message", {"role": "user", "text": "what is in this?\n\n[image omitted]"}),
        ("message", {"role": "user", "text": "[video omitted]"})]  # fmt: skip
