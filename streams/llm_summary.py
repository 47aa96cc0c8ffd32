"""An LLM summariser behind the ``agentlog.processors.compaction.Summariser`` interface: any
OpenAI-compatible ``/chat/completions`` endpoint. Off unless ``AGENTLOG_SUMMARY_URL``
is set; run by ``agentlog.streams.summary_job`` (off the hot path), its answer is checked
(``agentlog.processors.compaction.verdict``) before it is published."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import httpx
import orjson

from agentlog.processors.records import searchable
from agentlog.processors.redaction import redact_value
from agentlog.schemas.events import Envelope
from agentlog.schemas.handoff import HandoffRecord

PROMPT = """You write handoff records for a coding agent whose old context is being folded.
Answer with one JSON object with exactly these keys: goal, constraints, observations,
hypotheses, done, pending_jobs, next_action, unknowns, modified_files. observations,
hypotheses and done (finished work) are lists of {"text", "source_event_id"}; keep every
constraint and every modified file given; put guesses in hypotheses, never in
observations. An observation
cites only a tool result, a user message or an error event given (or one the previous
summary observed); nothing cites an id not given. A record that breaks these is thrown
away."""


def _role(event: Envelope) -> dict[str, str]:
    """A message's role: a user's words may be observed, an assistant's are no fact."""
    return {"role": event.payload.role} if event.kind == "message" else {}  # type: ignore[attr-defined]


def llm_client(timeout: float = 60.0) -> httpx.Client:
    """An HTTP client for the configured OpenAI-compatible endpoint (its bearer key, if any)."""
    headers = {}
    if os.environ.get("AGENTLOG_SUMMARY_API_KEY"):
        headers["Authorization"] = f"Bearer {os.environ['AGENTLOG_SUMMARY_API_KEY']}"
    return httpx.Client(timeout=timeout, headers=headers)


def ask_json(http: httpx.Client, url: str, model: str, prompt: str, material: Any) -> Any:
    """One JSON-object completion: ``prompt`` as the system message, ``material`` as the user's."""
    response = http.post(f"{url.rstrip('/')}/chat/completions", json={
        "model": model,
        "response_format": {"type": "json_object"},
        "messages": [{"role": "system", "content": prompt},
                     {"role": "user", "content": orjson.dumps(material).decode()}],
    })  # fmt: skip
    response.raise_for_status()
    return orjson.loads(response.json()["choices"][0]["message"]["content"])


class LlmSummariser:
    def __init__(self, url: str, model: str, timeout: float = 60.0) -> None:
        self.url = url.rstrip("/")
        self.model = model
        self.http = llm_client(timeout)

    def __call__(self, state: dict[str, Any], folded: Sequence[Envelope],
                 previous: HandoffRecord | None) -> dict[str, Any]:  # fmt: skip
        material = {
            "state": {k: state.get(k) for k in ("goal", "constraints", "plan", "tasks", "files",
                                                 "pending_approvals", "pending_calls", "failures")},
            "previous_summary": previous.model_dump(mode="json") if previous else None,
            "events": [{"event_id": e.event_id, "kind": e.kind, **_role(e), "text": searchable(e)[0][:2000]} for e in folded],
        }  # fmt: skip
        material = redact_value(material)  # an outside service: no secret leaves
        return ask_json(self.http, self.url, self.model, PROMPT, material)  # type: ignore[no-any-return]


__all__ = ["LlmSummariser", "PROMPT", "ask_json", "llm_client"]
