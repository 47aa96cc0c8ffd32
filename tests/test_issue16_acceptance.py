"""Issue 16 as an outsider drives it: ``agentlog run`` as a subprocess on a fresh data
directory, ``agentlog.Client`` / ``AsyncClient`` used as docs/client.md says, with the
odd inputs a real agent hands its tools (objects JSON cannot hold, outputs over the event
size limit, ids that look like paths) and the client's edges (a closed client, Kafka away
when the agent starts)."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agentlog.schemas.events import MAX_EVENT_BYTES
from agentlog.streams.config import Settings
from agentlog.streams.kafka.topics import EVENTS, topic

from agentlog import AsyncClient, Client
from agentlog.client import ClientError, PublishRefused
from tests.client_server import TOKEN, Server
from tests.tcp_proxy import TcpProxy
from tests.test_client import _no_agentlog_environment, server  # noqa: F401 - its fixtures: a fresh server per module
from tests.test_client_kafka import _produced


@pytest.fixture
def client(server: Server) -> Iterator[Client]:
    with Client(server.url, token=TOKEN) as c:
        yield c


@dataclasses.dataclass
class Ticket:
    id: int


class Opaque:
    def __str__(self) -> str:
        return "an opaque handle"


def _nested(levels: int) -> dict[str, Any]:
    root: dict[str, Any] = {}
    node = root
    for _ in range(levels):
        node["next"] = {}
        node = node["next"]
    return root


def test_tool_call_arguments_json_cannot_hold_are_published_with_their_result(client: Client) -> None:
    """Arguments a Python agent really passes (bytes, sets, datetimes, objects, integers past
    64 bits, lone surrogates, 300 levels deep) do not raise out of ``tool_call``, and the
    call is stored with its result."""
    t = client.thread("odd-args", project="accept")
    arguments = {"raw": b"\x00\xffbin", "tags": {"b", "a"}, "when": datetime.datetime(2026, 12, 1, 9, 0),
                 "ticket": Ticket(7), "handle": Opaque(), "big": 2**70, "broken": "x\ud800y",
                 "deep": _nested(300), 3: "int key"}  # fmt: skip
    with t.tool_call("lookup", arguments, call_id="odd-1") as call:
        call.result("found \x00 it ✓")
    client.flush()
    rows = client.sql("SELECT status, call_event_id FROM tool_calls FINAL WHERE call_id = 'odd-1'").records()
    assert [r["status"] for r in rows] == ["ok"]
    stored = client.read(rows[0]["call_event_id"]).event["payload"]["arguments"]
    assert stored["raw"] == "\x00\\xffbin" and stored["tags"] == ["a", "b"]
    assert stored["when"] == "2026-12-01T09:00:00" and stored["ticket"] == {"id": 7}
    assert stored["handle"] == "an opaque handle" and stored["big"] == str(2**70)
    assert stored["broken"] == "x\ufffdy" and stored["3"] == "int key"
    depth, node = 0, stored["deep"]
    while isinstance(node, dict):
        depth, node = depth + 1, node["next"]
    assert isinstance(node, str) and node.startswith('{"next": {')  # the rest kept as its text
    assert client._open_calls == {}


def test_a_call_the_client_could_not_publish_gets_no_timeout_result_at_close(server: Server) -> None:
    """A ``tool_call`` refused because the client is closed is not left open: the close of
    another client does not invent a result for a call nobody saw."""
    c = Client(server.url, token=TOKEN)
    c.close()
    with pytest.raises(ClientError, match="closed"), c.thread("refused").tool_call("x", {}):
        pass
    assert c._open_calls == {}


def test_a_tool_output_over_the_event_size_limit_is_cut_and_the_call_keeps_its_result(client: Client) -> None:
    """A 3 MB tool output (and 2 MB of arguments) is published cut to the event size limit,
    saying how much was cut, instead of the whole event being rejected and the call ending
    without a result."""
    t = client.thread("huge-io", project="accept")
    with t.tool_call("dump", {"blob": "a" * 2_000_000}, call_id="huge-1") as call:
        call.result("line of log output\n" * 160_000)  # 3,040,000 bytes
    client.flush()
    row = client.sql("SELECT status, output_bytes, call_event_id, result_event_id FROM tool_calls FINAL "
                     "WHERE call_id = 'huge-1'").records()  # fmt: skip
    assert [r["status"] for r in row] == ["ok"]
    result = client.read(row[0]["result_event_id"]).event["payload"]["output"]
    assert result.startswith("line of log output\n") and "of 3040000 bytes cut" in result
    assert len(result.encode()) < MAX_EVENT_BYTES
    arguments = client.read(row[0]["call_event_id"]).event["payload"]["arguments"]
    assert arguments.startswith('{"blob":"aaa') and "bytes cut" in arguments
    assert client.sql("SELECT count() FROM rejected_events WHERE reason LIKE 'too_large%'").scalar() == 0


@pytest.mark.parametrize("thread_id", [".", "..", "a..b", "x:y.z"])
def test_every_valid_thread_id_is_read_back_over_http(client: Client, server: Server, thread_id: str) -> None:
    """Ids are letters, digits and ``. _ : -``: ``.`` and ``..`` are ids like any other, not
    directories an HTTP client resolves away."""
    event_id = client.thread(thread_id, project="accept").user(f"hello from {thread_id}")
    assert client.state(thread_id).thread_id == thread_id
    assert client.context(thread_id, budget=500).thread_id == thread_id
    assert client.read(event_id).event["thread_id"] == thread_id

    async def from_asyncio() -> tuple[str, str]:
        async with AsyncClient(server.url, token=TOKEN) as ac:
            return (await ac.state(thread_id)).thread_id, (await ac.read(event_id)).event["event_id"]

    assert asyncio.run(from_asyncio()) == (thread_id, event_id)


def test_a_closed_client_refuses_reads_with_client_error(server: Server) -> None:
    c = Client(server.url, token=TOKEN)
    c.thread("closed-reads").user("hi")
    c.close()
    c.close()  # twice: a no-op
    with pytest.raises(ClientError, match="closed"):
        c.state("closed-reads")

    async def closed_async() -> None:
        ac = AsyncClient(server.url, token=TOKEN)
        await ac.close()
        await ac.close()
        await ac.state("closed-reads")

    with pytest.raises(ClientError, match="closed"):
        asyncio.run(closed_async())


def test_kafka_away_when_the_client_starts_is_retried_and_nothing_is_lost(kafka_bootstrap: str, tmp_path: Path) -> None:
    """Brokers away when the agent starts are a transient failure: the client is built at
    once, publishes into its buffer, and delivers when the brokers answer again."""
    host, port = kafka_bootstrap.rsplit(":", 1)
    proxy = TcpProxy(host, int(port))
    proxy.stop()  # Kafka "down": connections to the bootstrap address are refused
    namespace = f"away{uuid.uuid4().hex[:8]}"
    settings = Settings(data_dir=tmp_path, kafka_namespace=namespace, partitions=1)
    try:
        c = Client(kafka=f"127.0.0.1:{proxy.port}", settings=settings, id_prefix="away", retry_seconds=90)
        t = c.thread("kafka-away")
        sent = [t.user(f"message {i}") for i in range(20)]
        proxy.start()
        c.close()
    finally:
        proxy.stop()
    produced = _produced(kafka_bootstrap, topic(EVENTS, namespace))
    assert sorted(e["event_id"] for e in produced) == sorted(sent)


def test_the_langchain_handler_takes_an_agentlog_client_and_publishes_through_its_buffer(
    client: Client, server: Server
) -> None:
    """``AgentlogCallbackHandler(client)``: the client a user already holds is a handler's
    target like a service (before, every callback failed on it and LangChain only logged it),
    and the handler's events go through its buffer and retries."""
    from agentlog.integrations.langchain import AgentlogCallbackHandler  # noqa: PLC0415 - the extra

    from tests import scripted_agent  # noqa: PLC0415

    assert scripted_agent.run_langchain(AgentlogCallbackHandler(client), "lc-client") == scripted_agent.ANSWER
    client.flush()
    kinds = [r["kind"] for r in client.sql("SELECT kind FROM events WHERE thread_id = 'lc-client' "
                                           "ORDER BY ts, event_id").records()]  # fmt: skip
    assert sorted(kinds) == sorted(["message", "tool_call", "tool_result", "tool_call", "tool_result", "message",
                                    "turn_end"])  # fmt: skip
    pairs = client.sql("SELECT call_id, status FROM tool_calls FINAL WHERE thread_id = 'lc-client' ORDER BY call_id")
    assert pairs.rows == [["call_1", "ok"], ["call_2", "error"]]

    async def through_async_client() -> int:
        async with AsyncClient(server.url, token=TOKEN) as ac:
            scripted_agent.run_langchain(AgentlogCallbackHandler(ac), "lc-async")
            return (await ac.state("lc-async")).event_count

    assert asyncio.run(through_async_client()) == 7


