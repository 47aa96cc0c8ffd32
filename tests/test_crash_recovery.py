"""kill -9 at random moments while events are published and processed, then each store's
files damaged in turn: every accepted event logged once, state equal to a replay of the
log, and the data directory usable afterwards (issue 12, "the data directory"). The kills
land while the sink stage trails the processor by a varying group commit (issue 15): the
processor and the sinks each lose their uncommitted work, and nothing is lost or doubled.

``AGENTLOG_CRASH_EVENTS`` sets the event count (default the bar's 100,000, about five
minutes on two cores; a smaller count gives a quicker local run) and
``AGENTLOG_CRASH_SEED`` the seed of the kill moments (printed, to replay a failure).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson

from agentlog.streams.config import Settings
from agentlog.streams.cli.demo import iter_synthetic_events
from agentlog.streams.embedded.publisher import LocalPublisher
from tests.conftest import free_port
from tests.helpers import child_pids

EVENTS = int(os.environ.get("AGENTLOG_CRASH_EVENTS", "100000"))
KILLS = 20
CHUNK = 500

# Run in a fresh process (the stores lock their files to one process): the invariants.
CHECK = r"""
import orjson, sys
from pathlib import Path
from agentlog.processors.pipeline import Pipeline, Record
from agentlog.streams.config import Settings
from agentlog.streams.embedded.service import EmbeddedService
svc = EmbeddedService(Settings(data_dir=Path(sys.argv[1])))
count, unique = svc.sql("SELECT count(), uniqExact(event_id) FROM events").rows[0]
replay = Pipeline()
replay.process([Record(e.partition, e.offset, e.raw) for e in svc.log.replay()])
differ = [t for t in svc.threads() if svc.state(t) != replay.threads[t].state.public()]
hits = svc.search("module")["hits"]
print(orjson.dumps({"count": count, "unique": unique, "docs": svc.index.doc_count(),
                    "threads": len(svc.threads()), "replayed": len(replay.threads),
                    "differ": differ[:5], "hits": len(hits)}).decode())
svc.close()
"""


def _cli(env: dict[str, str], *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agentlog", *args], env=env, capture_output=True,
                          timeout=timeout)  # fmt: skip


def _invariants(env: dict[str, str], unique_accepted: int) -> None:
    proc = subprocess.run([sys.executable, "-c", CHECK, env["AGENTLOG_DATA_DIR"]], env=env,
                          capture_output=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    got = orjson.loads(proc.stdout.splitlines()[-1])
    assert (got["count"], got["unique"]) == (unique_accepted, unique_accepted), got  # logged exactly once
    assert got["differ"] == [] and got["threads"] == got["replayed"], got  # state equals a replay
    assert got["docs"] == unique_accepted and got["hits"] > 0, got  # searchable, every event


class Publisher(threading.Thread):
    """Publishes the events in chunks (some twice: a producer retrying), counting what the
    topic accepted, while the processor is being killed."""

    def __init__(self, settings: Settings, seed: int) -> None:
        super().__init__(daemon=True)
        self.settings, self.rng = settings, random.Random(seed)
        self.ids: set[str] = set()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            publisher = LocalPublisher(self.settings)
            chunk: list[bytes] = []
            for event in iter_synthetic_events(EVENTS, 200, seed=5):
                chunk.append(event)
                if len(chunk) == CHUNK:
                    self._send(publisher, chunk)
                    chunk = []
            self._send(publisher, chunk)
            publisher.close()
        except BaseException as error:  # noqa: BLE001 - reported by the test
            self.error = error

    def _send(self, publisher: LocalPublisher, chunk: list[bytes]) -> None:
        copies = 2 if self.rng.random() < 0.1 else 1
        for _ in range(copies):
            report = publisher.publish(b"\n".join(chunk))
            assert report.accepted == len(chunk), report
        self.ids.update(orjson.loads(e)["event_id"] for e in chunk)
        time.sleep(0.35)


def _sink_process(server: int, tries: int = 100) -> int | None:
    """The pid of ``agentlog run``'s sink process (its spawned child), once it runs."""
    for _ in range(tries):
        try:
            for child in child_pids(server):
                if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes():
                    return int(child)
        except OSError:  # a child that just ended
            pass
        time.sleep(0.05)
    return None


def _children(pid: int | None) -> list[int]:
    try:
        return child_pids(pid) if pid is not None else []
    except OSError:  # it ended meanwhile
        return []


