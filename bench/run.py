"""``agentlog bench``: throughput and latency percentiles of the hot paths, in one run.

1. processors alone (validate + dedup + pair + reduce), one core;
2. the whole embedded pipeline: publish to the on-disk topic, then processors, chDB log,
   tantivy index and state checkpoints until idle;
3. ``state`` and ``read`` latency on the resulting data.

Other sections: memory, context, fidelity (``agentlog.bench.fidelity``), kafka, rebuild,
client (``agentlog.bench.client``: publishing through ``agentlog.Client`` beside JSON lines).
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import Any

import httpx
import orjson

from agentlog.processors.pipeline import MemorySeen, Pipeline, Record
from agentlog.streams.config import Settings
from agentlog.streams.cli.demo import iter_synthetic_events, synthetic_events
from agentlog.streams.memory.jobs import Memory
from agentlog.streams.embedded.publisher import LocalPublisher
from agentlog.streams.embedded.service import EmbeddedService


def percentiles(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    pick = lambda q: s[min(len(s) - 1, int(q * len(s)))] * 1000.0  # noqa: E731
    return {"p50_ms": round(pick(0.50), 3), "p99_ms": round(pick(0.99), 3), "max_ms": round(s[-1] * 1000, 3)}


def bench_processors(records: list[bytes], batch: int = 1000) -> dict[str, Any]:
    pipeline = Pipeline(MemorySeen())
    lat: list[float] = []
    t0 = time.perf_counter()
    for i in range(0, len(records), batch):
        b0 = time.perf_counter()
        pipeline.process([Record(0, i + j, r) for j, r in enumerate(records[i : i + batch])])
        lat.append(time.perf_counter() - b0)
    elapsed = time.perf_counter() - t0
    return {"events": len(records), "seconds": round(elapsed, 2),
            "events_per_s": round(len(records) / elapsed), "batch_of_1000": percentiles(lat)}  # fmt: skip


def bench_pipeline(n_events: int, n_threads: int, data_dir: Path) -> tuple[dict[str, Any], EmbeddedService]:
    """Publish a generated stream (not held in memory), then drain it through every sink."""
    service = EmbeddedService(Settings(data_dir=data_dir))
    stream = iter_synthetic_events(n_events, n_threads)
    t0 = time.perf_counter()
    while chunk := list(islice(stream, 20_000)):
        service.publish(b"\n".join(chunk))
    published = time.perf_counter() - t0
    lat: list[float] = []
    driver, sinks = service.driver, service.sinks
    t1 = time.perf_counter()
    while True:
        b0 = time.perf_counter()
        n = driver.step()  # the processor, then the sink stage's group of the same batch
        if n == 0:
            break
        sinks.step(force=True)
        lat.append(time.perf_counter() - b0)
    driver.checkpoint()
    sinks.drain()
    elapsed = time.perf_counter() - t0
    return {
        "events": n_events,
        "publish_seconds": round(published, 2),
        "process_seconds": round(time.perf_counter() - t1, 2),
        "seconds": round(elapsed, 2),
        "events_per_s": round(n_events / elapsed),
        "batch_of_5000": percentiles(lat),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "log_rows": service.log.count_events(),
    }, service


def bench_served(n_events: int, n_threads: int, data_dir: Path) -> dict[str, Any]:
    """The same stream published first, then ``agentlog run`` (the processor in the server,
    the sinks in a process of their own: both cores) timed from its start until every
    event is applied, logged and indexed (``/healthz``), as a user runs it."""
    service = EmbeddedService(Settings(data_dir=data_dir))
    stream = iter_synthetic_events(n_events, n_threads)
    while chunk := list(islice(stream, 20_000)):
        service.publish(b"\n".join(chunk))
    end = service.bus.end_offsets()[0]
    service.close()  # nothing applied yet: the server does all of it
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "AGENTLOG_DATA_DIR": str(data_dir), "AGENTLOG_HTTP_PORT": str(port)}
    t0 = time.perf_counter()
    server = _serve(env)
    applied_s = None
    http = httpx.Client(timeout=10)  # one client: ``httpx.get`` costs ~19 ms of CPU a call
    try:
        while True:
            health = http.get(f"http://127.0.0.1:{port}/healthz").json()
            if applied_s is None and health.get("processed_offset", 0) >= end:
                applied_s = time.perf_counter() - t0
            if health.get("processed_offset", 0) >= end and health.get("sink_lag", 1) == 0 \
                    and health.get("logged_offset", 0) >= end:  # fmt: skip
                break
            time.sleep(0.05)
        elapsed = time.perf_counter() - t0
        # The sink process and its encoding helpers: every process below the server.
        rss = {"server": _peak_rss_mib(server.pid), "sinks": sum(_peak_rss_mib(c) for c in _descendants(server.pid))}
        rss["together"] = rss["server"] + rss["sinks"]  # what the bar counts: both processes' peaks
    finally:
        http.close()
        server.terminate()
        server.wait(timeout=300)
    return {"events": n_events, "applied_seconds": round(applied_s or elapsed, 2), "seconds": round(elapsed, 2),
            "events_per_s": round(n_events / elapsed), "peak_rss_mib": rss}  # fmt: skip


def bench_reads(service: EmbeddedService, threads: list[str], event_ids: list[str], n: int = 2000) -> dict[str, Any]:
    rng = random.Random(3)
    state_lat, read_lat = [], []
    for _ in range(n):
        t = rng.choice(threads)
        s0 = time.perf_counter()
        service.state(t)
        state_lat.append(time.perf_counter() - s0)
    for _ in range(min(n, 1000)):
        e = rng.choice(event_ids)
        s0 = time.perf_counter()
        service.read(e)
        read_lat.append(time.perf_counter() - s0)
    return {"state": percentiles(state_lat), "read": percentiles(read_lat)}


def fact_events(n_facts: int, n_threads: int, seed: int = 11) -> Iterator[bytes]:
    rng = random.Random(seed)
    for i in range(n_facts):
        yield orjson.dumps({
            "event_id": f"fact-{i}", "thread_id": f"mem-{i % n_threads:05d}", "kind": "fact",
            "ts": f"2026-11-{1 + i % 28:02d}T{i % 24:02d}:00:00Z", "project": f"p{i % 10}",
            "payload": {"key": f"k{rng.randrange(20_000)}", "value": f"value {rng.randrange(5)}",
                        "evidence_type": rng.choice(["user_confirmed", "tool_observed", "model_inferred",
                                                     "external_content"]), "confirmed": True},
        })  # fmt: skip


def bench_memory_throughput(n_facts: int, n_threads: int, data_dir: Path) -> dict[str, Any]:
    settings = Settings(data_dir=data_dir)
    publisher = LocalPublisher(settings)
    stream = fact_events(n_facts, n_threads)
    while chunk := list(islice(stream, 20_000)):
        publisher.publish(b"\n".join(chunk))
    publisher.close()
    job = Memory(settings)
    try:
        t0 = time.perf_counter()
        report = job.extract()
        extract_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        result = job.consolidate()
        consolidate_s = time.perf_counter() - t1
    finally:
        job.close()
    return {"facts": n_facts, "threads": len(report.extracted_threads),
            "extract_facts_per_s": round(report.candidates / extract_s),
            "consolidate_seconds": round(consolidate_s, 2), "view_facts": result.get("facts")}  # fmt: skip


def run_pipeline_section(args: argparse.Namespace) -> None:
    print(f"generating {args.processor_events:,} events over {args.threads:,} threads …", flush=True)
    records = synthetic_events(args.processor_events, args.threads)
    # Runs of the same work vary by a third on these VMs: three runs, the median reported.
    runs = sorted((bench_processors(records) for _ in range(3)), key=lambda r: r["events_per_s"])
    proc = runs[1]
    del records
    print(f"processors alone (validate+dedup+pair+reduce, 1 core): {proc['events_per_s']:,} events/s "
          f"(median of 3 runs: {', '.join(format(r['events_per_s'], ',') for r in runs)}); "
          f"batch of 1000 p50 {proc['batch_of_1000']['p50_ms']} ms p99 {proc['batch_of_1000']['p99_ms']} ms", flush=True)  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="agentlog-bench-") as tmp:
        pipe, service = bench_pipeline(args.events, args.threads, Path(tmp))
        print(f"embedded pipeline (topic append, processors, chDB, tantivy, state): {pipe['events_per_s']:,} events/s "
              f"over {pipe['events']:,} events ({pipe['seconds']} s; publish {pipe['publish_seconds']} s); "
              f"batch of 5000 p50 {pipe['batch_of_5000']['p50_ms']} ms p99 {pipe['batch_of_5000']['p99_ms']} ms; "
              f"peak RSS {pipe['peak_rss_mib']} MiB; log rows {pipe['log_rows']:,}", flush=True)  # fmt: skip
        threads = sorted(service.driver.pipeline.threads)
        ids = [r[0] for r in service.sql("SELECT event_id FROM events ORDER BY cityHash64(event_id) LIMIT 1000").rows]
        reads = bench_reads(service, threads, ids)
        service.close()
    print(f"state: p50 {reads['state']['p50_ms']} ms p99 {reads['state']['p99_ms']} ms; "
          f"read: p50 {reads['read']['p50_ms']} ms p99 {reads['read']['p99_ms']} ms", flush=True)  # fmt: skip
    ratio = proc["events_per_s"] / max(pipe["events_per_s"], 1)
    print(f"ratio processors-alone / whole pipeline: {ratio:.2f}x (same run)", flush=True)
    with tempfile.TemporaryDirectory(prefix="agentlog-bench-served-") as tmp:
        served = bench_served(args.events, args.threads, Path(tmp))
    print(f"served pipeline (agentlog run: processor + sink process, from a published backlog): "
          f"{served['events_per_s']:,} events/s over {served['events']:,} events ({served['seconds']} s to logged "
          f"and indexed; applied at {served['applied_seconds']} s); peak RSS server {served['peak_rss_mib']['server']} "
          f"MiB, sink process {served['peak_rss_mib']['sinks']} MiB, "
          f"together {served['peak_rss_mib']['together']} MiB "
          f"(single-process pipeline above: {pipe['peak_rss_mib']} MiB)", flush=True)  # fmt: skip


def run_memory_section(args: argparse.Namespace) -> int:
    """Extraction quality over generated sessions (``agentlog.bench.memory``), then the
    throughput of extraction and consolidation over fact events; 1 when quality misses its bar."""
    from agentlog.bench import memory as bench_memory  # noqa: PLC0415
    from agentlog.streams.cli.render import print_json  # noqa: PLC0415

    quality = bench_memory.run_extraction(args.memory_sessions)
    if not getattr(args, "json", False):
        bench_memory.print_report(quality)
    with tempfile.TemporaryDirectory(prefix="agentlog-bench-memory-") as tmp:
        mem = bench_memory_throughput(args.memory_facts, args.threads, Path(tmp))
    if getattr(args, "json", False):
        print_json({"extraction": quality, "throughput": mem})
    else:
        print(f"memory: extraction {mem['extract_facts_per_s']:,} facts/s over {mem['threads']:,} threads; "
              f"consolidation of {mem['facts']:,} candidates into {mem['view_facts']:,} facts in "
              f"{mem['consolidate_seconds']} s", flush=True)  # fmt: skip
    return 0 if quality["meets_bar"] else 1


def _timed_rebuild(env: dict[str, str]) -> float:
    """`agentlog rebuild` as a user runs it (its progress bar on this terminal)."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "agentlog", "rebuild", "--json"], env=env,
                          stdout=subprocess.PIPE, check=True)  # fmt: skip
    elapsed = time.perf_counter() - t0
    print(f"  {orjson.loads(proc.stdout)}", flush=True)
    return elapsed


