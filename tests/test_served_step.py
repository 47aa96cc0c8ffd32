"""Issue 15, the agent step over HTTP: nothing in it waits on a hop it can avoid.

The server searches the sink process's index through a reader of its own (a context's
recall runs several searches; each was a call to the sink process), the calls it still
makes to the sink process reuse their connections, and the HTTP client keeps its
connection to the server between requests.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from agentlog.schemas.search import SearchFilters
from agentlog.sinks.tantivy_index import TantivyIndexReader, TantivySearchIndex
from agentlog.streams.api.client import RemoteService
from agentlog.streams.api.wire import KeepAlive
from agentlog.streams.config import Settings
from agentlog.streams.embedded.service import EmbeddedService
from agentlog.streams.embedded.sink_process import IndexSearchedHere
from tests.helpers import raw


def _doc(i: int, text: str) -> dict[str, object]:
    return {"event_id": f"e{i}", "thread_id": "t", "window_id": "w0", "kind": "message", "tool_name": "",
            "ts": "2026-01-01T00:00:00Z", "ts_ms": i, "repo_commit": "", "project": "p", "text": text,
            "terms": text, "offset": i}  # fmt: skip


def test_a_reader_of_an_index_another_writer_commits_sees_each_commit_and_only_committed_documents(
    tmp_path: Path,
) -> None:
    writer = TantivySearchIndex(str(tmp_path))
    reader = TantivyIndexReader(str(tmp_path))
    query = ("walrus", SearchFilters(), 10)
    assert reader.search(*query) == [] and reader.visible_offsets() == {}
    writer.add([_doc(1, "the walrus sleeps"), _doc(2, "a seal swims")])
    assert reader.search(*query) == []  # added, not committed: not visible to anyone yet
    writer.refresh()
    assert [h.event_id for h in reader.search(*query)] == ["e1"]
    assert reader.visible_offsets() == {0: 2} and reader.doc_count() == 2
    writer.add([_doc(3, "another walrus")])
    writer.refresh()
    # The answer the reader remembered for this query is not given again after the commit.
    assert sorted(h.event_id for h in reader.search(*query)) == ["e1", "e3"]
    assert reader.visible_offsets() == {0: 3} and reader.visible_ids(["e3", "e9"]) == {"e3"}
    writer.close()



def test_a_reader_s_visible_offset_is_the_newest_committed_one_after_every_commit_even_one_that_starts_the_index_again(
    tmp_path: Path,
) -> None:
    """A refresh ranks only the documents after what the reader saw before; a cleared index
    rewritten to a lower offset, or a commit with nothing newer, is still read right."""
    writer = TantivySearchIndex(str(tmp_path))
    reader = TantivyIndexReader(str(tmp_path))
    committed: list[int] = []
    for offsets in ([1, 2, 3], [4], [7, 5, 6], [], [8]):
        writer.add([_doc(i, f"doc {i}") for i in offsets])
        writer.refresh()
        committed += offsets
        assert reader.visible_offsets() == ({0: max(committed)} if committed else {})
    writer.clear()  # a rebuild starts the index again, refilled before the reader looks
    writer.add([_doc(1, "doc 1"), _doc(2, "doc 2")])
    writer.refresh()
    assert reader.visible_offsets() == {0: 2}  # lower than before the clear: every document ranked
    writer.close()

@pytest.fixture
def served(tmp_path: Path) -> Iterator[EmbeddedService]:
    """The embedded service with its sink stage in a process of its own, as ``agentlog run`` has it."""
    svc = EmbeddedService(Settings(data_dir=tmp_path / "data"), sinks_apart=True)
    if svc.sink_process is None:
        svc.split_sinks()
    try:
        yield svc
    finally:
        svc.close()


def test_the_server_searches_the_sink_process_s_index_itself_even_while_that_process_is_stopped(
    served: EmbeddedService,
) -> None:
    assert isinstance(served.index, IndexSearchedHere)
    served.publish(raw("g1", "message", {"role": "user", "text": "the walrus migration failed"}, 0, thread="s"))
    served.serving = True  # a search then waits for the sink stage's commit, as under agentlog run
    served.catch_up()
    assert served.sink_process is not None
    sinks = served.sink_process.process.pid
    os.kill(sinks, signal.SIGSTOP)  # a call to the sink process would wait until it runs again
    try:
        found: list[dict[str, object]] = []
        searching = threading.Thread(target=lambda: found.append(served.search("walrus", drain=False)))
        searching.start()
        searching.join(5.0)
        assert not searching.is_alive(), "a search waited for the stopped sink process"
        hits = found[0]["hits"]
        assert isinstance(hits, list) and [(h["event_id"], h["source"]) for h in hits] == [("g1", "index")]
    finally:
        os.kill(sinks, signal.SIGCONT)


def test_calls_to_the_sink_process_reuse_one_connection(served: EmbeddedService) -> None:
    process = served.sink_process
    assert process is not None
    for _ in range(20):
        assert process.call("host", "status")["failing"] == {}
    assert len(process._idle) == 1  # one connection, taken and given back by each call
    connections = [p for p in Path(f"/proc/{process.process.pid}/fd").iterdir()
                   if os.readlink(p).startswith("socket:")]  # fmt: skip
    assert len(connections) <= 3, connections  # the listener and the one connection (and a spare)


def test_a_kept_connection_whose_call_failed_otherwise_is_closed_never_handed_to_the_next_call(
    served: EmbeddedService,
) -> None:
    process = served.sink_process
    assert process is not None
    process.call("host", "status")
    kept = process._idle[0]
    with pytest.raises(Exception):  # noqa: B017 - whatever pickling raises for a lambda
        process.call("host", "status", lambda: None)  # cannot be sent to the other process
    assert kept.closed and kept not in process._idle
    assert process.call("host", "status")["failing"] == {}  # the next call on a fresh connection


def _closing_server() -> tuple[socket.socket, list[int]]:
    """An HTTP server that answers each connection's first request with keep-alive, then
    closes it without a word (as a server's idle timeout does)."""
    listener = socket.create_server(("127.0.0.1", 0))
    served: list[int] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                served.append(len(served) + 1)
                body = orjson.dumps({"n": len(served)})
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: keep-alive\r\n"
                             b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)  # fmt: skip
                time.sleep(0.05)

    threading.Thread(target=serve, daemon=True).start()
    return listener, served


