"""SPEC §3, immutable log: stored once as received, never updated, the source of truth."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import orjson

from agentlog.processors.pipeline import MemorySeen, Pipeline, Record
from agentlog.streams.config import Settings
from agentlog.streams.cli.demo import synthetic_events
from agentlog.streams.embedded.service import EmbeddedService
from tests.helpers import raw


def test_every_accepted_event_is_stored_once_as_received_byte_for_byte(service: EmbeddedService) -> None:
    original = b'{"event_id":"e1","thread_id":"t1","kind":"goal","ts":"2026-01-01T00:00:00.000000001+01:00",' \
               b'"payload":{"text":"g","extra_in_payload":[1,2]},"custom":{"kept":true}}'  # fmt: skip
    service.publish(original + b"\n" + original)
    service.catch_up()
    assert service.log.count_events() == 1
    logged = service.log.get("e1")
    assert logged is not None and logged.raw == original
    assert service.read("e1")["event"] == orjson.loads(original)


def test_nothing_in_the_log_is_updated_or_deleted_by_a_rebuild(service: EmbeddedService) -> None:
    service.publish(b"\n".join(synthetic_events(3000, 20)))
    service.catch_up()
    before = service.sql("SELECT event_id, raw, offset, ingested_at FROM events ORDER BY event_id").rows
    service.rebuild()
    after = service.sql("SELECT event_id, raw, offset, ingested_at FROM events ORDER BY event_id").rows
    assert before == after


def test_the_state_rebuilt_from_the_log_equals_the_live_state(service: EmbeddedService) -> None:
    service.publish(b"\n".join(synthetic_events(4000, 30)))
    service.catch_up()
    live = {t: service.state(t) for t in service.threads()}
    replay = Pipeline(MemorySeen())
    replay.process([Record(e.partition, e.offset, e.raw) for e in service.log.replay()])
    assert {t: tp.state.public() for t, tp in replay.threads.items()} == live


def checkpointed_offset(state_db: Path) -> int:
    """The topic offset of the running worker's last checkpoint (a WAL reader never blocks it)."""
    if not state_db.exists():
        return 0
    db = sqlite3.connect(f"file:{state_db}?mode=ro", uri=True, timeout=5)
    try:
        row = db.execute("SELECT next_offset FROM positions WHERE name = 'events'").fetchone()
    except sqlite3.OperationalError:  # the schema is not there yet
        return 0
    finally:
        db.close()
    return int(row[0]) if row else 0


def test_a_worker_killed_mid_stream_loses_nothing_and_doubles_nothing(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTLOG_")}
    env.update(AGENTLOG_DATA_DIR=str(tmp_path / "d"), AGENTLOG_BATCH_SIZE="500", AGENTLOG_CHECKPOINT_SECONDS="0.3")
    records = synthetic_events(30_000, 50)
    duplicates = records[:2000:7]  # re-delivered copies must collapse too
    publish = subprocess.run([sys.executable, "-m", "agentlog", "publish", "-"], env=env,
                             input=b"\n".join(records + duplicates), capture_output=True, timeout=300)  # fmt: skip
    assert publish.returncode == 0, publish.stderr
    worker = subprocess.Popen([sys.executable, "-m", "agentlog", "run", "--until-idle"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    settings = Settings(data_dir=tmp_path / "d")
    state_db = settings.data_dir / "state.db"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and worker.poll() is None:  # wait until it has checkpointed some
        time.sleep(0.05)
        if checkpointed_offset(state_db) > 3_000:
            break
    assert worker.poll() is None, "the worker finished before it could be killed; make the stream longer"
    worker.send_signal(signal.SIGKILL)
    worker.wait()

    service = EmbeddedService(settings)
    try:
        partial = service.log.count_events()
        assert 0 < partial  # the kill came mid-stream, after some sink writes
        service.catch_up()
        counts = service.sql("SELECT count(), uniqExact(event_id) FROM events").rows[0]
        assert counts == (len(records), len(records))
        live = {t: service.state(t) for t in service.threads()}
        replay = Pipeline(MemorySeen())
        replay.process([Record(e.partition, e.offset, e.raw) for e in service.log.replay()])
        assert {t: tp.state.public() for t, tp in replay.threads.items()} == live
        pairs = service.sql("SELECT count() FROM tool_calls FINAL").rows[0][0]
        expected = sum(1 for r in records if b'"kind":"tool_call"' in r)
        assert pairs == expected
        hits = service.search("failing check", limit=1000)["hits"]
        assert len({h["event_id"] for h in hits}) == len(hits)
    finally:
        service.close()


def test_a_valid_event_after_a_rejected_one_is_still_processed(service: EmbeddedService) -> None:
    service.publish(b"{broken\n" + raw("e2", "goal", {"text": "after the bad one"}))
    service.catch_up()
    assert service.state("t1")["goal"]["text"] == "after the bad one"


def test_the_events_table_holds_the_envelope_fields_and_payload_of_each_event(service: EmbeddedService) -> None:
    service.publish(b"\n".join([
        raw("e1", "message", {"role": "user", "text": "hi"}, 0, turn_id="T1", repo_commit="abc123"),
        raw("e2", "tool_result", {"call_id": "c", "output": "o"}, 1, agent_id="sub", project="p2",
            schema_version=2, window_id="w7"),
    ]))  # fmt: skip
    service.catch_up()
    rows = service.sql(
        "SELECT event_id, thread_id, kind, toString(ts), window_id, turn_id, agent_id, project, source, "
        "repo_commit, schema_version, payload FROM events ORDER BY event_id"
    ).rows
    assert rows == [
        ("e1", "t1", "message", "2026-01-01 12:00:00.000000", "w0", "T1", "main", "default", "user",
         "abc123", 1, '{"role":"user","text":"hi"}'),
        ("e2", "t1", "tool_result", "2026-01-01 12:00:01.000000", "w7", None, "sub", "p2", "tool",
         None, 2, '{"call_id":"c","output":"o"}'),
    ]  # fmt: skip


def test_a_failing_sink_write_is_retried_from_the_checkpoint_and_nothing_is_lost(settings: Settings) -> None:
    import threading

    service = EmbeddedService(settings)
    real_append = service.log.append_events
    failures = {"left": 1}

    def flaky_append(rows):  # the real chDB write, failing once as a full disk or a restart would
        if failures["left"] and rows:
            failures["left"] -= 1
            raise OSError("simulated write failure")
        real_append(rows)

    service.log.append_events = flaky_append  # type: ignore[method-assign]
    stop = threading.Event()
    worker = threading.Thread(target=service.run_forever, args=(stop,))
    worker.start()
    try:
        records = synthetic_events(2000, 10)
        service.publish(b"\n".join(records))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and service.log.count_events() < len(records):
            time.sleep(0.1)
    finally:
        stop.set()
        worker.join()
    try:
        assert failures["left"] == 0
        assert service.sql("SELECT count(), uniqExact(event_id) FROM events").rows[0] == (2000, 2000)
    finally:
        service.close()
