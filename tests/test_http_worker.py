"""Issue 12, "both deployments behave the same": the Kafka worker's HTTP app (built by
``create_app``, served by uvicorn as ``agentlog run`` is) refuses the hostile corpus's bad
requests as the embedded server does, before anything reaches Kafka, which is not running
here: every request below is refused by the shared rules or models first."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import uvicorn

from agentlog.streams.api.http_parser import BoundedHttpToolsProtocol

from agentlog.streams.config import Settings
from tests.conftest import free_port
from tests.test_http_hostile import ATTACKS, LIMIT, TOKEN, Attack, send

WORKER_PATHS = ("/search", "/threads/", "/events", "/sql", "/nope", "/%00", "/xxx")


def _refused_before_any_store(attack: Attack) -> bool:
    """Attacks on routes the worker serves, refused by a rule or a model (not by a lookup)."""
    served = attack.target.startswith(WORKER_PATHS) and not attack.target.startswith("/threads/..")
    return served and not attack.parser and 200 not in attack.expect and attack.expect != (404,)



@contextmanager
def serving(asgi_app: Any, port: int) -> Iterator[None]:
    """``asgi_app`` on 127.0.0.1:``port`` (uvicorn in a thread, with the HTTP parser the
    worker serves with), while the block runs."""
    server = uvicorn.Server(uvicorn.Config(asgi_app, host="127.0.0.1", port=port, log_level="critical",
                                           http=BoundedHttpToolsProtocol))  # fmt: skip
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        yield
    finally:
        server.should_exit = True
        thread.join(30)


def test_the_worker_views_refuse_the_corpus_like_the_embedded_server(tmp_path: Path) -> None:
    from agentlog.streams.kafka.app import create_app  # noqa: PLC0415 - needs faust

    settings = Settings(data_dir=tmp_path / "worker", kafka_bootstrap="127.0.0.1:1", api_token=TOKEN,
                        max_request_bytes=LIMIT)  # fmt: skip
    app = create_app(settings)
    attacks = [a for a in ATTACKS if _refused_before_any_store(a)]
    assert len(attacks) >= 80
    port = free_port()

    answered = []
    try:
        with serving(app.conf.agentlog_http, port):
            for attack in attacks:
                try:
                    answered.append((attack, *send(port, attack.request())))
                except OSError as error:
                    answered.append((attack, 0, str(error).encode()))
    finally:
        app.conf.agentlog_log_store.close()  # chDB holds one data directory per process
    wrong = []
    for attack, status, body in answered:
        try:
            error = json.loads(body).get("error")
        except ValueError:
            error = None
        # Both servers answer 400 or 404 to a malformed id (the embedded router finds no
        # route for some; the worker's finds one and the id is refused).
        expected = (400, 404) if 404 in attack.expect else attack.expect
        if status not in expected or not isinstance(error, str):
            wrong.append((attack.name, status, body[:200]))
    assert wrong == [], "\n".join(map(str, wrong))


def test_the_worker_answers_the_routes_it_cannot_serve_with_a_501_that_says_what_to_run(tmp_path: Path) -> None:
    import httpx  # noqa: PLC0415

    from agentlog.streams.kafka.app import create_app  # noqa: PLC0415 - needs faust

    app = create_app(Settings(data_dir=tmp_path / "worker", kafka_bootstrap="127.0.0.1:1"))
    port = free_port()
    json_headers = {"Content-Type": "application/json"}
    try:
        with serving(app.conf.agentlog_http, port), httpx.Client(base_url=f"http://127.0.0.1:{port}") as http:
            answers = {"rebuild": http.post("/rebuild", headers=json_headers), "memory": http.get("/memory"),
                       "extract": http.post("/memory/extract", headers=json_headers)}  # fmt: skip
    finally:
        app.conf.agentlog_log_store.close()  # chDB holds one data directory per process
    assert {name: a.status_code for name, a in answers.items()} == {"rebuild": 501, "memory": 501, "extract": 501}
    assert "agentlog rebuild" in answers["rebuild"].json()["error"]
    assert all("agentlog memory" in answers[name].json()["error"] for name in ("memory", "extract"))


def test_a_worker_whose_consumer_has_not_started_answers_healthz_503_starting_with_its_counters(tmp_path: Path) -> None:
    """CI saw ``/healthz`` fail while the worker was still joining its group (faust raises
    ConsumerNotStarted for the assignment until its consumer thread runs): a health check
    must answer then too, saying it is starting, with its counters, and not 200 (a caller
    waiting for 200 waits until the worker can answer queries)."""
    import httpx  # noqa: PLC0415

    from agentlog.streams.kafka.app import create_app  # noqa: PLC0415 - needs faust

    app = create_app(Settings(data_dir=tmp_path / "worker", kafka_bootstrap="127.0.0.1:1"))
    port = free_port()
    try:
        with serving(app.conf.agentlog_http, port):
            answer = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10)
    finally:
        app.conf.agentlog_log_store.close()  # chDB holds one data directory per process
    assert answer.status_code == 503, answer.text
    health = answer.json()
    assert health["status"] == "starting" and health["partitions"] == []
    assert health["written"]["events"] == 0
