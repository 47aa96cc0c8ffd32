"""The agent step: an event is visible to ``state`` and ``context`` once the processor has
applied it, never after a sink write; ``search`` and ``read`` answer from the active state
while the sinks lag (issue 15, "apply, then answer")."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from agentlog.streams.config import Settings
from agentlog.streams.embedded.service import EmbeddedService
from agentlog.streams.embedded.sink_stage import CATCH_UP_GROUP
from tests.helpers import child_pids, raw


class GatedLog:
    """The real chDB log with its event writes held until ``gate`` opens: a sink that is
    slow or stuck, as a long merge or a full disk makes it."""

    def __init__(self, service: EmbeddedService) -> None:
        self.gate = threading.Event()
        self.entered = threading.Event()
        self._append = service.log.append_events
        service.log.append_events = self.append_events  # type: ignore[method-assign]

    def append_events(self, rows: Sequence[dict[str, Any]]) -> None:
        if rows:
            self.entered.set()
            assert self.gate.wait(60), "the gate was never opened"
        self._append(rows)


def goal(i: int, thread: str = "step") -> bytes:
    return raw(f"g{i}", "goal", {"text": f"walrus step {i}"}, i, thread=thread)


def in_time(call: Any, seconds: float) -> Any:
    """``call()`` in a thread; its answer, or a failure if it takes longer than ``seconds``."""
    out: list[Any] = []
    worker = threading.Thread(target=lambda: out.append(call()), daemon=True)
    worker.start()
    worker.join(seconds)
    assert out, f"no answer within {seconds} s: the read waited for the blocked sink"
    return out[0]


@pytest.fixture
def serving(settings: Settings) -> Iterator[tuple[EmbeddedService, GatedLog]]:
    """The live loops of ``agentlog run`` over a log whose writes are held."""
    svc = EmbeddedService(Settings(data_dir=settings.data_dir, sink_flush_ms=1.0))
    gated = GatedLog(svc)
    stop = threading.Event()
    loops = threading.Thread(target=svc.run_forever, args=(stop,), daemon=True)
    loops.start()
    try:
        yield svc, gated
    finally:
        gated.gate.set()
        stop.set()
        loops.join(60)
        svc.close()


def test_a_state_read_never_waits_for_a_sink_write_while_serving(serving) -> None:
    svc, gated = serving
    svc.publish(goal(1))
    assert gated.entered.wait(10), "the sink stage never started its write"
    for i in range(2, 6):  # the sink write is held the whole time
        svc.publish(goal(i))
        state = in_time(lambda: svc.state("step"), 2.0)
        assert state["goal"]["text"] == f"walrus step {i}"
        context = in_time(lambda: svc.context("step", 2000), 2.0)
        assert f"walrus step {i}" in str(context)
    assert svc.log.count_events() == 0 and svc.health()["sink_lag"] >= 4


def test_a_state_read_never_waits_for_a_sink_write_in_process(service: EmbeddedService) -> None:
    gated = GatedLog(service)
    for i in range(1, 4):
        service.publish(goal(i))
        state = in_time(lambda: service.state("step"), 2.0)
        assert state["goal"]["text"] == f"walrus step {i}"
    assert not gated.entered.is_set() and service.log.count_events() == 0  # state wrote no sink
    gated.gate.set()


def test_search_and_read_of_a_just_published_event_answer_from_the_active_state_while_sinks_lag(serving) -> None:
    svc, gated = serving
    svc.publish(goal(1))
    assert gated.entered.wait(10)
    svc.publish(goal(2))
    read = in_time(lambda: svc.read("g2"), 2.0)
    assert read["source"] == "active" and read["event"]["payload"]["text"] == "walrus step 2"
    found = in_time(lambda: svc.search("walrus", thread_id="step"), 2.0)
    assert {h["event_id"]: h["source"] for h in found["hits"]} == {"g1": "active", "g2": "active"}
    assert found["stale"]
    gated.gate.set()  # the sinks catch up: the same answers now come from the log and index
    svc.catch_up()
    assert svc.read("g2")["source"] == "log"
    assert {h["source"] for h in svc.search("walrus", thread_id="step")["hits"]} == {"index"}
    assert svc.sql("SELECT count() FROM events").rows == [(2,)]


def test_in_process_search_and_sql_write_the_sinks_first_and_close_writes_the_rest(settings: Settings) -> None:
    svc = EmbeddedService(settings)
    svc.publish(b"\n".join(goal(i) for i in range(1, 4)))
    assert svc.state("step")["goal"]["text"] == "walrus step 3"
    assert svc.read("g3")["source"] == "active"  # applied, not logged yet
    assert svc.health()["sink_lag"] == 3
    hits = svc.search("walrus")["hits"]  # across threads: the index must hold them
    assert sorted(h["event_id"] for h in hits) == ["g1", "g2", "g3"] and {h["source"] for h in hits} == {"index"}
    assert svc.sql("SELECT count() FROM events").rows == [(3,)]
    svc.publish(goal(4))
    svc.state("step")
    svc.close()  # applied but not written: close writes it
    again = EmbeddedService(settings)
    try:
        assert again.health()["sink_lag"] == 0 and again.log.count_events() == 4
        assert again.read("g4")["source"] == "log"
    finally:
        again.close()


def test_the_sink_stage_writes_in_groups_by_time_not_one_write_per_event(settings: Settings) -> None:
    svc = EmbeddedService(Settings(data_dir=settings.data_dir, sink_flush_ms=500.0))
    stop = threading.Event()
    loops = threading.Thread(target=svc.run_forever, args=(stop,), daemon=True)
    loops.start()
    try:
        for i in range(1, 31):
            svc.publish(goal(i))
            assert svc.state("step")["goal"]["text"] == f"walrus step {i}"
        svc.catch_up()
        assert svc.sql("SELECT count(), uniqExact(event_id) FROM events").rows == [(30, 30)]
        groups = svc.sinks.groups_written
        assert 1 <= groups < 30, groups  # several events per write, not one write per step
    finally:
        stop.set()
        loops.join(60)
        svc.close()


def test_while_a_backlog_of_more_than_a_group_waits_the_sink_stage_writes_larger_groups(settings: Settings) -> None:
    """Each group is a part of the chDB log that merges rewrite later: a catch-up writes
    ``CATCH_UP_GROUP`` times fewer, larger groups; every event is still written once."""
    svc = EmbeddedService(Settings(data_dir=settings.data_dir, sink_flush_rows=10, batch_size=10))
    try:
        svc.publish(b"\n".join(goal(i) for i in range(1, 201)))
        svc.driver.run_until_idle()  # twenty queue rows of ten applied events
        svc.sinks.drain()
        larger = 10 * CATCH_UP_GROUP
        assert svc.sinks.groups_written == 200 // larger  # groups of 10 x CATCH_UP_GROUP, not twenty of 10
        assert svc.sql("SELECT count(), uniqExact(event_id) FROM events").rows == [(200, 200)]
        assert len(svc.search("walrus", thread_id="step", limit=500)["hits"]) == 200
        svc.publish(b"\n".join(goal(i) for i in range(201, 211)))  # a group's worth: as it is
        svc.driver.run_until_idle()
        svc.sinks.drain()
        assert svc.sinks.groups_written == 200 // larger + 1
    finally:
        svc.close()


class SlowLog:
    """The real chDB log, each event write taking ``seconds`` longer: a group commit that
    events keep arriving during, as under an agent's steady traffic."""

    def __init__(self, service: EmbeddedService, seconds: float) -> None:
        self.seconds = seconds
        self._append = service.log.append_events
        service.log.append_events = self.append_events  # type: ignore[method-assign]

    def append_events(self, rows: Sequence[dict[str, Any]]) -> None:
        time.sleep(self.seconds)
        self._append(rows)


