"""Issue 16, items 4 and 5: a LangChain callback handler and OpenTelemetry GenAI ingest
(``POST /v1/traces``), both against a running ``agentlog run`` (with an API token). The
bar: for the same scripted agent run, each gives the same thread state and ``tool_calls``
rows as publishing the equivalent events by hand."""

from __future__ import annotations

import gzip
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("opentelemetry.sdk")

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # noqa: E402
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse  # noqa: E402
from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: E402

from agentlog.integrations.langchain import AgentlogCallbackHandler  # noqa: E402
from agentlog.streams.api.client import RemoteService  # noqa: E402
from tests import scripted_agent as script  # noqa: E402
from tests.client_server import Server  # noqa: E402
from tests.conftest import free_port  # noqa: E402

TOKEN = "otlp-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
JSON_TYPE = {**AUTH, "Content-Type": "application/json"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One ``agentlog run`` for the module (each test uses threads of its own)."""
    running = Server(tmp_path_factory.mktemp("otlp") / "data", free_port(), token=TOKEN).start()
    yield running.url
    running.stop()


@pytest.fixture(scope="module")
def remote(server: str) -> Iterator[RemoteService]:
    svc = RemoteService(server, TOKEN)
    yield svc
    svc.close()


def rows(remote: RemoteService, statement: str) -> list[dict[str, Any]]:
    result = remote.sql(statement)
    return [dict(zip(result.columns, row)) for row in result.rows]


def tool_calls(remote: RemoteService, thread: str) -> list[dict[str, Any]]:
    remote.catch_up()
    return rows(remote, f"SELECT * FROM tool_calls FINAL WHERE thread_id = '{thread}' ORDER BY call_id")


def events(remote: RemoteService, thread: str) -> list[dict[str, Any]]:
    found = rows(remote, f"SELECT event_id, kind, payload, turn_id FROM events WHERE thread_id = '{thread}' "
                         "ORDER BY ts, event_id")  # fmt: skip
    return [{**r, "payload": json.loads(r["payload"])} for r in found]


def tracer_to(server: str, headers: dict[str, str] = AUTH) -> tuple[Any, TracerProvider]:
    provider = TracerProvider(resource=Resource.create({"service.name": "scripted-agent"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{server}/v1/traces", headers=headers)))
    return provider.get_tracer("tests.scripted_agent"), provider


def export(server: str, thread: str) -> None:
    tracer, provider = tracer_to(server)
    script.run_otel(tracer, thread)
    assert provider.force_flush(30_000)
    provider.shutdown()


def run_langchain(remote: RemoteService, thread: str) -> list[bytes]:
    """The scripted LangChain run; the bodies the handler published, in order."""
    sent: list[bytes] = []

    class Recording:
        def publish(self, data: bytes) -> Any:
            sent.append(data)
            return remote.publish(data)

    assert script.run_langchain(AgentlogCallbackHandler(Recording()), thread) == script.ANSWER
    return sent


def otlp_json(*spans: dict[str, Any]) -> bytes:
    return orjson.dumps({"resourceSpans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "hand"}}]}, "scopeSpans": [{"spans": list(spans)}]}]})


def attr(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return {"key": key, "value": {"kvlistValue": {"values": [attr(k, v) for k, v in value.items()]}}}
    typed = {str: "stringValue", bool: "boolValue", int: "intValue", float: "doubleValue"}[type(value)]
    return {"key": key, "value": {typed: str(value) if typed == "intValue" else value}}


def span(span_id: str, start_ms: int, end_ms: int, *, error: str | None = None, **attributes: Any) -> dict[str, Any]:
    t0 = 1_780_000_000_000
    return {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": span_id, "name": "span",
            "startTimeUnixNano": str((t0 + start_ms) * 1_000_000), "endTimeUnixNano": str((t0 + end_ms) * 1_000_000),
            "attributes": [attr(k.replace("__", "."), v) for k, v in attributes.items()],
            **({"status": {"code": 2, "message": error}} if error else {})}  # fmt: skip


# -- the LangChain handler -------------------------------------------------------------


def test_the_langchain_handler_publishes_a_real_agent_loop_as_messages_calls_results_and_a_turn_end(
    remote: RemoteService,
) -> None:
    sent = run_langchain(remote, "lc-loop")
    found = events(remote, "lc-loop")
    assert [(e["kind"], e["payload"].get("role") or e["payload"].get("call_id")) for e in found] == [
        ("message", "user"), ("tool_call", "call_1"), ("tool_result", "call_1"), ("tool_call", "call_2"),
        ("tool_result", "call_2"), ("message", "assistant"), ("turn_end", None)]  # fmt: skip
    assert found[1]["payload"]["arguments"] == {"city": "Paris"}  # the model's own arguments
    assert len({e["turn_id"] for e in found}) == 1  # the outermost run is the turn
    pairs = {r["call_id"]: r for r in tool_calls(remote, "lc-loop")}
    assert pairs["call_1"]["status"] == "ok" and pairs["call_1"]["latency_ms"] >= script.TOOL_SECONDS * 1000
    assert pairs["call_2"]["status"] == "error" and not pairs["call_2"]["synthetic"]
    # Ids come from LangChain's run ids: the same callbacks delivered again change nothing.
    again = [remote.publish(body) for body in sent]
    assert sum(r.rejected for r in again) == 0
    remote.catch_up()
    assert remote.state("lc-loop")["event_count"] == 7


def test_a_call_the_model_asked_for_but_never_ran_gets_a_synthetic_result_at_the_turns_end(
    remote: RemoteService,
) -> None:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.runnables import RunnableLambda

    model = GenericFakeChatModel(messages=iter([AIMessage(content="", tool_calls=[
        {"name": "deploy", "args": {"env": "prod"}, "id": "call_never"}])]))  # fmt: skip
    handler = AgentlogCallbackHandler(remote, thread_id="lc-unrun")
    RunnableLambda(lambda q, config: model.invoke(q, config)).invoke("deploy it", {"callbacks": [handler]})
    [pair] = tool_calls(remote, "lc-unrun")
    assert (pair["call_id"], pair["tool_name"], pair["status"], pair["synthetic"]) == ("call_never", "deploy", "missing", True)


# -- OTLP ------------------------------------------------------------------------------


def test_the_otel_sdks_exporter_sends_genai_spans_that_become_calls_with_their_span_latency(
    server: str, remote: RemoteService,
) -> None:
    export(server, "otel-sdk")
    pairs = {r["call_id"]: r for r in tool_calls(remote, "otel-sdk")}
    assert pairs["call_1"]["status"] == "ok" and pairs["call_1"]["latency_ms"] >= script.TOOL_SECONDS * 1000
    assert pairs["call_2"]["status"] == "error"
    kinds = [e["kind"] for e in events(remote, "otel-sdk")]
    assert kinds == ["message", "tool_call", "tool_result", "tool_call", "tool_result", "message", "turn_end"]


def test_an_exporter_that_compresses_as_the_collectors_otlphttp_does_by_default_is_understood(
    server: str, remote: RemoteService,
) -> None:
    from opentelemetry.exporter.otlp.proto.http import Compression

    for compression in (Compression.Gzip, Compression.Deflate):
        thread = f"otel-{compression.value}"
        provider = TracerProvider(resource=Resource.create({"service.name": "scripted-agent"}))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(
            endpoint=f"{server}/v1/traces", headers=AUTH, compression=compression)))  # fmt: skip
        script.run_otel(provider.get_tracer("tests.scripted_agent"), thread)
        assert provider.force_flush(30_000)
        provider.shutdown()
        kinds = [e["kind"] for e in events(remote, thread)]
        assert kinds == ["message", "tool_call", "tool_result", "tool_call", "tool_result", "message", "turn_end"], thread
    # Decompressed, a body is bounded as a plain one is; an encoding not spoken is said.
    bomb = gzip.compress(b"\0" * (64 * 1024 * 1024 + 1))
    answer = httpx.post(f"{server}/v1/traces", content=bomb, headers={**JSON_TYPE, "Content-Encoding": "gzip"})
    assert answer.status_code == 413 and "limit" in answer.json()["error"], answer.text
    answer = httpx.post(f"{server}/v1/traces", content=otlp_json(), headers={**JSON_TYPE, "Content-Encoding": "br"})
    assert answer.status_code == 415 and "gzip" in answer.json()["error"], answer.text
    answer = httpx.post(f"{server}/v1/traces", content=b"not gzip", headers={**JSON_TYPE, "Content-Encoding": "gzip"})
    assert answer.status_code == 400 and "gzip" in answer.json()["error"], answer.text


def test_an_otlp_json_post_maps_spans_and_keeps_an_unknown_span_as_a_rejection_with_its_reason(
    server: str, remote: RemoteService,
) -> None:
    body = otlp_json(
        span("00000000000000a1", 0, 120, gen_ai__operation__name="execute_tool", gen_ai__conversation__id="otel-json",
             gen_ai__tool__name="pytest", gen_ai__tool__call__id="c9", gen_ai__tool__call__arguments='{"k": "login"}',
             gen_ai__tool__call__result="1 passed"),
        span("00000000000000a2", 200, 250, error="exit 2", gen_ai__operation__name="execute_tool",
             gen_ai__conversation__id="otel-json", gen_ai__tool__name="ruff", error__type="CalledProcessError"),
        span("00000000000000a3", 0, 5, http__method="GET"),
    )  # fmt: skip
    answer = httpx.post(f"{server}/v1/traces", content=body, headers=JSON_TYPE)
    assert answer.status_code == 200, answer.text
    partial = answer.json()["partialSuccess"]
    assert partial["rejectedSpans"] == "1" and "no gen_ai.operation.name" in partial["errorMessage"]
    pairs = {r["call_id"]: r for r in tool_calls(remote, "otel-json")}
    assert (pairs["c9"]["status"], pairs["c9"]["latency_ms"]) == ("ok", 120)
    failed = pairs["00000000000000a2"]  # no gen_ai.tool.call.id: the span id is the call's
    assert (failed["status"], failed["latency_ms"]) == ("error", 50)
    assert remote.read(failed["result_event_id"])["event"]["payload"]["output"] == "CalledProcessError: exit 2"
    [dead] = rows(remote, "SELECT reason, raw FROM rejected_events WHERE position(raw, '00000000000000a3') > 0")
    assert dead["reason"].startswith("otlp_unmapped") and json.loads(dead["raw"])["otlp_span"]["attributes"] == {
        "service.name": "hand", "http.method": "GET"}
    # An exporter's retry of the same spans publishes the same events: nothing changes.
    again = httpx.post(f"{server}/v1/traces", content=body, headers=JSON_TYPE).json()
    assert again["partialSuccess"]["rejectedSpans"] == "1"  # only the unknown span, again
    remote.catch_up()
    assert remote.state("otel-json")["event_count"] == 4


def test_a_protobuf_answer_is_an_export_trace_service_response_with_partial_success(server: str) -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest()
    s = request.resource_spans.add().scope_spans.add().spans.add()
    s.trace_id, s.span_id, s.name = bytes(range(16)), bytes(range(8)), "db.query"
    answer = httpx.post(f"{server}/v1/traces", content=request.SerializeToString(),
                        headers={**AUTH, "Content-Type": "application/x-protobuf"})  # fmt: skip
    assert answer.status_code == 200 and answer.headers["content-type"] == "application/x-protobuf"
    decoded = ExportTraceServiceResponse.FromString(answer.content)
    assert decoded.partial_success.rejected_spans == 1 and "db.query" in decoded.partial_success.error_message


def test_hostile_otlp_bodies_get_a_clear_4xx_lose_nothing_and_the_next_request_works(
    server: str, remote: RemoteService,
) -> None:
    before = rows(remote, "SELECT count() AS n FROM events")[0]["n"]
    protobuf = {**AUTH, "Content-Type": "application/x-protobuf"}
    cases = [
        (b"\x0a\xff\xff\xff\xff\x0f", protobuf, 400, "does not decode"),
        (_deep_protobuf(200), protobuf, 400, "does not decode"),  # deeper than protobuf parses
        (_deep_protobuf(30), protobuf, 400, "nests deeper"),  # parses, but deeper than attributes go
        (otlp_json(), {**AUTH, "Content-Type": "text/plain"}, 415, "application/x-protobuf"),
        (b"[" * 5000 + b"]" * 5000, JSON_TYPE, 400, "does not parse"),
        (orjson.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span("00000000000000b1", 0, 1, gen_ai__operation__name="chat",
                gen_ai__conversation__id="deep", x=_nested(30))]}]}]}), JSON_TYPE, 400, "nests deeper"),  # fmt: skip
        (otlp_json(span("zz", 0, 1)), JSON_TYPE, 400, "spanId"),
        (otlp_json(), {"Content-Type": "application/json"}, 401, "token"),
    ]
    for body, headers, status, says in cases:
        answer = httpx.post(f"{server}/v1/traces", content=body, headers=headers)
        assert answer.status_code == status and says in answer.json()["error"], (status, says, answer.text)
    # A huge tool result: the span's event would pass the event size limit, so its biggest
    # field is cut to fit, with a marker saying so (as the Python client does): the call
    # keeps its result. An unmapped huge span is dead-lettered, bounded, and OTLP is told.
    huge = otlp_json(
        span("00000000000000c1", 0, 1, gen_ai__operation__name="execute_tool", gen_ai__conversation__id="otel-huge",
             gen_ai__tool__name="cat", gen_ai__tool__call__result="x" * (2 * 1024 * 1024)),
        span("00000000000000c2", 0, 1, gen_ai__operation__name="execute_tool", gen_ai__conversation__id="otel-huge",
             gen_ai__tool__name="ls", gen_ai__tool__call__result="ok"),
        span("00000000000000c3", 0, 1, http__body="y" * (2 * 1024 * 1024)),  # unmapped, and huge
    )  # fmt: skip
    answer = httpx.post(f"{server}/v1/traces", content=huge, headers=JSON_TYPE)
    assert answer.status_code == 200 and answer.json()["partialSuccess"]["rejectedSpans"] == "1", answer.text
    assert "otlp_unmapped" in answer.json()["partialSuccess"]["errorMessage"]
    assert httpx.post(f"{server}/v1/traces", content=otlp_json(), headers=JSON_TYPE).json() == {}
    remote.catch_up()
    assert rows(remote, "SELECT count() AS n FROM events")[0]["n"] == before + 4  # both calls and both results
    assert sorted((r["tool_name"], r["status"]) for r in tool_calls(remote, "otel-huge")) == [("cat", "ok"), ("ls", "ok")]
    [cut] = rows(remote, "SELECT length(raw) AS n, JSONExtractString(payload, 'output') AS output FROM events "
                         "WHERE thread_id = 'otel-huge' AND kind = 'tool_result' AND position(raw, 'xxxx') > 0")  # fmt: skip
    assert cut["n"] <= 1024 * 1024 and cut["output"].startswith("x" * 1000)
    assert f"bytes cut to fit the event size limit of {1024 * 1024} bytes]" in cut["output"]
    assert "agentlog's OTLP ingest" in cut["output"]
    [letter] = rows(remote, "SELECT reason, length(raw) AS n FROM rejected_events WHERE position(raw, '00000000000000c3') > 0")
    assert letter["reason"].startswith("otlp_unmapped") and "kept the first" in letter["reason"]
    assert letter["n"] == 1024 * 1024  # a dead letter is bounded as an oversized event is


def test_a_span_time_beyond_otlps_unsigned_64_bit_nanoseconds_is_a_clear_400(server: str) -> None:
    # A time OTLP's fixed64 cannot hold: refused as the request's fault, not a 500 (or a
    # "year out of range") when the span is dead-lettered or its time is rendered.
    for start in ("1" + "0" * 30, 1e30, "-5"):
        unmapped = {**span("00000000000000d1", 0, 1), "startTimeUnixNano": start}
        answer = httpx.post(f"{server}/v1/traces", content=otlp_json(unmapped), headers=JSON_TYPE)
        assert answer.status_code == 400 and "startTimeUnixNano" in answer.json()["error"], (start, answer.text)


def test_an_int_attribute_beyond_otlps_int64_is_a_clear_400(server: str) -> None:
    # OTLP's intValue is an int64; a bigger one cannot be kept as JSON (the dead letter).
    for value in ("9" * 30, "-" + "9" * 30):
        unmapped = {**span("00000000000000d2", 0, 1), "attributes": [{"key": "n", "value": {"intValue": value}}]}
        answer = httpx.post(f"{server}/v1/traces", content=otlp_json(unmapped), headers=JSON_TYPE)
        assert answer.status_code == 400 and "intValue" in answer.json()["error"], (value, answer.text)


def _deep_protobuf(depth: int) -> bytes:
    """An export whose one attribute is key-value lists nested ``depth`` deep."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest()
    s = request.resource_spans.add().scope_spans.add().spans.add()
    s.trace_id, s.span_id = bytes(range(16)), bytes(range(8))
    pair = s.attributes.add()
    pair.key, value = "x", pair.value
    for _ in range(depth):
        pair = value.kvlist_value.values.add()
        pair.key, value = "k", pair.value
    value.string_value = "leaf"
    return request.SerializeToString()


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": "x"}
    for _ in range(depth):
        value = {"k": value}
    return value


# -- the bar: three ways to tell one run, one result ----------------------------------

ID_KEYS = {"event_id", "last_event_id", "latest_user_message_id", "call_event_id", "result_event_id"}
"""Event ids: each path derives its own (LangChain run ids, OTel span ids, the hand's
choice); what they point at is compared through the events themselves."""
TIME_KEYS = {"ts", "last_ts", "newest_ts", "latest_user_message_ts", "call_ts", "result_ts", "updated_at"}
"""Event times are each run's wall clock (the three runs happen one after another)."""
OTHER_KEYS = {
    "thread_id",  # three threads in one server, by construction
    "turn_id",  # each path's own turn: the outermost run's id, the trace id, the hand's "turn-1"
    "version",  # a row version is a position in the shared topic, not a property of the run
    "latency_ms",  # the real duration of each run's tools; checked apart, not equal to the microsecond
}


def normalised(value: Any) -> Any:
    """``value`` with the fields that must differ between paths (above) replaced by a mark."""
    if isinstance(value, dict):
        return {k: f"<{k}>" if k in ID_KEYS | TIME_KEYS | OTHER_KEYS and v is not None else normalised(v)
                for k, v in value.items()}  # fmt: skip
    if isinstance(value, list):
        return [normalised(v) for v in value]
    return value


def test_langchain_and_otlp_give_the_same_state_and_tool_calls_rows_as_the_events_published_by_hand(
    server: str, remote: RemoteService,
) -> None:
    remote.publish(b"\n".join(orjson.dumps(e) for e in script.hand_events("same-hand")))
    run_langchain(remote, "same-lc")
    export(server, "same-otel")
    threads = ("same-hand", "same-lc", "same-otel")
    pairs = {t: tool_calls(remote, t) for t in threads}
    states = {t: remote.state(t) for t in threads}
    logged = {t: [(e["kind"], e["payload"]) for e in events(remote, t)] for t in threads}
    for thread in threads:
        assert len(pairs[thread]) == 2 and states[thread]["event_count"] == 7, thread
        # Each path measured the tool's real time, not a stand-in.
        assert pairs[thread][0]["latency_ms"] >= script.TOOL_SECONDS * 1000, thread
        assert normalised(pairs[thread]) == normalised(pairs["same-hand"]), thread
        assert normalised(states[thread]) == normalised(states["same-hand"]), thread
        assert logged[thread] == logged["same-hand"], thread  # every event's kind and payload, in order
    # The normalised fields still say the same things, each in its own path's terms.
    for thread in threads:
        state, calls = states[thread], pairs[thread]
        assert state["latest_user_message_id"] == next(e["event_id"] for e in events(remote, thread) if e["kind"] == "message")
        assert state["failures"][0]["event_id"] == calls[1]["result_event_id"]
        assert len({c["turn_id"] for c in calls}) == 1


def test_on_kafka_the_handler_and_the_otlp_ingest_publish_to_the_topic_and_dead_letter_with_the_reason(
    kafka_bootstrap: str, tmp_path: Path,
) -> None:
    from agentlog.streams.api.otlp import ingest
    from agentlog.streams.config import Settings
    from agentlog.streams.kafka.publisher import KafkaPublisher
    from agentlog.streams.kafka.topics import DLQ, EVENTS, topic
    from tests.test_poison_kafka import consume

    namespace = f"hooks{uuid.uuid4().hex[:8]}"
    publisher = KafkaPublisher(Settings(data_dir=tmp_path, kafka_bootstrap=kafka_bootstrap, kafka_namespace=namespace))
    try:
        assert script.run_langchain(AgentlogCallbackHandler(publisher), "kafka-lc") == script.ANSWER
        body = otlp_json(span("00000000000000d1", 0, 40, gen_ai__operation__name="execute_tool",
                              gen_ai__conversation__id="kafka-otel", gen_ai__tool__name="ls"),
                         span("00000000000000d2", 0, 1, db__system="sqlite"))  # fmt: skip
        assert ingest(publisher, body, "application/json")[0] == 1
    finally:
        publisher.close()
    published = [orjson.loads(v) for v, _ in consume(kafka_bootstrap, topic(EVENTS, namespace))]
    assert [e["kind"] for e in published if e["thread_id"] == "kafka-lc"] == [
        "message", "tool_call", "tool_result", "tool_call", "tool_result", "message", "turn_end"]  # fmt: skip
    assert [e["kind"] for e in published if e["thread_id"] == "kafka-otel"] == ["tool_call", "tool_result"]
    [(letter, headers)] = consume(kafka_bootstrap, topic(DLQ, namespace))
    assert orjson.loads(letter)["otlp_span"]["span_id"] == "00000000000000d2"
    assert headers["reason"].decode().startswith("otlp_unmapped: span 'span' has no gen_ai.operation.name")


def test_a_model_and_a_tool_called_alone_are_published_and_leave_nothing_behind_in_the_handler(
    remote: RemoteService,
) -> None:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool

    handler = AgentlogCallbackHandler(remote, thread_id="lc-alone")
    model = GenericFakeChatModel(messages=iter([AIMessage(content="", tool_calls=[
        {"name": "get_weather", "args": {"city": "Oslo"}, "id": "call_o"}])]))  # fmt: skip
    answer = model.invoke("weather in Oslo?", {"callbacks": [handler]})
    tool(script.get_weather).invoke(answer.tool_calls[0], {"callbacks": [handler]})
    [pair] = tool_calls(remote, "lc-alone")
    assert (pair["call_id"], pair["tool_name"], pair["status"]) == ("call_o", "get_weather", "ok")
    assert handler._runs == {} and handler._turns == {}  # a long-lived handler does not grow


def test_an_event_the_deployment_refuses_is_logged_with_its_thread_and_reason_not_dropped_in_silence(
    remote: RemoteService, caplog: pytest.LogCaptureFixture,
) -> None:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    handler = AgentlogCallbackHandler(remote, thread_id="ada@example.com")  # not an id agentlog takes
    model = GenericFakeChatModel(messages=iter([AIMessage(content="hello")]))
    with caplog.at_level("WARNING", logger="agentlog.integrations.langchain"):
        model.invoke("hi", {"callbacks": [handler]})
    refused = [r.getMessage() for r in caplog.records if r.name == "agentlog.integrations.langchain"]
    assert refused and all("ada@example.com" in m for m in refused), refused


def test_a_langgraph_agent_is_published_under_its_own_thread_id_with_its_parallel_tool_calls(
    remote: RemoteService,
) -> None:
    pytest.importorskip("langgraph")  # the bench extra, which CI installs
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    model = GenericFakeChatModel(messages=iter([
        AIMessage(content="", tool_calls=[{"name": n, "args": a, "id": c} for c, n, a in script.CALLS]),
        AIMessage(content=script.ANSWER)]))  # fmt: skip
    graph = StateGraph(MessagesState)
    graph.add_node("model", lambda state: {"messages": [model.invoke(state["messages"])]})
    graph.add_node("tools", ToolNode([tool(f) for f in script.TOOLS.values()], handle_tool_errors=True))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    handler = AgentlogCallbackHandler(remote)  # no thread of its own: LangGraph's names it
    graph.compile().invoke({"messages": [("user", script.QUESTION)]},
                           {"callbacks": [handler], "configurable": {"thread_id": "lg-graph"}})  # fmt: skip
    pairs = {r["call_id"]: (r["tool_name"], r["status"], r["synthetic"]) for r in tool_calls(remote, "lg-graph")}
    assert pairs == {"call_1": ("get_weather", "ok", False), "call_2": ("read_file", "error", False)}
    kinds = [e["kind"] for e in events(remote, "lg-graph")]
    assert (kinds[0], kinds[-2:], sorted(kinds[1:-2])) == (
        "message", ["message", "turn_end"], ["tool_call", "tool_call", "tool_result", "tool_result"])
    assert handler._runs == {} and handler._turns == {}
