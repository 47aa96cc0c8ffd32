"""The distributed deployment on a real Kafka broker and a real OpenSearch node: faust
workers run the same processors; the log, pairs, state and search agree with the
embedded deployment on the same input."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentlog.schemas.search import SearchFilters
from agentlog.sinks.opensearch_index import OpenSearchIndex
from agentlog.streams.config import Settings
from agentlog.streams.api.context import context_for
from agentlog.streams.cli.demo import SessionWriter, compact_json, sample_session, synthetic_events
from agentlog.streams.kafka.publisher import KafkaPublisher
from agentlog.streams.embedded.service import EmbeddedService
from agentlog.streams.kafka.worker_process import free_port, start_worker, stop_worker, worker_env, worker_log


def kafka_settings(data_dir: Path, kafka_bootstrap: str, opensearch_url: str, **overrides: Any) -> Settings:
    """A fresh namespace of topics, groups and index on the test servers, for one test."""
    ns = overrides.pop("kafka_namespace", f"t{uuid.uuid4().hex[:8]}")
    return Settings(**{"data_dir": data_dir, "kafka_bootstrap": kafka_bootstrap, "opensearch_url": opensearch_url,
                       "opensearch_index": f"agentlog-{ns}", "kafka_namespace": ns, "worker_port": free_port(),
                       **overrides})  # fmt: skip


@pytest.fixture
def distributed(tmp_path: Path, kafka_bootstrap: str, opensearch_url: str):
    settings = kafka_settings(tmp_path / "dist", kafka_bootstrap, opensearch_url, partitions=3)
    worker = start_worker(settings)
    yield settings, worker
    if worker.poll() is None:
        worker.kill()
        worker.wait()
    drop_index(settings)
    # A topic missing from the consumer's metadata when it subscribed stays out of the
    # assignment until the next rebalance: a worker without its table partitions.
    assert "Ignoring missing topic" not in worker_log(settings, tail=10**7)


def drop_index(settings: Settings) -> None:
    assert settings.opensearch_url
    OpenSearchIndex(settings.opensearch_url, settings.opensearch_index)._client.indices.delete(
        index=settings.opensearch_index, ignore_unavailable=True)


def wait_written(settings: Settings, worker: subprocess.Popen, events: int, rejected: int, timeout: float = 180) -> None:
    url = f"http://127.0.0.1:{settings.worker_port}/healthz"
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        assert worker.poll() is None, worker_log(settings)
        try:
            health = httpx.get(url, timeout=2).json()
            assert "written" in health, f"/healthz answered without its counters: {health}"
            last = health["written"]
            joined = health["status"] != "starting"  # a worker still joining its group owns nothing
            if joined and last["events"] >= events and last["rejected"] >= rejected:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"the worker wrote {last}, expected {events} events and {rejected} rejects")


def state_when_served(settings: Settings, thread_id: str, timeout: float = 120) -> dict:
    """A thread's state, once a (re)started worker owns its partition again (until then
    faust's table route answers 503)."""
    url = f"http://127.0.0.1:{settings.worker_port}/threads/{thread_id}/state"
    deadline = time.monotonic() + timeout
    while True:
        response = httpx.get(url, timeout=60, follow_redirects=True)
        if response.status_code != 503 or time.monotonic() > deadline:
            # An error body is not a state: say what the worker answered (a KeyError on
            # 'event_count' said nothing).
            assert response.status_code == 200, f"{response.status_code} {response.text}"
            return response.json()
        time.sleep(0.5)


def consumer_position(settings: Settings) -> dict[str, Any]:
    """The workers' group against the event topic, for failure reports: records not yet
    committed (a stuck consumer) versus committed (applied, or lost)."""
    from agentlog.streams.kafka.groups import GroupWatch  # noqa: PLC0415
    from agentlog.streams.kafka.topics import EVENTS, processor_group, topic  # noqa: PLC0415

    watch = GroupWatch(settings)
    try:
        ends = watch.ends(topic(EVENTS, settings.kafka_namespace))
        group = processor_group(settings.kafka_namespace)
        behind = {tp.partition: watch.behind(group, {tp: end}) for tp, end in ends.items()}
        try:
            health = httpx.get(f"http://127.0.0.1:{settings.worker_port}/healthz", timeout=10).json()
        except httpx.HTTPError as error:
            health = str(error)
        return {"ends": {tp.partition: end for tp, end in ends.items()}, "not_committed": behind, "health": health}
    finally:
        watch.close()


def settle(settings: Settings, quiet_s: float = 6.0, timeout: float = 240) -> None:
    """Wait until the worker's sink has written nothing new for ``quiet_s`` seconds."""
    url = f"http://127.0.0.1:{settings.worker_port}/healthz"
    last, since, deadline = None, time.monotonic(), time.monotonic() + timeout
    while time.monotonic() < deadline:
        written = httpx.get(url, timeout=5).json()["written"]
        if written != last:
            last, since = written, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return
        time.sleep(0.5)