def test_under_steady_traffic_the_sink_stage_still_writes_in_groups_and_makes_them_searchable_on_cadence(
    settings: Settings,
) -> None:
    # Events arrive every 10 ms and each write takes 50 ms more: some always wait when a
    # write ends. A stage that wrote until the queue was empty wrote ~5 events at a time
    # back to back (about one write per 50 ms) and never committed the index meanwhile.
    svc = EmbeddedService(Settings(data_dir=settings.data_dir, sink_flush_ms=100.0, refresh_seconds=0.3))
    SlowLog(svc, 0.05)
    stop = threading.Event()
    loops = threading.Thread(target=svc.run_forever, args=(stop,), daemon=True)
    loops.start()
    try:
        first = time.monotonic()
        i = 0
        while time.monotonic() - first < 2.0:
            i += 1
            svc.publish(goal(i))
            assert svc.state("step")["goal"]["text"] == f"walrus step {i}"
            time.sleep(0.01)
        seconds = time.monotonic() - first
        searchable = svc.index.visible_offsets().get(0, 0)  # before the traffic stops
        groups = svc.sinks.groups_written
        svc.catch_up()
        assert svc.sql("SELECT count() FROM events").rows == [(i,)]
    finally:
        stop.set()
        loops.join(60)
        svc.close()
    assert searchable > 0, "nothing was made searchable while the traffic lasted"
    # One group per flush interval and write at most (~13 here), not one per write (~40).
    assert groups <= seconds / (0.1 + 0.05) * 1.5, (groups, i)


