"""One scripted agent run, told three ways (issue 16's comparison): the user asks, the
model calls two tools (one fails), the model answers. ``run_langchain`` drives it as a
real langchain-core loop with a fake chat model, ``run_otel`` as OpenTelemetry GenAI
spans from the real SDK, ``hand_events`` as the events a producer would publish itself."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone
from typing import Any

QUESTION = "What is the weather in Paris, and what is in notes.txt?"
ANSWER = "It is sunny in Paris; notes.txt does not exist."
CALLS = (("call_1", "get_weather", {"city": "Paris"}), ("call_2", "read_file", {"path": "notes.txt"}))
TOOL_SECONDS = 0.03
"""How long get_weather works: the latency every path must measure, at least."""


def get_weather(city: str) -> str:
    """The weather in a city."""
    time.sleep(TOOL_SECONDS)
    return f"sunny in {city}"


def read_file(path: str) -> str:
    """A file's text."""
    raise FileNotFoundError(f"no such file: {path}")


TOOLS = {"get_weather": get_weather, "read_file": read_file}


def run_tool(name: str, args: dict[str, Any]) -> tuple[str, bool]:
    """(output, failed): an exception's output is ``Type: message``, as each path says it."""
    try:
        return TOOLS[name](**args), False
    except Exception as error:  # noqa: BLE001 - the failing tool is the point
        return f"{type(error).__name__}: {error}", True


def run_langchain(handler: Any, thread_id: str) -> str:
    """The run as a langchain-core loop: a fake chat model, real ``@tool`` tools."""
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: PLC0415
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage  # noqa: PLC0415
    from langchain_core.runnables import RunnableConfig, RunnableLambda  # noqa: PLC0415
    from langchain_core.tools import tool  # noqa: PLC0415

    tools = {name: tool(fn) for name, fn in TOOLS.items()}
    model = GenericFakeChatModel(messages=iter([
        AIMessage(content="", tool_calls=[{"name": n, "args": a, "id": c} for c, n, a in CALLS]),
        AIMessage(content=ANSWER),
    ]))  # fmt: skip

    def agent(question: str, config: RunnableConfig) -> str:
        messages: list[Any] = [HumanMessage(question)]
        while True:
            answer = model.invoke(messages, config)
            messages.append(answer)
            if not answer.tool_calls:
                return str(answer.content)
            for call in answer.tool_calls:
                try:
                    messages.append(tools[call["name"]].invoke(call, config))
                except Exception as error:  # noqa: BLE001 - the model is told, the loop goes on
                    messages.append(ToolMessage(f"{type(error).__name__}: {error}", tool_call_id=call["id"],
                                                status="error"))  # fmt: skip

    return RunnableLambda(agent).invoke(QUESTION, {"callbacks": [handler], "metadata": {"thread_id": thread_id}})


def run_otel(tracer: Any, thread_id: str) -> None:
    """The run as GenAI spans: invoke_agent around two chat spans and the tool spans."""
    from opentelemetry.trace import Status, StatusCode  # noqa: PLC0415

    conv = {"gen_ai.conversation.id": thread_id}
    user = {"role": "user", "parts": [{"type": "text", "content": QUESTION}]}
    asked = {"role": "assistant", "parts": [{"type": "tool_call", "id": c, "name": n, "arguments": a} for c, n, a in CALLS]}
    with tracer.start_as_current_span("invoke_agent weather", attributes={**conv, "gen_ai.operation.name": "invoke_agent"}):
        with tracer.start_as_current_span("chat fake", attributes={**conv, "gen_ai.operation.name": "chat"}) as span:
            span.set_attribute("gen_ai.input.messages", json.dumps([user]))
            span.set_attribute("gen_ai.output.messages", json.dumps([asked]))
        replies = []
        for call_id, name, args in CALLS:
            with tracer.start_as_current_span(f"execute_tool {name}", attributes={
                    **conv, "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                    "gen_ai.tool.call.id": call_id, "gen_ai.tool.call.arguments": json.dumps(args)}) as span:  # fmt: skip
                try:
                    output = TOOLS[name](**args)
                    span.set_attribute("gen_ai.tool.call.result", output)
                except Exception as error:  # noqa: BLE001
                    output = f"{type(error).__name__}: {error}"
                    span.set_attribute("error.type", type(error).__name__)
                    span.set_status(Status(StatusCode.ERROR, str(error)))
            replies.append({"role": "tool", "parts": [{"type": "tool_call_response", "id": call_id, "response": output}]})
        with tracer.start_as_current_span("chat fake", attributes={**conv, "gen_ai.operation.name": "chat"}) as span:
            span.set_attribute("gen_ai.input.messages", json.dumps([user, asked, *replies]))
            span.set_attribute("gen_ai.output.messages", json.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": ANSWER}], "finish_reason": "stop"}]))


def hand_events(thread_id: str) -> list[dict[str, Any]]:
    """The same run published by hand, each tool timed as it runs."""
    clock = datetime.now(timezone.utc)

    def event(n: int, kind: str, payload: dict[str, Any], at: datetime) -> dict[str, Any]:
        return {"event_id": f"hand-{thread_id}-{n}", "thread_id": thread_id, "kind": kind, "turn_id": "turn-1",
                "ts": at.isoformat().replace("+00:00", "Z"), "payload": payload}  # fmt: skip

    events = [event(0, "message", {"role": "user", "text": QUESTION}, clock)]
    for call_id, name, args in CALLS:
        start = datetime.now(timezone.utc)
        output, failed = run_tool(name, args)
        end = max(datetime.now(timezone.utc), start + timedelta(microseconds=1))
        events.append(event(len(events), "tool_call", {"call_id": call_id, "tool_name": name, "arguments": args}, start))
        events.append(event(len(events), "tool_result", {"call_id": call_id, "output": output, "tool_name": name,
                                                        "status": "error" if failed else "ok"}, end))  # fmt: skip
    done = datetime.now(timezone.utc)
    events.append(event(len(events), "message", {"role": "assistant", "text": ANSWER}, done))
    events.append(event(len(events), "turn_end", {}, done + timedelta(microseconds=1)))
    return events