def _serve(env: dict[str, str], timeout: float = 300.0) -> subprocess.Popen:
    """``agentlog run`` on ``env``'s data directory, once it answers; its stderr goes to a
    file in that directory, quoted if it does not start."""
    err_path = Path(env["AGENTLOG_DATA_DIR"]) / "bench-server.err"
    with open(err_path, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "agentlog", "run"], env=env, stderr=err)
    url = f"http://127.0.0.1:{env['AGENTLOG_HTTP_PORT']}/healthz"
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=1) as http:  # its polls would take CPU from the starting server
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if http.get(url).status_code == 200:
                    return proc
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
    proc.kill()
    proc.wait()
    raise RuntimeError(f"agentlog run did not start (exit {proc.returncode}): {err_path.read_text()[-3000:]}")


def _descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (any thread's children, and theirs)."""
    found: list[int] = []
    todo = [pid]
    while todo:
        try:
            kids = [int(c) for task in Path(f"/proc/{todo.pop()}/task").iterdir()
                    for c in (task / "children").read_text().split()]  # fmt: skip
        except OSError:  # a process that ended meanwhile
            continue
        found += kids
        todo += kids
    return found


def _peak_rss_mib(pid: int) -> int:
    """A live process's peak resident set (VmHWM), from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) // 1024
    return 0


def run_rebuild_section(args: argparse.Namespace) -> None:
    """`agentlog rebuild` of an ``--events`` log, without a server and through one."""
    with tempfile.TemporaryDirectory(prefix="agentlog-bench-rebuild-") as tmp:
        print(f"building a log of {args.events:,} events over {args.threads:,} threads …", flush=True)
        pipe, service = bench_pipeline(args.events, args.threads, Path(tmp))
        service.close()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = {**os.environ, "AGENTLOG_DATA_DIR": tmp, "AGENTLOG_HTTP_PORT": str(port)}
        alone = _timed_rebuild(env)
        rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024  # the only child so far
        print(f"rebuild without a server: {pipe['log_rows']:,} events in {alone:.1f} s "
              f"({pipe['log_rows'] / alone:,.0f} events/s); peak RSS {rss} MiB", flush=True)  # fmt: skip
        server = _serve(env)
        try:
            served = _timed_rebuild(env)
            print(f"rebuild through a running server: {served:.1f} s ({pipe['log_rows'] / served:,.0f} events/s); "
                  f"server peak RSS {_peak_rss_mib(server.pid)} MiB", flush=True)  # fmt: skip
        finally:
            server.terminate()
            server.wait(timeout=120)


def run_bench(args: argparse.Namespace) -> int:
    from agentlog.bench import context as bench_context, fidelity, kafka as bench_kafka, step as bench_step  # noqa: PLC0415
    from agentlog.bench import client as bench_client, crowd  # noqa: PLC0415
    from agentlog.bench import web as bench_web  # noqa: PLC0415

    sections = {"pipeline": run_pipeline_section, "memory": run_memory_section,
                "context": lambda _args: bench_context.run(), "step": lambda a: bench_step.run(a.step_lengths, a.steps or bench_step.STEPS, a.in_process_only),
                "crowd": lambda _args: crowd.run(),
                "fidelity": lambda a: fidelity.run(getattr(a, "json", False)),
                "kafka": lambda a: bench_kafka.run(a.kafka_events), "rebuild": run_rebuild_section,
                "client": lambda a: bench_client.run(a.client_events),
                "web": lambda _args: bench_web.run()}  # fmt: skip
    # The Kafka section needs servers; "all" runs it only when they are configured.
    chosen = [args.only] if args.only != "all" else [s for s in sections if s != "rebuild" and
                                                     (s != "kafka" or Settings.from_env().kafka_bootstrap)]  # fmt: skip
    return max(sections[name](args) or 0 for name in chosen)


__all__ = ["run_bench"]
