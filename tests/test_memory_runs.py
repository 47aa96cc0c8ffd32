"""Issue 18: memory runs on its own (idle threads, under `agentlog run` and on Kafka
workers), shows what is pending, running and failed, and is fenced by the broker on Kafka."""

from __future__ import annotations

import http.server
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx

from agentlog.streams.config import Settings
from agentlog.streams.kafka.publisher import KafkaPublisher
from agentlog.streams.kafka.worker_process import free_port, start_worker, stop_worker, worker_env, worker_log
from agentlog.streams.memory import kafka_view
from agentlog.streams.memory.jobs import Memory
from agentlog.streams.memory.runner import MemoryRunner
from tests.helpers import raw
from tests.test_compaction import FakeLLM
from tests.test_memory import FakeClock, fact, publish


def _poll(what: str, check: Callable[[], object], timeout_s: float = 30.0) -> object:
    deadline = time.monotonic() + timeout_s
    while not (found := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)
    return found


def test_a_thread_is_extracted_only_once_idle_for_the_idle_time_and_a_new_event_restarts_the_wait(
    tmp_path: Path,
) -> None:  # fmt: skip
    settings = Settings(data_dir=tmp_path / "data", memory_idle_seconds=10.0)
    clock = FakeClock()
    runner = MemoryRunner(settings, clock=clock)
    publish(settings, fact("f1", "java.version", "17", "user_confirmed", 0, thread="busy"))
    assert runner.run_once() == {}  # seen for the first time: its idle time starts now
    clock.now += 6
    publish(settings, fact("f2", "build.tool", "gradle", "tool_observed", 1, thread="busy"))
    assert runner.run_once() == {}  # the runner looks every few seconds: it sees f2 now
    clock.now += 6  # 12 s after f1 but 6 s after f2: the thread is not idle yet
    assert runner.run_once() == {}
    clock.now += 5
    outcome = runner.run_once()
    assert outcome["extracted"] == ["busy"] and outcome["consolidated"]["published"] is True
    job = Memory(settings)
    try:
        facts = {f["key"]: f["value"] for f in job.show("svc")["facts"]}
        phases = job.status()["phases"]
    finally:
        job.close()
    assert facts == {"java.version": "17", "build.tool": "gradle"}
    assert phases["extract"]["pending"] == 0 and phases["extract"]["runs"] == 1
    assert phases["consolidate"]["runs"] == 1 and phases["consolidate"]["last_error"] is None


