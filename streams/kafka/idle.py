"""``agentlog run --until-idle`` on Kafka: drain what is pending, then exit.

A faust worker runs until it is stopped, so this watches the committed offsets, which
move only once the work is durable: the processors' on the event topic (committed after
the state, the dedup ids and the accepted records are saved), the log and index sinks'
on the accepted topic (committed after each batch is written), and faust's group on the
dead-letter topic. When every one has reached the end offsets, the work is done. If no
worker of this deployment is running, one is started as a child for the drain
(``agentlog.streams.kafka.worker_process``) and stopped with SIGTERM, which lets faust commit and close
its stores.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from agentlog.sinks.base import StoreError
from agentlog.streams.config import Settings
from agentlog.streams.kafka.groups import GroupWatch
from agentlog.streams.kafka.topics import ACCEPTED, DLQ, EVENTS, ensure_topics, processor_group, topic, worker_group
from agentlog.streams.wiring import open_search_index
from agentlog.streams.kafka.worker_process import log_path, start_worker, stop_worker, worker_log


def run_until_idle_on_kafka(settings: Settings, on_progress: Callable[[int, int], None] | None = None,
                            stall_s: float = 300.0) -> dict[str, int]:  # fmt: skip
    ns = settings.kafka_namespace
    ensure_topics(settings.kafka_bootstrap, settings.partitions, ns, settings.kafka_security)  # type: ignore[arg-type]
    group = worker_group(ns)
    watch = GroupWatch(settings)
    worker = None
    try:
        sources = watch.ends(topic(EVENTS, ns))
        todo = watch.behind(processor_group(ns), sources)
        pending = todo + watch.behind(group, watch.ends(topic(DLQ, ns)))  # rejected by publish
        if watch.members(group) == 0:  # nobody drains it: a worker of our own, for the drain
            worker = start_worker(settings)

        def wait(what: str, remaining: Callable[[], int]) -> None:
            last, since = None, time.monotonic()
            while (left := remaining()) > 0:
                if worker is not None and worker.poll() is not None:
                    raise StoreError(f"the worker exited while draining {what}; its log ({log_path(settings)}):\n"
                                     + worker_log(settings))  # fmt: skip
                if left != last:
                    last, since = left, time.monotonic()
                elif time.monotonic() - since > stall_s:
                    raise StoreError(f"{what}: {left} records not committed for {stall_s:.0f} s; see "
                                     f"{log_path(settings)} and the workers' /healthz")  # fmt: skip
                if on_progress and what == "the event topic":
                    on_progress(todo - left, todo)
                time.sleep(0.5)

        wait("the event topic", lambda: watch.behind(processor_group(ns), sources))
        # What the processors forwarded (and rejected while processing) is known now.
        accepted = watch.ends(topic(ACCEPTED, ns))
        wait("the log sink", lambda: watch.behind(f"{group}-log-sink", accepted))
        wait("the index sink", lambda: watch.behind(f"{group}-index-sink", accepted))
        # The dead letters are written by faust's agent in all-in-one workers (the worker
        # group), by the sink processes in a split deployment (their own group): whichever
        # of the two went further is the one that writes them.
        wait("the dead-letter topic", lambda: min(watch.behind(g, watch.ends(topic(DLQ, ns)))
                                                  for g in (group, f"{group}-rejected-sink")))  # fmt: skip
        if settings.opensearch_url:  # searchable now, not at the next refresh interval
            index = open_search_index(settings)
            index.refresh()
            index.close()
        if on_progress:
            on_progress(pending, pending)
        return {"processed": pending, "worker_started": int(worker is not None)}
    finally:
        if worker is not None:
            stop_worker(worker)
        watch.close()


__all__ = ["run_until_idle_on_kafka"]