def test_every_index_commit_writes_what_waits_first_so_an_event_is_searchable_within_a_refresh_interval(
    settings: Settings,
) -> None:
    # The group commit's own cadence is a minute here: only the refresh (0.3 s) can make
    # the event searchable in time.
    svc = EmbeddedService(Settings(data_dir=settings.data_dir, sink_flush_ms=60_000.0, refresh_seconds=0.3))
    stop = threading.Event()
    loops = threading.Thread(target=svc.run_forever, args=(stop,), daemon=True)
    loops.start()
    try:
        offset = svc.publish(goal(1)).last_offset
        assert svc.state("step")["goal"]["text"] == "walrus step 1"
        deadline = time.monotonic() + 10.0
        while svc.index.visible_offsets().get(0, 0) < offset and time.monotonic() < deadline:
            time.sleep(0.02)
        assert svc.index.visible_offsets().get(0, 0) >= offset, "a commit left the waiting event unwritten"
        assert [h["event_id"] for h in svc.search("walrus", drain=False)["hits"]] == ["g1"]
    finally:
        stop.set()
        loops.join(60)
        svc.close()


def test_a_hand_off_that_fails_is_applied_again_from_the_checkpoint_and_reaches_the_sinks(
    service: EmbeddedService,
) -> None:
    """The processor applies a batch in memory, then appends it to the queue in state.db; if
    that append fails, the batch must not count as applied (the sinks would never get it)."""
    real_append = service.queue.append
    failures = {"left": 1}

    def flaky_append(result: Any) -> None:  # the real queue write, failing once as a full disk would
        if failures["left"]:
            failures["left"] -= 1
            raise OSError("simulated write failure")
        real_append(result)

    service.queue.append = flaky_append  # type: ignore[method-assign]
    service.publish(goal(1))
    with pytest.raises(Exception, match="simulated write failure"):
        service.state("step")
    assert service.state("step")["goal"]["text"] == "walrus step 1"
    assert service.sql("SELECT count(), uniqExact(event_id) FROM events").rows == [(1, 1)]
    assert [h["source"] for h in service.search("walrus")["hits"]] == ["index"]


def _children(pid: int) -> list[int]:
    return child_pids(pid)


def _sink_process_of(pid: int) -> int:
    for child in _children(pid):
        if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes():
            return child
    raise AssertionError(f"agentlog run ({pid}) has no sink process: {_children(pid)}")


