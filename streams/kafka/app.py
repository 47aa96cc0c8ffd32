"""The distributed deployment's worker: a faust-streaming app over Apache Kafka.

``declare_app`` declares the app and its two tables (for the worker and for ``agentlog
rebuild``); ``create_app`` adds the topics and wires the methods of
``agentlog.streams.kafka.processor.KafkaProcessor`` (the processor, the sinks, the
dead-letter writer, the rebalance handlers) as faust tasks, agents and signal handlers.
The worker serves the same HTTP app as the embedded ``agentlog run``
(``agentlog.streams.api.http``) over ``WorkerService``, with uvicorn on faust's event loop.

Roles (``agentlog run --role``): ``all`` (the default) runs the processor, both sinks and
the dead-letter writer in this worker; ``processor`` leaves the sinks and the dead letters
to sink processes (``--role sinks``, ``agentlog.streams.kafka.sinks_role``), scaled apart.
"""

from __future__ import annotations

import functools
import logging
import sys
import threading
from typing import Any

import faust
from faust.contrib.asgi import AsgiService
from kafka.admin import NewTopic
from mode.utils.times import want_seconds

from agentlog.streams.api.guard import Policy
from agentlog.streams.api.http import build_app
from agentlog.streams.api.http_parser import BoundedHttpToolsProtocol
from agentlog.streams.config import Settings
from agentlog.streams.kafka.processor import KafkaProcessor, changelog_key
from agentlog.streams.kafka.service import WorkerService
from agentlog.streams.memory import runner as memory_runner
from agentlog.streams.kafka.topics import (ACCEPTED, DLQ, MAX_MESSAGE_BYTES, OWNERSHIP, ensure_topics, may_serve,
                                          topic, worker_group)
from agentlog.streams.wiring import outdated_index

def declare_app(settings: Settings) -> tuple[faust.App, Any, Any]:
    """The worker's faust app and its two tables (thread snapshots, dedup ids), declared
    once for the worker and for ``agentlog rebuild`` (which writes the state changelog)."""
    app = faust.App(
        worker_group(settings.kafka_namespace),
        broker=f"kafka://{settings.kafka_bootstrap}",
        broker_credentials=settings.kafka_security.faust_credentials(),
        store=settings.faust_store,
        topic_partitions=settings.partitions,
        datadir=str(settings.path("faust")),
        # faust's own web server stays off (the worker serves the API with uvicorn, see
        # run_worker), but its address is what the other workers route a thread's queries to.
        web_enabled=False,
        web_host=settings.http_host,
        web_port=settings.worker_port,
        canonical_url=f"http://{settings.http_host}:{settings.worker_port}",
        consumer_auto_offset_reset="earliest",
        broker_session_timeout=settings.session_timeout_seconds,
        broker_heartbeat_interval=min(3.0, settings.session_timeout_seconds / 3),
        producer_max_request_size=MAX_MESSAGE_BYTES,
        consumer_max_fetch_size=MAX_MESSAGE_BYTES,
        # No standby copies: when recovery of the active partitions ends, faust's memory
        # store drops every key of the other partitions, standby ones included, while the
        # standby reader goes on from its offset; promoted later, such a partition would
        # resume from there with the older keys (snapshots, dedup ids) gone. A new owner
        # reads the partition's whole changelog instead.
        table_standby_replicas=0,
        autodiscover=False,
    )
    # Changelogs take messages as large as the other topics (a long thread's snapshot).
    changelog_config = {"max.message.bytes": str(MAX_MESSAGE_BYTES)}
    states = app.Table("agentlog-state", default=None, key_type=str, value_type=bytes,
                       partitions=settings.partitions, extra_topic_configs=changelog_config)  # fmt: skip
    seen_table = app.Table("agentlog-seen", default=None, key_type=str, value_type=bytes,
                           partitions=settings.partitions, extra_topic_configs=changelog_config)  # fmt: skip
    return app, states, seen_table


ROLES = ("all", "processor", "sinks")


def create_app(settings: Settings, role: str = "all") -> faust.App:
    """The worker's app, its ``KafkaProcessor`` (``app.conf.agentlog_worker``) and the HTTP
    app it serves (``app.conf.agentlog_http``); ``role`` ``processor`` leaves out the sinks."""
    sinks_here = role == "all"
    ns = settings.kafka_namespace
    app, states, seen_table = declare_app(settings)
    # faust assigns the ownership topic's partitions (never written to) and, co-partitioned
    # with them, the tables'; the event partitions of the same numbers are read by a plain
    # consumer (agentlog.streams.kafka.event_feed).
    ownership = app.topic(topic(OWNERSHIP, ns), key_serializer="raw", value_serializer="raw",
                          partitions=settings.partitions)  # fmt: skip
    dlq = app.topic(topic(DLQ, ns), key_serializer="raw", value_serializer="raw")
    accepted = app.topic(topic(ACCEPTED, ns), key_serializer="raw", value_serializer="raw",
                         partitions=settings.partitions)  # fmt: skip
    worker = KafkaProcessor(app, settings, states, seen_table, ownership=ownership, dlq=dlq, accepted=accepted,
                            sinks_here=sinks_here)  # fmt: skip
    app.agent(ownership, name="assignment")(_subscribed)
    if sinks_here:  # else the sink processes write the dead letters
        app.agent(dlq, name="dead_letters")(worker.log_dead_letters)
    app.on_partitions_revoked.connect(worker.on_revoked)
    app.on_partitions_assigned.connect(worker.on_assigned)
    app.on_rebalance_complete.connect(worker.on_restored)
    app.task(worker.process)
    if sinks_here:
        for sink in ("log", "index"):
            app.task(functools.partial(worker.run_sink, sink))
    else:
        app.task(worker.follow_sinks)
    app.conf.agentlog_worker = worker  # type: ignore[attr-defined]
    app.conf.agentlog_log_store = worker.log_store  # type: ignore[attr-defined]
    app.conf.agentlog_http = build_app(WorkerService(settings, worker),  # type: ignore[attr-defined]
                                       Policy.of(settings, settings.http_host))  # fmt: skip
    return app