def test_the_same_session_through_kafka_and_embedded_gives_identical_state_sql_and_search(
    tmp_path: Path, distributed
) -> None:
    settings, worker = distributed
    lines, info = sample_session()
    lines += synthetic_events(3000, 40)
    distinct = info["distinct_events"] + 3000
    publisher = KafkaPublisher(settings)
    report = publisher.publish(b"\n".join(lines))
    publisher.close()
    assert (report.accepted, report.rejected) == (len(lines) - 2, 2)

    queries = ["SELECT count(), uniqExact(event_id) FROM events",
               "SELECT thread_id, call_id, orphan_event_id, status, synthetic, latency_ms, output_bytes FROM tool_calls FINAL ORDER BY ALL",
               "SELECT kind, count() FROM events GROUP BY kind ORDER BY kind",
               "SELECT count() FROM rejected_events"]  # fmt: skip
    searches = ("KeyError session_ttl", "restart auth", "runbook", "E501 lint")  # selective: no ties at the cut
    # chDB opens one data directory per process: the embedded answers come first.
    embedded = EmbeddedService(Settings(data_dir=tmp_path / "embedded"))
    try:
        embedded.publish(b"\n".join(lines))
        embedded.catch_up()
        threads = embedded.threads()
        expected_states = {t: embedded.state(t) for t in threads}
        expected_sql = [embedded.sql(q).rows for q in queries]
        expected_hits = [{h["event_id"] for h in embedded.search(q, limit=50)["hits"]} for q in searches]
        # A context is a pure function of state (its stream-folded summary included) and log,
        # at a budget that keeps everything and at one that has to choose.
        demo_threads = [t for t in threads if t.startswith("demo-")]
        expected_contexts = {t: context_for(embedded, t, 60_000) for t in demo_threads}
        expected_tight = {t: context_for(embedded, t, 1_500) for t in demo_threads}
    finally:
        embedded.close()

    wait_written(settings, worker, distinct, 2)
    states = {t: httpx.get(f"http://127.0.0.1:{settings.worker_port}/threads/{t}/state", timeout=10,
                           follow_redirects=True).json() for t in threads}  # fmt: skip
    assert states == expected_states
    # The CLI reaches the worker for queries, as it reaches `agentlog run` when embedded.
    env = worker_env(settings)
    cli = [sys.executable, "-m", "agentlog"]
    read = json.loads(subprocess.run([*cli, "read", "demo-login-bug.00007", "--json"], env=env,
                                     capture_output=True, check=True).stdout)  # fmt: skip
    assert read["event"]["payload"]["status"] == "error" and read["source"] == "log"
    rows = json.loads(subprocess.run([*cli, "sql", "SELECT count() AS n, max(ts) AS t FROM events", "--json"],
                                     env=env, capture_output=True, check=True).stdout)  # fmt: skip
    assert rows[0]["n"] == distinct and rows[0]["t"].startswith("2026-11-30")
    state = json.loads(subprocess.run([*cli, "state", "demo-docs", "--json"], env=env,
                                      capture_output=True, check=True).stdout)  # fmt: skip
    assert state == expected_states["demo-docs"]
    contexts = {t: json.loads(subprocess.run([*cli, "context", t, "--budget", "60000", "--json"], env=env,
                                             capture_output=True, check=True).stdout) for t in demo_threads}  # fmt: skip
    assert contexts == expected_contexts and all(c["messages"] for c in contexts.values())
    tight = {t: json.loads(subprocess.run([*cli, "context", t, "--budget", "1500", "--json"], env=env,
                                          capture_output=True, check=True).stdout) for t in demo_threads}  # fmt: skip
    assert tight == expected_tight
    stop_worker(worker)

    dist = EmbeddedService(Settings(data_dir=settings.data_dir, opensearch_url=settings.opensearch_url,
                                    opensearch_index=settings.opensearch_index))  # fmt: skip
    try:
        assert dist.sql(queries[0]).rows == [(distinct, distinct)]
        assert [dist.sql(q).rows for q in queries] == expected_sql
        dist.index.refresh()
        got = [{h["event_id"] for h in dist.search(q, limit=50)["hits"] if h["source"] == "index"} for q in searches]
        assert got == expected_hits and all(expected_hits)
    finally:
        dist.close()


def test_a_worker_killed_mid_stream_restarts_with_state_from_the_changelog_and_nothing_lost_or_doubled(
    distributed,
) -> None:
    settings, worker = distributed
    records = synthetic_events(100_000, 30)
    stream = records + records[:5_000]  # re-deliveries too
    publisher = KafkaPublisher(settings)

    def trickle() -> None:  # the agents keep publishing while the worker dies
        for i in range(0, len(stream), 1_000):
            publisher.publish(b"\n".join(stream[i : i + 1_000]))
            time.sleep(0.05)

    url = f"http://127.0.0.1:{settings.worker_port}/healthz"
    wait_written(settings, worker, 0, 0)  # the worker is up
    agents = threading.Thread(target=trickle)
    agents.start()
    deadline = time.monotonic() + 120
    written = 0
    while time.monotonic() < deadline and written <= 20_000:
        try:
            written = httpx.get(url, timeout=2).json()["written"]["events"]
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    worker.send_signal(signal.SIGKILL)
    assert 20_000 < written < len(records), "kill the worker mid-stream"
    worker.wait()
    agents.join()
    publisher.close()
    restarted = start_worker(settings)
    try:
        threads = sorted({f"bench-{t:05d}" for t in range(30)})
        deadline = time.monotonic() + 240
        states: dict = {}
        while time.monotonic() < deadline:
            assert restarted.poll() is None, worker_log(settings)
            try:
                states = {t: httpx.get(f"http://127.0.0.1:{settings.worker_port}/threads/{t}/state",
                                       timeout=5, follow_redirects=True).json() for t in threads}  # fmt: skip
                if sum(s.get("event_count", 0) for s in states.values()) == len(records):
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)
        assert sum(s["event_count"] for s in states.values()) == len(records)
        # The log sink trails the processor: wait until the log holds every event (or
        # time out, and let the assertion below say how many went missing).
        sql = f"http://127.0.0.1:{settings.worker_port}/sql"
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            rows = httpx.post(sql, json={"sql": "SELECT count() FROM events"}, timeout=30).json()["rows"]
            if rows[0][0] >= len(records):
                break
            time.sleep(1)
        settle(settings)
    finally:
        stop_worker(restarted)
    from agentlog.processors.pipeline import MemorySeen, Pipeline, Record

    # The state lost and doubled nothing: it equals a pure replay of what was published.
    published = Pipeline(MemorySeen())
    published.process([Record(0, i, r) for i, r in enumerate(records)])
    assert states == {t: published.threads[t].state.public() for t in threads}
    log = EmbeddedService(Settings(data_dir=settings.data_dir))
    try:
        n, distinct = log.sql("SELECT count(), uniqExact(event_id) FROM events").rows[0]
        assert n == distinct  # never a second row
        assert n == len(records)  # no event lost
        replay = Pipeline(MemorySeen())
        replay.process([Record(e.partition, e.offset, e.raw) for e in log.log.replay()])
        assert {t: tp.state.public() for t, tp in replay.threads.items()} == states
    finally:
        log.close()


