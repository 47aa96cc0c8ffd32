"""OTLP/HTTP trace ingest (``POST /v1/traces``): decode an ``ExportTraceServiceRequest``
(protobuf, ``application/x-protobuf``, or the OTLP JSON mapping, ``application/json``:
hex ids, camelCase fields, ``AnyValue`` objects) into spans, map them with
``agentlog.processors.otel_genai`` and publish the events through the service's ``publish``,
the same validation as ``POST /events``; spans that map to nothing are dead-lettered with
their reason. The answer is an ``ExportTraceServiceResponse`` in the request's encoding,
its ``partial_success`` counting the spans not (wholly) accepted.
"""

from __future__ import annotations

import base64
import zlib
from collections.abc import Iterable
from typing import Any

import orjson
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Status

from agentlog.processors.fitting import fit
from agentlog.processors.otel_genai import Span, map_spans
from agentlog.schemas.events import MAX_EVENT_BYTES
from agentlog.schemas.requests import RequestError
from agentlog.streams.api.guard import too_large
from agentlog.streams.api.service import Service

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
MAX_DEPTH = 16
"""How deep an attribute's arrays and key-value lists may nest: GenAI attributes are flat
or hold messages' JSON as a string; deeper is refused (400) rather than walked."""
_ERROR_CODES = (Status.STATUS_CODE_ERROR, "STATUS_CODE_ERROR")


def _refuse(message: str) -> RequestError:
    return RequestError(400, f"not an OTLP trace export: {message}")


# -- protobuf --------------------------------------------------------------------------


def _pb_value(value: AnyValue, depth: int = 0) -> Any:
    if depth > MAX_DEPTH:
        raise _refuse(f"an attribute nests deeper than {MAX_DEPTH} levels")
    which = value.WhichOneof("value")
    if which == "array_value":
        return [_pb_value(v, depth + 1) for v in value.array_value.values]
    if which == "kvlist_value":
        return _pb_attributes(value.kvlist_value.values, depth + 1)
    if which == "bytes_value":
        return base64.b64encode(value.bytes_value).decode()
    return getattr(value, which) if which else None


def _pb_attributes(pairs: Iterable[KeyValue], depth: int = 0) -> dict[str, Any]:
    return {kv.key: _pb_value(kv.value, depth) for kv in pairs}


def spans_of_protobuf(body: bytes) -> list[Span]:
    try:
        request = ExportTraceServiceRequest.FromString(body)
    except (DecodeError, RuntimeError, ValueError) as error:  # upb: DecodeError; depth: RuntimeError
        raise _refuse(f"the protobuf body does not decode ({error})") from None
    spans: list[Span] = []
    for resource_spans in request.resource_spans:
        resource = _pb_attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for s in scope_spans.spans:
                spans.append(Span(
                    trace_id=s.trace_id.hex(), span_id=s.span_id.hex(), parent_span_id=s.parent_span_id.hex(),
                    name=s.name, start_ns=s.start_time_unix_nano, end_ns=s.end_time_unix_nano,
                    error=s.status.code == Status.STATUS_CODE_ERROR, status_message=s.status.message,
                    attributes={**resource, **_pb_attributes(s.attributes)},
                ))  # fmt: skip
    return spans


# -- JSON (the OTLP JSON mapping) ------------------------------------------------------


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _refuse(f"{what} must be an object")
    return value


