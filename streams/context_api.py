"""``context(thread_id, budget, query)`` on a service: state + bounded window + recall."""

from __future__ import annotations

from typing import Any

import orjson

from processors.context import assemble
from processors.tokens import counter, encoding_for
from processors.validation import validate
from schemas.events import Envelope

WINDOW_RECORDS = 400
"""How many of a thread's newest records assembly looks at: its cost is bounded by this,
not by the thread's length."""


def context_for(service: Any, thread_id: str, budget: int, query: str | None = None,
                model: str | None = None) -> dict[str, Any]:  # fmt: skip
    state = service.state(thread_id)
    with service.lock:
        tp = service.driver.pipeline.thread(thread_id)
        orphans = set(tp.pairer.state.orphans)
    records = service.bus.thread_tail(thread_id, 0, WINDOW_RECORDS)
    events = [e for e in (validate(r.value) for r in records) if isinstance(e, Envelope)]
    # The raw window starts after the last window switch and after what the summary covers.
    start = 0
    for i, e in enumerate(events):
        if e.kind == "window_switch" or e.event_id == state.get("summary_covers_through"):
            start = i + 1
    window = events[start:]
    latest = None
    latest_id = state.get("latest_user_message_id")
    if latest_id and all(e.event_id != latest_id for e in window):
        found = service.read(latest_id)["event"]
        parsed = validate(orjson.dumps(found))
        latest = parsed if isinstance(parsed, Envelope) else None
    recall = None
    if query:
        recall = service.search(query, thread_id=thread_id, limit=8)["hits"]
        in_window = {e.event_id for e in window}
        recall = [h for h in recall if h["event_id"] not in in_window]
    result = assemble(state, window, counter(encoding_for(model)), budget, latest, orphans, recall)
    out = result.as_dict()
    out["thread_id"] = thread_id
    return out


__all__ = ["WINDOW_RECORDS", "context_for"]
