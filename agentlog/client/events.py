"""Building events in the wire format: each one gets its ``event_id`` and ``ts`` when it is
created and is encoded to bytes at once, so a retry sends the very same bytes (the
processors drop an exact copy of an id already accepted: a retry never duplicates).

Nothing is validated here: the deployment validates every record when it is published
(``agentlog.streams.publish_check``), and a rejection comes back in the publish report.
"""

from __future__ import annotations

import itertools
import os
import threading
from datetime import datetime, timezone
from typing import Any

import orjson


def now_ts() -> str:
    """The current time as RFC 3339 UTC with microseconds (what the log keeps)."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


class EventIds:
    """Event ids unique across processes without a round trip: a random prefix per client
    and a counter (cheaper than a UUID per event, and still in the id alphabet)."""

    def __init__(self, prefix: str | None = None) -> None:
        self.prefix = prefix or os.urandom(6).hex()
        self._counter = itertools.count(1)
        self._lock = threading.Lock()  # ``next`` on a count is atomic in CPython; the lock says so

    def next(self) -> str:
        with self._lock:
            n = next(self._counter)
        return f"{self.prefix}-{n}"


def encode(event_id: str, thread_id: str, kind: str, payload: dict[str, Any], envelope: dict[str, Any],
           ts: str | None = None) -> bytes:  # fmt: skip
    """One event as a JSON line's bytes (without the newline). ``envelope``: the optional
    envelope fields (``project``, ``agent_id``, ``turn_id``, ``window_id``, ...), ``None``
    values left out."""
    event = {"event_id": event_id, "thread_id": thread_id, "kind": kind, "ts": ts or now_ts(), "payload": payload}
    for key, value in envelope.items():
        if value is not None:
            event[key] = value
    return orjson.dumps(event)


__all__ = ["EventIds", "encode", "now_ts"]