def _list(value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _refuse(f"{what} must be an array")
    return value


def _json_value(value: Any, depth: int = 0) -> Any:
    if depth > MAX_DEPTH:
        raise _refuse(f"an attribute nests deeper than {MAX_DEPTH} levels")
    value = _object(value, "an attribute value (AnyValue)")
    if "arrayValue" in value:
        items = _list(_object(value["arrayValue"], "arrayValue").get("values"), "arrayValue.values")
        return [_json_value(v, depth + 1) for v in items]
    if "kvlistValue" in value:
        return _json_attributes(_object(value["kvlistValue"], "kvlistValue").get("values"), depth + 1)
    if "intValue" in value:  # int64 travels as a string in JSON
        try:
            number = int(value["intValue"])
        except (TypeError, ValueError, OverflowError):
            raise _refuse(f"intValue {str(value['intValue'])[:40]!r} is not an integer") from None
        if not -(2**63) <= number < 2**63:  # past it, not JSON a dead letter can keep
            raise _refuse(f"intValue {str(value['intValue'])[:40]!r} is not a 64-bit integer")
        return number
    for key in ("stringValue", "boolValue", "doubleValue", "bytesValue"):
        if key in value:
            return value[key]
    return None


def _json_attributes(pairs: Any, depth: int = 0) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for pair in _list(pairs, "attributes"):
        pair = _object(pair, "an attribute")
        if not isinstance(pair.get("key"), str):
            raise _refuse("an attribute has no string key")
        found[pair["key"]] = _json_value(pair.get("value", {}), depth)
    return found


def _nanos(value: Any, what: str) -> int:
    try:
        nanos = int(value or 0)  # uint64 travels as a string in JSON
    except (TypeError, ValueError, OverflowError):
        raise _refuse(f"{what} {str(value)[:40]!r} is not a number of nanoseconds") from None
    if not 0 <= nanos < 2**64:  # what protobuf's fixed64 holds (past it: no date, no JSON int)
        raise _refuse(f"{what} {str(value)[:40]!r} is not an unsigned 64-bit number of nanoseconds")
    return nanos


def _hex_id(value: Any, what: str, size: int) -> str:
    text = value or ""
    if not isinstance(text, str) or (text and len(text) != size) or any(c not in "0123456789abcdefABCDEF" for c in text):
        raise _refuse(f"{what} must be {size} hex digits")
    return text.lower()


def _json_span(s: Any, resource: dict[str, Any]) -> Span:
    s = _object(s, "a span")
    status = _object(s.get("status") or {}, "status")
    return Span(
        trace_id=_hex_id(s.get("traceId"), "traceId", 32), span_id=_hex_id(s.get("spanId"), "spanId", 16),
        parent_span_id=_hex_id(s.get("parentSpanId"), "parentSpanId", 16), name=str(s.get("name", "")),
        start_ns=_nanos(s.get("startTimeUnixNano"), "startTimeUnixNano"),
        end_ns=_nanos(s.get("endTimeUnixNano"), "endTimeUnixNano"),
        error=status.get("code") in _ERROR_CODES, status_message=str(status.get("message", "")),
        attributes={**resource, **_json_attributes(s.get("attributes"))},
    )  # fmt: skip


def spans_of_json(body: bytes) -> list[Span]:
    try:
        request = orjson.loads(body)
    except orjson.JSONDecodeError as error:  # also nesting past orjson's limit
        raise _refuse(f"the JSON body does not parse ({error})") from None
    spans: list[Span] = []
    for rs in _list(_object(request, "the body").get("resourceSpans"), "resourceSpans"):
        rs = _object(rs, "a resourceSpans item")
        resource = _json_attributes(_object(rs.get("resource") or {}, "resource").get("attributes"))
        for ss in _list(rs.get("scopeSpans"), "scopeSpans"):
            spans += [_json_span(s, resource) for s in _list(_object(ss, "a scopeSpans item").get("spans"), "spans")]
    return spans


TRACES_DOC: dict[str, Any] = {
    "requestBody": {"required": True, "content": {
        PROTOBUF: {"schema": {"type": "string", "format": "binary",
                              "description": "an OTLP ExportTraceServiceRequest (protobuf)"}},
        JSON: {"schema": {"type": "object", "description": "an OTLP ExportTraceServiceRequest (OTLP JSON)"}}}},
    "responses": {"200": {"description": "an ExportTraceServiceResponse, in the request's encoding", "content": {
        PROTOBUF: {"schema": {"type": "string", "format": "binary"}},
        JSON: {"schema": {"type": "object", "description": "{} or {partialSuccess: {rejectedSpans, errorMessage}}"}}}}},
}  # fmt: skip
"""The route's OpenAPI body and answer: OTLP's own message, in either encoding."""


# -- ingest ----------------------------------------------------------------------------


_WBITS = {"gzip": 31, "x-gzip": 31, "deflate": 15}
"""The ``Content-Encoding``s OTLP exporters send (the Collector's ``otlphttp`` gzips by default)."""


def decompressed(body: bytes, content_encoding: str | None, limit: int) -> bytes:
    """``body`` without its ``Content-Encoding``, refused (413) once it inflates past ``limit``
    (a small compressed body may hold a huge one)."""
    encoding = (content_encoding or "identity").strip().lower()
    if encoding == "identity":
        return body
    if encoding not in _WBITS:
        raise RequestError(415, f"POST /v1/traces takes a body as is or with Content-Encoding gzip or deflate, "
                                f"not {content_encoding!r}")  # fmt: skip
    inflater = zlib.decompressobj(_WBITS[encoding])
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error as error:
        raise _refuse(f"the body does not decompress as {encoding} ({error})") from None
    if len(out) > limit:
        raise too_large(limit)
    return out


def media_type(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def ingest(service: Service, body: bytes, content_type: str | None,
           max_event_bytes: int = MAX_EVENT_BYTES) -> tuple[int, str]:  # fmt: skip
    """Publish what ``body``'s spans mean: (spans rejected, the first reasons why). An event
    over ``max_event_bytes`` (a tool's output of megabytes) has its biggest fields cut to
    fit, as the Python client does, rather than losing the call's result."""
    media = media_type(content_type)
    if media not in (PROTOBUF, JSON):
        raise RequestError(415, f"POST /v1/traces takes OTLP as {PROTOBUF} or {JSON}, not {content_type!r}")
    spans = spans_of_protobuf(body) if media == PROTOBUF else spans_of_json(body)
    mapped = map_spans(spans)
    letters = [(orjson.dumps({"otlp_span": spans[i].as_dict()}), reason) for i, reason in mapped.unmapped]
    if not mapped.events and not letters:
        return 0, ""
    data = b"\n".join(fit(event, max_event_bytes, "agentlog's OTLP ingest") for _, event in mapped.events)
    report = service.publish(data, dead_letters=letters)
    # A span is rejected when any of its events is (records are numbered from 1, in order).
    refused = {mapped.events[r["record"] - 1][0] for r in report.rejections if r.get("record")}
    unlisted = report.rejected - len(letters) - len(report.rejections)  # the report lists 100 at most
    rejected = len(mapped.unmapped) + len(refused) + max(unlisted, 0)
    reasons = [why for _, why in mapped.unmapped] + [r["reason"] for r in report.rejections]
    return min(rejected, len(spans)), "; ".join(reasons[:5])[:2000]


def response(media: str, rejected: int, reason: str = "") -> tuple[bytes, str]:
    """An ``ExportTraceServiceResponse`` in ``media``'s encoding; ``partial_success`` only
    when something was rejected (as OTLP asks)."""
    if media == PROTOBUF:
        answer = ExportTraceServiceResponse()
        if rejected:
            answer.partial_success.rejected_spans = rejected
            answer.partial_success.error_message = reason
        return answer.SerializeToString(), PROTOBUF
    body = {"partialSuccess": {"rejectedSpans": str(rejected), "errorMessage": reason}} if rejected else {}
    return orjson.dumps(body), JSON


__all__ = ["JSON", "PROTOBUF", "TRACES_DOC", "decompressed", "ingest", "media_type", "response", "spans_of_json", "spans_of_protobuf"]
