"""The agent step, side by side (``agentlog bench --only step``).

An agent's loop publishes what just happened, then asks for the state (or the context for
the next model call). One step = publish one event, then ``state``; or publish one event,
then ``context`` at 8,000 tokens (recall on: the latest user message drives it). Measured
on threads pre-filled with generated agent traffic, in-process (``EmbeddedService``) and
over HTTP against a real ``agentlog run`` on a free port with its own data directory,
through the public API only, by an agent process of its own (``http_length``). In the same run, the same step with LangGraph (``graph.invoke``
appending one message to a StateGraph that holds the thread's messages, then
``graph.get_state``) with ``InMemorySaver`` and with ``SqliteSaver``, pre-filled to the same
length: LangGraph is an optional extra (``pip install 'agentlog[bench]'``).
"""

from __future__ import annotations

import gc
import os
import random
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import timedelta
from itertools import islice
from pathlib import Path
from typing import Any

import orjson

from agentlog.bench.run import _serve, percentiles
from agentlog.streams.api.client import RemoteService
from agentlog.streams.api.service import Service
from agentlog.streams.cli.demo import BASE_TIME
from agentlog.streams.cli.render import progress
from agentlog.streams.config import Settings
from agentlog.streams.embedded.service import EmbeddedService

LENGTHS = (200, 2_000, 20_000)
STEPS = 1_000
"""Measured steps per series: a p99 of 1,000 steps is its tenth-slowest, not (as of 200) its
second-slowest, which one stray pause of the machine sets."""
BUDGET = 8_000
WARMUP = 5
LANGGRAPH_SECONDS = 15.0
"""Time budget of one LangGraph series: its step grows with the thread (about 0.7 s at
20,000 messages here), so long threads take fewer steps; never fewer than ``MIN_STEPS``."""
MIN_STEPS = 10
INSTALL_HINT = "pip install 'agentlog[bench]'"
TOOLS = ("pytest", "grep", "bash", "read_file")

Tick = Callable[[], None]


# -- generated agent traffic -------------------------------------------------------------


class Traffic:
    """One thread's events as an agent produces them: a goal and constraints, then turns of
    user and assistant messages, tool call/result pairs (some failing, some long outputs)
    and plan updates. ``next()`` continues the same thread, so the step events follow the
    pre-fill with increasing ids and times."""

    def __init__(self, thread_id: str, seed: int = 7) -> None:
        self.thread_id = thread_id
        self.rng = random.Random(seed)
        self.n = 0
        self.turn = 0
        self.queue: list[tuple[str, dict[str, Any]]] = [
            ("goal", {"text": "keep the checkout service healthy after the cache migration"}),
            ("constraint", {"constraint_id": "ro-db", "text": "never write to the production database"}),
            ("constraint", {"constraint_id": "approve", "text": "ask before restarting any service"}),
        ]

    def _turn(self) -> list[tuple[str, dict[str, Any]]]:
        rng, t = self.rng, self.turn
        self.turn += 1
        out: list[tuple[str, dict[str, Any]]] = [
            ("message", {"role": "user", "text": f"turn {t}: what did {rng.choice(TOOLS)} say about "
                                                 f"component {rng.randrange(99)}? ERR_{rng.randrange(40):03d}"}),
        ]  # fmt: skip
        if rng.random() < 0.3:
            out.append(("plan", {"steps": [
                {"step_id": f"s{t}", "text": f"inspect component {rng.randrange(99)}", "status": "running"},
                {"step_id": f"s{t - 1}", "status": "done"}]}))  # fmt: skip
        for k in range(rng.randrange(1, 4)):
            call_id, tool = f"{self.thread_id}.c{t}.{k}", rng.choice(TOOLS)
            failed = rng.random() < 0.15
            lines = [f"{tool} line {i}: component {rng.randrange(99)} ok" for i in range(rng.randrange(1, 40))]
            if failed:
                lines.append(f"ERROR ERR_{rng.randrange(40):03d}: component {rng.randrange(99)} timed out")
            out.append(("tool_call", {"call_id": call_id, "tool_name": tool, "arguments": {"target": f"c{t}.{k}"}}))
            out.append(("tool_result", {"call_id": call_id, "output": "\n".join(lines),
                                        "status": "error" if failed else "ok", "exit_code": int(failed)}))  # fmt: skip
        out.append(("message", {"role": "assistant", "text": f"turn {t}: " + "checked and noted. " * rng.randrange(1, 12)}))
        return out

    def next(self) -> dict[str, Any]:
        if not self.queue:
            self.queue = self._turn()
        kind, payload = self.queue.pop(0)
        ts = (BASE_TIME + timedelta(seconds=2 * self.n)).isoformat().replace("+00:00", "Z")
        event = {"event_id": f"{self.thread_id}.{self.n}", "thread_id": self.thread_id, "kind": kind, "ts": ts,
                 "turn_id": f"{self.thread_id}.turn{self.turn}", "project": "bench", "payload": payload}  # fmt: skip
        self.n += 1
        return event

    def take(self, n: int) -> Iterator[dict[str, Any]]:
        for _ in range(n):
            yield self.next()