def test_the_worker_takes_post_events_and_serves_prometheus_metrics_like_agentlog_run(distributed) -> None:
    settings, worker = distributed
    base = f"http://127.0.0.1:{settings.worker_port}"
    wait_written(settings, worker, 0, 0)
    good = [{"event_id": f"http-{n}", "thread_id": "http-thread", "kind": "message", "ts": f"2026-11-30T12:00:0{n}Z",
             "payload": {"role": "user", "text": f"posted {n}"}} for n in range(2)]  # fmt: skip
    body = b"\n".join([json.dumps(e).encode() for e in good] + [b'{"event_id": "broken"'])
    report = httpx.post(f"{base}/events", content=body, timeout=30,
                        headers={"Content-Type": "application/x-ndjson"}).json()
    assert (report["accepted"], report["rejected"]) == (2, 1), report
    wait_written(settings, worker, 2, 1)
    metrics = httpx.get(f"{base}/metrics", timeout=10)
    assert metrics.status_code == 200 and metrics.headers["content-type"].startswith("text/plain")
    values = {line.split(" ")[0]: float(line.split(" ")[1]) for line in metrics.text.splitlines()
              if line and not line.startswith("#")}  # fmt: skip
    assert values["agentlog_events_applied_total"] == 2.0
    assert values["agentlog_events_rejected_total"] == 1.0
    assert values["agentlog_published_total"] == 3.0
    assert values["agentlog_dedup_ids"] == 2.0


def test_a_worker_creates_its_table_topics_and_sees_them_with_leaders_before_faust_subscribes(
        tmp_path: Path, kafka_bootstrap: str, opensearch_url: str) -> None:  # fmt: skip
    # faust creates the changelogs as it starts and subscribes right away; a consumer whose
    # metadata did not show them yet left them out of the assignment, and the worker
    # answered every state query 503 (restoring) until a rebalance minutes later.
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient  # noqa: PLC0415

    from agentlog.streams.kafka.app import declare_app, faust_topics  # noqa: PLC0415
    from agentlog.streams.kafka.topics import ensure_topics  # noqa: PLC0415

    settings = kafka_settings(tmp_path / "dist", kafka_bootstrap, opensearch_url, partitions=3)
    app, _states, _seen = declare_app(settings)
    wanted = {t.name: t for t in faust_topics(app)}
    assert set(wanted) == {f"agentlog-{settings.kafka_namespace}-{name}" for name in
                           ("agentlog-state-changelog", "agentlog-seen-changelog", "__assignor-__leader")}  # fmt: skip
    ensure_topics(kafka_bootstrap, settings.partitions, settings.kafka_namespace, also=list(wanted.values()))
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    try:
        described = {t["name"]: t for t in admin.describe_topics(list(wanted))}
        for name, spec in wanted.items():
            assert described[name]["error_code"] == 0, described[name]
            assert len(described[name]["partitions"]) == spec.num_partitions
            assert all(p["leader_id"] >= 0 for p in described[name]["partitions"])
        changelog = f"agentlog-{settings.kafka_namespace}-agentlog-state-changelog"
        configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, changelog)])
        entries = configs["topic"][changelog]
        assert entries["cleanup.policy"]["value"] == "compact"  # a snapshot lives as long as its thread
    finally:
        admin.close()
    ensure_topics(kafka_bootstrap, settings.partitions, settings.kafka_namespace, also=list(wanted.values()))  # again: no error


def test_a_verbose_worker_logs_each_applied_event_by_thread_and_event_and_a_quiet_one_does_not(
        tmp_path: Path, kafka_bootstrap: str, opensearch_url: str) -> None:  # fmt: skip
    # faust's log handlers pass INFO and up: a per-event line at DEBUG never reached the log.
    for verbose in (True, False):
        settings = kafka_settings(tmp_path / f"dist-{verbose}", kafka_bootstrap, opensearch_url, partitions=1)
        worker = start_worker(settings, verbose=verbose)
        try:
            publisher = KafkaPublisher(settings)
            event = {"event_id": "loud-1", "thread_id": "loud", "kind": "message", "ts": "2026-12-05T00:00:00Z",
                     "payload": {"role": "user", "text": "hello"}}  # fmt: skip
            publisher.publish(json.dumps(event).encode())
            publisher.close()
            wait_written(settings, worker, 1, 0)
            logged = "applied thread=loud event=loud-1 kind=message offset=0" in worker_log(settings, tail=10**7)
            assert logged == verbose, worker_log(settings)
        finally:
            stop_worker(worker)
            drop_index(settings)


