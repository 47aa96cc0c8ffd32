"""Replaying the immutable log (SPEC §3: the state and the index are projections of it).

Both deployments' ``agentlog rebuild`` run the log through a fresh pipeline with this;
they differ only in where the resulting thread snapshots go.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from agentlog.processors.pipeline import Pipeline, Record
from agentlog.processors.records import search_docs
from agentlog.processors.thread import PairingConfig
from agentlog.sinks.base import LogStore, SearchIndex, StoreError

REPLAY_BATCH = 5000

Progress = Callable[[int, int], None]


class RebuildInterrupted(StoreError):
    """The replay stopped between batches (the server was asked to stop): the derived
    stores are partly rebuilt, and the next start rebuilds them from the topic."""


@dataclass
class Replay:
    pipeline: Pipeline
    events: int = 0
    partition_of: dict[str, int] = field(default_factory=dict)
    """Each thread's source partition (where its changelog records belong on Kafka)."""


def replay_log(
    log: LogStore, index: SearchIndex, pairing: PairingConfig, on_progress: Progress | None = None,
    should_stop: Callable[[], bool] = lambda: False,
) -> Replay:
    """Empty the derived table and the index, then replay every logged event through a
    fresh pipeline, writing pair rows and search documents as it goes. The log is read a
    page at a time, so memory grows with threads and event ids, not with the events."""
    total = log.count_events()
    log.truncate_derived()
    index.clear()
    replay = Replay(Pipeline(config=pairing))  # no snapshots loaded: every thread starts empty
    batch: list[Record] = []

    def flush() -> None:
        result = replay.pipeline.process(batch)
        log.upsert_pairs([p.row() for p in result.pairs])
        index.add(search_docs(result.applied), new=True)  # each event once: the pipeline dedups
        replay.events += len(batch)
        batch.clear()
        if on_progress:
            on_progress(replay.events, total)
        if should_stop():
            raise RebuildInterrupted(f"rebuild stopped after {replay.events:,} of {total:,} events")

    for logged in log.replay():
        batch.append(Record(logged.partition, logged.offset, logged.raw))
        replay.partition_of[logged.thread_id] = logged.partition
        if len(batch) >= REPLAY_BATCH:
            flush()
    flush()
    index.refresh()
    return replay


__all__ = ["RebuildInterrupted", "Replay", "replay_log"]
