"""OpenTelemetry GenAI spans -> events of the wire format (pure: no I/O, no clock).

An OTLP adapter (``agentlog.streams.api.otlp``) decodes protobuf or JSON into ``Span``s;
this module says what each span means for its thread, following the GenAI semantic
conventions:

- ``gen_ai.conversation.id`` is the thread; the trace is the turn (``turn_id``);
- ``execute_tool`` spans are a ``tool_call`` at the span's start and a ``tool_result`` at
  its end, so the pair's latency is the span's duration; status ERROR makes the result an
  ``error`` one;
- chat spans (``chat``, ``text_completion``, ``generate_content``) give the new input
  messages (those after the model's last answer: each chat span re-sends the whole
  history) as messages at the span's start, and the output's text as an assistant message
  at its end; the tool calls a model asks for are taken from the ``execute_tool`` spans,
  which carry their results and real latency; an ERROR status is an ``error`` event;
- a root ``invoke_agent`` span ends the turn (``turn_end`` at its end); a nested one is a
  sub-agent (``agent_spawn`` at its start, ``agent_exit`` at its end).

Anything else is not dropped: ``map_spans`` returns it as unmapped, with the reason, for
the caller to dead-letter. Event ids are derived from the trace and span ids, so an
exporter's retry of the same spans publishes the same events (duplicates change nothing).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

from agentlog.processors.formats.common import marker

CHAT_OPERATIONS = frozenset({"chat", "text_completion", "generate_content"})
INPUT_ROLES = {"user": "user", "system": "system", "developer": "developer"}


@dataclass(frozen=True)
class Span:
    """One span, decoded; ``attributes`` hold plain values (str, int, float, bool, lists,
    dicts), the resource's attributes beneath the span's own."""

    trace_id: str
    span_id: str
    name: str
    start_ns: int
    end_ns: int
    parent_span_id: str = ""
    error: bool = False
    status_message: str = ""
    attributes: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The span as JSON-able data: what a dead letter keeps of it."""
        return {"trace_id": self.trace_id, "span_id": self.span_id, "parent_span_id": self.parent_span_id,
                "name": self.name, "start_time_unix_nano": self.start_ns, "end_time_unix_nano": self.end_ns,
                "status": {"error": self.error, "message": self.status_message},
                "attributes": self.attributes}  # fmt: skip


@dataclass
class Mapped:
    """What a batch of spans became: (span index, event) in event-time order, and the
    spans left unmapped as (span index, reason)."""

    events: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    unmapped: list[tuple[int, str]] = field(default_factory=list)