def test_events_from_a_transactional_producer_are_applied_and_its_markers_hold_up_no_query(distributed) -> None:
    # Each committed transaction leaves a marker at an offset no consumer sees, an aborted
    # one its records too: the worker must neither apply those, nor wait for their offsets,
    # nor take them for skipped records forever.
    import asyncio  # noqa: PLC0415

    from aiokafka import AIOKafkaProducer  # noqa: PLC0415

    from agentlog.streams.kafka.topics import EVENTS, topic  # noqa: PLC0415

    settings, worker = distributed
    wait_written(settings, worker, 0, 0)
    writer = SessionWriter("tx-thread")
    events = [compact_json(writer.emit("message", {"role": "user", "text": f"step {i}"})) for i in range(6)]
    taken_back = [compact_json(writer.emit("message", {"role": "user", "text": f"aborted {i}"})) for i in range(3)]

    async def publish(committed: list[list[bytes]], aborted: list[bytes]) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, transactional_id=f"tx-{uuid.uuid4()}")
        await producer.start()
        try:
            for chunk in committed:
                async with producer.transaction():
                    for value in chunk:
                        await producer.send(topic(EVENTS, settings.kafka_namespace), value, key=b"tx-thread")
            if aborted:
                await producer.begin_transaction()
                for value in aborted:
                    await producer.send_and_wait(topic(EVENTS, settings.kafka_namespace), value, key=b"tx-thread")
                await producer.abort_transaction()
        finally:
            await producer.stop()

    asyncio.run(publish([events[:3], events[3:]], []))  # two transactions: two markers in the partition
    wait_written(settings, worker, len(events), 0)
    started = time.monotonic()
    state = state_when_served(settings, "tx-thread")
    assert state["event_count"] == len(events)
    assert time.monotonic() - started < 5, "a query waited for offsets the topic does not hold"
    # Taken back after the worker applied the rest: no record after them moves it on.
    asyncio.run(publish([], taken_back))
    started = time.monotonic()
    state = state_when_served(settings, "tx-thread")
    assert state["event_count"] == len(events), "an aborted transaction's events were applied"
    assert time.monotonic() - started < 5, "a query waited for an aborted transaction's offsets"
    assert "answering before the processor caught up" not in worker_log(settings)


def test_the_worker_answers_a_search_read_and_context_that_name_a_just_published_event(distributed) -> None:
    """Read-your-writes on Kafka: the worker first applies what the broker holds, then
    answers from the index, the log, or the events its sink has not written yet."""
    settings, worker = distributed
    lines, _info = sample_session()
    publisher = KafkaPublisher(settings)
    publisher.publish(b"\n".join(lines))
    wait_written(settings, worker, 1, 0)
    base = f"http://127.0.0.1:{settings.worker_port}"
    for n in range(5):
        event = {"event_id": f"ryw-{n}", "thread_id": "demo-docs", "kind": "message", "project": "docs",
                 "ts": f"2026-11-30T12:00:0{n}Z", "payload": {"role": "user", "text": f"zanzibar marker {n}"}}  # fmt: skip
        publisher.publish(json.dumps(event).encode())
        hits = httpx.get(f"{base}/search", params={"q": "zanzibar", "after": f"ryw-{n}"}, timeout=30,
                         follow_redirects=True).json()["hits"]  # fmt: skip
        assert f"ryw-{n}" in {h["event_id"] for h in hits}, hits
        assert {h["source"] for h in hits} <= {"index", "active"}
        read = httpx.get(f"{base}/events/ryw-{n}", timeout=30, follow_redirects=True).json()
        assert read["event"]["payload"]["text"] == f"zanzibar marker {n}" and read["source"] in ("log", "active")
        context = httpx.get(f"{base}/threads/demo-docs/context", params={"budget": 4000}, timeout=30,
                            follow_redirects=True).json()  # fmt: skip
        assert any(f"zanzibar marker {n}" in (m.get("content") or "") for m in context["messages"])
    publisher.close()
    missing = httpx.get(f"{base}/events/never-published", timeout=30, follow_redirects=True)
    assert missing.status_code == 404 and "never accepted" in missing.json()["error"]


def test_an_opensearch_outage_of_30_s_under_load_holds_up_only_the_index_which_then_catches_up(
    tmp_path: Path, kafka_bootstrap: str, opensearch_url: str
) -> None:
    from tests.tcp_proxy import TcpProxy

    host, port = opensearch_url.rsplit("//", 1)[1].rsplit(":", 1)
    proxy = TcpProxy(host, int(port))  # the worker reaches OpenSearch only through it
    settings = kafka_settings(tmp_path / "dist", kafka_bootstrap, f"http://127.0.0.1:{proxy.port}", partitions=3)
    worker = start_worker(settings)
    base = f"http://127.0.0.1:{settings.worker_port}"
    health = lambda: httpx.get(f"{base}/healthz", timeout=10).json()["written"]  # noqa: E731
    try:
        wait_written(settings, worker, 0, 0)
        records = synthetic_events(20_000, 50)
        publisher = KafkaPublisher(settings)

        def load() -> None:  # about 40 s of steady traffic, through the outage
            for i in range(0, len(records), 100):
                publisher.publish(b"\n".join(records[i : i + 100]))
                time.sleep(0.2)

        agents = threading.Thread(target=load)
        agents.start()
        time.sleep(5)
        proxy.stop()
        down_at = health()
        time.sleep(15)
        # Mid-outage: the log keeps filling, state answers, search answers from the active
        # state and says the index is unreachable.
        mid = health()
        assert mid["events"] > down_at["events"]  # the log keeps filling
        state = httpx.get(f"{base}/threads/bench-00007/state", timeout=30, follow_redirects=True).json()
        assert state["event_count"] > 0
        found = httpx.get(f"{base}/search", params={"q": "module", "thread": "bench-00007"}, timeout=30,
                          follow_redirects=True).json()  # fmt: skip
        assert "index_error" in found and found["hits"] and {h["source"] for h in found["hits"]} == {"active"}
        time.sleep(15)
        proxy.start()
        agents.join()
        publisher.close()
        deadline = time.monotonic() + 240
        while health()["indexed"] < len(records) and time.monotonic() < deadline:
            assert worker.poll() is None, worker_log(settings)
            time.sleep(1)
        final = health()
        assert final["events"] == final["indexed"] == len(records) and final["index_retries"] > 0
        rows = httpx.post(f"{base}/sql", json={"sql": "SELECT count(), uniqExact(event_id) FROM events"},
                          timeout=30).json()["rows"]  # fmt: skip
        assert rows == [[len(records), len(records)]]
        client = OpenSearchIndex(opensearch_url, settings.opensearch_index)._client
        client.indices.refresh(index=settings.opensearch_index)
        assert client.count(index=settings.opensearch_index)["count"] == len(records)
    finally:
        stop_worker(worker)
        proxy.stop()
        drop_index(replace(settings, opensearch_url=opensearch_url))  # not the proxy


