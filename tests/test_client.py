"""Issue 16's Python client: a thread handle that publishes typed events, a bounded
buffer with retries that never duplicate, and the same answers from every target."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from agentlog.sinks.base import StoreError
from agentlog.streams.api.client import RemoteService
from agentlog.streams.api.kept_states import KeptStates
from agentlog.streams.api.service import Unavailable
from agentlog.streams.config import Settings
from agentlog.streams.embedded.service import EmbeddedService
from agentlog.streams.publish_check import PublishReport

import agentlog
from agentlog.client import AsyncClient, Client, PublishRefused
from agentlog.client.client import TIMEOUT_OUTPUT
from tests.client_server import TOKEN, Server
from tests.conftest import free_port
from tests.tcp_proxy import TcpProxy


@pytest.fixture(autouse=True)
def _no_agentlog_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A data directory's client reads AGENTLOG_* as the command does: these tests' stores
    are their own (no shared OpenSearch index named by the environment)."""
    for name in [n for n in os.environ if n.startswith("AGENTLOG_")]:
        monkeypatch.delenv(name)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = Server(tmp_path_factory.mktemp("client-server") / "data", free_port()).start()
    yield running
    running.stop()


def script(client: Any, thread: str = "s1") -> None:
    """One agent turn touching every helper of the thread handle."""
    t = client.thread(thread, project="billing")
    t.goal("make the login test pass")
    t.constraint("do not touch the database", constraint_id="no-db")
    t.user("the login test fails with KeyError, fix it")
    t.plan(["reproduce", "fix", ("verify", "run the suite", "pending")])
    with t.tool_call("pytest", {"k": "login"}, call_id="c1") as call:
        call.result("FAILED test_login - KeyError: 'user'", status="error", exit_code=1)
    t.file_changed("app/login.py")
    with t.tool_call("pytest", {"k": "login"}, call_id="c2") as call:
        call.result("1 passed", exit_code=0)
    child = t.spawn(f"{thread}-review", role="reviewer")
    child.goal("review the login fix")
    child.exit(summary="the fix looks right")
    t.approval("merge the fix", approval_id="a1")
    t.decision("a1", "approved", by="lead")
    t.assistant("fixed: the session lacked the user key")
    t.end_turn()


async def async_script(client: AsyncClient, thread: str = "s1") -> None:
    """``script`` through ``AsyncClient``."""
    t = client.thread(thread, project="billing")
    await t.goal("make the login test pass")
    await t.constraint("do not touch the database", constraint_id="no-db")
    await t.user("the login test fails with KeyError, fix it")
    await t.plan(["reproduce", "fix", ("verify", "run the suite", "pending")])
    async with t.tool_call("pytest", {"k": "login"}, call_id="c1") as call:
        await call.result("FAILED test_login - KeyError: 'user'", status="error", exit_code=1)
    await t.file_changed("app/login.py")
    async with t.tool_call("pytest", {"k": "login"}, call_id="c2") as call:
        await call.result("1 passed", exit_code=0)
    child = await t.spawn(f"{thread}-review", role="reviewer")
    await child.goal("review the login fix")
    await child.exit(summary="the fix looks right")
    await t.approval("merge the fix", approval_id="a1")
    await t.decision("a1", "approved", by="lead")
    await t.assistant("fixed: the session lacked the user key")
    await t.end_turn()


PAIRS = "SELECT thread_id, call_id, tool_name, status, synthetic, output_bytes FROM tool_calls FINAL " \
        "WHERE thread_id = '{t}' ORDER BY call_id"  # fmt: skip
EVENTS = "SELECT event_id, kind, thread_id, turn_id FROM events WHERE thread_id IN ('{t}', '{t}-review') " \
         "ORDER BY event_id"  # fmt: skip


def _timeless(state: dict[str, Any]) -> dict[str, Any]:
    """A state without its event times (each run has its own clock)."""
    timeless = {k: v for k, v in state.items() if k not in ("last_ts", "newest_ts", "latest_user_message_ts")}
    for name in ("failures", "agents", "files", "decided_approvals"):
        timeless[name] = [{k: v for k, v in item.items() if k != "ts"} for item in timeless[name]]
    return timeless