def test_an_event_the_kafka_brokers_refuse_is_raised_by_flush_not_reported_published(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Nothing lost in silence on Kafka: an event the brokers do not take (here the event
    topic was created with a 2 KB message limit) makes ``flush()`` raise, where the
    publisher used to count it accepted."""
    from kafka.admin import KafkaAdminClient, NewTopic  # noqa: PLC0415 - Kafka tests only

    namespace = f"refuse{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    admin.create_topics([NewTopic(topic(EVENTS, namespace), 1, 1, topic_configs={"max.message.bytes": "2048"})])
    admin.close()
    settings = Settings(data_dir=tmp_path, kafka_namespace=namespace, partitions=1)
    c = Client(kafka=kafka_bootstrap, settings=settings, id_prefix="refuse", retry_seconds=5)
    c.thread("kafka-refuse").user(os.urandom(8_000).hex())  # gzip cannot shrink it under 2 KB
    with pytest.raises(PublishRefused, match="MessageSizeTooLarge"):
        c.flush()
    c.close()


def test_a_tool_result_that_is_not_text_is_published_as_its_json_and_the_call_keeps_its_result(
    client: Client,
) -> None:
    """``call.result(rows)`` with what a tool really returns (a dict, a list, a number,
    ``None``): the result is published as text instead of being rejected, which left the
    call without a result."""
    t = client.thread("typed-results", project="accept")
    outputs = {"r-dict": {"rows": 3, "ok": True}, "r-list": ["a", "b"], "r-int": 42, "r-none": None}
    for call_id, output in outputs.items():
        with t.tool_call("query", {}, call_id=call_id) as call:
            call.result(output)
    client.flush()
    rows = client.sql("SELECT call_id, status, result_event_id FROM tool_calls FINAL "
                      "WHERE thread_id = 'typed-results' ORDER BY call_id").records()  # fmt: skip
    assert [(r["call_id"], r["status"]) for r in rows] == [(c, "ok") for c in sorted(outputs)]
    texts = {r["call_id"]: client.read(r["result_event_id"]).event["payload"]["output"] for r in rows}
    assert texts == {"r-dict": '{"rows":3,"ok":true}', "r-list": '["a","b"]', "r-int": "42", "r-none": ""}


def test_async_client_has_the_clients_service_pending_and_publish_raw(server: Server) -> None:
    """"The same constructor and methods, awaited": what docs/client.md puts on ``Client``
    beyond the thread handle (``service``, ``pending``, ``publish_raw``) is on ``AsyncClient``."""
    line = ('{"event_id":"raw-async-1","thread_id":"raw-async","kind":"message","ts":"2026-12-01T09:00:00Z",'
            '"payload":{"role":"user","text":"hi"}}').encode()  # fmt: skip

    async def scenario() -> tuple[int, bool, int]:
        async with AsyncClient(server.url, token=TOKEN) as ac:
            await ac.publish_raw(line)
            await ac.flush()
            return ac.pending, ac.service.health()["status"] == "ok", (await ac.state("raw-async")).event_count

    assert asyncio.run(scenario()) == (0, True, 1)


def test_every_public_method_of_the_client_and_its_handles_has_a_docstring_and_typed_return() -> None:
    """``agentlog.Client`` and ``agentlog.AsyncClient``, the public Python API, "typed, with
    docstrings": each public method of the clients, thread handles and tool calls says
    what it does and what it returns; the thread handle's reads return the typed results."""
    import typing  # noqa: PLC0415

    from agentlog.client import AsyncThread, AsyncToolCall, Context, SearchAnswer, State, Thread, ToolCall  # noqa: PLC0415

    missing = []
    for cls in (Client, AsyncClient, Thread, AsyncThread, ToolCall, AsyncToolCall):
        for name in dir(cls):
            if name.startswith("_") and name not in ("__enter__", "__exit__", "__aenter__", "__aexit__"):
                continue
            member = getattr(cls, name)
            function = member.fget if isinstance(member, property) else member
            if not callable(function):
                continue
            if not function.__doc__ or "return" not in getattr(function, "__annotations__", {}):
                missing.append(f"{cls.__name__}.{name}")
    assert missing == []
    hints = {n: typing.get_type_hints(getattr(Thread, n))["return"] for n in ("state", "context", "search")}
    assert hints == {"state": State, "context": Context, "search": SearchAnswer}


def test_a_provider_history_with_a_tool_result_over_the_event_limit_keeps_the_pair(client: Client) -> None:
    """``t.history(...)``: an Anthropic ``tool_result`` of 3 MB is cut to the event size
    limit like a published one, and importing the history again stores nothing twice."""
    history = [
        {"role": "user", "content": "show me the log"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_big", "name": "cat", "input": {"p": "x"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_big", "content": "log\n" * 750_000}]},
        {"role": "assistant", "content": "it is long"},
    ]
    t = client.thread("history-huge", project="accept")
    first = t.history(history, format="anthropic", at="2026-12-01T09:00:00Z")
    assert t.history(history, format="anthropic", at="2026-12-01T09:00:00Z") == first
    client.flush()
    rows = client.sql("SELECT status, result_event_id FROM tool_calls FINAL WHERE call_id = 'toolu_big'").records()
    assert [r["status"] for r in rows] == ["ok"]
    assert "of 3000000 bytes cut" in client.read(rows[0]["result_event_id"]).event["payload"]["output"]
    assert client.sql("SELECT count() FROM events WHERE thread_id = 'history-huge'").scalar() == len(first)


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no message")


def test_an_exception_inside_a_tool_call_block_is_raised_as_is_and_becomes_an_error_result(client: Client) -> None:
    """"An exception becomes an error result": the agent's own exception leaves the block
    unchanged, even one whose message cannot be printed, and the call gets an ``error``
    result naming it."""
    t = client.thread("block-errors", project="accept")
    with pytest.raises(Unprintable), t.tool_call("flaky", {}, call_id="unprintable-1"):
        raise Unprintable()
    with pytest.raises(ValueError, match="bad input"), t.tool_call("flaky", {}, call_id="plain-1"):
        raise ValueError("bad input")
    client.flush()
    rows = client.sql("SELECT call_id, status, result_event_id FROM tool_calls FINAL "
                      "WHERE thread_id = 'block-errors' ORDER BY call_id").records()  # fmt: skip
    assert [(r["call_id"], r["status"]) for r in rows] == [("plain-1", "error"), ("unprintable-1", "error")]
    outputs = [client.read(r["result_event_id"]).event["payload"]["output"] for r in rows]
    assert outputs[0] == "ValueError: bad input" and outputs[1].startswith("Unprintable: ")
