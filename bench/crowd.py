"""A new question's context step as the data directory fills with other threads
(``agentlog bench --only crowd``).

The step benchmark measures each thread length in a data directory of its own making.
This one keeps the thread's length fixed and adds other threads of the same length,
their events interleaved with the thread's, as agents running side by side write them.
Only the steps that publish a new user question are timed (publish, then ``context`` at
8,000 tokens): their recall runs a new search of the thread in the index. Tantivy scores
a union of the query's words over every thread's postings before the thread's filter
drops the others; the index plans a crowded thread's search the other way round
(``agentlog.sinks.tantivy_index._filters_lead``). The figures say how much the step still
grows with the index, not only with the thread.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from itertools import islice
from typing import Any

import orjson

from agentlog.bench.run import percentiles
from agentlog.bench.step import BUDGET, Traffic, in_process
from agentlog.streams.cli.render import progress
from agentlog.streams.embedded.service import EmbeddedService

THREAD_EVENTS = 2_000
CROWDS = (0, 10, 100)
"""Other threads in the data directory, each as long as the measured one."""
QUESTIONS = 100


def _interleaved(traffics: list[Traffic], each: int) -> Iterator[dict[str, Any]]:
    """``each`` events of every thread, round-robin: the threads' events mixed in the topic."""
    streams = [t.take(each) for t in traffics]
    for _ in range(each):
        for stream in streams:
            yield next(stream)


def _fill(service: EmbeddedService, traffics: list[Traffic], each: int) -> None:
    events = _interleaved(traffics, each)
    while chunk := list(islice(events, 5_000)):
        service.publish(b"\n".join(orjson.dumps(e) for e in chunk))
    service.catch_up()


def _is_question(event: dict[str, Any]) -> bool:
    return event["kind"] == "message" and event["payload"].get("role") == "user"


def crowd_series(others: int, length: int = THREAD_EVENTS, questions: int = QUESTIONS) -> dict[str, Any]:
    """The measured thread (``length`` events) among ``others`` threads of that length:
    its agent steps (publish, then context) until ``questions`` of them published a new
    user question, those timed."""
    with in_process() as service:
        traffics = [Traffic(f"crowd-{i}", seed=i) for i in range(others + 1)]
        _fill(service, traffics, length)
        thread = traffics[0]
        samples: list[float] = []
        while len(samples) < questions:
            event = thread.next()
            t0 = time.perf_counter()
            service.publish(orjson.dumps(event))
            service.context(thread.thread_id, BUDGET)
            if _is_question(event):
                samples.append(time.perf_counter() - t0)
                # Untimed: in-process, the sinks are written inline once enough events wait,
                # a stall the step benchmark measures; here the index keeps up on its own
                # (as a served one does) and the steps before the next question warm again.
                service.catch_up()
        return {"others": others, "thread_events": length, "index_docs": service.index.doc_count(),
                **percentiles(samples), "steps": len(samples)}  # fmt: skip


def report(rows: list[dict[str, Any]]) -> list[str]:
    alone = rows[0]["p50_ms"] if rows and rows[0]["others"] == 0 else None
    lines = []
    for row in rows:
        ratio = f", {row['p50_ms'] / alone:.1f}x the thread alone" if alone and row["others"] else ""
        lines.append(
            f"crowd: a new question's context step, a {row['thread_events']:,}-event thread among "
            f"{row['others']:>3} other threads ({row['index_docs']:,} events indexed): "
            f"p50 {row['p50_ms']:.3f} ms "
            f"p99 {row['p99_ms']:.3f} ms max {row['max_ms']:.3f} ms ({row['steps']} steps){ratio}"
        )
    return lines


def run(crowds: tuple[int, ...] = CROWDS, length: int = THREAD_EVENTS, questions: int = QUESTIONS) -> int:
    rows = []
    with progress("crowd: one thread's questions among other threads") as update:
        for done, others in enumerate(crowds):
            update(done, len(crowds))
            rows.append(crowd_series(others, length, questions))
        update(len(crowds), len(crowds))
    for line in report(rows):
        print(line, flush=True)
    return 0


__all__ = ["CROWDS", "QUESTIONS", "THREAD_EVENTS", "crowd_series", "report", "run"]