def test_agentlog_run_s_sink_process_runs_at_a_lower_cpu_priority_so_state_reads_win_the_cores(start_server) -> None:
    _url, env = start_server(AGENTLOG_SINK_NICE="7")
    server = orjson.loads((Path(env["AGENTLOG_DATA_DIR"]) / "server.json").read_bytes())["pid"]
    sinks = _sink_process_of(server)
    assert os.getpriority(os.PRIO_PROCESS, sinks) - os.getpriority(os.PRIO_PROCESS, server) == 7


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2 and not os.environ.get("CI"),
                    reason="one CPU: nothing to leave to the server (in CI it runs, and fails)")
def test_agentlog_run_s_sink_process_leaves_a_cpu_to_the_server_with_every_thread_it_starts(start_server) -> None:
    url, env = start_server()
    server = orjson.loads((Path(env["AGENTLOG_DATA_DIR"]) / "server.json").read_bytes())["pid"]
    sinks = _sink_process_of(server)
    with httpx.Client(base_url=url, timeout=10) as http:  # a group commit: chDB's and tantivy's threads run
        http.post("/events", content=goal(1), headers={"content-type": "application/json"})
        assert http.post("/flush", json={}).status_code == 200
    first = min(os.sched_getaffinity(0))
    threads = list(Path(f"/proc/{sinks}/task").iterdir())
    assert len(threads) > 5  # chDB's pools among them
    for task in threads:
        allowed = os.sched_getaffinity(int(task.name))
        assert first not in allowed and allowed, (task.name, allowed)
    assert first in os.sched_getaffinity(server)  # the server itself is not restricted


