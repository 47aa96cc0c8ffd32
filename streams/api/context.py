"""``context(thread_id, budget, query)`` on a service: state, a bounded recent window,
recall, and compaction of the window when it outgrows its share of the budget."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import orjson
from pydantic import ValidationError

from agentlog.processors.compaction import Summariser, compaction_event, fold_count, safe_cut, summarise
from agentlog.processors.context import assemble, build_units, message_tokens, output_budget
from agentlog.processors.tokens import TokenCounter, counter, encoding_for
from agentlog.schemas.events import Envelope
from agentlog.schemas.handoff import HandoffRecord
from agentlog.schemas.requests import check_budget
from agentlog.streams.api.recall import recall_for
from agentlog.streams.config import Settings

WINDOW_RECORDS = 400
"""How many of a thread's newest records assembly looks at: its cost is bounded by this,
not by the thread's length."""
WINDOW_SHARE = 0.6
"""Share of the budget the raw window may fill before its oldest part is compacted."""


class ContextSource(Protocol):
    """What assembly reads and writes; the embedded service and the Kafka worker each
    provide it over their own stores."""

    settings: Settings
    summariser: Summariser | None

    def state(self, thread_id: str) -> dict[str, Any]: ...
    def orphans(self, thread_id: str) -> set[str]: ...
    def window(self, thread_id: str, after: Sequence[str], limit: int) -> list[Envelope]:
        """The thread's newest ``limit`` accepted events after the events named in
        ``after`` (window start, summary cover), oldest first."""

    def read_event(self, event_id: str) -> Envelope | None: ...
    def search(self, query: str, thread_id: str | None = None, kind: str | None = None,
               project: str | None = None, limit: int = 10) -> dict[str, Any]: ...  # fmt: skip
    def memory_facts(self, project: str) -> list[dict[str, Any]]: ...
    def publish(self, data: bytes) -> Any: ...


def context_for(service: ContextSource, thread_id: str, budget: int, query: str | None = None,
                model: str | None = None) -> dict[str, Any]:  # fmt: skip
    check_budget(budget)
    state = service.state(thread_id)
    orphans = service.orphans(thread_id)
    # The raw window starts after the window switch and after what the summary covers:
    # only those records are read (at most WINDOW_RECORDS), however long the thread is.
    markers = [m for m in (state.get("window_started_by"), state.get("summary_covers_through")) if m]
    window = service.window(thread_id, markers, WINDOW_RECORDS)
    tokens = counter(encoding_for(model))
    compacted = None
    if service.settings.auto_compact:
        window, compacted = _compact(service, state, window, orphans, tokens, budget)
    latest = None
    latest_id = state.get("latest_user_message_id")
    if latest_id and all(e.event_id != latest_id for e in window):
        latest = service.read_event(latest_id)
    # Recall runs on every request: the query, else the latest user message and the goal.
    recall = recall_for(service, state, window, latest, orphans, query) or None
    facts = service.memory_facts(state["project"])
    result = assemble(state, window, tokens, budget, latest, orphans, recall, memory=facts,
                      redact_secrets=service.settings.redact)
    out = result.as_dict()
    out["thread_id"] = thread_id
    out["meta"]["compaction"] = compacted
    return out


def _compact(service: ContextSource, state: dict[str, Any], window: list[Envelope], orphans: set[str],
             tokens: TokenCounter, budget: int) -> tuple[list[Envelope], dict[str, Any] | None]:  # fmt: skip
    """Fold the window's oldest safe prefix into the summary if the window is too big;
    publishes the ``compaction`` event and returns the remaining window."""
    units = build_units(window, orphans, output_budget(budget), service.settings.redact)
    for u in units:
        u.tokens = sum(message_tokens(tokens, m) for m in u.messages)
    pending = {c["call_id"] for c in state.get("pending_calls", [])}
    cut = safe_cut(window, units, fold_count(units, int(budget * WINDOW_SHARE), pending))
    if cut == 0:
        return window, None
    folded, rest = window[:cut], window[cut:]
    previous = None
    if state.get("summary"):
        try:
            previous = HandoffRecord.model_validate(state["summary"])
        except ValidationError:
            previous = None
    record, summariser = summarise(state, folded, previous, service.summariser, service.settings.redact)
    event = compaction_event(state["thread_id"], state["project"], record, folded[-1], state["window_id"], summariser)
    service.publish(orjson.dumps(event))
    state["summary"] = record.model_dump(mode="json")
    state["summary_covers_through"] = folded[-1].event_id
    return rest, {"event_id": event["event_id"], "covers_through": folded[-1].event_id,
                  "folded_events": len(folded), "summariser": summariser}  # fmt: skip


__all__ = ["WINDOW_RECORDS", "WINDOW_SHARE", "ContextSource", "context_for"]
