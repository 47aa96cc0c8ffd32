"""Issue 13, item 3: the HTTP client is a whole ``Service``: the same methods, the same
answers and the same exceptions as the service it talks to, memory operations included."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

import httpx
import pytest

from agentlog.processors.context import BudgetTooSmall
from agentlog.streams.api.client import RemoteService
from agentlog.streams.api.service import NotFound, Service
from agentlog.streams.embedded.service import EmbeddedService
from agentlog.streams.publish_check import PublishReport
from tests.helpers import raw


def test_every_service_method_is_implemented_by_the_embedded_service_and_the_http_client() -> None:
    methods = [name for name in vars(Service) if not name.startswith("_")]
    assert {"publish", "catch_up", "health", "close", "memory_show", "memory_revoke"} <= set(methods)
    for implementation in (EmbeddedService, RemoteService):
        missing = [m for m in methods if not callable(getattr(implementation, m, None))]
        assert missing == [], (implementation.__name__, missing)


def test_the_http_client_answers_every_operation_as_the_server_does(
    start_server: Callable[..., tuple[str, dict[str, str]]],
) -> None:
    url, _env = start_server()
    remote = RemoteService(url)
    assert isinstance(remote, Service)
    fact = raw("f1", "fact", {"key": "java.version", "value": "17", "evidence_type": "user_confirmed",
                              "confirmed": True}, 0, thread="mem", project="svc")  # fmt: skip
    report = remote.publish(fact + b"\n{bad")
    assert isinstance(report, PublishReport) and (report.accepted, report.rejected) == (1, 1)
    assert remote.catch_up() == {"ok": True}
    assert remote.state("mem")["event_count"] == 1
    assert remote.health()["status"] == "ok"
    assert remote.memory_extract(lease_seconds=30)["extracted_threads"] == ["mem"]
    assert remote.memory_consolidate(high_risk=["secret.*"])["published"] is True
    assert [f["value"] for f in remote.memory_show(project="svc")["facts"]] == ["17"]
    assert remote.memory_show(project="svc", key="other")["facts"] == []
    assert remote.memory_revoke("f1", reason="wrong")["revoked"] == "f1"
    with pytest.raises(NotFound, match="never accepted"):
        remote.memory_revoke("nope")
    assert remote.memory_status()["published_version"] == 2
    # The revoke is an event of its own in the log.
    assert remote.sql("SELECT event_id FROM events ORDER BY event_id").rows == [("f1",), ("revoke.f1",)]
    remote.close()


def test_a_budget_too_small_is_the_same_exception_over_http_and_the_cli_exits_2_on_it(
    start_server: Callable[..., tuple[str, dict[str, str]]],
) -> None:
    url, env = start_server()
    remote = RemoteService(url)
    remote.publish(raw("u1", "message", {"role": "user", "text": "please fix the failing login test " * 5}, 0,
                       thread="small"))  # fmt: skip
    with pytest.raises(BudgetTooSmall) as raised:
        remote.context("small", 5)
    assert raised.value.budget == 5 and raised.value.needed > 5
    assert remote.context("small", raised.value.needed)["meta"]["used_tokens"] <= raised.value.needed
    done = subprocess.run([sys.executable, "-m", "agentlog", "context", "small", "--budget", "5"], env=env,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert f"ask for at least {raised.value.needed}" in done.stderr


def test_the_http_client_reads_an_answer_as_the_standard_library_would_even_past_64_bit_integers() -> None:
    from agentlog.streams.api.client import answer_of  # noqa: PLC0415

    body = {"n": 2**70, "x": 0.1, "s": "caf\u00e9 \U0001f600", "l": [None, True, -(2**63)], "nested": {"k": []}}
    for content in (json.dumps(body).encode(), json.dumps(body, ensure_ascii=False).encode()):
        assert answer_of(httpx.Response(200, content=content)) == json.loads(content) == body