def test_agentlog_run_writes_the_sinks_in_a_process_of_its_own_that_never_holds_up_state_and_stops_with_it(
    start_server,
) -> None:
    url, env = start_server()
    server = orjson.loads((Path(env["AGENTLOG_DATA_DIR"]) / "server.json").read_bytes())["pid"]
    sinks = _sink_process_of(server)
    post = {"headers": {"content-type": "application/json"}, "timeout": 10}
    with httpx.Client(base_url=url, timeout=10) as http:
        assert http.post("/events", content=goal(1), **post).json()["accepted"] == 1
        assert http.post("/flush", json={}).status_code == 200
        assert http.post("/sql", json={"sql": "SELECT count() FROM events"}).json()["rows"] == [[1]]
        os.kill(sinks, signal.SIGSTOP)  # the sink process frozen: no log or index write can finish
        try:
            for i in range(2, 5):
                http.post("/events", content=goal(i), **post)
                state = in_time(lambda: http.get("/threads/step/state").json(), 2.0)
                assert state["goal"]["text"] == f"walrus step {i}"
                read = in_time(lambda: http.get(f"/events/g{i}").json(), 2.0)
                assert read["source"] == "active"
        finally:
            os.kill(sinks, signal.SIGCONT)
        assert http.post("/flush", json={}).status_code == 200
        assert http.post("/sql", json={"sql": "SELECT count() FROM events"}).json()["rows"] == [[4]]
        assert http.get("/healthz").json()["sink_lag"] == 0
    os.kill(server, signal.SIGTERM)  # one agentlog run stops it all
    deadline = time.monotonic() + 60
    while Path(f"/proc/{sinks}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(f"/proc/{sinks}").exists(), "the sink process outlived agentlog run"


def test_in_process_recall_s_scan_of_events_not_yet_indexed_stays_bounded_however_long_the_loop(
    settings: Settings,
) -> None:
    from agentlog.streams.embedded.service import INLINE_WRITE_AFTER

    svc = EmbeddedService(settings)
    try:
        svc.publish(b"\n".join(goal(i) for i in range(1, 11)))
        svc.context("step", 4000)
        assert svc.health()["sink_lag"] == 10  # a short backlog: the context read wrote nothing
        svc.publish(b"\n".join(goal(i) for i in range(11, INLINE_WRITE_AFTER + 12)))
        svc.context("step", 4000)  # past the limit: the backlog is written before the scan
        assert svc.health()["sink_lag"] == 0 and svc.log.count_events() == INLINE_WRITE_AFTER + 11
    finally:
        svc.close()


def test_a_sink_process_started_from_a_thread_that_ends_outlives_that_thread(settings: Settings) -> None:
    # The kernel's parent-death signal follows the thread that forked the child: a sink
    # process started by a request's worker thread (POST /rebuild) or by the watcher that
    # restarts it must not die when that thread does.
    svc = EmbeddedService(settings)
    try:
        svc.publish(goal(1))
        starter = threading.Thread(target=svc.split_sinks)
        starter.start()
        starter.join()
        time.sleep(1.0)
        assert svc.sink_process is not None and svc.sink_process.process.is_alive()
        assert svc.sink_process.call("host", "status") is not None  # and it answers
    finally:
        svc.close()


_APPLY_THEN_DIE = """
import os, signal, sys
from pathlib import Path
from agentlog.streams.config import Settings
from agentlog.streams.embedded.service import EmbeddedService
svc = EmbeddedService(Settings(data_dir=Path(sys.argv[1]), checkpoint_seconds=3600))
svc.publish(sys.stdin.buffer.read())
svc.state("step")  # applied and handed to the sinks' queue; the checkpoint is an hour away
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_kill_9_of_the_processor_between_its_hand_off_and_its_checkpoint_loses_nothing_and_duplicates_nothing(
    settings: Settings,
) -> None:
    """The restarted processor applies the same events again and hands them over a second
    time: both copies reach the sinks in one group, and the log must keep one."""
    body = b"\n".join(goal(i) for i in range(1, 4))
    died = subprocess.run([sys.executable, "-c", _APPLY_THEN_DIE, str(settings.data_dir)], input=body,
                          capture_output=True, timeout=120)  # fmt: skip
    assert died.returncode == -signal.SIGKILL, died.stderr.decode()[-2000:]
    svc = EmbeddedService(settings)
    try:
        assert svc.state("step")["goal"]["text"] == "walrus step 3"
        assert svc.sql("SELECT count(), uniqExact(event_id) FROM events").rows == [(3, 3)]
        assert sorted(h["event_id"] for h in svc.search("walrus")["hits"]) == ["g1", "g2", "g3"]
    finally:
        svc.close()


def test_a_state_read_that_costs_no_wait_is_answered_at_once_with_the_same_bytes_else_it_is_left_to_a_thread(
    service: EmbeddedService,
) -> None:
    """The HTTP route answers ``state_json_now`` on its event loop: it must never block
    there (the processor busy, a long backlog), and must answer what a thread would."""
    from agentlog.streams.embedded.service import STEP_RECORDS  # noqa: PLC0415

    service.publish(goal(1))
    assert service.state_json_now("step") is None  # a thread it has not applied yet
    service.state("step")
    service.publish(goal(2))  # one agent step: applied inline
    now = service.state_json_now("step")
    assert now is not None and orjson.loads(now.body)["goal"]["text"] == "walrus step 2"
    assert now.body == service.state_json("step").body == orjson.dumps(service.state("step"))
    held, release = threading.Event(), threading.Event()

    def processor_busy() -> None:
        with service.lock:
            held.set()
            release.wait(10)

    busy = threading.Thread(target=processor_busy)
    busy.start()
    try:
        assert held.wait(10)
        assert service.state_json_now("step") is None
    finally:
        release.set()
        busy.join()
    service.publish(b"\n".join(goal(i) for i in range(3, 4 + STEP_RECORDS)))  # a backlog
    assert service.state_json_now("step") is None
    assert orjson.loads(service.state_json("step").body)["goal"]["text"] == f"walrus step {3 + STEP_RECORDS}"
    assert service.state_json_now("step") is not None


def test_a_server_that_fails_to_start_leaves_no_sink_process_behind(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``agentlog run`` starts its sink process before it loads the state: a ^C (or a
    damaged state.db) during that load must not leave the sink process (not a daemon)
    running, or the server would hang at exit waiting for it."""
    import multiprocessing  # noqa: PLC0415

    svc = EmbeddedService(settings)
    svc.publish(b"\n".join(goal(i) for i in range(1, 6)))
    svc.catch_up()
    svc.close()

    def interrupted(_self: EmbeddedService) -> None:
        assert multiprocessing.active_children(), "the sink process starts first"
        raise KeyboardInterrupt

    monkeypatch.setattr(EmbeddedService, "_new_driver", interrupted)
    with pytest.raises(KeyboardInterrupt):
        EmbeddedService(settings, sinks_apart=True)
    assert multiprocessing.active_children() == []
    monkeypatch.undo()
    again = EmbeddedService(settings)  # nothing held: the directory opens again
    try:
        assert again.state("step")["goal"]["text"] == "walrus step 5"
    finally:
        again.close()


def test_concurrent_searches_of_one_thread_and_query_all_answer(service: EmbeddedService) -> None:
    """Parallel sub-agents (or the web view's poll beside the agent) ask the same recall of
    the same thread at once: the kept answers are shared, and none may fail."""
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415

    service.publish(b"\n".join(goal(i) for i in range(1, 200)))
    service.state("step")

    def ask(_: int) -> list[str]:
        return [h["event_id"] for h in service.search("walrus", thread_id="step", drain=False, limit=5)["hits"]]

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(ask, range(400)))
    assert len({tuple(a) for a in answers}) == 1 and len(answers[0]) == 5