def outcome(client: Any, thread: str = "s1") -> dict[str, Any]:
    """What a run left: the thread's state, pairs, events and context, the child's goal."""
    context = client.context(thread, budget=3000, query="KeyError")
    return {"state": _timeless(client.state(thread).model_dump()), "pairs": client.sql(PAIRS.format(t=thread)).rows,
            "events": client.sql(EVENTS.format(t=thread)).rows, "messages": context.messages,
            "child": client.state(f"{thread}-review").goal}  # fmt: skip


async def async_outcome(client: AsyncClient, thread: str = "s1") -> dict[str, Any]:
    """``outcome`` through ``AsyncClient``'s awaited reads."""
    context = await client.context(thread, budget=3000, query="KeyError")
    return {"state": _timeless((await client.state(thread)).model_dump()),
            "pairs": (await client.sql(PAIRS.format(t=thread))).rows,
            "events": (await client.sql(EVENTS.format(t=thread))).rows, "messages": context.messages,
            "child": (await client.state(f"{thread}-review")).goal}  # fmt: skip


def test_the_same_script_gives_the_same_state_pairs_events_and_context_embedded_over_http_and_async(
    tmp_path: Path, server: Server
) -> None:
    with Client(tmp_path / "embedded", id_prefix="run") as embedded:
        script(embedded)
        local = outcome(embedded)
    with Client(server.url, token=TOKEN, id_prefix="run") as remote:
        script(remote)
        over_http = outcome(remote)

    async def run_async(target: Any, prefix: str, thread: str, **options: Any) -> dict[str, Any]:
        async with AsyncClient(target, id_prefix=prefix, **options) as client:
            assert (client._http is not None) == str(target).startswith("http")  # reads awaited over HTTP
            await async_script(client, thread)
            return await async_outcome(client, thread)

    assert over_http == local
    assert asyncio.run(run_async(tmp_path / "async", "run", "s1")) == local
    # over HTTP with httpx's async client, on the same server: another thread and id prefix,
    # so compared with an embedded run of that thread and prefix
    with Client(tmp_path / "embedded-x1", id_prefix="arun") as embedded:
        script(embedded, "x1")
        local_x1 = outcome(embedded, "x1")
    assert asyncio.run(run_async(server.url, "arun", "x1", token=TOKEN)) == local_x1
    assert local["state"]["goal"]["text"] == "make the login test pass"
    assert [p[1:4] for p in local["pairs"]] == [["c1", "pytest", "error"], ["c2", "pytest", "ok"]]
    assert len(local["events"]) == 16


def test_spawn_links_the_child_thread_and_exit_reports_to_the_parent(tmp_path: Path) -> None:
    with Client(tmp_path / "data") as client:
        parent = client.thread("p", project="billing")
        child = parent.spawn("p-child", role="tester")
        child.user("run the tests")
        child.exit("done", summary="all green")
        agents = parent.state().agents
        assert [(a["agent_id"], a["thread_id"], a["role"], a["summary"]) for a in agents] == \
            [("p-child", "p-child", "tester", "all green")]  # fmt: skip
        assert client.state("p-child").project == "billing"
        assert client.read(agents[0]["event_id"]).event["payload"]["child_thread_id"] == "p-child"
        with pytest.raises(ValueError, match="spawn"):
            client.thread("alone").exit()


def test_an_exception_in_a_tool_call_block_becomes_an_error_result_with_its_latency_and_is_raised(
    tmp_path: Path,
) -> None:
    with Client(tmp_path / "data") as client:
        t = client.thread("t")
        with pytest.raises(KeyError):
            with t.tool_call("deploy", {"env": "prod"}) as call:
                time.sleep(0.02)
                raise KeyError("token")
        assert call.status == "error" and call.latency_ms is not None and call.latency_ms >= 20
        row = client.sql("SELECT status, latency_ms, output_bytes FROM tool_calls FINAL").rows
        assert row[0][0] == "error" and row[0][1] >= 20
        found = client.search("token", thread_id="t", kind="tool_result").hits
        assert found and "KeyError" in found[0].snippet


