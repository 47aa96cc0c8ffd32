"""A faust agent that does nothing but take batches off a topic: the ceiling of faust's
own consume path on this machine, printed by ``agentlog bench --only kafka`` next to a
bare kafka-python loop and the real worker.

Run as ``python -m agentlog.bench.faust_ceiling worker`` with ``BENCH_BOOTSTRAP``,
``BENCH_TOPIC`` and ``BENCH_EVENTS`` set (and ``BENCH_DATADIR``, faust's data directory,
which the caller removes); logs ``events_per_s=N`` (faust sends prints to its log) and exits.
"""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any

import faust

from agentlog.streams.kafka.topics import MAX_MESSAGE_BYTES

app = faust.App(f"agentlog-ceiling-{os.getpid()}", broker=f"kafka://{os.environ.get('BENCH_BOOTSTRAP', '')}",
                store="memory://", datadir=os.environ.get("BENCH_DATADIR") or tempfile.mkdtemp(prefix="agentlog-ceiling-"),
                web_enabled=False, consumer_auto_offset_reset="earliest", autodiscover=False,
                consumer_max_fetch_size=MAX_MESSAGE_BYTES)  # fmt: skip
source = app.topic(os.environ.get("BENCH_TOPIC", "unset"), key_serializer="raw", value_serializer="raw")
wanted = int(os.environ.get("BENCH_EVENTS", "0"))


@app.agent(source)
async def take(stream: Any) -> None:
    # The worker's batching (agentlog.streams.kafka.app.process), with nothing done per batch.
    n, t0 = 0, 0.0
    async for batch in stream.take_events(4000, within=0.5):
        t0 = t0 or time.perf_counter()  # from the first batch: group joins are not throughput
        n += len(batch)
        if n >= wanted:
            print(f"events_per_s={n / (time.perf_counter() - t0):.0f}", flush=True)
            os._exit(0)


if __name__ == "__main__":
    app.main()