def test_a_kept_connection_the_server_closed_meanwhile_is_replaced_and_the_request_answered() -> None:
    listener, served = _closing_server()
    wire = KeepAlive(f"http://127.0.0.1:{listener.getsockname()[1]}", {}, timeout=5.0)
    try:
        assert [wire.request("GET", "/x").json() for _ in range(3)] == [{"n": 1}, {"n": 2}, {"n": 3}]
        assert served == [1, 2, 3]  # each request answered once: none lost, none sent twice
    finally:
        wire.close()
        listener.close()


def test_one_client_used_from_many_threads_gives_each_request_its_own_answer(start_server) -> None:
    url, _env = start_server()
    remote = RemoteService(url)
    assert remote.wire is not None  # plain http, no proxy: the kept connections
    errors: list[BaseException] = []

    def agent(n: int) -> None:
        try:
            for i in range(15):
                event = raw(f"a{n}.{i}", "message", {"role": "user", "text": f"agent {n} step {i}"}, i,
                            thread=f"agent-{n}")  # fmt: skip
                assert remote.publish(event).accepted == 1
                state = remote.state(f"agent-{n}")
                assert state["thread_id"] == f"agent-{n}" and state["event_count"] == i + 1
        except BaseException as error:  # noqa: BLE001 - reported by the test's thread
            errors.append(error)

    agents = [threading.Thread(target=agent, args=(n,)) for n in range(6)]
    for t in agents:
        t.start()
    for t in agents:
        t.join(120)
    assert errors == []
    remote.close()
    with pytest.raises(RuntimeError, match="closed"):
        remote.state("agent-0")


def test_agentlog_run_formats_no_access_log_line_it_would_never_print(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """At log level "warning" uvicorn prints no access line, yet while its access logger
    has handlers it formats one (client address, quoted path) for every response."""
    from agentlog.streams.embedded import server  # noqa: PLC0415

    configs: list[object] = []
    monkeypatch.setattr(server, "_run", lambda _service, config: configs.append(config))
    assert server.serve(Settings(data_dir=tmp_path), "127.0.0.1", 0) == 0
    (config,) = configs
    assert config.access_log is False and config.log_level == "warning"  # type: ignore[attr-defined]
