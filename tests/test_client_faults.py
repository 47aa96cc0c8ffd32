"""The client under faults (issue 16's bar): ``agentlog run`` killed and restarted while
the client publishes 10,000 events over HTTP; after ``flush()`` every event is stored
exactly once."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from agentlog.client import Client
from tests.client_server import TOKEN, Server
from tests.conftest import free_port

EVENTS = 10_000


def test_every_event_is_stored_exactly_once_when_the_server_is_killed_and_restarted_mid_publish(
    tmp_path: Path,
) -> None:
    server = Server(tmp_path / "data", free_port()).start()
    client = Client(server.url, token=TOKEN, batch_size=100, capacity=2_000)
    thread = client.thread("faults", project="drill")
    published: list[str] = []

    def publish() -> None:  # 2,000 messages and 4,000 calls, each with its result: 10,000 events
        for i in range(EVENTS * 3 // 5):
            if i % 3:
                with thread.tool_call("probe", {"i": i}, call_id=f"c{i}") as call:
                    call.result(f"probe {i} ok")
                published.append(call.call_id)
            else:
                published.append(thread.user(f"step {i}"))

    writer = threading.Thread(target=publish)
    try:
        writer.start()
        while client._buffer.sent < 3_000 and writer.is_alive():
            time.sleep(0.01)
        assert writer.is_alive(), "the kill must come while the client publishes"
        server.kill()  # mid-request, as a crash: nothing flushed, nothing closed
        time.sleep(0.5)  # the client meets refused connections meanwhile
        server.start()
        writer.join(timeout=300)
        assert not writer.is_alive()
        client.flush()
        total, distinct = client.sql("SELECT count(), uniqExact(event_id) FROM events WHERE thread_id = 'faults'").rows[0]
        assert (total, distinct) == (EVENTS, EVENTS)
        pairs = client.sql("SELECT count(), countIf(status = 'ok') FROM tool_calls FINAL WHERE thread_id = 'faults'")
        assert pairs.rows == [[len(published) * 2 // 3, len(published) * 2 // 3]]
        assert client.state("faults").event_count == EVENTS
    finally:
        client.close()
        server.stop()