def test_a_tool_call_never_given_a_result_gets_a_timeout_result_when_the_client_closes(tmp_path: Path) -> None:
    with Client(tmp_path / "data") as client:
        t = client.thread("t")
        with t.tool_call("long_job", {"n": 1}):
            pass  # finished elsewhere, never reported
        with t.tool_call("quick") as done:
            done.result("ok")
        assert len(t.state().pending_calls) == 1
    with Client(tmp_path / "data") as again:
        rows = again.sql("SELECT tool_name, status FROM tool_calls FINAL ORDER BY tool_name").rows
        assert rows == [["long_job", "timeout"], ["quick", "ok"]]
        output = again.sql("SELECT payload FROM events WHERE kind = 'tool_result' AND payload LIKE '%timeout%'")
        assert TIMEOUT_OUTPUT in output.rows[0][0]


class Flaky:
    """A real ``EmbeddedService`` whose publish first fails as a deployment that is away
    would: 503s (``Unavailable``), then a refused connection."""

    def __init__(self, service: EmbeddedService, failures: list[Exception]) -> None:
        self.service = service
        self.failures = failures
        self.attempts = 0

    def publish(self, data: bytes) -> PublishReport:
        self.attempts += 1
        if self.failures:
            raise self.failures.pop(0)
        return self.service.publish(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.service, name)


def test_a_publish_answered_503_or_refused_is_retried_with_back_off_and_stored_once(settings: Settings) -> None:
    from agentlog.streams.api.client import Unreachable

    service = EmbeddedService(settings)
    flaky = Flaky(service, [Unavailable("catching up"), Unavailable("catching up"), Unreachable("connection refused")])
    client = Client(flaky, batch_size=100)
    t = client.thread("t")
    ids = [t.user(f"message {i}") for i in range(50)]
    started = time.monotonic()
    client.flush()
    assert flaky.attempts == 4  # three failures, then the same batch once more
    assert time.monotonic() - started >= 0.05 * (0.5 + 1 + 2) * 0.5  # backed off, with jitter
    assert client.sql("SELECT count(), uniqExact(event_id) FROM events").rows == [[50, 50]]
    assert client.read(ids[-1]).event["payload"]["text"] == "message 49"
    client.close()
    service.close()


def test_a_batch_stops_growing_at_its_byte_limit_so_big_tool_outputs_go_in_several_requests(settings: Settings) -> None:
    service = EmbeddedService(settings)
    sizes: list[int] = []

    class Recording(Flaky):
        def publish(self, data: bytes) -> PublishReport:
            sizes.append(len(data))
            return super().publish(data)

    with Client(Recording(service, []), max_batch_bytes=1_000_000) as client:
        t = client.thread("big")
        for i in range(10):
            t.tool_result(f"c{i}", "x" * 300_000)
        client.flush()
        assert client.sql("SELECT count() FROM events").scalar() == 10
    service.close()
    assert len(sizes) >= 4 and max(sizes) < 1_000_000


def test_a_refusal_is_never_retried_and_says_why(server: Server) -> None:
    class Counting(RemoteService):
        attempts = 0

        def publish(self, data: bytes) -> PublishReport:
            Counting.attempts += 1
            return super().publish(data)

    client = Client(Counting(server.url, "wrong-token", busy_seconds=0.0))
    client.thread("t").user("hello")
    started = time.monotonic()
    with pytest.raises(PublishRefused, match="token"):
        client.flush()
    assert Counting.attempts == 1 and time.monotonic() - started < 2.0
    with pytest.raises(StoreError, match="token"):  # a read is refused the same way, at once
        client.state("t")
    client.connection.close()
    with Client(server.url, token=TOKEN) as good:
        good.thread("t").user("hello")
        started = time.monotonic()
        with pytest.raises(StoreError, match="budget"):  # HTTP 400: a bad parameter, said, never retried
            good.context("t", budget=-5)
        assert time.monotonic() - started < 2.0


