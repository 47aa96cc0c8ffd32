"""Context requests with the per-service caches on and off, alternated in one process on
the same threads (``python -m agentlog.bench.context_cache``): what the caches save, with
the machine's load the same for both. "Off" gives every request a cache that keeps nothing,
which is the work a request did before they existed."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from agentlog.bench.context import load_long_threads
from agentlog.bench.run import percentiles
from agentlog.streams.api import context as api_context
from agentlog.streams.api import context_cache
from agentlog.streams.config import Settings
from agentlog.streams.embedded import service as embedded_service
from agentlog.streams.embedded.service import EmbeddedService


class _Forgetful(context_cache.ContextCache):
    """A cache that remembers nothing: each call does the whole work, as before caching."""

    texts = None  # type: ignore[assignment]
    items = None  # type: ignore[assignment]  # the state redacted whole, every time
    docs = None  # type: ignore[assignment]  # unindexed events' documents built on every search
    derived = None  # type: ignore[assignment]  # units' tokens and the summary worked out every time

    def __init__(self) -> None:  # no stores at all
        self.active = context_cache.ActiveSets(max_sets=0)  # unindexed events prepared again on every search

    def parse(self, raw: bytes, validate: Any) -> Any:
        return validate(raw)

    def read_event(self, source: Any, event_id: str) -> Any:
        return source.read_event(event_id)

    def read_events(self, source: Any, event_ids: list[str]) -> dict[str, Any]:
        return {i: source.read_event(i) for i in event_ids}  # one read each, as before batching


_OFF = _Forgetful()


def _use(cached: bool) -> None:
    chosen = context_cache.cache_for if cached else (lambda _service: _OFF)
    api_context.cache_for = chosen  # type: ignore[attr-defined]
    embedded_service.cache_for = chosen  # type: ignore[attr-defined]


def run(lengths: tuple[int, ...] = (1_000, 10_000, 100_000), rounds: int = 10, calls: int = 30,
        budget: int = 8_000) -> list[dict[str, Any]]:  # fmt: skip
    rows = []
    with tempfile.TemporaryDirectory(prefix="agentlog-bench-ctxcache-") as tmp:
        service = EmbeddedService(Settings(data_dir=Path(tmp)))
        try:
            load_long_threads(service, lengths, budget)
            for n in lengths:
                thread = f"long-{n}"
                samples: dict[bool, tuple[list[float], list[float]]] = {True: ([], []), False: ([], [])}
                outputs = {}
                for r in range(rounds):  # alternated: both see the same load
                    for cached in (r % 2 == 0, r % 2 != 0):
                        _use(cached)
                        wall, cpu = samples[cached]
                        for _ in range(calls):
                            t0, c0 = time.perf_counter(), time.thread_time()
                            outputs[cached] = api_context.context_for(service, thread, budget)
                            wall.append(time.perf_counter() - t0)
                            cpu.append(time.thread_time() - c0)
                assert outputs[True] == outputs[False]  # the caches change the cost, never the answer
                rows.append({"events": n, **{("cached" if c else "uncached"): {"wall": percentiles(w), "cpu": percentiles(u)}
                                             for c, (w, u) in samples.items()}})  # fmt: skip
        finally:
            _use(True)
            service.close()
    return rows


def main() -> None:
    for row in run():
        for mode in ("uncached", "cached"):
            m = row[mode]
            print(f"context, {row['events']:>7,} events, caches {'on ' if mode == 'cached' else 'off'}: own CPU p50 "
                  f"{m['cpu']['p50_ms']} ms p99 {m['cpu']['p99_ms']} ms | wall p50 {m['wall']['p50_ms']} ms "
                  f"p99 {m['wall']['p99_ms']} ms")  # fmt: skip


if __name__ == "__main__":
    main()


__all__ = ["main", "run"]
