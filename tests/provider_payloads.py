"""Checks of provider request payloads against the providers' own typed request models
(their official Python packages: validation only, no network), and of the pairing each
API requires: every tool call answered right after it, no result without its call."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from anthropic.types import MessageParam
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
from openai.types.chat import ChatCompletionMessageParam
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
from openai.types.responses import ResponseInputParam
from pydantic import TypeAdapter

OPENAI_REQUEST = TypeAdapter(CompletionCreateParamsNonStreaming)
OPENAI_MESSAGES = TypeAdapter(list[ChatCompletionMessageParam])
RESPONSES_INPUT = TypeAdapter(ResponseInputParam)
ANTHROPIC_REQUEST = TypeAdapter(MessageCreateParamsNonStreaming)
ANTHROPIC_MESSAGES = TypeAdapter(list[MessageParam])


def _drain(value: Any) -> Any:
    # The request types declare ``Iterable[...]`` fields, which pydantic validates lazily:
    # reading them through is what validates every message and block.
    if isinstance(value, Iterator):  # pydantic-core's ValidatorIterator
        return [_drain(v) for v in value]
    if isinstance(value, dict):
        return {k: _drain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_drain(v) for v in value]
    return value


def validated(adapter: TypeAdapter[Any], payload: Any) -> Any:
    """``payload`` validated whole by ``adapter``; it must come out exactly as it went in
    (the TypedDicts drop unknown keys, so a key the API does not know would show here)."""
    out = _drain(adapter.validate_python(payload))
    assert out == payload, f"the provider's type changed the payload:\n{out}\n!=\n{payload}"
    return out


def openai_request(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return validated(OPENAI_REQUEST, {"model": "gpt-5", "messages": messages})


def anthropic_request(answer: dict[str, Any]) -> dict[str, Any]:
    request = {"model": "claude-sonnet-4-5", "max_tokens": 1024, "system": answer["system"],
               "messages": answer["messages"]}  # fmt: skip
    return validated(ANTHROPIC_REQUEST, request)


def openai_pairs(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(call id, result text) of every call, checking that each assistant ``tool_calls``
    message is followed at once by one ``tool`` message per call id, and that no ``tool``
    message stands anywhere else."""
    pairs: list[tuple[str, str]] = []
    i = 0
    while i < len(messages):
        m = messages[i]
        assert m["role"] != "tool", f"message {i} is a tool result without its call just before it"
        ids = [c["id"] for c in m.get("tool_calls") or ()]
        answers = messages[i + 1 : i + 1 + len(ids)]
        assert [a.get("role") for a in answers] == ["tool"] * len(ids), f"calls of message {i} not answered at once"
        assert [a["tool_call_id"] for a in answers] == ids
        pairs += [(a["tool_call_id"], a["content"]) for a in answers]
        i += 1 + len(ids)
    return pairs


def anthropic_pairs(messages: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(tool_use id, its tool_result block) of every call, checking the Messages rules:
    the first turn is the user's, roles alternate, every ``tool_use`` of an assistant turn
    is answered by a ``tool_result`` at the start of the next user turn, and no
    ``tool_result`` stands anywhere else; no text block is empty."""
    assert messages and messages[0]["role"] == "user"
    pairs: list[tuple[str, dict[str, Any]]] = []
    for i, m in enumerate(messages):
        assert m["role"] == ("user" if i % 2 == 0 else "assistant"), f"turn {i} does not alternate"
        for block in m["content"]:
            assert block["type"] != "text" or block["text"].strip(), f"turn {i} has an empty text block"
        uses = [b["id"] for b in m["content"] if b["type"] == "tool_use"]
        following = messages[i + 1]["content"] if i + 1 < len(messages) else []
        results = [b for b in following if b["type"] == "tool_result"]
        if m["role"] == "assistant":
            assert [b["tool_use_id"] for b in following[: len(uses)]] == uses, f"calls of turn {i} not answered next"
            assert len(results) == len(uses), f"turn {i + 1} holds a result of no call of turn {i}"
            pairs += list(zip(uses, results))
        elif i == 0:
            assert all(b["type"] != "tool_result" for b in m["content"])
    return pairs


__all__ = [
    "ANTHROPIC_MESSAGES", "OPENAI_MESSAGES", "RESPONSES_INPUT", "anthropic_pairs", "anthropic_request",
    "openai_pairs", "openai_request", "validated",
]  # fmt: skip