def test_records_the_deployment_rejects_are_reported_with_their_reasons_and_the_rest_stored(server: Server) -> None:
    with Client(server.url, token=TOKEN) as client:
        client.thread("fine").user("kept")
        client.thread("not an id").user("refused")  # a space is outside the id alphabet
        with pytest.raises(PublishRefused) as refused:
            client.flush()
        assert "1 of 2 events rejected" in str(refused.value)
        assert "invalid_event" in refused.value.rejections[0]["reason"]
        assert client.state("fine").event_count == 1


def test_an_agent_that_never_flushes_keeps_a_bounded_record_of_refusals_and_flush_still_counts_them_all(
    tmp_path: Path,
) -> None:
    # A write-only agent publishing a bad event now and then: what flush() will report must
    # not grow with every refused batch for as long as the agent runs.
    with Client(tmp_path / "data", batch_size=1, flush_interval=0.0) as client:
        bad = client.thread("not an id")
        for i in range(300):
            bad.user(f"refused {i}")
        while client.pending:
            time.sleep(0.01)
        assert len(client._buffer._errors) <= 100
        with pytest.raises(PublishRefused) as refused:
            client.flush()
        assert str(refused.value).startswith("300 publish failures") and len(refused.value.rejections) <= 100


def test_the_buffer_is_bounded_publishing_waits_while_the_server_is_away_and_nothing_is_lost(server: Server) -> None:
    proxy = TcpProxy("127.0.0.1", int(server.url.rsplit(":", 1)[1]))
    proxy.stop()  # the server is unreachable: connections refused
    client = Client(f"http://127.0.0.1:{proxy.port}", token=TOKEN, capacity=50, batch_size=10)
    t = client.thread("bounded")
    queued = []
    writer = threading.Thread(target=lambda: queued.extend(t.user(f"m{i}") for i in range(300)))
    writer.start()
    time.sleep(1.0)
    assert writer.is_alive(), "publishing should wait for room, not grow the buffer"
    assert client.pending <= 50 + 10  # the buffer, and at most one batch in a request
    proxy.start()
    writer.join(timeout=60)
    client.flush()
    assert client.sql("SELECT count(), uniqExact(event_id) FROM events WHERE thread_id = 'bounded'").rows == [[300, 300]]
    client.close()
    proxy.stop()


def test_the_buffer_is_bounded_in_bytes_too_so_big_tool_outputs_wait_for_room(server: Server) -> None:
    proxy = TcpProxy("127.0.0.1", int(server.url.rsplit(":", 1)[1]))
    proxy.stop()  # the server is unreachable: connections refused
    client = Client(f"http://127.0.0.1:{proxy.port}", token=TOKEN, capacity=10_000, capacity_bytes=1_000_000,
                    batch_size=2)  # fmt: skip
    t = client.thread("bounded-bytes")
    big = "x" * 100_000
    writer = threading.Thread(target=lambda: [t.user(f"{i} {big}") for i in range(40)])
    writer.start()
    time.sleep(1.0)
    assert writer.is_alive(), "publishing should wait once the buffer holds its bytes"
    assert client.pending <= 10 + 2 + 1  # about 1 MB of 100 KB events, one batch in flight, one over
    proxy.start()
    writer.join(timeout=60)
    client.flush()
    assert client.sql("SELECT count() FROM events WHERE thread_id = 'bounded-bytes'").rows == [[40]]
    client.close()
    proxy.stop()


def test_the_package_exports_the_client_lazily() -> None:
    assert agentlog.Client is Client and agentlog.AsyncClient is AsyncClient


def test_a_client_never_closed_publishes_its_buffer_when_the_program_exits(tmp_path: Path) -> None:
    program = ("from agentlog import Client\n"
               f"t = Client({str(tmp_path / 'data')!r}, flush_interval=600).thread('t')\n"
               "for i in range(10):\n    t.user(f'm{i}')\n"
               "with t.tool_call('left_open'):\n    pass\n")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    with Client(tmp_path / "data") as client:
        assert client.sql("SELECT kind, count() FROM events GROUP BY kind ORDER BY kind").rows == \
            [["message", 10], ["tool_call", 1], ["tool_result", 1]]  # fmt: skip
        assert client.sql("SELECT status FROM tool_calls FINAL").rows == [["timeout"]]


