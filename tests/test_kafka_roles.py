"""The Kafka deployment split by role: processors (`agentlog run --role processor`) and sink
processes (`agentlog run --role sinks`), each kind scaled apart, on a real broker and a
real OpenSearch node. Each event reaches the log and the index once, read-your-writes
holds from the processor before the sinks write, and a sink process killed with -9 or
joined by a second one loses and duplicates nothing."""

from __future__ import annotations

import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from agentlog.sinks.opensearch_index import OpenSearchIndex
from agentlog.streams.cli.demo import SessionWriter, synthetic_events
from agentlog.streams.config import Settings
from agentlog.streams.kafka.publisher import KafkaPublisher
from agentlog.streams.kafka.worker_process import free_port, start_worker, stop_worker, worker_log


@pytest.fixture
def roles(tmp_path: Path, kafka_bootstrap: str, opensearch_url: str) -> Iterator[dict[str, Any]]:
    """One namespace: settings of a processor and of two sink processes (not started)."""
    ns = f"r{uuid.uuid4().hex[:8]}"
    base = Settings(kafka_bootstrap=kafka_bootstrap, opensearch_url=opensearch_url, opensearch_index=f"agentlog-{ns}",
                    kafka_namespace=ns, partitions=4)  # fmt: skip
    sinks = [replace(base, data_dir=tmp_path / f"sinks{i}", sinks_port=free_port()) for i in range(2)]
    processor = replace(base, data_dir=tmp_path / "processor", worker_port=free_port(),
                        sinks_url=f"http://127.0.0.1:{sinks[0].sinks_port}")  # fmt: skip
    running: list[subprocess.Popen] = []
    yield {"processor": processor, "sinks": sinks, "running": running}
    for p in running:
        if p.poll() is None:
            p.kill()
            p.wait()
    OpenSearchIndex(opensearch_url, base.opensearch_index)._client.indices.delete(
        index=base.opensearch_index, ignore_unavailable=True)


def start(roles: dict[str, Any], settings: Settings, role: str) -> subprocess.Popen:
    process = start_worker(settings, role)
    roles["running"].append(process)
    return process


def publish(settings: Settings, lines: list[bytes]) -> set[str]:
    publisher = KafkaPublisher(settings)
    try:
        for i in range(0, len(lines), 5000):
            publisher.publish(b"\n".join(lines[i : i + 5000]))
    finally:
        publisher.close()
    return {orjson.loads(line)["event_id"] for line in lines}


def sinks_url(settings: Settings) -> str:
    return f"http://127.0.0.1:{settings.sinks_port}"


def health(settings: Settings) -> dict[str, Any] | None:
    try:
        return httpx.get(f"{sinks_url(settings)}/healthz", timeout=5).json()
    except httpx.HTTPError:
        return None


def logged_ids(settings: Settings) -> list[str]:
    """Every event id in this sink process's log, one per row (duplicates kept)."""
    body = httpx.post(f"{sinks_url(settings)}/sql", json={"sql": "SELECT event_id FROM events"}, timeout=60)
    assert body.status_code == 200, body.text
    return [row[0] for row in body.json()["rows"]]


def indexed_count(settings: Settings) -> int:
    index = OpenSearchIndex(settings.opensearch_url or "", settings.opensearch_index)
    index.refresh()
    return int(index._client.count(index=settings.opensearch_index)["count"])


def wait_until(check: Any, what: str, processes: list[subprocess.Popen], *logs_of: tuple[Settings, str],
               timeout: float = 240) -> None:  # fmt: skip
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in processes:
            if p.poll() is not None:
                logs = "\n".join(worker_log(s, role=role) for s, role in logs_of)
                raise AssertionError(f"a process exited while waiting for {what}: {logs}")
        if check():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def all_logged(sinks: list[Settings], n: int) -> bool:
    try:
        return sum(len(logged_ids(s)) for s in sinks) >= n and indexed_count(sinks[0]) >= n
    except (httpx.HTTPError, AssertionError):
        return False


def assert_once(sinks: list[Settings], published: set[str]) -> None:
    ids = [i for s in sinks for i in logged_ids(s)]
    assert len(ids) == len(set(ids)), "an event was logged twice"
    assert set(ids) == published
    assert indexed_count(sinks[0]) == len(published)


def test_with_the_sinks_in_their_own_process_every_published_event_reaches_the_log_and_the_index_once(
    roles: dict[str, Any],
) -> None:
    processor, sink = roles["processor"], roles["sinks"][0]
    running = [start(roles, sink, "sinks"), start(roles, processor, "processor")]
    published = publish(processor, synthetic_events(6000, 60))
    wait_until(lambda: all_logged([sink], len(published)), "the log and the index", running,
               (sink, "sinks"), (processor, "processor"))  # fmt: skip
    assert_once([sink], published)
    answer = health(sink)
    assert answer is not None and answer["role"] == "sinks"
    assert sorted(answer["partitions"]["log"]) == [0, 1, 2, 3]  # the only sink process holds every partition
    assert answer["lag"]["log"] == {"0": 0, "1": 0, "2": 0, "3": 0}  # all written
    assert "agentlog_sink_lag_records" in httpx.get(f"{sinks_url(sink)}/metrics", timeout=5).text