def faust_topics(app: faust.App) -> list[NewTopic]:
    """The topics faust would create as its worker starts (the tables' changelogs, the
    leader assignor's), declared as faust declares them, for ``ensure_topics`` to create
    and see in the metadata first: faust subscribes right after creating them, and a
    consumer whose metadata did not show them yet left them out of the assignment."""
    internal = [table.changelog_topic for table in app.tables.values()]
    internal.append(app._leader_assignor._leader_topic)  # noqa: SLF001 (faust keeps it private)
    return [_new_topic(t, app.conf.topic_partitions) for t in internal]


def _new_topic(declared: faust.TopicT, default_partitions: int) -> NewTopic:
    cleanup = ",".join(flag for flag, on in (("compact", declared.compacting), ("delete", declared.deleting)) if on)
    config = {"cleanup.policy": cleanup} if cleanup else {}
    if declared.retention:
        config["retention.ms"] = str(int(want_seconds(declared.retention) * 1000))
    config.update({key: str(value) for key, value in (declared.config or {}).items()})
    return NewTopic(declared.get_topic_name(), declared.partitions or default_partitions,
                    declared.replicas or 1, topic_configs=config)  # fmt: skip


async def _subscribed(stream: faust.StreamT) -> None:
    async for _ in stream.events():  # subscribed for its partitions; nothing is sent
        pass


def quiet_worker(app: faust.App, *services: Any, loglevel: str) -> faust.Worker:
    """A faust worker logging at ``loglevel`` and no lower.

    faust's startup spinner would set the root logger to DEBUG and spin once per log call:
    every debug line of the Kafka client and every per-event INFO line was then built and
    dropped by the handlers (8% of a processor's CPU). Without the spinner the root logger
    stays at ``loglevel``."""
    worker = faust.Worker(app, *services, loglevel=loglevel, quiet=True)
    worker.spinner = None
    return worker


def run_worker(settings: Settings, loglevel: str = "warn", role: str = "all") -> int:
    """``agentlog run`` in the distributed deployment: one faust worker, serving the API
    from the start (queries answer 503 until its tables are restored); with ``role``
    ``sinks``, a sink process instead."""
    if role == "sinks":
        from agentlog.streams.kafka.sinks_role import run_sinks  # noqa: PLC0415

        return run_sinks(settings, loglevel)
    if role != "all" and not settings.opensearch_url:
        print("agentlog: a processor with its sinks elsewhere needs a shared search index: set "
              "AGENTLOG_OPENSEARCH_URL (tantivy keeps its files in one process)", file=sys.stderr)  # fmt: skip
        return 2
    if (outdated := outdated_index(settings)) is not None:  # its words are split by an older rule
        print(f"agentlog: {outdated}: stop the workers and run `agentlog rebuild`, which makes it again "
              "from the log", file=sys.stderr)  # fmt: skip
        return 2
    if not may_serve(settings):
        return 2
    app = create_app(settings, role)  # connects to no broker: the topics are made first, next
    ensure_topics(settings.kafka_bootstrap or "", settings.partitions, settings.kafka_namespace,
                  settings.kafka_security, also=faust_topics(app))  # fmt: skip
    # The index sink logs one line per failed attempt with the reason; the client's own
    # per-request warnings would repeat it for every retry of every connection.
    logging.getLogger("opensearch").setLevel(logging.ERROR)
    # Listen where it is advertised, behind the API's rules (a token beyond loopback, Host,
    # content type, body size); faust's worker keeps the signals (AsgiService leaves them).
    http = AsgiService(app.conf.agentlog_http, host=settings.http_host, port=settings.worker_port,
                       uvicorn_options={"access_log": False, "timeout_graceful_shutdown": 5,
                                        "proxy_headers": False, "http": BoundedHttpToolsProtocol})  # fmt: skip
    worker = quiet_worker(app, http, loglevel=loglevel)
    # Memory runs on its own beside the worker (threads idle for AGENTLOG_MEMORY_IDLE_SECONDS),
    # in a daemon thread off faust's loop, yielding while the processor has a backlog; its
    # view is fenced by the broker.
    memory_runner.start(settings, threading.Event(), busy=app.conf.agentlog_worker.busy)
    worker.execute_from_commandline()
    return 0


__all__ = ["ROLES", "changelog_key", "create_app", "declare_app", "faust_topics", "run_worker"]
