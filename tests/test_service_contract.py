"""Issue 13's bar: one parametrised test drives the same scenario through the ``Service``
interface of every implementation (embedded in-process, embedded over HTTP, the Kafka
worker, offline) and compares their answers field by field with the embedded in-process
service's, the reference.

The scenario is two threads of one family (a parent that spawns a helper with its own
thread) covering a user message, a goal, a plan, tool calls with results (one failing),
a call left without a result (``missing`` at its turn's end), a result with no call (an
orphan), an approval request and its decision, a file change, a window switch, a
duplicate delivery and an invalid record; then a late event searched for at once
(read-your-writes). The HTTP server's index refreshes every 30 s and the Kafka worker's
never on its own, so their searches are answered by read-your-writes, which must agree
with what the index says once it has the events (the in-process reference, offline).

Only fields that legitimately differ by deployment are normalised away (``normalise``,
each with its reason); everything else must be equal. ``absolute_facts`` pins what the
scenario must show regardless of deployment, so four equally wrong answers still fail.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from agentlog.sinks.opensearch_index import OpenSearchIndex
from agentlog.streams.api.client import RemoteService
from agentlog.streams.api.service import Service
from agentlog.streams.config import Settings
from agentlog.streams.embedded.service import EmbeddedService
from agentlog.streams.kafka.offline import OfflineService
from agentlog.streams.kafka.worker_process import free_port, start_worker, stop_worker, worker_log
from agentlog.streams.publish_check import PublishReport

MAIN, CHILD, PROJECT = "contract-main", "contract-child", "contract"
LATE = "cm-late"
"""The event published last and searched for at once: only read-your-writes finds it."""
BUDGET = 4000
SQL = (
    "SELECT kind, count() AS n FROM events GROUP BY kind ORDER BY kind",
    "SELECT count() AS n FROM rejected_events",
    (
        "SELECT thread_id, call_id, orphan_event_id, tool_name, status, synthetic FROM tool_calls FINAL "
        "ORDER BY thread_id, call_id, orphan_event_id"
    ),
)


def event(
    event_id: str, kind: str, payload: dict[str, Any], t: int, thread: str = MAIN, **extra: Any
) -> bytes:
    ts = f"2026-11-30T10:{t // 60:02d}:{t % 60:02d}Z"
    return orjson.dumps({"event_id": event_id, "thread_id": thread, "kind": kind, "ts": ts, "project": PROJECT,
                         "payload": payload, **extra})  # fmt: skip


def scenario() -> list[bytes]:
    turn = {"turn_id": "turn-1"}
    steps = [{"step_id": "s1", "text": "reproduce the flake", "status": "running"},
             {"step_id": "s2", "text": "patch session_ttl"}]  # fmt: skip
    # fmt: off
    lines = [
        event("cm-user", "message", {"role": "user", "text": "The login test is flaky: fix session_ttl"}, 0, **turn),
        event("cm-goal", "goal", {"text": "Make the login test pass reliably"}, 1),
        event("cm-plan", "plan", {"steps": steps}, 2),
        event("cm-call-1", "tool_call", {"call_id": "k1", "tool_name": "pytest", "arguments": {"cmd": "pytest"}}, 3,
              **turn),
        event("cm-result-1", "tool_result", {"call_id": "k1", "status": "error", "exit_code": 1,
                                             "output": "KeyError: session_ttl in auth/session.py"}, 4, **turn),
        event("cm-call-2", "tool_call", {"call_id": "k2", "tool_name": "grep", "arguments": {"pattern": "ttl"}}, 5,
              **turn),
        event("cm-result-2", "tool_result", {"call_id": "k2", "output": "auth/session.py:12 session_ttl = 30"}, 6,
              **turn),
        # No result ever comes for k3: a synthetic ``missing`` one at the turn's end.
        event("cm-call-3", "tool_call", {"call_id": "k3", "tool_name": "edit", "arguments": {"path": "x"}}, 7,
              **turn),
        event("cm-orphan", "tool_result", {"call_id": "ghost", "output": "a result nobody asked for"}, 8, **turn),
        event("cm-approve-req", "approval_request", {"approval_id": "ap1", "action": "git push --force",
                                                     "detail": "rewrite the branch"}, 9),
        event("cm-approve", "approval_decision", {"approval_id": "ap1", "decision": "approved", "by": "alice"}, 10),
        event("cm-file", "file_change", {"path": "auth/session.py", "change": "modified"}, 11),
        event("cm-spawn", "agent_spawn", {"child_agent_id": "helper", "role": "reader", "child_thread_id": CHILD}, 12),
        event("cc-user", "message", {"role": "user", "text": "Read the docs on session_ttl"}, 13, thread=CHILD),
        event("cc-call", "tool_call", {"call_id": "r1", "tool_name": "read", "arguments": {"path": "ttl.md"}}, 14,
              thread=CHILD),
        event("cc-result", "tool_result", {"call_id": "r1", "output": "session_ttl is in minutes"}, 15, thread=CHILD),
        # The helper's context fills up: a new window, and the hits keep each event's own.
        event("cc-switch", "window_switch", {"new_window_id": "cw1", "reason": "context full"}, 16, thread=CHILD),
        event("cc-note", "message", {"role": "assistant", "text": "session_ttl noted, in minutes"}, 17, thread=CHILD),
        event("cm-turn-end", "turn_end", {}, 50, **turn),
    ]
    # fmt: on
    lines.insert(8, lines[5])  # the grep call delivered twice: applied once
    lines.insert(4, event("cm-invalid", "tool_call", {"tool_name": "bash"}, 3))  # no call_id: rejected
    return lines


LATE_EVENT = event(LATE, "message", {"role": "assistant", "text": "zanzibar: the flake was a clock skew"}, 60)


def capture(ask: Callable[[], Any]) -> Any:
    """An answer, or the exception it raised as a comparable value (one failing operation
    must not hide how the others answer)."""
    try:
        answer = ask()
    except Exception as error:  # noqa: BLE001 - recorded, compared, reported
        return {"raised": type(error).__name__, "message": str(error)[:300]}
    if hasattr(answer, "columns") and hasattr(answer, "rows"):  # a QueryResult
        return {"columns": list(answer.columns), "rows": [list(r) for r in answer.rows]}
    return answer


def feed(svc: Any) -> dict[str, Any]:
    """The writes: the scenario, then a late event searched for at once, then catch-up."""
    answers = {"publish": capture(lambda: svc.publish(b"\n".join(scenario())))}
    answers["publish_late"] = capture(lambda: svc.publish(LATE_EVENT))
    answers["search_read_your_writes"] = capture(lambda: svc.search("zanzibar", after=LATE))
    answers["catch_up"] = capture(lambda: svc.catch_up())
    return answers


def ask(svc: Any) -> dict[str, Any]:
    """The reads, each through the ``Service`` method of its name."""
    answers = {
        "state": capture(lambda: svc.state(MAIN)),
        "state_child": capture(lambda: svc.state(CHILD)),
        "state_missing": capture(lambda: svc.state("contract-nobody")),
        "thread_list": capture(lambda: svc.thread_list(project=PROJECT)),
        "thread_list_newest": capture(lambda: svc.thread_list(project=PROJECT, limit=1)),
        "context": capture(lambda: svc.context(MAIN, BUDGET)),
        "context_query": capture(lambda: svc.context(MAIN, BUDGET, query="session_ttl")),
        # A provider's shape is made in one place; every deployment must route ``format`` to it.
        "context_anthropic": capture(lambda: svc.context(MAIN, BUDGET, format="anthropic")),
        "search_thread": capture(lambda: svc.search("session_ttl", thread_id=MAIN, limit=50)),
        "search_child": capture(lambda: svc.search("session_ttl", thread_id=CHILD, limit=50)),
        "search_tool": capture(
            lambda: svc.search("session_ttl", thread_id=MAIN, tool_name="pytest", limit=50)
        ),
        "search_after": capture(lambda: svc.search("zanzibar", after=LATE, limit=50)),
        "read": capture(lambda: svc.read("cm-result-1")),
        "read_missing": capture(lambda: svc.read("cm-never-published")),
        "health": capture(lambda: svc.health()),
    }
    for n, statement in enumerate(SQL):
        answers[f"sql_{n}"] = capture(lambda s=statement: svc.sql(s))  # type: ignore[misc]
    return answers


# -- what legitimately differs by deployment -------------------------------------------


def normalise(op: str, answer: Any) -> Any:
    """``answer`` without the fields that differ by deployment, every exclusion justified."""
    if not isinstance(answer, dict):
        return answer
    if "raised" in answer:
        # Error messages are prose for people (the HTTP client relays the server's text);
        # the exception type is the contract (NotFound = HTTP 404).
        return {"raised": answer["raised"]}
    answer = dict(answer)
    if op.startswith("publish"):
        # A topic position: the embedded topic's single offset sequence, a Kafka publisher
        # sends to one of several partitions and reports none.
        answer.pop("last_offset", None)
    if op.startswith("search"):
        # index_visible_offset/stale: how far the index's refresh has got (timing, and a
        # per-deployment offset space); warnings: a degraded store's notes, asserted empty
        # separately in ``absolute_facts``; index_error: the same, the Kafka worker's name.
        for key in ("index_visible_offset", "stale", "warnings", "index_error"):
            answer.pop(key, None)
        # source: "index" or "active" says whether the refresh had come (timing); offset:
        # a topic offset (one sequence embedded, one per partition on Kafka); score: BM25
        # of tantivy vs OpenSearch (different engines' statistics). With those gone the
        # order among hits is the engines' ranking, not the contract: compare as a set.
        hits = [
            {k: v for k, v in h.items() if k not in ("source", "offset", "score")} for h in answer["hits"]
        ]
        answer["hits"] = sorted(hits, key=lambda h: h["event_id"])
    if op.startswith("read"):
        # source: "log" or "active" (whether the sink has written it yet: timing);
        # offset: a topic offset, per partition on Kafka.
        answer.pop("source", None)
        answer.pop("offset", None)
    if op.startswith("thread_list"):
        # Warnings are a degraded store's notes, asserted empty in ``absolute_facts``.
        answer.pop("warnings", None)
    return answer


COMPARED = ("publish", "publish_late", "search_read_your_writes", "state", "state_child", "state_missing",
            "thread_list", "thread_list_newest", "context", "context_query", "context_anthropic", "search_thread", "search_child", "search_tool",
            "search_after", "read", "read_missing",
            *(f"sql_{n}" for n in range(len(SQL))))  # fmt: skip
"""Compared field by field. Not compared: ``catch_up`` (how much was pending when it ran
is timing: the server's loop may have drained it already) and ``health`` (each
deployment's own stores and counters): both are checked in ``absolute_facts``."""


def absolute_facts(answers: dict[str, Any], fed: bool) -> list[str]:
    """What the scenario must show in every deployment, stated without the reference."""
    problems: list[str] = []

    def check(ok: bool, what: str) -> None:
        if not ok:
            problems.append(what)

    try:
        if fed:
            publish = answers["publish"]
            check(publish.get("accepted") == 20 and publish.get("rejected") == 1,
                  f"publish: 20 accepted (a duplicate too) and 1 rejected, got {publish}")  # fmt: skip
            ryw = answers["search_read_your_writes"]
            check(
                LATE in {h["event_id"] for h in ryw.get("hits", [])}, f"read-your-writes missed {LATE}: {ryw}"
            )
            check("raised" not in answers["catch_up"], f"catch_up: {answers['catch_up']}")
        state = answers["state"]
        check(state.get("event_count") == 15, f"the duplicate applied once: 15 events in {MAIN}, got "
              f"{state.get('event_count')}")  # fmt: skip
        failures = {f.get("call_id"): f.get("status") for f in state.get("failures", [])}
        check(failures.get("k1") == "error", f"the failing call k1 is in failures: {failures}")
        check(state.get("decided_approvals", [{}])[0].get("decision") == "approved",
              f"approval decided: {state.get('decided_approvals')}")  # fmt: skip
        check(
            [f["path"] for f in state.get("files", [])] == ["auth/session.py"], f"files: {state.get('files')}"
        )
        check(
            answers["state_missing"].get("raised") == "NotFound",
            f"state of no thread: {answers['state_missing']}",
        )
        check(
            answers["read_missing"].get("raised") == "NotFound",
            f"read of no event: {answers['read_missing']}",
        )
        read = answers["read"]
        check(read.get("event", {}).get("payload", {}).get("status") == "error", f"read: {read}")
        pairs = {(r[1], r[2]): (r[4], r[5]) for r in answers["sql_2"].get("rows", []) if r[0] == MAIN}
        check(pairs.get(("ghost", "cm-orphan"), ("",))[0] == "orphan", f"the orphan is flagged: {pairs}")
        check(pairs.get(("k3", "")) == ("missing", True), f"k3 has a synthetic missing result: {pairs}")
        kinds = dict(map(tuple, answers["sql_0"].get("rows", [])))
        check(
            kinds.get("tool_call") == 4 and kinds.get("tool_result") == 4, f"each event logged once: {kinds}"
        )
        check(answers["sql_1"].get("rows") == [[1]], f"one rejected event logged: {answers['sql_1']}")
        listed = answers["thread_list"]
        check(sorted(r["thread_id"] for r in listed.get("threads", [])) == [CHILD, MAIN],
              f"both threads listed: {listed}")  # fmt: skip
        check(not listed.get("warnings") and listed.get("partial") is False, f"listing complete: {listed}")
        hits = {h["event_id"] for h in answers["search_thread"].get("hits", [])}
        check("cm-result-1" in hits and not hits & {"cc-user", "cc-result"}, f"search in {MAIN} only: {hits}")
        windows = {h["event_id"]: h["window_id"] for h in answers["search_child"].get("hits", [])}
        check(
            windows == {"cc-user": "w0", "cc-call": "w0", "cc-result": "w0", "cc-note": "cw1"},
            f"each hit in its window: {windows}",
        )
        tool_hits = {h["event_id"] for h in answers["search_tool"].get("hits", [])}
        check(tool_hits == {"cm-result-1"}, f"a result is found by its call's tool: {tool_hits}")
        check(not answers["search_thread"].get("warnings"), f"search warnings: {answers['search_thread']}")
        messages = " ".join(str(m.get("content")) for m in answers["context"].get("messages", []))
        check("a result nobody asked for" not in messages, "the orphan is never shown to a model")
        check("session_ttl" in messages, f"the context carries the thread: {answers['context']}")
        check(answers["health"].get("status") == "ok", f"health: {answers['health']}")
    except (AttributeError, IndexError, KeyError, TypeError) as error:
        problems.append(f"an answer is not shaped as the contract says ({error!r}): {answers}")
    return problems


# -- the four implementations ------------------------------------------------------------


@dataclass
class Deployment:
    name: str
    svc: Any
    fed: dict[str, Any] = field(default_factory=dict)
    """The answers to ``feed``; empty for offline, fed through the worker (see below)."""


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The embedded in-process answers. chDB opens one data directory per process, so
    this service is closed before any other in-process one opens."""
    svc = EmbeddedService(Settings(data_dir=tmp_path_factory.mktemp("reference")))
    try:
        answers = {**feed(svc), **ask(svc)}
    finally:
        svc.close()
    json_shaped(answers)  # the embedded case reports it if it is not
    return answers


@dataclass
class KafkaDeployment:
    settings: Settings
    worker: subprocess.Popen
    fed: dict[str, Any]


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory, kafka_bootstrap: str, opensearch_url: str
          ) -> Iterator[KafkaDeployment]:  # fmt: skip
    """One worker in its own namespace and index, fed the scenario through its HTTP API;
    shared by the Kafka case and the offline case (which stops it)."""
    ns = f"contract{uuid.uuid4().hex[:8]}"
    settings = Settings(data_dir=tmp_path_factory.mktemp("kafka"), kafka_bootstrap=kafka_bootstrap,
                        opensearch_url=opensearch_url, opensearch_index=f"agentlog-{ns}", kafka_namespace=ns,
                        worker_port=free_port(), partitions=2)  # fmt: skip
    # The index never refreshes on its own while the worker runs (as the HTTP case's
    # 30 s): every search must find the scenario through the worker's read-your-writes.
    OpenSearchIndex(opensearch_url, settings.opensearch_index, refresh_interval="-1").close()
    worker = start_worker(settings)
    remote = RemoteService(f"http://127.0.0.1:{settings.worker_port}")
    try:
        wait_up(remote.url, worker, settings)
        fed = feed(remote)
        if "raised" in fed["catch_up"]:
            # Reported by ``absolute_facts``; meanwhile wait as a user would, so that the
            # other answers are compared with the sinks written, not a race with them.
            wait_written(settings)
        yield KafkaDeployment(settings, worker, fed)
    finally:
        remote.close()
        stop_worker(worker)
        OpenSearchIndex(opensearch_url, settings.opensearch_index)._client.indices.delete(
            index=settings.opensearch_index, ignore_unavailable=True)  # fmt: skip


def wait_up(url: str, proc: subprocess.Popen, settings: Settings | None = None, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, worker_log(settings) if settings else "the server exited"
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"nothing answers at {url}")


def wait_written(settings: Settings, quiet_s: float = 3.0, timeout: float = 120) -> None:
    """Until the worker's sinks have written nothing new for ``quiet_s``: what the
    offline service reads must be in the log and the index before the worker stops."""
    url = f"http://127.0.0.1:{settings.worker_port}/healthz"
    last, since, deadline = None, time.monotonic(), time.monotonic() + timeout
    while time.monotonic() < deadline:
        written = httpx.get(url, timeout=5).json().get("written")
        if written != last:
            last, since = written, time.monotonic()
        elif time.monotonic() - since >= quiet_s and written and written.get("events", 0) >= 20:
            return
        time.sleep(0.3)
    raise AssertionError(f"the worker's sinks did not settle: {last}")


def embedded_in_process(_request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Deployment]:
    svc = EmbeddedService(Settings(data_dir=tmp_path / "embedded"))
    try:
        yield Deployment("embedded", svc, feed(svc))
    finally:
        svc.close()


def embedded_over_http(_request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Deployment]:
    """``agentlog run`` in a child process, its index refreshed every 30 s only, so the
    read-your-writes search must come from the active state (as conftest's ``server``)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTLOG_")}
    env.update(
        AGENTLOG_DATA_DIR=str(tmp_path / "http"), AGENTLOG_HTTP_PORT=str(port), AGENTLOG_REFRESH_SECONDS="30"
    )
    proc = subprocess.Popen([sys.executable, "-m", "agentlog", "run"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    svc = RemoteService(f"http://127.0.0.1:{port}")
    try:
        wait_up(svc.url, proc)
        yield Deployment("http", svc, feed(svc))
    finally:
        svc.close()
        proc.terminate()
        proc.wait(timeout=60)


def kafka_worker(request: pytest.FixtureRequest, _tmp_path: Path) -> Iterator[Deployment]:
    deployment: KafkaDeployment = request.getfixturevalue("kafka")
    if deployment.worker.poll() is not None:
        pytest.fail(
            "the offline case stopped the shared worker: run the Kafka case before it (parameter order)"
        )
    svc = RemoteService(f"http://127.0.0.1:{deployment.settings.worker_port}")
    try:
        yield Deployment("kafka", svc, deployment.fed)  # fed through this same interface
    finally:
        svc.close()


def offline(request: pytest.FixtureRequest, _tmp_path: Path) -> Iterator[Deployment]:
    """Kafka with no worker answering: the shared worker processed the scenario, then
    stops; the offline service reads the log and the index it wrote. Its ``feed`` answers
    are not its own (what it publishes no worker would process), so only ``ask`` is
    compared."""
    deployment: KafkaDeployment = request.getfixturevalue("kafka")
    if deployment.worker.poll() is None:
        wait_written(deployment.settings)
        stop_worker(deployment.worker)
        # What ``run --until-idle`` leaves: an index searchable without waiting for a refresh.
        index = OpenSearchIndex(str(deployment.settings.opensearch_url), deployment.settings.opensearch_index)
        index.refresh()
        index.close()
    svc = OfflineService(deployment.settings)
    try:
        yield Deployment("offline", svc)
    finally:
        svc.close()


IMPLEMENTATIONS = {"embedded": embedded_in_process, "http": embedded_over_http, "kafka": kafka_worker,
                   "offline": offline}  # fmt: skip
"""In this order: the offline case stops the worker the Kafka case asks."""


@pytest.fixture(params=list(IMPLEMENTATIONS))
def deployment(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Deployment]:
    yield from IMPLEMENTATIONS[request.param](request, tmp_path)


def json_shaped(answers: dict[str, Any]) -> list[str]:
    """Every implementation answers a publish with the protocol's ``PublishReport`` (the
    HTTP client rebuilds it from the body); anything else is a problem. It is then made a
    dict for comparison."""
    problems = []
    for op in ("publish", "publish_late"):
        if op in answers and not isinstance(answers[op], PublishReport):
            problems.append(f"{op} answered a {type(answers[op]).__name__}, not a PublishReport")
        elif isinstance(answers.get(op), PublishReport):
            answers[op] = answers[op].as_dict()
    return problems


def differences(expected: Any, got: Any, where: str) -> list[str]:
    """Field-by-field differences, each with its path."""
    if isinstance(expected, dict) and isinstance(got, dict):
        out = [f"{where}.{k}: missing (expected {expected[k]!r})" for k in expected if k not in got]
        out += [f"{where}.{k}: unexpected {got[k]!r}" for k in got if k not in expected]
        for k in expected.keys() & got.keys():
            out += differences(expected[k], got[k], f"{where}.{k}")
        return out
    if isinstance(expected, list) and isinstance(got, list) and len(expected) == len(got):
        return [d for n, (e, g) in enumerate(zip(expected, got)) for d in differences(e, g, f"{where}[{n}]")]
    return [] if expected == got else [f"{where}: expected {expected!r}, got {got!r}"]


def test_every_implementation_answers_the_same_scenario_as_the_embedded_service_field_by_field(
    deployment: Deployment, reference: dict[str, Any]
) -> None:
    svc = deployment.svc
    answers = {**deployment.fed, **ask(svc)}
    missing = [m for m in ("publish", "thread_list", "state", "context", "search", "read", "sql", "catch_up",
                           "rebuild", "health", "close") if not callable(getattr(svc, m, None))]  # fmt: skip
    problems = [f"not a Service: lacks {missing}"] if missing or not isinstance(svc, Service) else []
    problems += json_shaped(answers)
    for op in COMPARED:
        if op in answers:  # offline has no feed answers of its own
            problems += differences(normalise(op, reference[op]), normalise(op, answers[op]), op)
    problems += [f"fact: {p}" for p in absolute_facts(answers, fed=bool(deployment.fed))]
    assert not problems, f"{deployment.name}:\n  " + "\n  ".join(problems)


def test_the_reference_itself_shows_the_scenarios_facts(reference: dict[str, Any]) -> None:
    """The reference is held to the absolute facts too: a wrong reference would otherwise
    make every other deployment look wrong, or right."""
    assert absolute_facts(reference, fed=True) == []