def test_a_just_published_event_is_found_by_search_and_read_from_the_processor_before_the_sinks_write_it(
    roles: dict[str, Any],
) -> None:
    processor, sink = roles["processor"], roles["sinks"][0]
    worker = start(roles, processor, "processor")  # no sink process yet: nothing is written
    w = SessionWriter(f"ryw-{uuid.uuid4().hex[:6]}")
    event = w.emit("message", {"role": "user", "text": "the flamingo quota alarm fired"})
    publish(processor, [orjson.dumps(event)])
    url = f"http://127.0.0.1:{processor.worker_port}"

    def read() -> dict[str, Any]:
        """The read's answer; empty until the processor serves (and has applied the event)."""
        try:
            response = httpx.get(f"{url}/events/{event['event_id']}", timeout=60)
        except httpx.HTTPError:
            return {}
        return response.json() if response.status_code == 200 else {}

    wait_until(read, "the processor to apply the event", [worker], (processor, "processor"))
    assert read()["source"] == "active"
    found = httpx.get(f"{url}/search", params={"q": "flamingo", "thread": w.thread_id}, timeout=60)
    assert found.status_code == 200, found.text
    hits = found.json()["hits"]
    assert [(h["event_id"], h["source"]) for h in hits] == [(event["event_id"], "active")]
    assert httpx.get(f"{url}/threads/{w.thread_id}/state", timeout=60).json()["event_count"] == 1

    # The sinks start: the processor learns from their committed offsets that the log holds
    # the event, and answers from the log (read through the sink process: chDB is there).
    running = [worker, start(roles, sink, "sinks")]
    wait_until(lambda: read().get("source") == "log", "the processor to see the event logged", running,
               (sink, "sinks"), (processor, "processor"))  # fmt: skip
    context = httpx.get(f"{url}/threads/{w.thread_id}/context", params={"budget": 2000}, timeout=60).json()
    assert "flamingo" in orjson.dumps(context).decode()
    sql = httpx.post(f"{url}/sql", json={"sql": "SELECT count() FROM events"}, timeout=60).json()
    assert sql["rows"] == [[1]]


def test_killing_the_sink_process_and_the_processor_with_kill_9_and_restarting_them_loses_and_duplicates_nothing(
    roles: dict[str, Any],
) -> None:
    processor, sink = roles["processor"], roles["sinks"][0]
    sinks = start(roles, sink, "sinks")
    worker = start(roles, processor, "processor")
    published = publish(processor, synthetic_events(20000, 100, seed=11))
    wait_until(lambda: (health(sink) or {}).get("written", {}).get("events", 0) > 0, "the first writes",
               [sinks, worker], (sink, "sinks"), (processor, "processor"))  # fmt: skip
    for killed in (sinks, worker):  # mid-stream: the sinks first, then the processor
        killed.send_signal(signal.SIGKILL)
        killed.wait()
    more = publish(processor, synthetic_events(24000, 100, seed=11)[20000:])  # the same threads go on
    running = [start(roles, sink, "sinks"), start(roles, processor, "processor")]
    wait_until(lambda: all_logged([sink], len(published | more)), "the log and the index after the restarts",
               running, (sink, "sinks"), (processor, "processor"))  # fmt: skip
    assert_once([sink], published | more)
    for p in running:
        stop_worker(p)


def test_two_sink_processes_share_the_partitions_and_write_each_event_once(roles: dict[str, Any]) -> None:
    processor, sinks = roles["processor"], roles["sinks"]
    running = [start(roles, s, "sinks") for s in sinks]

    def shared() -> bool:
        answers = [health(s) for s in sinks]
        if any(a is None for a in answers):
            return False
        for sink in ("log", "index"):
            held = [set(a["partitions"][sink]) for a in answers]  # type: ignore[index]
            if not all(held) or held[0] & held[1] or held[0] | held[1] != {0, 1, 2, 3}:
                return False
        return True

    wait_until(shared, "both sink processes to hold partitions", running, (sinks[0], "sinks"), (sinks[1], "sinks"))
    running.append(start(roles, processor, "processor"))
    published = publish(processor, synthetic_events(8000, 80, seed=5))
    wait_until(lambda: all_logged(sinks, len(published)), "the log and the index", running,
               (sinks[1], "sinks"), (processor, "processor"))  # fmt: skip
    assert_once(sinks, published)
    assert all(logged_ids(s) for s in sinks), "each sink process wrote its share"


def test_a_processor_forgets_an_unlogged_event_only_once_the_log_sink_committed_past_its_record() -> None:
    from agentlog.streams.kafka.sink_progress import AcceptedMarks  # noqa: PLC0415

    marks = AcceptedMarks()
    marks.add(0, 10, ["a", "b"])
    marks.add(0, 11, ["c"])
    marks.add(1, 5, ["d"])
    assert list(marks.logged({0: 10, 1: 5})) == []  # committed offset 10: record 10 is not written yet
    assert list(marks.logged({0: 11})) == ["a", "b"]
    assert marks.waiting() == [0, 1]
    assert sorted(marks.logged({0: 12, 1: 6})) == ["c", "d"]
    assert marks.waiting() == []
