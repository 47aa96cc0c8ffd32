"""A realistic multi-thread agent session for ``agentlog demo`` and the benchmarks."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone
from collections.abc import Iterator
from typing import Any

import orjson

BASE_TIME = datetime(2026, 11, 30, 9, 0, 0, tzinfo=timezone.utc)


class SessionWriter:
    """Builds one thread's events with increasing event time."""

    def __init__(self, thread_id: str, project: str = "webshop", start: datetime = BASE_TIME) -> None:
        self.thread_id = thread_id
        self.project = project
        self.now = start
        self.n = 0
        self.turn = 0
        self.events: list[dict[str, Any]] = []

    def emit(self, kind: str, payload: dict[str, Any], advance_s: float = 2.0, **extra: Any) -> dict[str, Any]:
        self.now += timedelta(seconds=advance_s)
        self.n += 1
        event = {
            "event_id": f"{self.thread_id}.{self.n:05d}",
            "thread_id": self.thread_id,
            "kind": kind,
            "ts": self.now.isoformat().replace("+00:00", "Z"),
            "turn_id": f"{self.thread_id}.turn{self.turn}",
            "project": self.project,
            "payload": payload,
            **extra,
        }
        self.events.append(event)
        return event

    def call(self, call_id: str, tool: str, args: dict[str, Any], output: str | None,
             status: str = "ok", latency_s: float = 1.5, **extra: Any) -> None:  # fmt: skip
        self.emit("tool_call", {"call_id": call_id, "tool_name": tool, "arguments": args}, **extra)
        if output is not None:
            self.emit("tool_result", {"call_id": call_id, "output": output, "status": status,
                                      "exit_code": 0 if status == "ok" else 1}, latency_s, **extra)  # fmt: skip

    def end_turn(self) -> None:
        self.emit("turn_end", {}, 0.5)
        self.turn += 1


def login_bug_thread() -> SessionWriter:
    w = SessionWriter("demo-login-bug")
    w.emit("goal", {"text": "Find out why users cannot log in after the session-cache change"})
    w.emit("constraint", {"constraint_id": "read-only-db", "text": "Read-only: never modify the production database"})
    w.emit("constraint", {"constraint_id": "no-force-push", "text": "Do not force-push to main"})
    w.emit("message", {"role": "user", "text": "Login fails with 500 since this morning; please diagnose."})
    w.emit("plan", {"steps": [
        {"step_id": "s1", "text": "Reproduce the failure with the test suite", "status": "running"},
        {"step_id": "s2", "text": "Inspect the session cache configuration", "status": "pending"},
        {"step_id": "s3", "text": "Fix and verify", "status": "pending"},
    ]})  # fmt: skip
    w.call("call-1", "pytest", {"args": ["tests/test_login.py", "-x"]},
           "FAILED tests/test_login.py::test_login_ok - KeyError: 'session_ttl'\n1 failed, 12 passed",
           status="error", latency_s=7.2)  # fmt: skip
    w.emit("message", {"role": "assistant", "text": "The test fails with KeyError session_ttl; checking config."})
    w.emit("agent_spawn", {"child_agent_id": "explorer-1", "role": "code search"})
    w.call("call-2", "grep", {"pattern": "session_ttl", "path": "src/"},
           "src/auth/cache.py:41: ttl = settings['session_ttl']\nconfig/settings.yaml:12: sessionTTL: 3600",
           agent_id="explorer-1")  # fmt: skip
    w.emit("agent_exit", {"child_agent_id": "explorer-1", "status": "done"})
    big = "\n".join(f"2026-11-30T08:{i // 60:02d}:{i % 60:02d}Z INFO request id={i} path=/login status=500"
                    for i in range(4000))  # fmt: skip
    w.call("call-3", "read_logs", {"service": "auth", "since": "1h"}, big, latency_s=3.0)
    w.emit("plan", {"steps": [{"step_id": "s1", "status": "done"}, {"step_id": "s2", "status": "running"}]})
    w.emit("approval_request", {"approval_id": "ap-1", "action": "edit src/auth/cache.py",
                                "detail": "rename the key to sessionTTL"})  # fmt: skip
    w.emit("approval_decision", {"approval_id": "ap-1", "decision": "approved", "by": "alice"}, 30)
    w.emit("file_change", {"path": "src/auth/cache.py", "change": "modified", "confirmed": True})
    w.emit("task", {"task_id": "t-verify", "text": "Re-run the login tests", "status": "running"})
    w.call("call-4", "pytest", {"args": ["tests/test_login.py"]}, None)  # no result: the turn ends
    w.end_turn()
    w.emit("message", {"role": "user", "text": "Any news? Also check the deploy pipeline config."})
    w.emit("approval_request", {"approval_id": "ap-2", "action": "restart the auth service"})
    w.call("call-5", "pytest", {"args": ["tests/test_login.py"]}, "13 passed", latency_s=6.0)
    w.emit("task", {"task_id": "t-verify", "status": "done"})
    w.emit("plan", {"steps": [{"step_id": "s2", "status": "done"}, {"step_id": "s3", "status": "running"}]})
    return w