def _gone(pid: int | None, timeout: float = 10.0) -> bool:
    """The process has ended (a zombie not yet reaped by init counts as ended)."""
    deadline = time.monotonic() + timeout
    while pid is not None and time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
                return True
        except OSError:
            return True
        time.sleep(0.05)
    return pid is None


def _damage_cases(data: Path) -> list[tuple[str, object]]:
    def truncate_files(path: Path) -> None:
        for f in path.rglob("*"):
            if f.is_file():
                os.truncate(f, f.stat().st_size // 2)

    return [
        ("state.db garbage", lambda: (data / "state.db").write_bytes(os.urandom(50_000))),
        ("state.db truncated", lambda: os.truncate(data / "state.db", (data / "state.db").stat().st_size // 2)),
        ("state.db deleted", lambda: (data / "state.db").unlink()),
        ("index/ files truncated", lambda: truncate_files(data / "index")),
        ("index/ deleted", lambda: shutil.rmtree(data / "index")),
        ("log/ files truncated", lambda: truncate_files(data / "log")),
        ("log/ deleted", lambda: shutil.rmtree(data / "log")),
        ("topic.db -shm deleted", lambda: (data / "topic.db-shm").unlink(missing_ok=True)),
    ]


def test_kill_9_at_random_moments_then_damaged_stores_leave_every_event_logged_once_and_state_a_replay(
    cli_env: dict[str, str],
) -> None:
    seed = int(os.environ.get("AGENTLOG_CRASH_SEED", str(random.randrange(1 << 30))))
    print(f"crash seed {seed} ({EVENTS} events, {KILLS} kills)")
    rng = random.Random(seed)
    data = Path(cli_env["AGENTLOG_DATA_DIR"])
    env = {**cli_env, "AGENTLOG_HTTP_PORT": str(free_port()), "AGENTLOG_CHECKPOINT_SECONDS": "0.5"}
    publisher = Publisher(Settings(data_dir=data), seed)
    publisher.start()
    killed_sinks = 0
    for _ in range(KILLS):
        # The sink stage trails the processor by a group (by time) and commits its position
        # at each index commit: kills land with applied events not yet written, written but
        # not committed, and the processor's checkpoint on either side of the sinks'.
        lag = {"AGENTLOG_SINK_FLUSH_MS": str(rng.choice([1, 200, 1500])),
               "AGENTLOG_REFRESH_SECONDS": str(rng.choice([0.2, 1.0, 2.5]))}  # fmt: skip
        proc = subprocess.Popen([sys.executable, "-m", "agentlog", "run"], env={**env, **lag},
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
        time.sleep(rng.uniform(0.5, 3.0))
        sinks = _sink_process(proc.pid)
        if sinks is not None and rng.random() < 0.5:  # the sink process alone, then both
            os.kill(sinks, signal.SIGKILL)
            killed_sinks += 1
            time.sleep(rng.uniform(0.2, 3.0))
        current = _sink_process(proc.pid, tries=1)  # the server starts another one
        helpers = _children(current)  # its encoding helpers, if a catch-up started them
        proc.send_signal(signal.SIGKILL)
        try:  # its stderr ends when every process that inherited it has ended
            _, stderr = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            raise AssertionError("a process the killed server started still holds its stderr") from None
        assert b"Traceback" not in stderr, stderr.decode()[-3000:]
        assert _gone(current), "the sink process outlived its server"
        assert all(_gone(h) for h in helpers), "an encoding helper outlived its sink process"
    publisher.join(timeout=600)
    assert publisher.error is None, publisher.error
    print(f"killed the sink process alone {killed_sinks} times")
    done = _cli(env, "run", "--until-idle")
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    unique = len(publisher.ids)
    _invariants(env, unique)

    for label, damage in _damage_cases(data):
        damage()  # type: ignore[operator]
        healed = _cli(env, "run", "--until-idle")
        assert healed.returncode == 0, f"{label}: {healed.stderr.decode()[-3000:]}"
        assert b"Traceback" not in healed.stderr, label
        print(label, "->", healed.stderr.decode().strip()[-300:])
        _invariants(env, unique)

    os.truncate(data / "topic.db", (data / "topic.db").stat().st_size // 2)
    broken = _cli(env, "state", "bench-00001")
    message = broken.stderr.decode()
    assert broken.returncode == 1 and "Traceback" not in message, message
    assert "topic.db" in message and "backup" in message, message