def _prefill(service: Service, traffic: Traffic, n: int) -> None:
    stream = traffic.take(n)
    while chunk := list(islice(stream, 5_000)):
        service.publish(b"\n".join(orjson.dumps(e) for e in chunk))
    service.catch_up()
    # The pre-fill built thousands of events here at once, which an agent never does: the
    # full collection they would set off lands on the first measured steps otherwise.
    gc.collect()


# -- agentlog ----------------------------------------------------------------------------


@dataclass
class Series:
    """One measured series: per-step latencies (seconds) and the wall time of the loop."""

    samples: list[float] = field(default_factory=list)
    seconds: float = 0.0

    def figures(self) -> dict[str, Any]:
        return {**percentiles(self.samples), "steps": len(self.samples),
                "steps_per_s": round(len(self.samples) / max(self.seconds, 1e-9), 2)}  # fmt: skip


def _agentlog_series(service: Service, traffic: Traffic, read: Callable[[str], Any], steps: int,
                     tick: Tick) -> Series:  # fmt: skip
    for _ in range(WARMUP):  # the first contexts warm the index reader and the token counter
        service.publish(orjson.dumps(traffic.next()))
        read(traffic.thread_id)
    series = Series()
    t_all = time.perf_counter()
    for _ in range(steps):
        data = orjson.dumps(traffic.next())
        t0 = time.perf_counter()
        service.publish(data)
        read(traffic.thread_id)
        series.samples.append(time.perf_counter() - t0)
        tick()
    series.seconds = time.perf_counter() - t_all
    return series


def agentlog_length(service: Service, n: int, steps: int, budget: int, tick: Tick) -> dict[str, Any]:
    """Both steps at one length; each step kind on its own thread, pre-filled to ``n``."""
    reads: dict[str, Callable[[str], Any]] = {
        "state": service.state, "context": lambda thread: service.context(thread, budget)}  # fmt: skip
    out = {}
    for kind, read in reads.items():
        traffic = Traffic(f"step-{n}-{kind}", seed=n)
        _prefill(service, traffic, n)
        out[kind] = _agentlog_series(service, traffic, read, steps, tick).figures()
    return out


AGENT_PROCESS = "--agent-process"