def rfc3339(ns: int) -> str:
    """Nanoseconds since the epoch as RFC 3339 in UTC, microseconds kept (what the log holds)."""
    seconds, rest = divmod(ns, 1_000_000_000)
    stamp = datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{stamp}.{rest // 1000:06d}Z"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


def _json_value(value: Any) -> Any:
    """An attribute that the conventions record as JSON text, parsed (as given if not JSON)."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


MEDIA_PARTS = frozenset({"blob", "uri", "file", "image"})
"""Parts the conventions give for media: shown as a visible marker, as the provider
adapters show an image (``[image omitted]``), so a context still sees something was shown."""


def _media_marker(part: dict[str, Any]) -> str:
    """``[image omitted]`` for a media part, named after its ``modality`` (image, video, audio)."""
    modality = part.get("modality")
    return marker(modality if isinstance(modality, str) and modality.isalpha() else "file")


def _parts_text(message: dict[str, Any]) -> str:
    """The text parts of a GenAI message (``parts: [{type: text, content}]``), joined, then
    a marker for each media part. Tool calls come from the execute_tool spans; reasoning
    parts are the model's own and left out."""
    parts = message.get("parts")
    if not isinstance(parts, list):
        content = message.get("content")
        return content if isinstance(content, str) else ""
    parts = [p for p in parts if isinstance(p, dict)]
    texts = "".join(c for p in parts if p.get("type") == "text" and isinstance(c := p.get("content"), str))
    media = [_media_marker(p) for p in parts if p.get("type") in MEDIA_PARTS]
    return "\n\n".join(t for t in (texts, *media) if t)


def _messages(value: Any) -> list[dict[str, Any]]:
    found = _json_value(value)
    return [m for m in found if isinstance(m, dict)] if isinstance(found, list) else []


def _new_inputs(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The input messages after the model's last answer or tool result: the new ones."""
    tail: list[dict[str, Any]] = []
    for message in reversed(messages):
        role = message.get("role")
        if not isinstance(role, str) or role not in INPUT_ROLES:  # a hostile role may be unhashable
            break
        tail.append(message)
    return tail[::-1]


class _Builder:
    """Events of one span, sharing its envelope fields."""

    def __init__(self, span: Span, thread_id: str) -> None:
        self.span, self.base = span, f"otel:{span.trace_id}:{span.span_id}"
        self.envelope: dict[str, Any] = {"thread_id": thread_id, "turn_id": span.trace_id}
        for attribute, key in (("agentlog.project", "project"), ("agentlog.agent_id", "agent_id")):
            if isinstance(span.attributes.get(attribute), str):
                self.envelope[key] = span.attributes[attribute]
        self.events: list[dict[str, Any]] = []

    def add(self, suffix: str, kind: str, ns: int, payload: dict[str, Any]) -> None:
        self.events.append({"event_id": f"{self.base}:{suffix}", **self.envelope, "kind": kind,
                            "ts": rfc3339(ns), "payload": payload})  # fmt: skip

    def failure(self) -> str:
        """What an ERROR status says: ``error.type: description`` (either alone if one is missing)."""
        kind = self.span.attributes.get("error.type")
        parts = [str(kind) if kind else "", self.span.status_message]
        return ": ".join(p for p in parts if p) or "error"


def _tool(b: _Builder) -> None:
    attrs, span = b.span.attributes, b.span
    call_id = str(attrs.get("gen_ai.tool.call.id") or span.span_id)
    name = str(attrs["gen_ai.tool.name"])
    arguments = _json_value(attrs.get("gen_ai.tool.call.arguments", {}))
    if not isinstance(arguments, (dict, str)):  # the wire format takes an object or a string
        arguments = _text(arguments)
    b.add("call", "tool_call", span.start_ns, {"call_id": call_id, "tool_name": name, "arguments": arguments})
    result = attrs.get("gen_ai.tool.call.result")
    output = _text(result) if result is not None else (b.failure() if span.error else "")
    b.add("result", "tool_result", span.end_ns, {"call_id": call_id, "output": output, "tool_name": name,
                                                 "status": "error" if span.error else "ok"})  # fmt: skip


def _chat(b: _Builder) -> None:
    attrs, span = b.span.attributes, b.span
    for n, message in enumerate(_new_inputs(_messages(attrs.get("gen_ai.input.messages")))):
        b.add(f"in:{n}", "message", span.start_ns, {"role": INPUT_ROLES[message["role"]], "text": _parts_text(message)})
    if span.error:
        code = attrs.get("error.type")
        b.add("error", "error", span.end_ns, {"message": b.failure(), **({"code": str(code)} if code else {})})
    text = "".join(_parts_text(m) for m in _messages(attrs.get("gen_ai.output.messages")))
    if text:
        b.add("out", "message", span.end_ns, {"role": "assistant", "text": text})


def _agent(b: _Builder) -> None:
    span = b.span
    if not span.parent_span_id:  # the agent's own invocation: its end ends the turn
        if span.error:
            b.add("error", "error", span.end_ns, {"message": b.failure()})
        b.add("turn_end", "turn_end", span.end_ns, {})
        return
    child = str(span.attributes.get("gen_ai.agent.name") or span.attributes.get("gen_ai.agent.id") or span.span_id)
    b.add("spawn", "agent_spawn", span.start_ns, {"child_agent_id": child})
    b.add("exit", "agent_exit", span.end_ns, {"child_agent_id": child, "status": "error" if span.error else "ok"})


def unmapped_reason(span: Span) -> str | None:
    """Why ``span`` maps to no event, or None if it maps."""
    attrs = span.attributes
    operation = attrs.get("gen_ai.operation.name")
    if operation is None:
        return f"otlp_unmapped: span {span.name!r} has no gen_ai.operation.name (not a GenAI span)"
    if not isinstance(operation, str):  # an OTLP array or key-value list: not a name (nor hashable)
        return f"otlp_unmapped: span {span.name!r} has a gen_ai.operation.name that is not a string"
    if not span.trace_id or not span.span_id:  # the event ids are made of them: id-less spans would collide
        return f"otlp_unmapped: {operation} span {span.name!r} has no trace id or no span id"
    if not isinstance(attrs.get("gen_ai.conversation.id"), str):
        return f"otlp_unmapped: {operation} span {span.name!r} has no gen_ai.conversation.id (the thread)"
    if operation == "execute_tool" and not attrs.get("gen_ai.tool.name"):
        return f"otlp_unmapped: execute_tool span {span.name!r} has no gen_ai.tool.name"
    if operation not in CHAT_OPERATIONS and operation not in ("execute_tool", "invoke_agent"):
        return f"otlp_unmapped: gen_ai.operation.name {operation!r} is not mapped to events"
    if operation in CHAT_OPERATIONS:
        for attribute in ("gen_ai.input.messages", "gen_ai.output.messages"):
            if attribute in attrs and not isinstance(_json_value(attrs[attribute]), list):
                return f"otlp_unmapped: {operation} span {span.name!r} has a {attribute} that is not a JSON array of messages"
    if span.start_ns <= 0 or span.end_ns <= 0:  # OTLP's zero: not set (the events would be dated 1970)
        return f"otlp_unmapped: {operation} span {span.name!r} has no start or no end time"
    return None


def map_spans(spans: list[Span]) -> Mapped:
    """Every span's events (sorted by event time, then by span order), or its reason."""
    mapped = Mapped()
    timed: list[tuple[str, int, int, dict[str, Any]]] = []
    for index, span in enumerate(spans):
        reason = unmapped_reason(span)
        if reason is not None:
            mapped.unmapped.append((index, reason))
            continue
        if span.end_ns < span.start_ns:  # a skewed clock: the result never comes before its call
            span = replace(span, end_ns=span.start_ns)
        b = _Builder(span, span.attributes["gen_ai.conversation.id"])
        operation = span.attributes["gen_ai.operation.name"]
        {"execute_tool": _tool, "invoke_agent": _agent}.get(operation, _chat)(b)
        timed += [(event["ts"], index, n, event) for n, event in enumerate(b.events)]
    # Spans arrive as they end (a parent after its children); a thread reads in event time.
    mapped.events = [(index, event) for _ts, index, _n, event in sorted(timed, key=lambda t: t[:3])]
    return mapped


__all__ = ["CHAT_OPERATIONS", "Mapped", "Span", "map_spans", "rfc3339", "unmapped_reason"]
