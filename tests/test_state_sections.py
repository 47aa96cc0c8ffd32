"""A state read over HTTP brings only the sections that changed (``processors/state_sections.py``,
``streams/api/kept_states.py``): the reader sends the digests of the sections it holds,
the server leaves out those still current and names them; the state the client hands out
is the whole state, exactly as a full read gives it."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest
from starlette.testclient import TestClient

from agentlog.bench.step import Traffic
from agentlog.processors.pipeline import MemorySeen, Pipeline, Record
from agentlog.processors.redaction import redact_if
from agentlog.processors.state_sections import (
    ACCEPT_PATCHES_HEADER, Held, KNOWN_HEADER, MAX_KNOWN_CHARS, PATCHED_HEADER, SECTIONS, SECTIONS_HEADER, UNCHANGED_HEADER, StateBody, digest, digests_of,
    header_of, parse_held, parse_known, serialised,
)  # fmt: skip
from agentlog.sinks.base import StoreError
from agentlog.streams.api.client import RemoteService
from agentlog.streams.api.guard import Policy
from agentlog.streams.api.http import build_app
from agentlog.streams.api.kept_states import KeptStates
from agentlog.streams.config import Settings
from agentlog.processors.thread import PairingConfig
from agentlog.streams.embedded.service import EmbeddedService
from tests.helpers import raw

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")

NDJSON = {"Content-Type": "application/x-ndjson"}


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[EmbeddedService, TestClient]]:
    service = EmbeddedService(Settings(data_dir=tmp_path))
    try:
        with TestClient(build_app(service, Policy()), base_url="http://localhost") as client:
            yield service, client
    finally:
        service.close()


def _publish(client: TestClient, events: list[dict]) -> None:
    body = b"\n".join(orjson.dumps(e) for e in events)
    assert client.post("/events", content=body, headers=NDJSON).json()["accepted"] == len(events)


# -- the digests -------------------------------------------------------------------------


def test_every_section_digest_is_that_of_its_json_as_a_full_read_sends_it(service: EmbeddedService) -> None:
    """The spliced digests (kept with each section's JSON) equal the digests of the full
    state's sections, after every event of a generated thread: so a deployment that
    digests its state as it serialises it (``digests_of``) names the same content the same."""
    traffic = Traffic("d", seed=5)
    for event in traffic.take(300):
        service.publish(orjson.dumps(event))
        answer = service.state_json("d")
        full = orjson.loads(answer.body)
        assert answer.body == orjson.dumps(service.state("d"))
        assert dict(answer.digests) == digests_of(full)
        assert set(answer.digests) == {n for n in SECTIONS if n in full}


def test_a_reader_holding_every_current_section_gets_them_as_null_and_named(service: EmbeddedService) -> None:
    service.publish(b"\n".join(orjson.dumps(e) for e in Traffic("n", seed=2).take(120)))
    first = service.state_json("n")
    again = service.state_json("n", Held(first.digests))
    assert set(again.unchanged) == set(first.digests)
    shown = orjson.loads(again.body)
    assert all(shown[name] is None for name in again.unchanged)
    assert list(shown) == list(orjson.loads(first.body))  # every key in its place
    assert len(again.body) < len(first.body) / 2


def test_a_section_whose_digest_differs_is_sent_whole(service: EmbeddedService) -> None:
    service.publish(b"\n".join(orjson.dumps(e) for e in Traffic("w", seed=2).take(60)))
    first = service.state_json("w")
    stale = {**first.digests, "plan": digest(b"[]")}
    again = service.state_json("w", Held(stale))
    assert "plan" not in again.unchanged
    assert orjson.loads(again.body)["plan"] == orjson.loads(first.body)["plan"]


def test_digests_of_another_thread_leave_out_only_what_is_byte_for_byte_the_same(service: EmbeddedService) -> None:
    service.publish(b"\n".join(orjson.dumps(e) for e in Traffic("a", seed=1).take(80)))
    service.publish(b"\n".join(orjson.dumps(e) for e in Traffic("b", seed=9).take(80)))
    a, b = service.state_json("a"), service.state_json("b")
    crossed = service.state_json("b", Held(a.digests))
    same = {n for n in a.digests if a.digests[n] == b.digests.get(n)}
    assert set(crossed.unchanged) == same
    assert "plan" not in same  # their plans differ: sent


# -- the header, hostile -----------------------------------------------------------------


def test_the_known_header_round_trips() -> None:
    digests = {"plan": digest(b"[1]"), "summary": digest(b"null")}
    assert parse_known([header_of(digests)]) == digests
    assert parse_known([]) == {}
    assert parse_known([" plan=%s , summary=%s " % (digests["plan"], digests["summary"])]) == digests
    assert parse_known([header_of(digests) + ","]) == digests  # a trailing comma
    newer = {"plan-v2": digests["plan"], "Section.9": digests["plan"], "x" * 64: digests["plan"]}
    assert parse_known([header_of(newer)]) == newer  # names this server does not keep: allowed


def test_patches_are_taken_only_when_asked_for_with_true() -> None:
    known = [header_of({"plan": digest(b"[]")})]
    assert parse_held(known, []) == Held({"plan": digest(b"[]")}, patches=False)
    assert parse_held(known, [" TRUE "]) == Held({"plan": digest(b"[]")}, patches=True)
    assert parse_held([], ["true"]) is None  # nothing held: nothing to patch
    for bad, says in ((["yes"], "takes only 'true'"), (["true", "true"], "sent 2 times"), ([""], "takes only")):
        with pytest.raises(ValueError, match=says):
            parse_held(known, bad)


@pytest.mark.parametrize(("values", "says"), [
    (["plan=abc"], "name=digest pairs"),
    (["plan"], "name=digest pairs"),
    (["plan=" + "A" * 16 + ",x"], "name=digest pairs"),
    (["p" * 65 + "=" + "A" * 16], "name=digest pairs"),
    (["plan=" + "A" * 15 + "!"], "name=digest pairs"),
    (["plan=" + "A" * 16 + ";summary=" + "B" * 16], "name=digest pairs"),
    (["plän=" + "A" * 16], "name=digest pairs"),
    (["plan=" + "A" * 16 + ",plan=" + "B" * 16], "twice"),
    (["plan=" + "A" * 16, "plan=" + "A" * 16], "sent 2 times"),
    (["x" * (MAX_KNOWN_CHARS + 1)], "over the"),
    ([",".join(f"s{i}=" + "A" * 16 for i in range(60))], "over the"),
])  # fmt: skip
def test_a_malformed_known_header_is_refused_saying_what_is_wrong(values: list[str], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_known(values)


def test_an_unknown_section_name_is_allowed_and_never_matches(service: EmbeddedService) -> None:
    service.publish(b"\n".join(orjson.dumps(e) for e in Traffic("u", seed=2).take(40)))
    known = parse_known(["future_section=" + "A" * 16])
    assert service.state_json("u", Held(known)).unchanged == ()


def test_over_http_a_malformed_header_is_a_400_and_spares_the_next_read(served) -> None:
    _service, client = served
    _publish(client, list(Traffic("h", seed=2).take(40)))
    for bad in ("nonsense", "plan=" + "A" * 16 + ",plan=" + "A" * 16, "x" * 5000):
        r = client.get("/threads/h/state", headers={KNOWN_HEADER: bad})
        assert r.status_code == 400
        assert KNOWN_HEADER in r.json()["error"]
    twice = client.get("/threads/h/state", headers=[(KNOWN_HEADER, "plan=" + "A" * 16)] * 2)
    assert twice.status_code == 400 and "sent 2 times" in twice.json()["error"]
    ok = client.get("/threads/h/state")
    assert ok.status_code == 200 and ok.json()["event_count"] == 40
    assert UNCHANGED_HEADER not in ok.headers


def test_over_http_the_answer_names_its_sections_and_leaves_out_what_is_held(served) -> None:
    _service, client = served
    events = Traffic("s", seed=4)
    _publish(client, list(events.take(200)))
    first = client.get("/threads/s/state")
    assert first.headers["vary"] == f"{KNOWN_HEADER}, {ACCEPT_PATCHES_HEADER}"
    digests = parse_known([first.headers[SECTIONS_HEADER]])
    again = client.get("/threads/s/state", headers={KNOWN_HEADER: first.headers[SECTIONS_HEADER]})
    assert set(again.headers[UNCHANGED_HEADER].split(",")) == set(digests)
    assert len(again.content) < len(first.content) / 2
    while (event := events.next())["kind"] != "plan":
        _publish(client, [event])
    _publish(client, [event])
    held = {KNOWN_HEADER: first.headers[SECTIONS_HEADER]}
    not_patched = client.get("/threads/s/state", headers=held)  # a reader that did not ask for patches
    assert PATCHED_HEADER not in not_patched.headers
    assert not_patched.json()["plan"] == client.get("/threads/s/state").json()["plan"]
    after_plan = client.get("/threads/s/state", headers={**held, ACCEPT_PATCHES_HEADER: "true"})
    assert "plan" not in after_plan.headers[UNCHANGED_HEADER].split(",")
    assert after_plan.headers[PATCHED_HEADER] == "plan"  # a few steps changed: those alone
    patch, plan = after_plan.json()["plan"], first.json()["plan"]
    assert 1 <= len(patch["items"]) <= 2 and len(orjson.dumps(patch)) < len(orjson.dumps(plan)) / 3
    for position, item in patch["items"]:
        plan[position:position + 1] = [item]
    assert plan == client.get("/threads/s/state").json()["plan"]


def test_a_reader_holding_a_plan_older_than_the_one_the_patch_starts_from_gets_it_whole(served) -> None:
    _service, client = served
    events = Traffic("o", seed=4)
    _publish(client, list(events.take(100)))

    def through_next_plan() -> None:
        while (event := events.next())["kind"] != "plan":
            _publish(client, [event])
        _publish(client, [event])

    oldest = client.get("/threads/o/state").headers[SECTIONS_HEADER]
    through_next_plan()
    client.get("/threads/o/state")  # another reader: the server now patches from this one
    through_next_plan()
    answer = client.get("/threads/o/state", headers={KNOWN_HEADER: oldest, ACCEPT_PATCHES_HEADER: "true"})
    assert PATCHED_HEADER not in answer.headers and "plan" not in answer.headers.get(UNCHANGED_HEADER, "")
    assert answer.json()["plan"] == client.get("/threads/o/state").json()["plan"]


# -- the client --------------------------------------------------------------------------


def _full(client: TestClient, thread_id: str) -> dict:
    return client.get(f"/threads/{thread_id}/state").json()


def _reader(client: TestClient, thread_id: str, sent: list[int],
            patched: list[str] | None = None) -> Callable[[dict[str, str]], tuple[dict, object]]:  # fmt: skip
    def request(headers: dict[str, str]) -> tuple[dict, object]:
        r = client.get(f"/threads/{thread_id}/state", headers=headers)
        sent.append(len(r.content))
        if patched is not None and PATCHED_HEADER in r.headers:
            patched.append(r.headers[PATCHED_HEADER])
        return r.json(), r.headers

    return request


def test_the_clients_state_is_the_full_state_after_every_event_key_order_included(served) -> None:
    _service, client = served
    kept, sent, full_sizes, patched = KeptStates(), [], [], []
    for event in Traffic("k", seed=6).take(400):
        _publish(client, [event])
        state = kept.read("k", _reader(client, "k", sent, patched))
        full = _full(client, "k")  # a full read between two of the client's: its patch starts from that one
        full_sizes.append(len(orjson.dumps(full)))
        assert orjson.dumps(state) == orjson.dumps(full)
    assert sum(sent[-100:]) < sum(full_sizes[-100:]) / 2  # mostly unchanged sections: not sent again
    assert "plan" in patched  # plan updates came as their changed steps


def test_the_clients_kept_sections_are_read_only_so_a_caller_cannot_change_the_next_answer(served) -> None:
    _service, client = served
    _publish(client, list(Traffic("r", seed=2).take(100)))
    kept = KeptStates()
    first = kept.read("r", _reader(client, "r", []))
    with pytest.raises(TypeError, match="change a copy"):
        first["plan"].append({"step_id": "mine"})
    with pytest.raises(TypeError):
        first["goal"]["text"] = "changed"
    mine = [dict(step) for step in first["plan"]]  # copies are the caller's
    mine.append({"step_id": "mine"})
    assert kept.read("r", _reader(client, "r", [])) == _full(client, "r")


def test_an_answer_leaving_out_a_section_the_client_does_not_hold_is_read_again_in_full(served) -> None:
    _service, client = served
    _publish(client, list(Traffic("f", seed=2).take(50)))
    asked: list[dict[str, str]] = []

    def lying(headers: dict[str, str]) -> tuple[dict, object]:
        asked.append(headers)
        r = client.get("/threads/f/state", headers=headers)
        if len(asked) == 1:  # a server that says "unchanged" of what it never sent
            return {**r.json(), "plan": None}, {**r.headers, UNCHANGED_HEADER: "plan"}
        return r.json(), r.headers

    assert KeptStates().read("f", lying) == _full(client, "f")
    assert asked == [{}, {}]


def test_a_client_keeps_at_most_its_number_of_threads(served) -> None:
    _service, client = served
    kept = KeptStates(threads=2)
    for t in ("t1", "t2", "t3"):
        _publish(client, list(Traffic(t, seed=1).take(20)))
        kept.read(t, _reader(client, t, []))
    asked: list[dict[str, str]] = []

    def first(headers: dict[str, str]) -> tuple[dict, object]:
        asked.append(headers)
        r = client.get("/threads/t1/state", headers=headers)
        return r.json(), r.headers

    kept.read("t1", first)
    assert asked == [{}]  # t1 was the least recently read: no longer kept


def test_remote_service_against_agentlog_run_reads_the_same_state_as_a_full_read(server) -> None:
    url, _env = server
    remote, fresh = RemoteService(url), RemoteService(url)
    try:
        traffic = Traffic("live", seed=8)
        for event in traffic.take(150):
            remote.publish(orjson.dumps(event))
            state = remote.state("live")
            fresh.kept_states = KeptStates()  # nothing kept: a full read
            assert orjson.dumps(state) == orjson.dumps(fresh.state("live"))
    finally:
        remote.close()
        fresh.close()


def test_a_server_without_section_digests_is_read_in_full() -> None:
    body = StateBody.of({"plan": [1], "event_count": 3}, {}, Held({"plan": digest(b"[1]")}))
    assert body.unchanged == () and body.headers()[SECTIONS_HEADER] == ""
    calls: list[dict[str, str]] = []

    def older_server(headers: dict[str, str]) -> tuple[dict, object]:
        calls.append(headers)
        return {"plan": [1], "event_count": 3}, {}

    kept = KeptStates()
    assert kept.read("o", older_server) == {"plan": [1], "event_count": 3}
    assert kept.read("o", older_server) == {"plan": [1], "event_count": 3}
    assert calls == [{}, {}]  # nothing to name: nothing kept


@pytest.mark.parametrize("patch", [
    {"length": 3, "items": [[-1, {"step_id": "x"}]]},  # a negative position
    {"length": 3, "items": [[5, {"step_id": "x"}]]},  # past the end
    {"length": 9, "items": [[2, {"step_id": "x"}]]},  # not that long once applied
    {"length": "3", "items": []},
    {"length": 3, "items": [["1", {}]]},
    {"length": 3},
    [1, 2, 3],
    None,
])  # fmt: skip
def test_a_patch_that_does_not_fit_the_clients_copy_makes_it_read_the_state_in_full(patch: object) -> None:
    plan = [{"step_id": f"s{i}"} for i in range(3)]
    full = {"plan": plan, "event_count": 4}
    digests = {"plan": digest(orjson.dumps(plan))}
    header = {SECTIONS_HEADER: header_of(digests)}
    asked: list[dict[str, str]] = []

    def server(headers: dict[str, str]) -> tuple[dict, object]:
        asked.append(headers)
        if headers:
            return {"plan": patch, "event_count": 4}, {**header, PATCHED_HEADER: "plan"}
        return orjson.loads(orjson.dumps(full)), header

    kept = KeptStates()
    kept.read("p", server)
    assert kept.read("p", server) == full
    assert asked == [{}, {KNOWN_HEADER: header_of(digests), ACCEPT_PATCHES_HEADER: "true"}, {}]


def test_a_client_whose_digests_the_server_refuses_reads_in_full_and_starts_over(served) -> None:
    _service, client = served
    _publish(client, list(Traffic("x", seed=2).take(30)))
    asked: list[dict[str, str]] = []

    def strict_server(headers: dict[str, str]) -> tuple[dict, object]:
        asked.append(headers)
        if headers:  # say, a proxy that doubled the header
            raise StoreError("HTTP 400: Agentlog-Known-Sections was sent 2 times; send it once")
        r = client.get("/threads/x/state")
        return r.json(), r.headers

    kept = KeptStates()
    for _ in range(3):
        assert kept.read("x", strict_server) == _full(client, "x")
    assert asked == [{}, asked[1], {}, asked[1], {}] and asked[1]  # asked with digests, refused, then in full


def test_a_full_read_that_still_leaves_sections_out_is_an_error_not_a_state_with_holes() -> None:
    plan = [{"step_id": "s1"}]
    header = {SECTIONS_HEADER: header_of({"plan": digest(orjson.dumps(plan))})}

    def broken(headers: dict[str, str]) -> tuple[dict, object]:
        return {"plan": None, "event_count": 1}, {**header, UNCHANGED_HEADER: "plan"}

    with pytest.raises(StoreError, match="left sections out"):
        KeptStates().read("b", broken)


def test_a_client_keeping_no_threads_hands_out_the_answer_as_sent_and_names_nothing(served) -> None:
    _service, client = served
    _publish(client, list(Traffic("z", seed=2).take(30)))
    asked: list[dict[str, str]] = []
    kept = KeptStates(threads=0)
    for _ in range(2):
        state = kept.read("z", lambda headers: (asked.append(headers), _reader(client, "z", [])(headers))[1])
        assert state == _full(client, "z") and type(state["plan"]) is list
    assert asked == [{}, {}]


def test_the_sections_header_names_them_in_one_order_on_every_deployment(service: EmbeddedService) -> None:
    service.publish(b"\n".join(orjson.dumps(e) for e in Traffic("h", seed=2).take(60)))
    spliced = service.state_json("h")
    generic = StateBody.of(*serialised(service.state("h")), None)  # a Kafka worker's route
    assert spliced.headers() == generic.headers() and spliced.body == generic.body
    assert generic.body == orjson.dumps(service.state("h"))  # each section serialised once, spliced in
    held = Held(dict(spliced.digests))
    assert StateBody.of(*serialised(service.state("h")), held).body == service.state_json("h", held).body


# -- readers at their own pace, on the thread processor's own view ------------------------

_KEYS = [f"k{i}" for i in range(12)]


def _random_events(rng: random.Random, n: int) -> Iterator[bytes]:
    """Events that replace, add and remove items of every section (ids drawn from a small
    pool), fold the window often (a small budget) and switch windows, secrets included."""
    for i in range(n):
        key, text = rng.choice(_KEYS), rng.choice(["fix the build", "key AKIAIOSFODNN7EXAMPLE", "ok " * 30, None])
        status = rng.choice(["pending", "running", "done", "failed"])
        kind, payload = rng.choice([
            ("plan", {"steps": [{"step_id": rng.choice(_KEYS), "status": status, **({"text": text} if text else {})}
                                for _ in range(rng.randrange(1, 4))]}),
            ("constraint", {"constraint_id": key, "text": text or "no writes", **({"op": "remove"} if rng.random() < .3 else {})}),
            ("task", {"task_id": key, "status": status}),
            ("file_change", {"path": f"{key}.py", "change": "modified", "confirmed": rng.random() < .5}),
            ("approval_request", {"approval_id": key, "action": text or "deploy"}),
            ("approval_decision", {"approval_id": key, "decision": rng.choice(["approved", "denied"])}),
            ("agent_spawn", {"child_agent_id": key, "child_thread_id": f"t1.{key}"}),
            ("tool_call", {"call_id": key, "tool_name": "bash", "arguments": {"cmd": text}}),
            ("tool_result", {"call_id": key, "output": text or "done", "status": rng.choice(["ok", "error"])}),
            ("error", {"message": text or "boom"}),
            ("message", {"role": rng.choice(["user", "assistant"]), "text": text or "hello " * 30}),
            ("goal", {"text": text or "ship it"}),
            ("window_switch", {"new_window_id": f"w{i}"}) if rng.random() < .1 else ("plan", {"steps": []}),
        ])  # fmt: skip
        yield raw(f"e{i}", kind, payload, float(i))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("redact", [False, True])
def test_readers_at_their_own_pace_always_rebuild_the_full_state_byte_for_byte(seed: int, redact: bool) -> None:
    """Three readers (one reads after most events, one now and then, one rarely) and
    in-process reads in between, on the view the thread processor keeps: whatever mix of
    null sections and patches each gets, its state is the full render, key order included."""
    rng = random.Random(seed)
    pipeline = Pipeline(MemorySeen(), config=PairingConfig(compact_window_tokens=200))
    readers, patched = [KeptStates() for _ in range(3)], []
    for offset, record in enumerate(_random_events(rng, 300)):
        pipeline.process([Record(0, offset, record)])
        tp = pipeline.thread("t1")
        if rng.random() < 0.2:
            tp.view.render(tp.state, redact)

        def request(headers: dict[str, str]) -> tuple[dict, object]:
            held = parse_held([headers[KNOWN_HEADER]] if KNOWN_HEADER in headers else [],
                              [headers[ACCEPT_PATCHES_HEADER]] if ACCEPT_PATCHES_HEADER in headers else [])  # fmt: skip
            public = tp.view.render_json(tp.state, redact)
            body = StateBody.of(public, tp.view.digests(), held, tp.view.patches())
            patched.extend(body.patched)
            return orjson.loads(body.body), body.headers()

        for reader, pace in zip(readers, (0.9, 0.3, 0.05)):
            if rng.random() < pace:
                state = reader.read("t1", request)
                assert orjson.dumps(state) == orjson.dumps(redact_if(redact, tp.state.public())), (seed, offset)
    assert "plan" in patched  # patches were taken, not only whole sections
