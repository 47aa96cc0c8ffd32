"""``agentlog bench --only kafka``: the distributed deployment on real servers.

Needs a Kafka broker and an OpenSearch node (``eval "$(infra/up)"``). In one run, on one
broker, with the same generated events:

1. a bare kafka-python loop (consume + JSON parse, nothing else): the ceiling;
2. a faust agent that only takes batches (``agentlog.bench.faust_ceiling``): faust's own
   consume path, which bounded the worker while it read the events through faust (it
   now reads them with its own consumer, ``agentlog.streams.kafka.event_feed``);
3. the deployment end to end, split by role as in production: one processor
   (``agentlog run --role processor``: pairing, state tables) and one sink process
   (``agentlog run --role sinks``: chDB log, OpenSearch index), each on a core of its own;
   twice: from a backlog published before the processes start, timed like the bare loop
   from the first record written until every one is in the log and the index; then live,
   as many events again published as fast as possible while they run (the publisher
   in this process takes its share of the two cores);
4. index lag at a steady 2,000 events/s: from publish until the event is searchable
   in OpenSearch, sampled on every 20th event.

``run(split=False)`` measures the single all-in-one worker (``agentlog run``) instead.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import orjson
from kafka import KafkaConsumer, KafkaProducer

from agentlog.sinks.opensearch_index import OpenSearchIndex
from agentlog.bench.run import percentiles
from agentlog.streams.config import Settings
from agentlog.streams.cli.demo import SessionWriter, synthetic_events
from agentlog.streams.kafka.publisher import KafkaPublisher
from agentlog.streams.kafka.worker_process import free_port, start_worker, stop_worker, worker_log


class Deployment:
    """The processes under test: one all-in-one worker, or a processor and a sink process
    (separate data directories: chDB lives in the sink process)."""

    def __init__(self, settings: Settings, split: bool) -> None:
        self.settings, self.split = settings, split
        # One client for every poll: ``httpx.get`` builds a TLS context per call (about
        # 19 ms of CPU here), which polling every 50 ms took from the processes under test.
        self.http = httpx.Client(timeout=2)
        if split:
            self.sinks = replace(settings, data_dir=settings.data_dir / "sinks", sinks_port=free_port())
            self.processor = replace(settings, data_dir=settings.data_dir / "processor",
                                     sinks_url=f"http://127.0.0.1:{self.sinks.sinks_port}")  # fmt: skip
            self.processes = [start_worker(self.sinks, "sinks"), start_worker(self.processor, "processor")]
            self.health_url = f"http://127.0.0.1:{self.sinks.sinks_port}/healthz"
            self.wait_serving(f"http://127.0.0.1:{settings.worker_port}/healthz")
        else:
            self.processes = [start_worker(settings)]
            self.health_url = f"http://127.0.0.1:{settings.worker_port}/healthz"

    def wait_serving(self, url: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.http.get(url).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"nothing answers at {url}: " + self.logs())

    def written(self) -> int:
        """Events both in the log and in the index: end to end means through both sinks."""
        try:
            counts = self.http.get(self.health_url).json()["written"]
        except (httpx.HTTPError, KeyError):
            return -1
        return min(int(counts["events"]), int(counts["indexed"]))

    def wait_for(self, events: int, timeout: float) -> float:
        """Seconds until the sinks have logged and indexed ``events`` events."""
        t0 = time.perf_counter()
        while self.written() < events:
            if any(p.poll() is not None for p in self.processes):
                raise RuntimeError("a worker exited: " + self.logs())
            if time.perf_counter() - t0 > timeout:
                raise RuntimeError(f"the sinks logged {self.written()} of {events} events in {timeout} s")
            time.sleep(0.05)
        return time.perf_counter() - t0

    def logs(self) -> str:
        if not self.split:
            return worker_log(self.settings)
        return worker_log(self.processor) + "\n" + worker_log(self.sinks, role="sinks")

    def stop(self) -> None:
        for p in self.processes:
            stop_worker(p)
        self.http.close()


def bare_loop(bootstrap: str, records: list[bytes], ns: str) -> dict[str, Any]:
    """The ceiling: kafka-python reading the same records and parsing them, nothing more."""
    name = f"{ns}.bare"
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, batch_size=256 * 1024)
    for r in records:
        producer.send(name, r)
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(name, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             group_id=f"{ns}-bare", enable_auto_commit=False)  # fmt: skip
    n, t0 = 0, 0.0
    while n < len(records):
        for batch in consumer.poll(timeout_ms=500).values():
            t0 = t0 or time.perf_counter()  # from the first record: group joins are not throughput
            for message in batch:
                orjson.loads(message.value)
                n += 1
    elapsed = time.perf_counter() - t0
    consumer.close()
    return {"events": n, "events_per_s": round(n / elapsed)}


def faust_ceiling(bootstrap: str, n_events: int, ns: str) -> int:
    """events/s of a faust agent that only takes batches off the bare loop's topic."""
    # Its data directory is made and removed here: the agent ends with os._exit.
    with tempfile.TemporaryDirectory(prefix="agentlog-ceiling-") as datadir:
        env = {**os.environ, "BENCH_BOOTSTRAP": bootstrap, "BENCH_TOPIC": f"{ns}.bare", "BENCH_EVENTS": str(n_events),
               "BENCH_DATADIR": datadir}  # fmt: skip
        out = subprocess.run([sys.executable, "-m", "agentlog.bench.faust_ceiling", "worker", "-l", "warn"], env=env,
                             capture_output=True, text=True, timeout=900)  # fmt: skip
    found = re.search(r"events_per_s=(\d+)", out.stdout + out.stderr)  # faust logs what it prints
    if found is None:
        raise RuntimeError("the faust ceiling run printed no figure: " + out.stderr[-2000:])
    return int(found.group(1))