def http_length(url: str, n: int, steps: int, budget: int, tick: Tick) -> dict[str, Any]:
    """``agentlog_length`` over HTTP against ``url``, run by an agent process of its own: a
    fresh interpreter holding the client alone, as an agent's would. In this process the
    client's full collections also walked what an agent does not carry (the in-process
    deployment's threads, LangGraph's checkpoints), and its steps shared the interpreter
    lock with them. The figures carry the agent process's id (``agent_pid``)."""
    argv = [sys.executable, "-m", "agentlog.bench.step", AGENT_PROCESS, url, str(n), str(steps), str(budget)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=3600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the agent process measuring over HTTP failed: {done.stderr[-2000:]}")
    for _ in range(2 * steps):  # both step kinds, ticked once the process reports
        tick()
    return dict(orjson.loads(done.stdout.splitlines()[-1]))


def _agent_process(url: str, n: str, steps: str, budget: str) -> int:
    """The agent side of ``http_length``: both series' figures (and the process's id) as one JSON line."""
    client = RemoteService(url)
    try:
        figures = agentlog_length(client, int(n), int(steps), int(budget), lambda: None)
        print(orjson.dumps({**figures, "agent_pid": os.getpid()}).decode(), flush=True)
    finally:
        client.close()
    return 0


@contextmanager
def in_process() -> Iterator[EmbeddedService]:
    """The embedded service in this process, over a data directory of its own."""
    with tempfile.TemporaryDirectory(prefix="agentlog-bench-step-") as tmp:
        service = EmbeddedService(Settings(data_dir=Path(tmp)))
        try:
            yield service
        finally:
            service.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def served() -> Iterator[RemoteService]:
    """A real ``agentlog run`` (embedded, loopback, a free port, its own data directory) and
    a client of it; the server is terminated however the run ends."""
    with tempfile.TemporaryDirectory(prefix="agentlog-bench-step-http-") as tmp:
        # Only the variables that name this server: an AGENTLOG_KAFKA_BOOTSTRAP (or a store
        # URL) in the caller's environment must not turn it into another deployment.
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTLOG_")}
        env |= {"AGENTLOG_DATA_DIR": tmp, "AGENTLOG_HTTP_PORT": str(_free_port())}
        server = _serve(env)
        try:
            client = RemoteService(f"http://127.0.0.1:{env['AGENTLOG_HTTP_PORT']}")
            try:
                yield client
            finally:
                client.close()
        finally:
            server.terminate()
            try:
                server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


# -- LangGraph ---------------------------------------------------------------------------


def langgraph_available() -> bool:
    try:
        import langgraph.checkpoint.sqlite  # noqa: F401, PLC0415
        import langgraph.graph  # noqa: F401, PLC0415
    except ImportError:
        return False
    return True


def to_message(event: dict[str, Any]) -> Any:
    """The LangChain message an agent keeps in its graph state for one of our events."""
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage  # noqa: PLC0415

    kind, p, mid = event["kind"], event["payload"], event["event_id"]
    if kind == "message":
        return (HumanMessage if p["role"] == "user" else AIMessage)(p["text"], id=mid)
    if kind == "tool_call":
        return AIMessage("", tool_calls=[{"name": p["tool_name"], "args": p["arguments"], "id": p["call_id"]}], id=mid)
    if kind == "tool_result":
        return ToolMessage(p["output"], tool_call_id=p["call_id"], status="error" if p["exit_code"] else "success", id=mid)
    return SystemMessage(f"{kind}: {orjson.dumps(p).decode()}", id=mid)  # goal, constraint, plan


def _graph(checkpointer: Any) -> Any:
    """The smallest agent graph: its state is the thread's messages (``add_messages``), one
    node that reads them; each invoke appends the step's message and checkpoints."""
    from typing import Annotated, TypedDict  # noqa: PLC0415

    from langchain_core.messages import AnyMessage  # noqa: PLC0415
    from langgraph.graph import END, START, StateGraph  # noqa: PLC0415
    from langgraph.graph.message import add_messages  # noqa: PLC0415

    # The functional form: this module's postponed annotations would hide the local imports.
    agent_state = TypedDict("AgentState", {"messages": Annotated[list[AnyMessage], add_messages]})

    def agent(state: dict[str, Any]) -> dict[str, Any]:
        return {}  # the model call is out of the step: both sides pay for it alike

    builder = StateGraph(agent_state)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", END)
    return builder.compile(checkpointer=checkpointer)


def _savers(tmp: Path) -> dict[str, Callable[[], AbstractContextManager[Any]]]:
    from langgraph.checkpoint.memory import InMemorySaver  # noqa: PLC0415
    from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: PLC0415

    @contextmanager
    def sqlite() -> Iterator[Any]:
        """A checkpoint file of its own per series, closed with it."""
        conn = sqlite3.connect(tmp / f"checkpoints-{time.monotonic_ns()}.db", check_same_thread=False)
        try:
            yield SqliteSaver(conn)
        finally:
            conn.close()

    return {"InMemorySaver": lambda: nullcontext(InMemorySaver()), "SqliteSaver": sqlite}


def _langgraph_series(saver: Any, n: int, steps: int, seconds: float, tick: Tick) -> Series:
    graph = _graph(saver)
    traffic = Traffic(f"step-{n}-state", seed=n)  # the same events as agentlog's state step
    config = {"configurable": {"thread_id": traffic.thread_id}}
    graph.invoke({"messages": [to_message(e) for e in traffic.take(n)]}, config)
    for _ in range(WARMUP):
        graph.invoke({"messages": [to_message(traffic.next())]}, config)
        graph.get_state(config)
    series = Series()
    t_all = time.perf_counter()
    for _ in range(steps):
        message = to_message(traffic.next())
        t0 = time.perf_counter()
        graph.invoke({"messages": [message]}, config)
        graph.get_state(config)
        series.samples.append(time.perf_counter() - t0)
        tick()
        if len(series.samples) >= MIN_STEPS and time.perf_counter() - t_all > seconds:
            break
    series.seconds = time.perf_counter() - t_all
    return series


def langgraph_length(n: int, steps: int, seconds: float, tmp: Path, tick: Tick) -> dict[str, Any]:
    """LangGraph's publish-then-state step at one length, with each saver, fresh."""
    out = {}
    for name, make in _savers(tmp).items():
        with make() as saver:
            out[name] = _langgraph_series(saver, n, steps, seconds, tick).figures()
    return out


# -- the section -------------------------------------------------------------------------


def bench_step(lengths: tuple[int, ...] = LENGTHS, steps: int = STEPS, budget: int = BUDGET,
               langgraph_seconds: float = LANGGRAPH_SECONDS, on_length: Callable[[int, int], Tick] | None = None,
               in_process_only: bool = False) -> dict[str, Any]:  # fmt: skip
    """Every series of the section, length by length: agentlog in-process, over HTTP, then
    LangGraph, so each ratio compares series measured minutes apart at most (this machine's
    load moves). ``on_length(n, total)`` gives each length's tick. ``in_process_only``: the
    in-process series alone (no server, no LangGraph)."""
    start = on_length or (lambda _n, _total: lambda: None)
    langgraph = langgraph_available() and not in_process_only
    result: dict[str, Any] = {"lengths": list(lengths), "steps": steps, "budget": budget,
                              "in_process": {}, "http": None if in_process_only else {}, "http_agent_pids": {},
                              "langgraph": {} if langgraph else None}  # fmt: skip
    with in_process() as local, (nullcontext(None) if in_process_only else served()) as remote, \
            tempfile.TemporaryDirectory(prefix="agentlog-bench-step-langgraph-") as tmp:  # fmt: skip
        result["http_url"] = remote.url if remote is not None else None
        for n in lengths:
            tick = start(n, _series(in_process_only, langgraph) * steps)
            result["in_process"][n] = agentlog_length(local, n, steps, budget, tick)
            if remote is not None:
                result["http"][n] = http_length(remote.url, n, steps, budget, tick)
                result["http_agent_pids"][n] = result["http"][n].pop("agent_pid")
            if langgraph:
                result["langgraph"][n] = langgraph_length(n, steps, langgraph_seconds, Path(tmp), tick)
    return result


def _series(in_process_only: bool, langgraph: bool) -> int:
    """Measured series per length: each agentlog deployment's state and context steps,
    and LangGraph's two savers."""
    return 2 if in_process_only else 6 if langgraph else 4


def _fmt(f: dict[str, Any]) -> str:
    rate = f"{f['steps_per_s']:,.0f}" if f["steps_per_s"] >= 10 else f"{f['steps_per_s']:.2f}"
    return f"p50 {f['p50_ms']:.3f} ms p99 {f['p99_ms']:.3f} ms ({rate} steps/s, {f['steps']} steps)"


def _ratio(theirs_ms: float, ours_ms: float) -> str:
    """How many times longer LangGraph's step takes (below 1: agentlog's is the slower)."""
    r = theirs_ms / max(ours_ms, 1e-6)
    return f"{r:,.0f}x" if r >= 10 else f"{r:.2f}x"


def report(result: dict[str, Any]) -> list[str]:
    lines = []
    for where in ("in_process", "http"):
        if result[where] is None:
            continue
        label = "in-process" if where == "in_process" else "over HTTP "
        for n in result["lengths"]:
            row = result[where][n]
            lines.append(f"agentlog {label}, thread of {n:>6,} events: publish->state {_fmt(row['state'])} | "
                         f"publish->context({result['budget']:,} tokens, recall on) {_fmt(row['context'])}")  # fmt: skip
    if result["langgraph"] is None:
        if result["http"] is not None:  # not left out on purpose (--in-process-only)
            lines.append(f"LangGraph is not installed: `{INSTALL_HINT}` to measure it side by side")
        return lines
    for n in result["lengths"]:
        ours = result["in_process"][n]["state"]
        for saver, f in result["langgraph"][n].items():
            lines.append(f"LangGraph invoke+get_state, {saver:<13}, thread of {n:>6,} messages: {_fmt(f)} | "
                         f"LangGraph / agentlog in-process publish->state: p50 {_ratio(f['p50_ms'], ours['p50_ms'])}, "
                         f"p99 {_ratio(f['p99_ms'], ours['p99_ms'])}")  # fmt: skip
    return lines


def run(lengths: tuple[int, ...] = LENGTHS, steps: int = STEPS, in_process_only: bool = False) -> int:
    langgraph = langgraph_available() and not in_process_only
    if not langgraph and not in_process_only:
        print(f"step: LangGraph is not installed, measuring agentlog only (`{INSTALL_HINT}` adds it)", flush=True)
    total = len(lengths) * _series(in_process_only, langgraph) * steps
    title = "step: agentlog in-process" if in_process_only else "step: agentlog in-process, over HTTP, LangGraph"
    with progress(title) as update:
        done, planned = [0], [0]

        def on_length(_n: int, steps_of_length: int) -> Tick:
            done[0] = planned[0]  # LangGraph's long threads stop early, on their time budget
            planned[0] += steps_of_length

            def tick() -> None:
                done[0] += 1
                update(done[0], total)

            return tick

        result = bench_step(lengths, steps, on_length=on_length, in_process_only=in_process_only)
    for line in report(result):
        print(line, flush=True)
    return 0


__all__ = ["Traffic", "agentlog_length", "bench_step", "http_length", "in_process", "langgraph_available", "langgraph_length",
           "report", "run", "served", "to_message"]

if __name__ == "__main__" and sys.argv[1:2] == [AGENT_PROCESS]:
    sys.exit(_agent_process(*sys.argv[2:6]))