ANTHROPIC_HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": "the build fails, look at it"},
    {"role": "assistant", "content": [
        {"type": "text", "text": "Running both checks."},
        {"type": "tool_use", "id": "toolu_1", "name": "pytest", "input": {"k": "build"}},
        {"type": "tool_use", "id": "toolu_2", "name": "ruff", "input": {}}]},
    {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "1 failed", "is_error": True},
        {"type": "tool_result", "tool_use_id": "toolu_2", "content": "All checks passed"}]},
    {"role": "assistant", "content": "pytest fails; ruff is clean."},
]  # fmt: skip


@pytest.mark.parametrize("target", ["embedded", "http"])
def test_a_provider_history_goes_in_through_a_thread_and_comes_out_as_either_providers_payload(
        target: str, tmp_path: Path, server: Server) -> None:  # fmt: skip
    from tests.provider_payloads import anthropic_request, openai_pairs, openai_request  # noqa: PLC0415

    where = str(tmp_path / "data") if target == "embedded" else server.url
    with Client(where, token=None if target == "embedded" else TOKEN) as client:
        t = client.thread(f"hist-{target}", project="billing")
        ids = t.history(ANTHROPIC_HISTORY, format="anthropic", system="Be brief.", at="2026-12-01T09:00:00Z")
        again = t.history(ANTHROPIC_HISTORY, format="anthropic", system="Be brief.", at="2026-12-01T09:00:00Z")
        assert ids == again  # the same ids: the second import stores nothing
        anthropic = t.context(budget=50_000, format="anthropic")
        openai = t.context(budget=50_000, format="openai")
        rows = client.sql(f"SELECT count() AS n FROM events WHERE thread_id = 'hist-{target}'").rows
    assert anthropic.format == "anthropic" and anthropic.system
    anthropic_request(anthropic.model_dump())  # validates against anthropic's own request type
    openai_request(openai.messages)
    assert sorted(call for call, _ in openai_pairs(openai.messages)) == ["toolu_1", "toolu_2"]
    assert rows[0][0] == len(ids)