def lag_phase(settings: Settings, rate: int, seconds: int) -> dict[str, Any]:
    """Publish ``rate`` events/s for ``seconds``; every 20th is watched until searchable."""
    publisher = KafkaPublisher(settings)
    index = OpenSearchIndex(settings.opensearch_url or "", settings.opensearch_index)
    writers = [SessionWriter(f"lag{rate}-{t:04d}") for t in range(50)]
    published: dict[str, float] = {}
    seen: dict[str, float] = {}
    done = threading.Event()

    def watch() -> None:
        while not done.is_set() or len(seen) < len(published):
            waiting = [i for i in list(published) if i not in seen]
            if waiting:
                found = index.visible_ids(waiting[:1000])
                now = time.perf_counter()
                for event_id in found:
                    seen.setdefault(event_id, now)
            if done.is_set() and time.perf_counter() - stop > 60:
                return
            time.sleep(0.02)

    stop = float("inf")
    watcher = threading.Thread(target=watch)
    watcher.start()
    per_tick = max(1, int(rate * 0.05))  # a burst every 50 ms
    t0 = time.perf_counter()
    n = 0
    while time.perf_counter() - t0 < seconds:
        lines, marks = [], []
        for _ in range(per_tick):
            w = writers[n % len(writers)]
            event = w.emit("message", {"role": "assistant", "text": f"lag probe {n}"})
            lines.append(orjson.dumps(event))
            if n % 20 == 0:
                marks.append(event["event_id"])
            n += 1
        sent = time.perf_counter()
        publisher.publish(b"\n".join(lines))
        for m in marks:
            published[m] = sent
        time.sleep(max(0.0, t0 + (n / rate) - time.perf_counter()))
    stop = time.perf_counter()
    publisher.close()
    done.set()
    watcher.join()
    lags = [seen[m] - published[m] for m in published if m in seen]
    return {"events": n, "rate": round(n / (stop - t0)), "samples": len(lags),
            "missing": len(published) - len(lags), **(percentiles(lags) if lags else {})}  # fmt: skip


def publish_all(settings: Settings, records: list[bytes]) -> float:
    """Seconds to publish ``records`` through the publisher, 5,000 to a call."""
    publisher = KafkaPublisher(settings)
    t0 = time.perf_counter()
    for i in range(0, len(records), 5000):
        publisher.publish(b"\n".join(records[i : i + 5000]))
    elapsed = time.perf_counter() - t0
    publisher.close()
    return elapsed


def report(what: str, rate: int, bare: dict[str, Any], ceiling: int, note: str = "") -> None:
    ratio = rate / max(bare["events_per_s"], 1)
    print(f"{what} (pair, state tables, chDB log, OpenSearch): {rate:,} events/s{note}; "
          f"{ratio:.2f} of the bare loop (target >= 0.33), faust alone / this: {ceiling / max(rate, 1):.1f}x "
          "(same run, same broker)", flush=True)  # fmt: skip


WARM_UP_EVENTS = 20_000
"""Events of one warm-up round: sent end to end through a deployment of their own before
anything is timed. The first run after the servers start was about half as fast end to
end (4,384 against 9,320 events/s, two consecutive runs); one round of 20,000 (or 60,000)
events lifted it only to 5,300-5,700: the servers (their JIT compilers share the two
cores with the benchmark) stay slow for their first minutes of load, not their first
events."""
WARM_UP_ROUNDS = 30
"""At most this many rounds; warm once two consecutive rounds agree (``WARM_UP_AGREE``)
after ``WARM_UP_SECONDS`` of rounds."""
WARM_UP_AGREE = 0.15
WARM_UP_SECONDS = 120.0
"""Rounds go on for at least this long: servers just started ran two rounds at the same
slow rate (3,969 and 4,327 events/s, then 4,982 timed) and were twice as fast a run later."""


def warm_up(base: Settings, ns: str, records: list[bytes], split: bool) -> list[int]:
    """``records`` end to end through a deployment on a namespace and index of their own,
    round after round until two consecutive rounds' rates (events/s from the first record
    written) agree within ``WARM_UP_AGREE``: the servers are then as warm as a run on
    servers up for minutes. Returns each round's rate."""
    rates: list[int] = []
    t0 = time.monotonic()
    for round_no in range(WARM_UP_ROUNDS):
        rates.append(_warm_up_round(base, f"{ns}w{round_no}", records, split))
        print(f"warm-up round {round_no + 1}: {len(records):,} events end to end through a deployment of "
              f"their own at {rates[-1]:,} events/s (not timed below)", flush=True)  # fmt: skip
        if warmed_up(rates, time.monotonic() - t0):
            break
    return rates