def test_with_two_workers_killing_one_hands_its_threads_to_the_other_with_state_intact(
    tmp_path: Path, kafka_bootstrap: str, opensearch_url: str
) -> None:
    from agentlog.processors.pipeline import MemorySeen, Pipeline, Record

    ns = f"t{uuid.uuid4().hex[:8]}"
    # One consumer group; each worker has its own chDB file (chDB is in-process; with a
    # ClickHouse server both would write one log) and both share the OpenSearch index.
    both = [kafka_settings(tmp_path / name, kafka_bootstrap, opensearch_url, kafka_namespace=ns, partitions=4,
                           session_timeout_seconds=8.0) for name in ("a", "b")]  # fmt: skip
    doomed, survivor = both
    workers = [start_worker(s) for s in both]
    health = lambda s: httpx.get(f"http://127.0.0.1:{s.worker_port}/healthz", timeout=10).json()["written"]  # noqa: E731
    records = synthetic_events(20_000, 30)
    threads = sorted({f"bench-{t:05d}" for t in range(30)})
    try:
        for s, w in zip(both, workers, strict=True):
            wait_written(s, w, 0, 0)
        deadline = time.monotonic() + 120
        while True:  # the group has settled: each worker owns half of the partitions
            owned = [httpx.get(f"http://127.0.0.1:{s.worker_port}/healthz", timeout=10).json()["partitions"]
                     for s in both]  # fmt: skip
            if all(owned) and sorted(owned[0] + owned[1]) == [0, 1, 2, 3]:
                break
            assert time.monotonic() < deadline, owned
            time.sleep(0.5)
        publisher = KafkaPublisher(settings=survivor)
        publisher.publish(b"\n".join(records[:4000]))
        deadline = time.monotonic() + 120
        while min(health(s)["events"] for s in both) == 0:  # both work
            assert time.monotonic() < deadline, [health(s) for s in both]
            time.sleep(0.2)
        for i in range(4000, len(records), 2000):
            publisher.publish(b"\n".join(records[i : i + 2000]))
        workers[0].send_signal(signal.SIGKILL)
        workers[0].wait()
        publisher.close()
        url = f"http://127.0.0.1:{survivor.worker_port}"
        deadline = time.monotonic() + 240
        states: dict = {}
        while time.monotonic() < deadline:
            assert workers[1].poll() is None, worker_log(survivor)
            try:
                states = {t: httpx.get(f"{url}/threads/{t}/state", timeout=5, follow_redirects=True).json()
                          for t in threads}
                if sum(s.get("event_count", 0) for s in states.values()) == len(records):
                    break
            except (httpx.HTTPError, ValueError):  # the dead worker's threads are not routed yet
                pass
            time.sleep(1)
        replay = Pipeline(MemorySeen())
        replay.process([Record(0, i, r) for i, r in enumerate(records)])
        expected = {t: replay.threads[t].state.public() for t in threads}
        # Which threads differ, by how many events, and what the survivor logged.
        differ = {t: (states.get(t, {}).get("event_count"), expected[t]["event_count"])
                  for t in threads if states.get(t) != expected[t]}  # fmt: skip
        assert not differ, (differ, consumer_position(survivor), worker_log(survivor))
        settle(survivor)
        client = OpenSearchIndex(opensearch_url, survivor.opensearch_index)._client
        client.indices.refresh(index=survivor.opensearch_index)
        assert client.count(index=survivor.opensearch_index)["count"] == len(records)
    finally:
        for w in workers:
            stop_worker(w)
        drop_index(survivor)
    # Nothing lost: every event is in one of the two logs, each without duplicates.
    logged: list[str] = []
    for s in both:
        log = EmbeddedService(Settings(data_dir=s.data_dir))
        try:
            n, distinct = log.sql("SELECT count(), uniqExact(event_id) FROM events").rows[0]
            assert n == distinct
            logged += [r[0] for r in log.sql("SELECT event_id FROM events").rows]
        finally:
            log.close()
    assert set(logged) == {json.loads(r)["event_id"] for r in records}


