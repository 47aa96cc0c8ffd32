"""The web view's pages on a 2,000-event thread: server time per page (issue 17 asks for the
thread page under 500 ms). The app runs in this process (Starlette's test client, no
network), serving as ``agentlog run`` does, so a request's time is the server's time."""

from __future__ import annotations

import tempfile
import time
import warnings
from pathlib import Path

from agentlog.bench.context import load_long_threads
from agentlog.bench.run import percentiles
from agentlog.streams.api.http import build_app
from agentlog.streams.config import Settings
from agentlog.streams.embedded.service import EmbeddedService

TARGET_MS = 500.0


def pages(thread: str) -> dict[str, str]:
    return {
        "threads": "/",
        "thread": f"/ui/threads/{thread}",
        "thread poll": f"/ui/threads/{thread}/poll?after=1990",  # the newest 10 events
        "search": f"/ui/search?q=component&thread={thread}&limit=50",
        "analytics": "/ui/analytics?sql=SELECT+offset,+length(raw)+FROM+events+LIMIT+500",
        "memory": "/ui/memory",
    }


def bench_pages(events: int = 2_000, rounds: int = 30) -> dict[str, dict[str, float]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the test client's httpx deprecation notice
        from starlette.testclient import TestClient  # noqa: PLC0415

    out: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="agentlog-bench-web-") as tmp:
        service = EmbeddedService(Settings(data_dir=Path(tmp)))
        try:
            load_long_threads(service, (events,), 4_000)
            app = build_app(service, background=service.run_forever)
            with TestClient(app, base_url="http://localhost") as client:
                for name, path in pages(f"long-{events}").items():
                    first = client.get(path)  # warms what a page reads (the first query, the tokenizer)
                    assert first.status_code == 200, (path, first.status_code, first.text[:300])
                    times = []
                    for _ in range(rounds):
                        t0 = time.perf_counter()
                        client.get(path)
                        times.append(time.perf_counter() - t0)
                    out[name] = {**percentiles(times), "kib": round(len(first.content) / 1024, 1)}
        finally:
            service.close()
    return out


def run(events: int = 2_000, rounds: int = 30) -> int:
    print(f"web view: server time per page on a {events:,}-event thread, {rounds} requests each", flush=True)
    results = bench_pages(events, rounds)
    for name, r in results.items():
        print(f"  {name:<12} p50 {r['p50_ms']:7.1f} ms   p99 {r['p99_ms']:7.1f} ms   ({r['kib']:,.0f} KiB)", flush=True)
    thread = results["thread"]["p50_ms"]
    print(f"thread page p50 {thread:.1f} ms: {'within' if thread < TARGET_MS else 'OVER'} the {TARGET_MS:.0f} ms target",
          flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(run())
