"""SPEC §7 and issue 13 item 6: ``agentlog threads`` and ``GET /threads`` list the threads
with project, event count, last activity, open calls and status; filters and ``--json``."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from agentlog.processors.thread import ThreadProcessor
from agentlog.schemas.snapshot import ThreadSnapshot
from agentlog.processors.thread_list import (
    FAILING_WITHIN_MS, GOAL_CHARS, IDLE_AFTER_MS, ROW_FIELDS, select_rows, status_of, thread_row,
)  # fmt: skip
from agentlog.schemas.events import epoch_ms_of
from agentlog.schemas.requests import thread_list_query
from agentlog.streams.config import Settings
from agentlog.streams.embedded.service import EmbeddedService
from agentlog.streams.kafka.service import StoreQueries, Unlogged
from tests.helpers import T0, call, ev, result

T0_MS = T0.timestamp() * 1000.0
SECRET = "sk-proj-" + "A1b2C3d4E5f6G7h8J9k0" * 2


def applied(*events: Any) -> ThreadProcessor:
    tp = ThreadProcessor.new("t1")
    for e in events:
        tp.apply(e)
    return tp


def now_raw(event_id: str, kind: str, payload: dict[str, Any], thread: str, project: str = "default",
            ago_s: float = 0.0) -> bytes:  # fmt: skip
    """An event timed ``ago_s`` seconds before the wall clock (statuses read the clock)."""
    ts = (datetime.now(timezone.utc) - timedelta(seconds=ago_s)).isoformat().replace("+00:00", "Z")
    return orjson.dumps({"event_id": event_id, "thread_id": thread, "kind": kind, "ts": ts,
                         "project": project, "payload": payload})  # fmt: skip


def workload() -> bytes:
    """Three threads: one active with an open call (project a), one waiting for an approval
    (project a), one idle for a day (project b)."""
    lines = [
        now_raw("w-1", "goal", {"text": "ship the release"}, "busy", "a", ago_s=60),
        now_raw("w-2", "tool_call", {"call_id": "c1", "tool_name": "bash"}, "busy", "a", ago_s=30),
        now_raw("w-3", "approval_request", {"approval_id": "ap1", "action": "deploy"}, "asking", "a", 120),
        now_raw("w-4", "message", {"role": "user", "text": "hello"}, "old", "b", ago_s=86_400),
    ]
    return b"\n".join(lines) + b"\n"


# -- the row (pure) ---------------------------------------------------------------------


def test_a_row_says_project_events_last_activity_open_calls_failures_approvals_window_and_goal() -> None:
    tp = applied(ev("e1", "goal", {"text": "fix the build"}, project="p"), call("e2", "c1", 1),
                 call("e3", "c2", 2), result("e4", "c2", 3, status="error", output="boom"),
                 ev("e5", "approval_request", {"approval_id": "a1", "action": "deploy"}, 4))  # fmt: skip
    row = thread_row(tp.state, T0_MS + 5_000)
    assert tuple(row) == ROW_FIELDS
    assert row == {"thread_id": "t1", "project": "p", "event_count": 5,
                   "last_activity": "2026-01-01T12:00:04Z", "open_calls": 1, "failures": 1, "pending_approvals": 1, "status": "waiting_approval",
                   "window_id": "w0", "goal": "fix the build"}  # fmt: skip


def test_last_activity_is_the_newest_event_time_even_when_a_late_older_event_is_applied_last() -> None:
    tp = applied(ev("e1", "message", {"role": "user", "text": "a"}, 100),
                 ev("e2", "message", {"role": "user", "text": "b"}, 5))  # fmt: skip
    assert tp.state.last_ts == "2026-01-01T12:00:05Z"
    assert thread_row(tp.state, T0_MS)["last_activity"] == "2026-01-01T12:01:40Z"


def test_a_replay_of_the_same_events_gives_the_same_last_activity_also_across_a_snapshot() -> None:
    events = [ev("e1", "message", {"role": "user", "text": "a"}, 10),
              ev("e2", "message", {"role": "user", "text": "b"}, 10),
              ev("e3", "message", {"role": "user", "text": "c"}, 3)]  # fmt: skip
    first, again = applied(*events), applied(*events)
    assert first.state.newest_ts == again.state.newest_ts == "2026-01-01T12:00:10Z"
    restored = ThreadProcessor.restore(ThreadSnapshot.model_validate_json(first.snapshot().model_dump_json()))
    assert thread_row(restored.state, T0_MS) == thread_row(first.state, T0_MS)


def test_a_snapshot_from_before_newest_ts_existed_reports_its_last_event_time() -> None:
    tp = applied(ev("e1", "message", {"role": "user", "text": "a"}, 7))
    tp.state.newest_ts = None
    assert thread_row(tp.state, T0_MS)["last_activity"] == "2026-01-01T12:00:07Z"
    tp.apply(ev("e2", "message", {"role": "user", "text": "b"}, 2))  # late: does not go back in time
    assert tp.state.newest_ts == "2026-01-01T12:00:07Z"


def test_status_waiting_approval_comes_first_then_idle_then_failing_then_active() -> None:
    failed = applied(call("e1", "c1"), result("e2", "c1", 1, status="timeout"))
    assert status_of(failed.state, T0_MS + 1_000) == "failing"
    assert status_of(failed.state, T0_MS + 1_000 + IDLE_AFTER_MS + 1) == "idle"
    failed.apply(ev("e3", "approval_request", {"approval_id": "a", "action": "go"}, 2))
    assert status_of(failed.state, T0_MS + 10 * IDLE_AFTER_MS) == "waiting_approval"
    failed.apply(ev("e4", "approval_decision", {"approval_id": "a", "decision": "approved"}, 3))
    assert status_of(failed.state, T0_MS + 3_000) == "failing"
    later_s = FAILING_WITHIN_MS / 1000 + 10
    failed.apply(ev("e5", "message", {"role": "assistant", "text": "recovered"}, later_s))
    assert status_of(failed.state, T0_MS + later_s * 1000) == "active"


def test_an_error_event_counts_as_a_failure() -> None:
    tp = applied(ev("e1", "error", {"message": "rate limited", "code": 429}))
    row = thread_row(tp.state, T0_MS)
    assert (row["failures"], row["status"]) == (1, "failing")


def test_the_goal_is_short_and_redacted_whole_before_it_is_cut() -> None:
    text = "deploy with key " + SECRET + " " + "and then check everything twice " * 5
    tp = applied(ev("e1", "goal", {"text": text}))
    goal = thread_row(tp.state, T0_MS)["goal"]
    assert len(goal) <= GOAL_CHARS and goal.startswith("deploy with key ") and goal.endswith("…")
    assert "sk-proj" not in goal and "A1b2" not in goal
    assert SECRET in thread_row(tp.state, T0_MS, redact=False)["goal"]
    # A key cut in half at the boundary is one no pattern knows: it is redacted first.
    straddling = applied(ev("e1", "goal", {"text": "see:" + "x" * 66 + "/AKIAIOSFODNN7EXAMPLE tail"}))
    assert "AKIA" not in thread_row(straddling.state, T0_MS)["goal"]


def test_rows_are_filtered_by_project_and_status_newest_first_and_limited_with_the_total() -> None:
    rows = [{"thread_id": t, "project": p, "status": s, "last_activity": ts}
            for t, p, s, ts in [("x", "a", "idle", "2026-01-01T10:00:00Z"),
                                ("y", "a", "active", "2026-01-01T12:00:00+01:00"),  # 11:00Z
                                ("z", "b", "active", "2026-01-01T10:30:00Z"),
                                ("w", "a", "active", None)]]  # fmt: skip
    assert [r["thread_id"] for r in select_rows(rows)["threads"]] == ["y", "z", "x", "w"]
    assert select_rows(rows, project="a", status="active", limit=1) == {"threads": [rows[1]], "total": 2}


def test_bad_listing_parameters_are_refused_with_what_is_allowed() -> None:
    for bad in ({"limit": 0}, {"limit": 1001}, {"status": "busy"}, {"limit": True}):
        with pytest.raises(ValueError, match="bad parameter"):
            thread_list_query(**{"project": None, "status": None, "limit": 100, **bad})


# -- embedded, in process ------------------------------------------------------------------


def ids(answer: dict[str, Any]) -> list[str]:
    return [r["thread_id"] for r in answer["threads"]]


def test_a_thread_appears_in_the_list_right_after_publish(service: EmbeddedService) -> None:
    assert service.thread_list()["threads"] == []
    service.publish(workload())
    answer = service.thread_list()
    assert ids(answer) == ["busy", "asking", "old"] and answer["total"] == 3 and answer["partial"] is False
    busy = answer["threads"][0]
    assert (busy["project"], busy["event_count"], busy["open_calls"], busy["status"]) == ("a", 2, 1, "active")
    assert busy["goal"] == "ship the release"
    assert busy["last_activity"] == service.state("busy")["newest_ts"]
    assert [r["status"] for r in answer["threads"][1:]] == ["waiting_approval", "idle"]


def test_the_list_filters_by_project_and_status_and_limits(service: EmbeddedService) -> None:
    service.publish(workload())
    assert ids(service.thread_list(project="a")) == ["busy", "asking"]
    assert ids(service.thread_list(status="idle")) == ["old"]
    assert ids(service.thread_list(project="b", status="active")) == []
    limited = service.thread_list(limit=1)
    assert ids(limited) == ["busy"] and limited["total"] == 3
    with pytest.raises(ValueError, match="limit"):
        service.thread_list(limit=0)


def test_the_list_is_redacted_like_the_state(service: EmbeddedService) -> None:
    service.publish(now_raw("s-1", "goal", {"text": f"use {SECRET}"}, "leaky"))
    goal = service.thread_list()["threads"][0]["goal"]
    assert SECRET not in goal and goal == service.state("leaky")["goal"]["text"]


def test_threads_checkpointed_in_the_state_store_are_listed_after_a_restart(settings: Settings) -> None:
    first = EmbeddedService(settings)
    first.publish(workload())
    before = first.thread_list()["threads"]
    first.close()
    again = EmbeddedService(settings)
    try:
        assert again.driver.pipeline.threads == {}  # nothing in memory: read from state.db
        assert [{**r, "status": None} for r in again.thread_list()["threads"]] == \
            [{**r, "status": None} for r in before]  # fmt: skip
        assert again.rebuild()["threads"] == 3  # replayed from the log: the same rows
        rebuilt = again.thread_list()["threads"]
        assert [r["last_activity"] for r in rebuilt] == [r["last_activity"] for r in before]
    finally:
        again.close()


def test_a_kafka_worker_lists_its_own_threads_in_full_and_others_from_the_log(
    service: EmbeddedService,
) -> None:
    service.publish(workload())
    service.catch_up()  # the log holds every event now, as a worker's sink would
    owned = [service.states.load("busy").model_dump_json().encode()]  # type: ignore[union-attr]
    worker = StoreQueries(service.settings, lambda _t: None, service.log, service.index, Unlogged(), lambda: owned)
    answer = worker.thread_list()
    embedded = {r["thread_id"]: r for r in service.thread_list()["threads"]}
    assert ids(answer) == ["busy", "asking", "old"] and answer["partial"] is True
    assert answer["threads"][0] == embedded["busy"]
    for row in answer["threads"][1:]:  # another worker's: project, count and time from the log
        mine = embedded[row["thread_id"]]
        assert (row["project"], row["event_count"]) == (mine["project"], mine["event_count"])
        assert epoch_ms_of(row["last_activity"]) == pytest.approx(epoch_ms_of(mine["last_activity"]), abs=1)
        assert row["open_calls"] is None and row["status"] is None
    assert ids(worker.thread_list(status="active")) == ["busy"]  # a status is known for owned only
    assert worker.thread_list(project="b")["threads"][0]["thread_id"] == "old"


def test_the_offline_service_lists_the_same_rows_by_replaying_the_log(settings: Settings) -> None:
    from agentlog.streams.kafka.offline import OfflineService  # noqa: PLC0415

    embedded = EmbeddedService(settings)
    embedded.publish(workload())
    embedded.catch_up()
    expected = embedded.thread_list(project="a")
    embedded.close()
    offline = OfflineService(settings)  # Kafka with no worker answering: the log is the truth
    try:
        answer = offline.thread_list(project="a")
    finally:
        offline.close()
    assert answer["threads"] == expected["threads"] and answer["total"] == 2


# -- over HTTP and through the CLI ---------------------------------------------------------


def agentlog(env: dict[str, str], *args: str, data: bytes | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agentlog", *args], env=env, capture_output=True,
                          text=True, input=None if data is None else data.decode(), timeout=120)  # fmt: skip


def test_get_threads_lists_right_after_post_events_filters_and_refuses_bad_parameters_with_json(
    start_server: Callable[..., tuple[str, dict[str, str]]],
) -> None:
    url, env = start_server()
    posted = httpx.post(f"{url}/events", content=workload(), headers={"Content-Type": "application/json"})
    assert posted.status_code == 200 and posted.json()["accepted"] == 4
    answer = httpx.get(f"{url}/threads").json()
    assert ids(answer) == ["busy", "asking", "old"] and answer["total"] == 3
    assert answer["threads"][0]["open_calls"] == 1
    assert ids(httpx.get(f"{url}/threads", params={"project": "a", "limit": 1}).json()) == ["busy"]
    assert ids(httpx.get(f"{url}/threads", params={"status": "waiting_approval"}).json()) == ["asking"]
    for bad in ("limit=0", "limit=1001", "limit=x", "status=busy", "thread=busy", "limit=1&limit=2"):
        refused = httpx.get(f"{url}/threads?{bad}")
        assert refused.status_code == 400, bad
        assert isinstance(refused.json()["error"], str), bad
    assert httpx.post(f"{url}/threads", headers={"Content-Type": "application/json"}).status_code == 405

    # The CLI goes through the running server.
    table = agentlog(env, "threads", "--project", "a")
    assert table.returncode == 0, table.stderr
    header, _rule, *lines = table.stdout.splitlines()
    assert header.split() == ["thread", "|", "project", "|", "events", "|", "last", "activity", "|", "open",
                              "calls", "|", "failures", "|", "status"]  # fmt: skip
    assert [line.split("|")[0].strip() for line in lines[:2]] == ["busy", "asking"]
    listed = json.loads(agentlog(env, "threads", "--json", "--status", "idle").stdout)
    assert ids(listed) == ["old"] and listed["threads"][0]["project"] == "b"
    limited = agentlog(env, "threads", "--limit", "1")
    assert "(3 threads match; --limit shows more)" in limited.stdout
    for bad in ("0", "5000", "ten"):
        refused = agentlog(env, "threads", "--limit", bad)  # a usage error, in the option's words
        assert refused.returncode == 2 and "--limit" in refused.stderr and "route" not in refused.stderr
    assert "between 1 and 1000" in agentlog(env, "threads", "--limit", "5000").stderr


def test_agentlog_threads_works_without_a_server_and_explains_itself_in_help(cli_env: dict[str, str]) -> None:
    published = agentlog(cli_env, "publish", "-", data=workload())
    assert published.returncode == 0, published.stderr
    listed = json.loads(agentlog(cli_env, "threads", "--json").stdout)
    assert ids(listed) == ["busy", "asking", "old"]
    helped = agentlog(cli_env, "threads", "--help").stdout
    for words in ("--project", "--status", "--limit", "--json", "open calls", "waiting_approval", "idle"):
        assert words in helped
    assert agentlog(cli_env, "threads", "--status", "busy").returncode == 2  # argparse names the choices


def test_the_kafka_workers_threads_route_refuses_bad_parameters_before_any_kafka(tmp_path: Path) -> None:
    from agentlog.streams.kafka.app import create_app  # noqa: PLC0415 - needs faust
    from tests.conftest import free_port  # noqa: PLC0415
    from tests.test_http_worker import serving  # noqa: PLC0415

    app = create_app(Settings(data_dir=tmp_path / "worker", kafka_bootstrap="127.0.0.1:1"))
    port = free_port()
    try:
        with serving(app.conf.agentlog_http, port):
            answers = [httpx.get(f"http://127.0.0.1:{port}/threads?{q}") for q in ("limit=0", "status=busy", "nope=1")]
    finally:
        app.conf.agentlog_log_store.close()  # chDB holds one data directory per process
    assert [(a.status_code, isinstance(a.json().get("error"), str)) for a in answers] == [(400, True)] * 3