def test_with_two_workers_either_one_answers_for_every_thread_by_asking_its_owner_with_the_token(
    tmp_path: Path, kafka_bootstrap: str, opensearch_url: str
) -> None:
    from agentlog.processors.pipeline import MemorySeen, Pipeline, Record

    ns, token = f"t{uuid.uuid4().hex[:8]}", "a-token-for-both-workers"
    auth = {"Authorization": f"Bearer {token}"}
    both = [kafka_settings(tmp_path / name, kafka_bootstrap, opensearch_url, kafka_namespace=ns, partitions=4,
                           api_token=token) for name in ("a", "b")]  # fmt: skip
    workers = [start_worker(s) for s in both]
    records = synthetic_events(1500, 12)
    threads = sorted({f"bench-{t:05d}" for t in range(12)})
    replay = Pipeline(MemorySeen())
    replay.process([Record(0, i, r) for i, r in enumerate(records)])
    expected = {t: replay.threads[t].state.public() for t in threads}
    try:
        deadline = time.monotonic() + 180
        while True:  # the group has settled: each worker owns some of the partitions
            try:
                owned = [httpx.get(f"http://127.0.0.1:{s.worker_port}/healthz", headers=auth, timeout=10).json()
                         .get("partitions") for s in both]  # fmt: skip
                if all(owned) and sorted(owned[0] + owned[1]) == [0, 1, 2, 3]:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline and all(w.poll() is None for w in workers), [worker_log(s) for s in both]
            time.sleep(0.5)
        publisher = KafkaPublisher(settings=both[0])
        publisher.publish(b"\n".join(records))
        publisher.close()
        bases = [f"http://127.0.0.1:{s.worker_port}" for s in both]
        for base in bases:
            states: dict = {}
            deadline = time.monotonic() + 180
            while states != expected and time.monotonic() < deadline:
                answers = {t: httpx.get(f"{base}/threads/{t}/state", headers=auth, timeout=30) for t in threads}
                states = {t: a.json() for t, a in answers.items() if a.status_code == 200}
                time.sleep(0.5)
            assert states == expected, {t: (a.status_code, a.text[:300]) for t, a in answers.items()}
        # Each worker's own log holds only its partitions' threads: the others' states above
        # were answered by their owner.
        sql = {"sql": "SELECT DISTINCT thread_id FROM events"}
        deadline = time.monotonic() + 120
        while True:
            logged = [{r[0] for r in httpx.post(f"{b}/sql", json=sql, headers=auth, timeout=30).json()["rows"]}
                      for b in bases]  # fmt: skip
            if logged[0] | logged[1] == set(threads) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert logged[0] and logged[1] and not logged[0] & logged[1] and logged[0] | logged[1] == set(threads)
        for base, foreign in zip(bases, (min(logged[1]), min(logged[0])), strict=True):
            context = httpx.get(f"{base}/threads/{foreign}/context", params={"budget": 4000}, headers=auth,
                                timeout=30).json()  # fmt: skip
            assert context["thread_id"] == foreign and context["messages"], context
            hits = httpx.get(f"{base}/search", params={"q": "module", "thread": foreign, "limit": 50}, headers=auth,
                             timeout=30).json()["hits"]  # fmt: skip
            assert hits and {h["thread_id"] for h in hits} == {foreign}
            refused = httpx.get(f"{base}/threads/{foreign}/state", timeout=30)
            assert refused.status_code == 401  # the token is checked before any routing
    finally:
        for w in workers:
            stop_worker(w)
        drop_index(both[0])