def refactor_thread() -> SessionWriter:
    w = SessionWriter("demo-refactor", start=BASE_TIME + timedelta(minutes=5))
    w.emit("goal", {"text": "Split the payments module into smaller services"})
    w.emit("message", {"role": "user", "text": "Refactor payments; keep the public API stable."})
    w.emit("constraint", {"constraint_id": "api-stable", "text": "Keep the public payments API unchanged"})
    w.call("call-1", "bash", {"cmd": "git status"}, "On branch refactor\nnothing to commit")
    # A timeout: the build tool never answers within the call timeout.
    w.emit("tool_call", {"call_id": "call-2", "tool_name": "build", "arguments": {"target": "payments"}})
    for i in range(3):
        w.emit("tool_progress", {"call_id": "call-2", "text": f"compiling {i + 1}/40"}, 5)
    w.emit("message", {"role": "assistant", "text": "The build is slow; continuing with the docs meanwhile."}, 660)
    w.call("call-3", "edit", {"path": "src/payments/api.py"}, "ok")
    w.emit("file_change", {"path": "src/payments/api.py", "change": "modified"})
    w.emit("file_change", {"path": "src/payments/gateway.py", "change": "created", "confirmed": False})
    w.emit("error", {"message": "lint failed: E501 line too long in src/payments/api.py", "code": "E501"})
    return w


def docs_thread() -> SessionWriter:
    w = SessionWriter("demo-docs", project="handbook", start=BASE_TIME + timedelta(minutes=9))
    w.emit("goal", {"text": "Document the on-call runbook"})
    w.emit("message", {"role": "user", "text": "Write the runbook for the auth outage."})
    # A result whose call never comes: an orphan once the grace period passes.
    w.emit("tool_result", {"call_id": "call-ghost", "output": "stale output from a crashed tool"})
    w.emit("message", {"role": "assistant", "text": "Fetching the runbook template."}, 40)
    w.call("call-1", "web_fetch", {"url": "https://wiki.example/runbooks"}, "Runbook template ...")
    w.emit("window_switch", {"new_window_id": "w1", "reason": "fresh window for writing"})
    w.call("call-2", "write_file", {"path": "docs/runbook.md"}, "written 2.1 KiB", window_id="w1")
    w.emit("file_change", {"path": "docs/runbook.md", "change": "created"}, window_id="w1")
    return w


def sample_session() -> tuple[list[bytes], dict[str, Any]]:
    """The demo's JSON lines, with a duplicate and a malformed line in the stream."""
    threads = [login_bug_thread(), refactor_thread(), docs_thread()]
    lines: list[bytes] = []
    for w in threads:
        lines.extend(orjson.dumps(e) for e in w.events)
    lines.insert(7, lines[3])  # a duplicate: same event_id, delivered twice
    lines.insert(11, b'{"event_id": "broken-1", "thread_id": "demo-login-bug", "kind": "message", "ts": ')
    lines.insert(12, orjson.dumps({"event_id": "bad kind", "thread_id": "t", "kind": "teleport",
                                   "ts": "2026-11-30T09:00:00Z", "payload": {}}))  # fmt: skip
    info = {"threads": [w.thread_id for w in threads], "distinct_events": sum(len(w.events) for w in threads)}
    return lines, info


def compact_json(event: dict[str, Any]) -> bytes:
    """``orjson.dumps`` copied into an exact-size object: orjson hands back a 4 KiB
    buffer even for a 250-byte event, which for inputs held in memory by the benchmarks
    made 200,000 events cost 800 MiB instead of 50."""
    return memoryview(orjson.dumps(event)).tobytes()


def synthetic_events(n_events: int, n_threads: int, seed: int = 7) -> list[bytes]:
    """A large mixed workload for benchmarks: messages, tool pairs, plans, files."""
    return list(iter_synthetic_events(n_events, n_threads, seed))


def iter_synthetic_events(n_events: int, n_threads: int, seed: int = 7) -> Iterator[bytes]:
    """``synthetic_events`` as a stream, so a million events need not sit in memory."""
    rng = random.Random(seed)
    writers = [SessionWriter(f"bench-{t:05d}", start=BASE_TIME) for t in range(n_threads)]
    out: list[bytes] = []
    calls = [0] * n_threads
    produced = 0
    while produced < n_events:
        if out:
            take = out[: n_events - produced]
            produced += len(take)
            yield from take
            out.clear()
            continue
        t = rng.randrange(n_threads)
        w = writers[t]
        r = rng.random()
        if r < 0.35:
            e = w.emit("message", {"role": rng.choice(["user", "assistant"]),
                                   "text": f"step {w.n}: looking at module {rng.randrange(500)} for the failing check"})  # fmt: skip
            out.append(compact_json(e))
        elif r < 0.75:
            calls[t] += 1
            cid = f"c{calls[t]}"
            e = w.emit("tool_call", {"call_id": cid, "tool_name": rng.choice(["bash", "pytest", "grep", "edit"]),
                                     "arguments": {"cmd": f"run {rng.randrange(1000)}"}})  # fmt: skip
            out.append(compact_json(e))
            e = w.emit("tool_result", {"call_id": cid, "output": "ok " * rng.randrange(1, 40),
                                       "status": "ok" if rng.random() < 0.9 else "error"})  # fmt: skip
            out.append(compact_json(e))
        elif r < 0.85:
            e = w.emit("plan", {"steps": [{"step_id": f"s{rng.randrange(8)}", "text": "do the thing",
                                           "status": rng.choice(["pending", "running", "done"])}]})  # fmt: skip
            out.append(compact_json(e))
        elif r < 0.95:
            e = w.emit("file_change", {"path": f"src/mod{rng.randrange(50)}.py", "change": "modified"})
            out.append(compact_json(e))
        else:
            e = w.emit("turn_end", {})
            w.turn += 1
            out.append(compact_json(e))
        w.events.clear()  # the writer only needs its counters


__all__ = ["SessionWriter", "sample_session", "synthetic_events"]