def test_a_thread_whose_extraction_failed_waits_for_its_back_off_instead_of_a_run_every_pass(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", memory_idle_seconds=1.0)
    clock = FakeClock()
    runner = MemoryRunner(settings, clock=clock)
    publish(settings, fact("f1", "java.version", "17", "user_confirmed", 0, thread="broken"))
    job = Memory(settings)
    try:
        assert job.store.claim("broken", "someone", 1, time.time(), 60) == 0
        job.store.fail_extraction("broken", "someone", "RuntimeError('boom')", time.time(), max_attempts=1)
        assert runner.run_once() == {}  # seen: its idle time starts
        clock.now += 5
        assert runner.run_once() == {}  # idle, not extracted, but failed for good: left to a command
        assert job.status(pull=False)["phases"]["extract"] == {**job.status(pull=False)["phases"]["extract"],
                                                                "pending": 1, "failed": 1, "runs": 0}  # fmt: skip
    finally:
        job.close()


def test_idle_triggered_under_agentlog_run_the_view_holds_the_facts_without_any_command(
    start_server: Callable[..., tuple[str, dict[str, str]]],
) -> None:  # fmt: skip
    url, env = start_server(AGENTLOG_MEMORY_IDLE_SECONDS="1")
    body = b"\n".join([fact("obs-21", "java.version", "21.0.2", "tool_observed", 0, thread="idle-1"),
                       fact("user-pg", "staging.db.host", "pg-stage-3.internal", "user_confirmed", 1, thread="idle-1")])  # fmt: skip
    assert httpx.post(f"{url}/events", content=body, headers={"content-type": "application/x-ndjson"},
                      timeout=30).json()["accepted"] == 2  # fmt: skip

    def facts() -> dict[str, str]:
        answer = httpx.get(f"{url}/memory", params={"project": "svc"}, timeout=30).json()
        return {f["key"]: f["value"] for f in answer["facts"]}

    assert _poll("the idle thread's facts", facts) == {"java.version": "21.0.2", "staging.db.host": "pg-stage-3.internal"}
    status = json.loads(subprocess.run([sys.executable, "-m", "agentlog", "memory", "status", "--json"], env=env,
                                       capture_output=True, text=True, timeout=60, check=True).stdout)  # fmt: skip
    extract, consolidate = status["phases"]["extract"], status["phases"]["consolidate"]
    assert (extract["pending"], extract["failed"], consolidate["pending"], consolidate["failed"]) == (0, 0, 0, 0)
    assert extract["runs"] >= 1 and consolidate["runs"] >= 1 and consolidate["last_run"] is not None
    metrics = httpx.get(f"{url}/metrics", timeout=30).text
    assert 'agentlog_memory_runs_total{outcome="ok",phase="consolidate"} 1.0' in metrics
    assert 'agentlog_memory_pending{phase="extract"} 0.0' in metrics


class HeldLLM(FakeLLM):
    """An OpenAI-compatible extractor that answers only once the test lets it: a memory
    run that calls it stays running meanwhile."""

    answer: dict = {"facts": []}
    release = threading.Event()

    def do_POST(self) -> None:  # noqa: N802
        type(self).release.wait(60)
        super().do_POST()


def _gauge(metrics: str, name: str, phase: str) -> float | None:
    found = re.search(rf'^{name}{{phase="{phase}"}} (\S+)$', metrics, re.M)
    return None if found is None else float(found[1])


def test_metrics_show_what_is_pending_and_running_while_a_memory_run_is_under_way(
    start_server: Callable[..., tuple[str, dict[str, str]]],
) -> None:  # fmt: skip
    HeldLLM.release.clear()
    llm = http.server.ThreadingHTTPServer(("127.0.0.1", 0), HeldLLM)
    threading.Thread(target=llm.serve_forever, daemon=True).start()
    try:
        url, _ = start_server(AGENTLOG_MEMORY_IDLE_SECONDS="0.5", AGENTLOG_MEMORY_LLM="true",
                              AGENTLOG_SUMMARY_URL=f"http://127.0.0.1:{llm.server_address[1]}/v1",
                              AGENTLOG_SUMMARY_MODEL="held")  # fmt: skip
        said = raw("m1", "message", {"role": "user", "text": "Remember: our deploy branch is release-7."}, 0)
        assert httpx.post(f"{url}/events", content=said, headers={"content-type": "application/x-ndjson"},
                          timeout=30).json()["accepted"] == 1  # fmt: skip

        def scraped(running: float, pending: float) -> bool:
            metrics = httpx.get(f"{url}/metrics", timeout=30).text
            return (_gauge(metrics, "agentlog_memory_running", "extract"),
                    _gauge(metrics, "agentlog_memory_pending", "extract")) == (running, pending)

        _poll("the run under way on /metrics", lambda: scraped(1.0, 1.0))
        HeldLLM.release.set()
        _poll("the run done on /metrics", lambda: scraped(0.0, 0.0))
        facts = httpx.get(f"{url}/memory", timeout=30).json()["facts"]
        assert [(f["key"], f["value"]) for f in facts] == [("deploy.branch", "release-7")]
    finally:
        HeldLLM.release.set()
        llm.shutdown()


# -- Kafka ----------------------------------------------------------------------------------


def _kafka(tmp_path: Path, name: str, kafka_bootstrap: str, ns: str, **extra: object) -> Settings:
    return Settings(data_dir=tmp_path / name, kafka_bootstrap=kafka_bootstrap, kafka_namespace=ns, partitions=1,
                    **extra)  # type: ignore[arg-type]  # fmt: skip


def _publish_kafka(settings: Settings, *records: bytes) -> None:
    publisher = KafkaPublisher(settings)
    publisher.publish(b"\n".join(records))
    publisher.close()


def _memory_cli(settings: Settings, *args: str) -> subprocess.Popen:
    """``agentlog memory ARGS --json``, its stderr in ``memory.err`` of its data directory."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    with open(settings.data_dir / "memory.err", "w") as err:
        return subprocess.Popen([sys.executable, "-m", "agentlog", "memory", *args, "--json"], env=worker_env(settings),
                                stdout=subprocess.PIPE, stderr=err, text=True)  # fmt: skip


def _stderr(settings: Settings) -> str:
    return (settings.data_dir / "memory.err").read_text()


def test_on_kafka_a_memory_consolidate_command_paused_past_its_lease_is_refused_by_the_broker_and_exits_with_status_3(
    tmp_path: Path, kafka_bootstrap: str,
) -> None:  # fmt: skip
    """The same fence for ``agentlog memory consolidate`` run by hand on two machines (two
    data directories, one namespace): the broker's transactional fence, not a local lease,
    refuses the paused one, which exits with status 3 and leaves the run in its ``memory
    status``. The workers' runners are drilled in the next test."""
    ns = f"t{uuid.uuid4().hex[:8]}"
    a, b = (_kafka(tmp_path, n, kafka_bootstrap, ns) for n in ("a", "b"))
    _publish_kafka(a, fact("java-17", "java.version", "17", "user_confirmed", 0, thread="t1"))
    assert json.loads(subprocess.run([sys.executable, "-m", "agentlog", "memory", "extract", "--json"],
                                     env=worker_env(a), capture_output=True, text=True, timeout=120,
                                     check=True).stdout)["candidates"] == 1  # fmt: skip
    paused = _memory_cli(a, "consolidate", "--owner", "worker-a", "--lease-seconds", "3", "--pause-before-publish", "4")
    try:
        # A's view is sent inside its transaction (the log says so); pause A there, past its lease.
        _poll("worker A's open transaction", lambda: "holding the transaction" in _stderr(a) or paused.poll(), 60)
        assert paused.poll() is None, _stderr(a)
        os.kill(paused.pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        assert kafka_view.latest_view(b) is None  # read_committed: A's open transaction is invisible
        _publish_kafka(b, fact("gradle", "build.tool", "gradle", "tool_observed", 1, thread="t2"))
        other = subprocess.run([sys.executable, "-m", "agentlog", "memory", "extract", "--json"], env=worker_env(b),
                               capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
        assert json.loads(other.stdout)["candidates"] == 2
        done = _memory_cli(b, "consolidate", "--owner", "worker-b", "--lease-seconds", "3")
        out, _ = done.communicate(timeout=120)
        assert done.returncode == 0, _stderr(b)
        assert json.loads(out)["published"] is True
        time.sleep(max(0.0, stopped_at + 3.5 - time.monotonic()))  # A stays paused past its lease (3 s)
    finally:
        os.kill(paused.pid, signal.SIGCONT)
    paused.communicate(timeout=120)
    assert paused.returncode == 3 and "the broker refused the memory view of worker-a" in _stderr(a), _stderr(a)
    assert "memory consolidation of worker-a refused" in _stderr(a)  # logged by the job
    view = kafka_view.latest_view(a)
    assert view is not None and view.owner == "worker-b"
    assert {f["key"]: f["value"] for f in view.facts.values()} == {"java.version": "17", "build.tool": "gradle"}
    job = Memory(a)
    try:
        consolidate = job.status(pull=False)["phases"]["consolidate"]
        assert consolidate["fenced"] == 1 and "broker refused" in consolidate["last_error"]
        before = job.store.published()
        assert {f["key"] for f in job.show("svc")["facts"]} == {"java.version", "build.tool"}  # B's, from the topic
        assert job.store.published() == before  # memory show wrote nothing here: a read
        assert job.adopt() is True  # A's machine now holds the view B published
    finally:
        job.close()



HOLDING = re.compile(r"memory view v\d+ of (\S+) \(epoch (\d+)\) sent; holding the transaction")


def test_on_kafka_a_view_built_on_an_older_view_than_the_newest_committed_one_is_refused(
    tmp_path: Path, kafka_bootstrap: str,
) -> None:  # fmt: skip
    """Two consolidators that both read v1: the one that commits second, though nobody
    fenced it, built its view without the other's facts, and must not replace it."""
    import pytest  # noqa: PLC0415

    from agentlog.sinks.base import StaleToken  # noqa: PLC0415

    settings = _kafka(tmp_path, "a", kafka_bootstrap, f"stale-{uuid.uuid4().hex[:8]}")
    first = kafka_view.publish_view(settings, {"k1": {"key": "k1"}}, "first", after=0, lease_s=10)
    assert first.version == 1
    with pytest.raises(StaleToken, match="built on v0, but v1 of first"):
        kafka_view.publish_view(settings, {"k2": {"key": "k2"}}, "second", after=0, lease_s=10)
    newest = kafka_view.latest_view(settings)
    assert newest is not None and (newest.version, newest.owner) == (1, "first")
    assert kafka_view.publish_view(settings, {"k2": {"key": "k2"}}, "second", after=1, lease_s=10).version == 2


def _fenced_runs(settings: Settings) -> float:
    """``agentlog_memory_runs_total{outcome="fenced",phase="consolidate"}`` on the worker's /metrics."""
    metrics = httpx.get(f"http://127.0.0.1:{settings.worker_port}/metrics", timeout=10).text
    found = re.search(r'^agentlog_memory_runs_total\{outcome="fenced",phase="consolidate"\} (\S+)$', metrics, re.M)
    return float(found.group(1)) if found else 0.0


def test_on_kafka_two_workers_the_one_paused_past_its_lease_is_refused_by_the_broker_and_the_view_is_the_others(
    tmp_path: Path, kafka_bootstrap: str,
) -> None:  # fmt: skip
    """Two real workers (two data directories standing in for two machines, one namespace)
    whose runners consolidate on their own: A is stopped (SIGSTOP) inside its view's open
    transaction, B publishes, A resumes past its lease and the broker refuses its commit."""
    ns, lease = f"t{uuid.uuid4().hex[:8]}", 3.0
    common = {"memory_idle_seconds": 1.0, "memory_lease_seconds": lease}
    a = _kafka(tmp_path, "a", kafka_bootstrap, ns, worker_port=free_port(),
               memory_pause_before_publish_seconds=2 * lease, **common)  # fmt: skip
    b = _kafka(tmp_path, "b", kafka_bootstrap, ns, worker_port=free_port(), **common)
    _publish_kafka(a, fact("java-17", "java.version", "17", "user_confirmed", 0, thread="t1"),
                   fact("gradle", "build.tool", "gradle", "tool_observed", 1, thread="t1"))  # fmt: skip
    worker_a = start_worker(a)
    worker_b: subprocess.Popen | None = None
    try:
        held = _poll("worker A holding its view's open transaction",
                     lambda: HOLDING.search(worker_log(a, tail=100_000)) or worker_a.poll() is not None, 90)  # fmt: skip
        assert worker_a.poll() is None, worker_log(a)
        os.kill(worker_a.pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        a_owner, a_epoch = held.group(1), int(held.group(2))  # type: ignore[union-attr]
        try:
            assert kafka_view.latest_view(b) is None  # read_committed: A's open transaction is invisible
            worker_b = start_worker(b)

            def committed() -> kafka_view.KafkaView | None:
                assert worker_b is not None and worker_b.poll() is None, worker_log(b)
                return kafka_view.latest_view(b)

            by_b = _poll("the view committed by worker B", committed, 90)
            assert isinstance(by_b, kafka_view.KafkaView)
            assert by_b.owner.startswith(f"memory-runner-{worker_b.pid}-") and by_b.epoch > a_epoch
            # A stays stopped past its lease (the transaction timeout): the broker's abort or
            # B's newer epoch, either fences it.
            time.sleep(max(0.0, stopped_at + lease + 0.5 - time.monotonic()))
        finally:
            os.kill(worker_a.pid, signal.SIGCONT)
        _poll("A's refused publication counted as fenced in its /metrics", lambda: _fenced_runs(a) >= 1, 60)
        log_a = worker_log(a, tail=100_000)
        assert f"the broker refused the memory view of {a_owner}" in log_a, log_a
        assert f"memory consolidation of {a_owner} refused" in log_a  # logged by the job
        view = kafka_view.latest_view(a)
        assert view is not None and (view.owner, view.version) == (by_b.owner, by_b.version), view
        assert {f["key"]: f["value"] for f in view.facts.values()} == {"java.version": "17", "build.tool": "gradle"}
        job = Memory(a)  # A's machine: the fenced run recorded, and B's view is its published view
        try:
            assert job.status(pull=False)["phases"]["consolidate"]["fenced"] == 1
            assert _poll("A adopting B's view", lambda: job.store.published()[1] == view.facts, 30)
        finally:
            job.close()
        assert _fenced_runs(a) == 1 and worker_a.poll() is None, worker_log(a)
    finally:
        for worker in (worker_a, worker_b):
            if worker is not None and worker.poll() is None:
                worker.terminate()
        for worker in (worker_a, worker_b):
            if worker is not None:
                stop_worker(worker)


def test_idle_triggered_on_a_kafka_worker_the_committed_view_holds_the_facts_without_any_command(
    tmp_path: Path, kafka_bootstrap: str,
) -> None:  # fmt: skip
    settings = _kafka(tmp_path, "worker", kafka_bootstrap, f"t{uuid.uuid4().hex[:8]}", memory_idle_seconds=1.0,
                      worker_port=free_port())  # fmt: skip
    worker = start_worker(settings)
    try:
        _publish_kafka(settings, fact("obs-21", "java.version", "21.0.2", "tool_observed", 0, thread="idle-k"),
                       fact("user-pg", "staging.db.host", "pg-stage-3.internal", "user_confirmed", 1, thread="idle-k"))  # fmt: skip

        def committed() -> dict[str, str]:
            assert worker.poll() is None, worker_log(settings)
            view = kafka_view.latest_view(settings)
            return {} if view is None else {f["key"]: f["value"] for f in view.facts.values()}

        assert _poll("the view committed by the worker", committed, 120) == {
            "java.version": "21.0.2", "staging.db.host": "pg-stage-3.internal"}
        job = Memory(settings)  # the worker's data directory: its published view, and the runs
        try:
            assert {f["key"] for f in job.show("svc")["facts"]} == {"java.version", "staging.db.host"}
            assert job.status(pull=False)["phases"]["consolidate"]["runs"] >= 1
        finally:
            job.close()
        metrics = httpx.get(f"http://127.0.0.1:{settings.worker_port}/metrics", timeout=30).text
        ok = re.search(r'^agentlog_memory_runs_total\{outcome="ok",phase="consolidate"\} (\S+)$', metrics, re.M)
        assert ok is not None and float(ok.group(1)) >= 1, metrics
    finally:
        stop_worker(worker)


def _copied(settings: Settings) -> int:
    job = Memory(settings)
    try:
        return job.bus.end_offsets()[0]
    finally:
        job.close()


def test_on_kafka_the_memory_copy_stops_after_a_batch_while_the_processor_is_busy_and_goes_on_from_there_later(
    tmp_path: Path, kafka_bootstrap: str,
) -> None:  # fmt: skip
    settings = _kafka(tmp_path, "copy", kafka_bootstrap, f"t{uuid.uuid4().hex[:8]}")
    _publish_kafka(settings, *(fact(f"c{i}", f"key.{i}", "v", "tool_observed", i, thread=f"th{i % 7}")
                               for i in range(12_000)))  # fmt: skip
    job = Memory(settings)
    try:
        first = job.pull(busy=lambda: True)
        assert 0 < first < 12_000, first  # one batch, then it yields
        assert job.pull() == 12_000 - first  # the next pass goes on from the committed offsets
    finally:
        job.close()
    assert _copied(settings) == 12_000  # nothing copied twice, nothing skipped


def test_on_kafka_a_memory_pass_while_the_processor_is_busy_extracts_nothing_even_for_an_idle_thread(
    tmp_path: Path, kafka_bootstrap: str,
) -> None:  # fmt: skip
    settings = _kafka(tmp_path, "busy", kafka_bootstrap, f"t{uuid.uuid4().hex[:8]}", memory_idle_seconds=1.0)
    _publish_kafka(settings, fact("b1", "java.version", "17", "user_confirmed", 0, thread="quiet"))
    clock = FakeClock()
    busy = [True]
    runner = MemoryRunner(settings, clock=clock, busy=lambda: busy[0])
    assert runner.run_once() == {}
    clock.now += 5  # idle by now, but the processor still has a backlog
    assert runner.run_once() == {}
    busy[0] = False
    assert runner.run_once() == {}  # the thread is seen for the first time: its idle time starts
    clock.now += 5
    assert runner.run_once()["extracted"] == ["quiet"]