def test_a_state_read_on_the_event_loop_applies_only_the_records_it_found_waiting(settings: Settings) -> None:
    """The fast path reads an agent step's records once; it never goes on to apply what
    publishers append meanwhile (a loop on a busy topic would stall every request)."""
    from agentlog.streams.embedded.service import STEP_RECORDS  # noqa: PLC0415

    svc = EmbeddedService(Settings(data_dir=settings.data_dir, checkpoint_seconds=3600))
    try:
        svc.publish(goal(1))
        svc.state("step")
        svc.publish(b"\n".join(goal(i) for i in range(2, 2 + STEP_RECORDS)))
        process = svc.driver.pipeline.process

        def while_publishers_append(records: Any) -> Any:  # another 50 arrive during the step
            svc.driver.pipeline.process = process  # type: ignore[method-assign]
            svc.publish(b"\n".join(goal(i) for i in range(2 + STEP_RECORDS, 52 + STEP_RECORDS)))
            return process(records)

        svc.driver.pipeline.process = while_publishers_append  # type: ignore[method-assign]
        answer = svc.state_json_now("step")
        assert answer is not None and orjson.loads(answer.body)["goal"]["text"] == f"walrus step {1 + STEP_RECORDS}"
        assert svc.driver.pending() == 50  # left to the processor's loop, not applied on the event loop
    finally:
        svc.close()


def test_a_state_read_on_the_event_loop_leaves_a_backlog_longer_than_a_step_to_the_thread_pool(
    settings: Settings,
) -> None:
    from agentlog.streams.embedded.service import STEP_RECORDS  # noqa: PLC0415

    svc = EmbeddedService(Settings(data_dir=settings.data_dir, checkpoint_seconds=3600))
    try:
        svc.publish(goal(1))
        svc.state("step")
        svc.publish(b"\n".join(goal(i) for i in range(2, 3 + STEP_RECORDS)))  # one more than a step
        assert svc.state_json_now("step") is None
        assert svc.driver.pending() == STEP_RECORDS + 1  # nothing applied on the event loop
        assert orjson.loads(svc.state_json("step").body)["goal"]["text"] == f"walrus step {2 + STEP_RECORDS}"
    finally:
        svc.close()


def test_a_served_read_never_takes_the_checkpoint_the_processor_s_loop_takes_it(settings: Settings) -> None:
    svc = EmbeddedService(Settings(data_dir=settings.data_dir, checkpoint_seconds=0))  # always due
    try:
        svc.serving = True  # as under agentlog run (its loop is not started here)
        svc.publish(goal(1))
        svc.state("step")
        assert orjson.loads(getattr(svc.state_json_now("step"), "body", b"{}"))["goal"]["text"] == "walrus step 1"
        svc.publish(goal(2))
        assert orjson.loads(getattr(svc.state_json_now("step"), "body", b"{}"))["goal"]["text"] == "walrus step 2"
        assert svc.states.offsets().get("events", 0) == 0  # no read wrote a checkpoint
        with svc.lock:
            svc.driver.step()  # the loop's turn
        assert svc.states.offsets()["events"] == svc.driver.events_pos
        svc.serving = False  # in-process, with no loop, a read takes it
        svc.publish(goal(3))
        svc.state("step")
        assert svc.states.offsets()["events"] == svc.driver.events_pos
    finally:
        svc.serving = False
        svc.close()


