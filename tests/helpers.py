"""Small builders for events in tests."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import orjson

from agentlog.processors.validation import validate
from agentlog.schemas.events import Envelope

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)


def raw(event_id: str, kind: str, payload: dict[str, Any], t: float = 0.0,
        thread: str = "t1", **extra: Any) -> bytes:  # fmt: skip
    ts = (T0 + timedelta(seconds=t)).isoformat().replace("+00:00", "Z")
    return orjson.dumps({"event_id": event_id, "thread_id": thread, "kind": kind, "ts": ts,
                         "payload": payload, **extra})  # fmt: skip


def ev(event_id: str, kind: str, payload: dict[str, Any], t: float = 0.0, thread: str = "t1",
       **extra: Any) -> Envelope:  # fmt: skip
    result = validate(raw(event_id, kind, payload, t, thread, **extra))
    assert isinstance(result, Envelope), result
    return result


def call(event_id: str, call_id: str, t: float = 0.0, tool: str = "bash", **extra: Any) -> Envelope:
    return ev(event_id, "tool_call", {"call_id": call_id, "tool_name": tool, "arguments": {}}, t, **extra)


def result(event_id: str, call_id: str, t: float = 0.0, status: str = "ok", output: str = "out",
           **extra: Any) -> Envelope:  # fmt: skip
    return ev(event_id, "tool_result", {"call_id": call_id, "output": output, "status": status}, t, **extra)


def child_pids(pid: int) -> list[int]:
    """A live process's children, whichever of its threads started them (Linux's
    ``/proc/<pid>/task/<tid>/children`` lists each thread's own)."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):  # the thread ended meanwhile
            continue
    return out