def test_an_in_process_client_takes_the_state_as_its_service_built_it_and_validates_a_server_s(
        tmp_path: Path, server: Server, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """A long plan costs an in-process agent's step nothing more: the state is not
    validated item by item again (pydantic would copy every step); a server's answer is."""
    from agentlog.client.results import State  # noqa: PLC0415

    validated: list[object] = []
    original = State.model_validate.__func__  # type: ignore[attr-defined]

    def counting(cls: type[State], answer: Any, *args: Any, **kwargs: Any) -> State:
        validated.append(answer)
        return original(cls, answer, *args, **kwargs)  # type: ignore[no-any-return]

    monkeypatch.setattr(State, "model_validate", classmethod(counting))
    steps = [{"step_id": f"s{i}", "text": f"step {i}"} for i in range(300)]
    for target, kwargs, want_validated in ((tmp_path / "data", {}, 0), (server.url, {"token": TOKEN}, 1)):
        validated.clear()
        with Client(target, **kwargs) as client:  # type: ignore[arg-type]
            t = client.thread(f"long-{want_validated}")
            t.goal("ship it")
            t.plan(steps)
            state = t.state()
        assert len(validated) == want_validated
        assert [s["step_id"] for s in state.plan] == [f"s{i}" for i in range(300)] and state.goal["text"] == "ship it"
        assert state.event_count == 2 and state == State.model_validate(state.model_dump())
        assert state.model_fields_set == State.model_validate(state.model_dump()).model_fields_set
    with Client(tmp_path / "data") as client:
        read = client.thread("long-0").state()
        with pytest.raises(TypeError, match="change a copy"):
            read.plan[0]["status"] = "forged"
        assert client.thread("long-0").state().plan[0]["status"] == "pending"


def test_a_server_s_state_takes_the_list_sections_the_http_client_kept_without_validating_them_again(
        server: Server) -> None:  # fmt: skip
    """Over HTTP a long plan that did not change is neither sent nor validated again: the
    ``State`` holds the client's kept read-only list itself; anything else is validated."""
    from pydantic import ValidationError  # noqa: PLC0415

    from agentlog.client.results import State, state_from  # noqa: PLC0415
    from agentlog.processors.read_only import ReadOnlyDict, ReadOnlyList  # noqa: PLC0415

    steps = [{"step_id": f"s{i}", "text": f"step {i}"} for i in range(300)]
    with Client(server.url, token=TOKEN) as client:
        t = client.thread("kept-plan")
        t.goal("ship it")
        t.plan(steps)
        first = t.state()
        t.user("and now?")
        second = t.state()
    assert second.plan is first.plan and type(second.plan) is ReadOnlyList  # kept, not copied
    assert second.goal is first.goal and type(second.goal) is ReadOnlyDict
    assert second == State.model_validate(orjson.loads(orjson.dumps(second.model_dump())))
    with pytest.raises(TypeError, match="change a copy"):
        second.plan[0]["status"] = "forged"
    forged = {"thread_id": "t", "plan": ReadOnlyList([ReadOnlyDict(a=1), 5])}  # not all dicts: validated
    with pytest.raises(ValidationError):
        state_from(forged, in_process=False)
    with pytest.raises(ValidationError):
        state_from({"thread_id": "t", "plan": [5]}, in_process=False)


def test_the_async_client_over_http_is_sent_only_what_changed_and_keeps_the_rest_read_only(server: Server) -> None:
    """``AsyncClient`` reads the state as ``Client`` does: the sections it holds are not sent
    again, a plan update comes as a patch, and what it hands out is the full state."""
    from agentlog.processors.read_only import ReadOnlyList  # noqa: PLC0415

    steps = [{"step_id": f"s{i}", "text": f"step {i}"} for i in range(200)]

    async def scenario() -> tuple[Any, Any, Any, Any]:
        async with AsyncClient(server.url, token=TOKEN) as client:
            t = client.thread("async-kept")
            await t.goal("ship it")
            await t.plan(steps)
            first = await t.state()
            await t.user("and now?")
            second = await t.state()
            await t.plan([{"step_id": "s0", "status": "done"}])
            third = await t.state()
            return first, second, third, client._http.kept_states  # noqa: SLF001

    first, second, third, kept = asyncio.run(scenario())
    assert second.plan is first.plan and type(second.plan) is ReadOnlyList
    assert third.plan[0]["status"] == "done" and third.plan[1:] == first.plan[1:]
    assert third.plan[1] is first.plan[1]  # the patch replaced one step; the others are the kept objects
    with Client(server.url, token=TOKEN) as fresh:
        fresh.service.kept_states = KeptStates(threads=0)
        assert third == fresh.thread("async-kept").state()
    assert "async-kept" in kept._kept  # noqa: SLF001


def test_a_search_answer_or_thread_list_with_fields_a_newer_server_adds_is_read_not_refused() -> None:
    from agentlog.client.results import search_from, threads_from  # noqa: PLC0415

    hit = {"event_id": "e1", "thread_id": "t1", "window_id": "w0", "kind": "message", "tool_name": "",
           "ts": "2026-01-01T00:00:00Z", "repo_commit": "", "score": 1.0, "snippet": "hi", "source": "index",
           "offset": 1, "role": "user", "status": "", "exit_code": None}  # fmt: skip
    answer = search_from({"query": "hi", "hits": [{**hit, "later_field": 1}], "warnings": [], "later": True})
    assert answer.hits[0].event_id == "e1" and answer.hits[0].role == "user"
    row = {"thread_id": "t1", "project": "p", "event_count": 1, "last_activity": None, "open_calls": 0,
           "failures": 0, "pending_approvals": 0, "status": None, "window_id": "w0", "goal": None}  # fmt: skip
    listed = threads_from({"threads": [{**row, "later": 2}], "total": 1, "partial": False, "warnings": [], "x": 3})
    assert listed.threads[0].thread_id == "t1" and listed.total == 1