def test_a_state_read_after_an_agent_step_reads_the_topic_once_and_a_backlog_of_many_batches_is_applied_whole(
    service: EmbeddedService,
) -> None:  # fmt: skip
    reads: list[int] = []
    bus_read = service.driver.bus.read

    def counted(after: int, limit: int) -> Any:
        records = bus_read(after, limit)
        reads.append(len(records))
        return records

    service.driver.bus.read = counted  # type: ignore[method-assign]
    service.publish(goal(1))
    assert service.state("step")["goal"]["text"] == "walrus step 1"
    assert reads == [1]  # fewer than a batch: the read saw the whole topic, no second look
    service.driver.batch_size = 3
    reads.clear()
    service.publish(b"\n".join(goal(i) for i in range(2, 9)))  # seven: two full batches and one
    assert service.state("step")["event_count"] == 8
    assert reads == [3, 3, 1]


def test_while_a_backlog_is_applied_checkpoints_are_spaced_by_their_own_cost_and_the_rest_lands_after_it(
    settings: Settings,
) -> None:
    """A checkpoint writes every thread a batch touched: on a catch-up across many long
    threads, one every ``checkpoint_s`` took a third of the processor. While reads fill whole
    batches, the next is due only once the last one's cost is ``CHECKPOINT_SHARE`` of the
    time since; the read that reaches the end takes it on the plain cadence again."""
    svc = EmbeddedService(Settings(data_dir=settings.data_dir, checkpoint_seconds=0, batch_size=10))
    taken: list[int] = []
    write = svc.states.checkpoint

    def slow_disk(snapshots: Any, seen: Any, offsets: dict[str, int]) -> None:
        time.sleep(0.2)  # each checkpoint costs 0.2 s: the next is due 2 s later at the earliest
        write(snapshots, seen, offsets)
        taken.append(offsets["events"])

    svc.states.checkpoint = slow_disk  # type: ignore[method-assign]
    try:
        svc.publish(b"\n".join(goal(i) for i in range(1, 96)))  # nine whole batches and five
        t0 = time.monotonic()
        full = [svc.driver.step() for _ in range(9)]
        assert full == [10] * 9
        assert taken[0] == 10  # the first batch's: no cost known yet
        # One more for each 2 s the catch-up took at most (none on a machine that is not
        # swamped); every 0 s as configured would have taken nine.
        assert len(taken) <= 1 + int((time.monotonic() - t0) / 2.0)
        assert svc.driver.step() == 5  # the end of the topic: the plain cadence (0 s) is back
        assert taken[-1] == svc.driver.events_pos == svc.states.offsets()["events"]
        assert orjson.loads(svc.state_json("step").body)["goal"]["text"] == "walrus step 95"
    finally:
        svc.close()


def test_with_a_cheap_checkpoint_a_catch_up_keeps_the_plain_cadence(settings: Settings) -> None:
    svc = EmbeddedService(Settings(data_dir=settings.data_dir, checkpoint_seconds=0, batch_size=10))
    taken: list[int] = []
    write = svc.states.checkpoint
    svc.states.checkpoint = lambda s, seen, o: (write(s, seen, o), taken.append(o["events"]))  # type: ignore[method-assign]
    try:
        svc.publish(b"\n".join(goal(i) for i in range(1, 31)))
        for _ in range(3):
            svc.driver.step()
            time.sleep(0.2)  # far more than ten times a checkpoint of one small thread
        assert taken == [10, 20, 30]
    finally:
        svc.close()