def test_memory_jobs_read_the_kafka_topic_and_the_worker_context_carries_the_facts(distributed) -> None:
    from tests.test_memory import fact

    settings, worker = distributed
    publisher = KafkaPublisher(settings)
    publisher.publish(b"\n".join([
        fact("obs-8", "java.version", "8", "tool_observed", 0, thread="old"),
        fact("user-17", "java.version", "17", "user_confirmed", 3600, thread="new"),
        json.dumps({"event_id": "new-goal", "thread_id": "new", "kind": "goal", "project": "svc",
                    "ts": "2026-01-01T13:00:01Z", "payload": {"text": "upgrade the build"}}).encode(),
    ]))  # fmt: skip
    publisher.close()
    wait_written(settings, worker, 3, 0)
    env = worker_env(settings)

    def memory(*args: str) -> dict:
        done = subprocess.run([sys.executable, "-m", "agentlog", "memory", *args, "--json"], env=env,
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    assert memory("extract")["candidates"] == 2
    assert memory("consolidate")["published"] is True
    (f,) = memory("show", "--project", "svc")["facts"]
    assert (f["value"], f["supporting"]) == ("17", ["user-17"])
    context = httpx.get(f"http://127.0.0.1:{settings.worker_port}/threads/new/context", params={"budget": 4000},
                        timeout=30, follow_redirects=True).json()  # fmt: skip
    assert "java.version" in json.dumps(context["messages"])
    # A revocation goes through Kafka like any event: the worker's state and log see it.
    assert memory("revoke", "user-17", "--reason", "the build used 8")["revoke_event_id"] == "revoke.user-17"
    assert memory("extract")["extracted_threads"] == ["new"]
    memory("consolidate")
    (f,) = memory("show", "--project", "svc")["facts"]
    assert (f["value"], f["status"], f["revoked"]) == ("8", "needs_refresh", ["user-17"])
    read = httpx.get(f"http://127.0.0.1:{settings.worker_port}/events/revoke.user-17", timeout=30,
                     follow_redirects=True).json()  # fmt: skip
    assert read["event"]["kind"] == "revoke"


def test_a_thread_whose_state_outgrows_a_megabyte_is_saved_and_restored_on_kafka(tmp_path: Path, kafka_bootstrap: str,
                                                                                  opensearch_url: str) -> None:  # fmt: skip
    """Constraints are pinned whole in the state, so a thread can hold more than the
    broker's default 1 MiB message: its changelog takes it, and a restart restores it."""
    settings = kafka_settings(tmp_path / "big", kafka_bootstrap, opensearch_url, partitions=1)
    events = [{"event_id": f"big-{i}", "thread_id": "big-thread", "kind": "constraint", "ts": f"2026-11-30T12:00:{i:02d}Z",
               "payload": {"op": "add", "constraint_id": f"c{i}", "text": f"rule {i} " + "x" * 200_000}}
              for i in range(8)]  # fmt: skip
    worker = start_worker(settings)
    try:
        wait_written(settings, worker, 0, 0)
        publisher = KafkaPublisher(settings)
        publisher.publish(b"\n".join(json.dumps(e).encode() for e in events))
        publisher.close()
        wait_written(settings, worker, len(events), 0)
    finally:
        stop_worker(worker)
    restarted = start_worker(settings)
    try:
        wait_written(settings, restarted, 0, 0)
        state = state_when_served(settings, "big-thread")
        assert state.get("event_count") == len(events), (state, worker_log(settings)[-3000:])
        assert sum(len(c["text"]) for c in state["constraints"]) > 1_600_000
    finally:
        stop_worker(restarted)
        drop_index(settings)


def test_the_workers_dedup_ids_stay_within_their_horizon_and_still_catch_recent_duplicates_after_a_restart(
    tmp_path: Path, kafka_bootstrap: str, opensearch_url: str
) -> None:
    settings = kafka_settings(tmp_path / "dedup", kafka_bootstrap, opensearch_url, partitions=1, dedup_horizon=300)
    writer = SessionWriter("dedup-thread")
    events = [compact_json(writer.emit("message", {"role": "user", "text": f"note {i}"})) for i in range(1_002)]
    publisher = KafkaPublisher(settings)
    health = f"http://127.0.0.1:{settings.worker_port}/healthz"
    worker = start_worker(settings)
    try:
        wait_written(settings, worker, 0, 0)
        for start in range(0, 1_000, 200):  # five batches, each beyond the last one's reach
            publisher.publish(b"\n".join(events[start : start + 200]))
            wait_written(settings, worker, start + 200, 0)
        assert httpx.get(health, timeout=5).json()["dedup_ids"] <= 300 + 200
        publisher.publish(b"\n".join([events[999], events[1_000]]))  # a recent duplicate, then a new event
        wait_written(settings, worker, 1_001, 0)
        assert state_when_served(settings, "dedup-thread")["event_count"] == 1_001
    finally:
        stop_worker(worker)
    restarted = start_worker(settings)
    try:
        wait_written(settings, restarted, 0, 0)
        state = state_when_served(settings, "dedup-thread")
        assert state.get("event_count") == 1_001, (state, worker_log(settings)[-3000:])
        publisher.publish(b"\n".join([events[1_000], events[1_001]]))
        deadline = time.monotonic() + 120
        while state_when_served(settings, "dedup-thread")["event_count"] < 1_002 and time.monotonic() < deadline:
            time.sleep(0.5)
        time.sleep(2)  # a wrongly applied duplicate would land with the new event
        assert state_when_served(settings, "dedup-thread")["event_count"] == 1_002, worker_log(settings)[-3000:]
        assert httpx.get(health, timeout=5).json()["dedup_ids"] <= 300 + 200
    finally:
        publisher.close()
        stop_worker(restarted)
        drop_index(settings)


def test_rebuild_on_kafka_replays_the_log_into_the_state_the_workers_restore(
    tmp_path: Path, kafka_bootstrap: str, opensearch_url: str
) -> None:
    from kafka import KafkaProducer  # noqa: PLC0415

    from agentlog.processors.pipeline import Pipeline, Record  # noqa: PLC0415
    from agentlog.streams.kafka.app import changelog_key, declare_app  # noqa: PLC0415

    settings = kafka_settings(tmp_path / "rb", kafka_bootstrap, opensearch_url, partitions=2)
    lines, info = sample_session()
    publisher = KafkaPublisher(settings)
    publisher.publish(b"\n".join(lines))
    publisher.close()
    env = worker_env(settings)
    cli = [sys.executable, "-m", "agentlog"]
    sql = "SELECT thread_id, call_id, orphan_event_id, status, synthetic, latency_ms FROM tool_calls FINAL ORDER BY ALL"
    base = f"http://127.0.0.1:{settings.worker_port}"
    worker = start_worker(settings)
    try:
        wait_written(settings, worker, info["distinct_events"], 2)
        settle(settings)
        threads = [r[0] for r in httpx.post(f"{base}/sql", json={"sql": "SELECT DISTINCT thread_id FROM events"},
                                            timeout=30).json()["rows"]]  # fmt: skip
        before = {t: state_when_served(settings, t) for t in threads}
        pairs_before = httpx.post(f"{base}/sql", json={"sql": sql}, timeout=30).json()["rows"]
        victim = "demo-docs"
        partition = httpx.post(f"{base}/sql", json={"sql": f"SELECT any(partition) FROM events WHERE thread_id = '{victim}'"},
                               timeout=30).json()["rows"][0][0]  # fmt: skip
        running = subprocess.run([*cli, "rebuild"], env=env, capture_output=True, timeout=300)
        assert running.returncode == 1 and b"stop every `agentlog run`" in running.stderr, running.stderr
    finally:
        stop_worker(worker)

    # A faulty release saved a wrong snapshot for one thread: rebuild replaces it from the log.
    wrong = Pipeline()
    wrong.process([Record(partition, 0, compact_json({"event_id": "bad", "thread_id": victim, "kind": "goal",
                                                      "ts": "2026-11-30T00:00:00Z", "payload": {"text": "WRONG"}}))])  # fmt: skip
    app, states, _seen = declare_app(settings)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    producer.send(states.changelog_topic.get_topic_name(), key=changelog_key(app, states, victim),
                  value=wrong.threads[victim].snapshot().model_dump_json().encode(), partition=partition).get(30)  # fmt: skip
    producer.close()

    rebuilt = json.loads(subprocess.run([*cli, "rebuild", "--json"], env=env, capture_output=True, check=True,
                                        timeout=600).stdout)  # fmt: skip
    assert rebuilt == {"events": info["distinct_events"], "threads": len(threads)}
    worker = start_worker(settings)
    try:
        wait_written(settings, worker, 0, 0)  # serving
        after = {t: state_when_served(settings, t) for t in threads}
        assert after[victim]["goal"] == before[victim]["goal"] and after == before
        assert httpx.post(f"{base}/sql", json={"sql": sql}, timeout=30).json()["rows"] == pairs_before
        hits = httpx.get(f"{base}/search", params={"q": "runbook", "limit": 50}, timeout=30).json()["hits"]
        assert hits and {h["source"] for h in hits} == {"index"}
    finally:
        stop_worker(worker)
        drop_index(settings)


def test_run_until_idle_on_kafka_drains_what_is_pending_through_every_sink_and_exits(
    tmp_path: Path, kafka_bootstrap: str, opensearch_url: str
) -> None:
    settings = kafka_settings(tmp_path / "idle", kafka_bootstrap, opensearch_url, partitions=2)
    env = worker_env(settings)
    cli = [sys.executable, "-m", "agentlog"]
    lines, info = sample_session()
    report = json.loads(subprocess.run([*cli, "publish", "-", "--json"], env=env, input=b"\n".join(lines),
                                       capture_output=True, check=True, timeout=120).stdout)  # fmt: skip
    assert report["rejected"] == 2
    try:
        done = subprocess.run([*cli, "run", "--until-idle", "--json"], env=env, capture_output=True, timeout=600)
        assert done.returncode == 0, done.stderr.decode()[-3000:]
        assert json.loads(done.stdout) == {"processed": len(lines), "worker_started": 1}
        # Everything is written and searchable: read it with the worker stopped.
        dist = EmbeddedService(Settings(data_dir=settings.data_dir, opensearch_url=settings.opensearch_url,
                                        opensearch_index=settings.opensearch_index))  # fmt: skip
        try:
            assert dist.sql("SELECT count(), uniqExact(event_id) FROM events").rows == [(info["distinct_events"],) * 2]
            assert dist.sql("SELECT count() FROM rejected_events").rows == [(2,)]
            assert dist.index.search("runbook", SearchFilters(), limit=5)  # refreshed before the exit
        finally:
            dist.close()
        again = subprocess.run([*cli, "run", "--until-idle", "--json"], env=env, capture_output=True, timeout=600)
        assert json.loads(again.stdout)["processed"] == 0  # nothing pending: a no-op

        # No worker runs now: the commands answer from the log and the index, as the
        # embedded default does before `run`, with the same state a replay gives.
        embedded = EmbeddedService(Settings(data_dir=tmp_path / "embedded"))
        try:
            embedded.publish(b"\n".join(lines))
            embedded.catch_up()
            expected = embedded.state("demo-docs")
        finally:
            embedded.close()

        def offline(*args: str) -> Any:
            out = subprocess.run([*cli, *args, "--json"], env=env, capture_output=True, timeout=300)
            assert out.returncode == 0 and b"no worker answers" in out.stderr, out.stderr.decode()[-2000:]
            return json.loads(out.stdout)

        assert offline("state", "demo-docs") == expected
        assert offline("sql", "SELECT count() AS n FROM events") == [{"n": info["distinct_events"]}]
        assert offline("read", "demo-login-bug.00007")["event"]["payload"]["status"] == "error"
        assert "runbook" in offline("search", "runbook", "--thread", "demo-docs")["hits"][0]["snippet"].lower()
        context = offline("context", "demo-docs", "--budget", "60000")
        assert context["sections"][0]["goal"] == expected["goal"]
    finally:
        drop_index(settings)


def test_the_workers_sql_route_refuses_the_hostile_corpus_and_keeps_ingesting(
    tmp_path: Path, kafka_bootstrap: str, opensearch_url: str
) -> None:
    """Issue 12: the SQL sandbox holds on Kafka as embedded (one code path, the log store)."""
    from tests.hostile_sql import CORPUS  # noqa: PLC0415

    settings = kafka_settings(tmp_path / "dist", kafka_bootstrap, opensearch_url, partitions=1,
                              sql_timeout_seconds=3.0)  # fmt: skip
    canary = tmp_path / "canary.txt"
    canary.write_text("kafka-canary-never-readable\n")
    target = tmp_path / "written-by-worker-sql.txt"
    worker = start_worker(settings)
    try:
        wait_written(settings, worker, 0, 0)
        base = f"http://127.0.0.1:{settings.worker_port}"
        with httpx.Client(base_url=base, timeout=30) as http:
            for hostile in CORPUS:
                response = http.post("/sql", json={"sql": hostile.render(str(canary), str(target))})
                assert 400 <= response.status_code < 500, (hostile.sql[:80], response.status_code, response.text[:300])
                assert "kafka-canary" not in response.text
            assert not target.exists()
            event = {"event_id": "after-sql", "thread_id": "sql-thread", "kind": "goal", "ts": "2026-11-30T12:00:00Z",
                     "payload": {"text": "still ingesting"}}  # fmt: skip
            report = http.post("/events", content=json.dumps(event), headers={"content-type": "application/json"})
            assert report.json()["accepted"] == 1
            wait_written(settings, worker, 1, 0)
            rows = http.post("/sql", json={"sql": "SELECT event_id FROM events"}).json()["rows"]
            assert rows == [["after-sql"]]
        assert state_when_served(settings, "sql-thread")["goal"]["text"] == "still ingesting"
    finally:
        stop_worker(worker)
        drop_index(settings)
