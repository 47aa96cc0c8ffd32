"""``agentlog rebuild`` on the Kafka deployment: the log replayed into the state table.

The workers' state lives in the ``agentlog-state`` table, whose durable form is its
changelog topic. Rebuilding writes each thread's replayed snapshot there (on the
thread's own partition, keyed as faust keys it), empties and refills ``tool_calls``
and the search index, and leaves the dedup table and the committed offsets alone: they
describe the same applied events as the log, once the log sink has caught up. Workers
read the new snapshots when they next restore the table.

Two checks come first, each with what to do: no worker may be running (it would
overwrite the snapshots from memory), and the log sink must have written everything
the processors forwarded (else the log is missing applied events, and the rebuilt
state would miss them).
"""

from __future__ import annotations

import logging

from kafka import KafkaProducer

from agentlog.sinks.base import StoreError
from agentlog.streams.config import Settings
from agentlog.streams.kafka.app import changelog_key, declare_app
from agentlog.streams.kafka.groups import GroupWatch
from agentlog.streams.kafka.topics import ACCEPTED, MAX_MESSAGE_BYTES, topic
from agentlog.streams.rebuild import Progress, replay_log
from agentlog.streams.wiring import open_log_store, open_search_index

log = logging.getLogger("agentlog.rebuild")


def rebuild_on_kafka(settings: Settings, on_progress: Progress | None = None) -> dict[str, int]:
    app, states, _seen = declare_app(settings)
    group = app.conf.id
    watch = GroupWatch(settings)
    try:
        _refuse_while_workers_run(watch, group)
        _require_log_caught_up(watch, f"{group}-log-sink", topic(ACCEPTED, settings.kafka_namespace))
    finally:
        watch.close()
    log_store, index = open_log_store(settings), open_search_index(settings, remake_outdated=True)
    try:
        replay = replay_log(log_store, index, settings.pairing, on_progress)
    finally:
        log_store.close()
        index.close()
    producer = KafkaProducer(bootstrap_servers=settings.kafka_bootstrap, acks="all", enable_idempotence=True,
                             max_request_size=MAX_MESSAGE_BYTES, **settings.kafka_security.kafka_python())  # fmt: skip
    changelog = states.changelog_topic.get_topic_name()
    try:
        for thread_id, processor in replay.pipeline.threads.items():
            producer.send(changelog, key=changelog_key(app, states, thread_id),
                          value=processor.snapshot().model_dump_json().encode(),
                          partition=replay.partition_of[thread_id])  # fmt: skip
        producer.flush()
    finally:
        producer.close()
    log.info("rebuilt %d threads from %d logged events into %s", len(replay.pipeline.threads), replay.events, changelog)
    return {"events": replay.events, "threads": len(replay.pipeline.threads)}


def _refuse_while_workers_run(watch: GroupWatch, group: str) -> None:
    # Every worker is a member of faust's group (the sink feeds assign their partitions).
    members = watch.members(group)
    if members:
        raise StoreError(
            f"{members} agentlog worker(s) are consuming as group {group!r}: stop every "
            "`agentlog run` of this deployment first (a running worker would overwrite the rebuilt "
            "state with its own), then rebuild and start them again"
        )


def _require_log_caught_up(watch: GroupWatch, sink_group: str, accepted: str) -> None:
    behind = watch.behind(sink_group, watch.ends(accepted))
    if behind:
        raise StoreError(
            f"the log is behind what the processors applied ({behind} accepted batches not yet written): "
            "run `agentlog run --until-idle` first (it drains every sink and exits), then rebuild"
        )


__all__ = ["rebuild_on_kafka"]