def warmed_up(rates: list[int], seconds: float) -> bool:
    """Whether warm-up rounds at ``rates`` (events/s, in order) over ``seconds`` leave the
    servers warm: the last two agree within ``WARM_UP_AGREE``, after ``WARM_UP_SECONDS``."""
    agree = len(rates) >= 2 and abs(rates[-1] - rates[-2]) <= WARM_UP_AGREE * max(rates[-1], rates[-2])
    return agree and seconds >= WARM_UP_SECONDS


def _warm_up_round(base: Settings, ns: str, records: list[bytes], split: bool) -> int:
    with tempfile.TemporaryDirectory(prefix="agentlog-bench-kafka-warm-") as tmp:
        settings = Settings(data_dir=Path(tmp), kafka_bootstrap=base.kafka_bootstrap,
                            opensearch_url=base.opensearch_url, opensearch_index=f"agentlog-{ns}-warm",
                            kafka_namespace=f"{ns}warm", worker_port=free_port(), partitions=4)  # fmt: skip
        publish_all(settings, records)
        deployment = Deployment(settings, split)
        try:
            deployment.wait_for(1, 300)
            t0 = time.perf_counter()
            deployment.wait_for(len(records), 900)
            return round(len(records) / (time.perf_counter() - t0))
        finally:
            deployment.stop()
            OpenSearchIndex(base.opensearch_url, settings.opensearch_index)._client.indices.delete(
                index=settings.opensearch_index, ignore_unavailable=True)


def run(n_events: int = 100_000, partitions: int = 4, lag_rates: tuple[int, ...] = (2000, 500),
        split: bool = True) -> int:  # fmt: skip
    base = Settings.from_env()
    if not base.kafka_bootstrap or not base.opensearch_url:
        print('the kafka benchmark needs real servers: run  eval "$(infra/up)"  first '
              "(AGENTLOG_KAFKA_BOOTSTRAP and AGENTLOG_OPENSEARCH_URL)", file=sys.stderr)  # fmt: skip
        return 2
    ns = f"bench{uuid.uuid4().hex[:6]}"
    records = synthetic_events(2 * n_events, 200)  # a backlog, then as many live (the same threads go on)
    backlog, live = records[:n_events], records[n_events:]
    bare = bare_loop(base.kafka_bootstrap, backlog, ns)
    print(f"bare kafka-python loop (consume + parse only): {bare['events_per_s']:,} events/s", flush=True)
    ceiling = faust_ceiling(base.kafka_bootstrap, n_events, ns)
    print(f"faust agent taking batches, nothing else (faust's own consume path): {ceiling:,} events/s", flush=True)
    warm_up(base, ns, records[:WARM_UP_EVENTS], split)
    with tempfile.TemporaryDirectory(prefix="agentlog-bench-kafka-") as tmp:
        settings = Settings(data_dir=Path(tmp), kafka_bootstrap=base.kafka_bootstrap,
                            opensearch_url=base.opensearch_url, opensearch_index=f"agentlog-{ns}",
                            kafka_namespace=ns, worker_port=free_port(), partitions=partitions)  # fmt: skip
        what = "processor + sink process" if split else "one all-in-one worker"
        publish_s = publish_all(settings, backlog)
        print(f"publisher alone (validate, produce, acks=all): {n_events / publish_s:,.0f} events/s", flush=True)
        deployment = Deployment(settings, split)
        try:
            deployment.wait_for(1, 300)  # the first record written: startup and recovery are not throughput
            t0 = time.perf_counter()
            deployment.wait_for(n_events, 900)
            report(f"end to end from a backlog, {what}", round(n_events / (time.perf_counter() - t0)), bare, ceiling)
            t0 = time.perf_counter()
            publish_s = publish_all(settings, live)
            deployment.wait_for(2 * n_events, 900)
            elapsed = time.perf_counter() - t0
            report(f"end to end live, {what}", round(n_events / elapsed), bare, ceiling,
                   f"; publish {publish_s:.1f} s of {elapsed:.1f} s")  # fmt: skip
            published = 2 * n_events
            for rate in lag_rates:  # 2,000/s as asked; a lower rate shows the lag within capacity
                lag = lag_phase(settings, rate, 20)
                published += lag["events"]
                print(f"index lag at {lag['rate']:,} events/s (publish to searchable in OpenSearch, "
                      f"{lag['samples']} samples, {lag['missing']} never seen): p50 {lag.get('p50_ms')} ms "
                      f"p99 {lag.get('p99_ms')} ms max {lag.get('max_ms')} ms", flush=True)  # fmt: skip
                deployment.wait_for(published, 900)  # drained before the next rate
        finally:
            deployment.stop()
            OpenSearchIndex(base.opensearch_url, settings.opensearch_index)._client.indices.delete(
                index=settings.opensearch_index, ignore_unavailable=True)
    return 0


__all__ = ["run", "warm_up", "warmed_up"]
