"""Poison input (issue 12): every odd or hostile record gets one documented answer on
every path, nothing valid around it is lost, and the pipeline never stops.

The corpus below is published through the embedded service and through the `agentlog`
command; each record is either rejected with its documented reason (dead-lettered with
its bytes) or accepted and stored as sent.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import shutil

import orjson
import pytest
from hypothesis import given
from hypothesis import settings as hsettings  # `settings` is the data directory's fixture here
from hypothesis import strategies as st

from agentlog.processors.duplicates import same_content
from agentlog.processors.records import search_doc
from agentlog.processors.validation import Rejection, check_json, validate
from agentlog.sinks.tantivy_index import TantivySearchIndex
from agentlog.streams.config import Settings
from agentlog.streams.embedded.service import EmbeddedService
from agentlog.streams.publish_check import check_records, split_records
from agentlog.streams.sink_guard import StoreUnavailable, is_refusal, write_isolating
from tests.helpers import ev, raw

TS = '"2026-01-01T12:00:00Z"'


def event(kind: str = "message", payload: str = '{"role":"user","text":"hi"}', eid: str = "p",
          **fields: str) -> bytes:  # fmt: skip
    """An event written by hand, so that bytes no serialiser would write can be put in."""
    parts = {"event_id": f'"{eid}"', "thread_id": '"poison"', "kind": f'"{kind}"', "ts": TS,
             "payload": payload, **fields}  # fmt: skip
    # latin-1: each character is the one byte it stands for (the corpus is ASCII otherwise)
    return ("{" + ",".join(f'"{k}":{v}' for k, v in parts.items()) + "}").encode("latin-1")


def call_args(args: str, eid: str = "p") -> bytes:
    return event("tool_call", '{"call_id":"c","tool_name":"calc","arguments":' + args + "}", eid)


def fact(value: str, eid: str = "p") -> bytes:
    return event("fact", '{"key":"k","value":' + value + ',"evidence_type":"tool_observed","confirmed":true}', eid)


def summary(body: str, eid: str = "p") -> bytes:
    return event("compaction", '{"summary":' + body + ',"covers_through":"x"}', eid)


def deep(n: int, open_: str, close: str) -> str:
    return open_ * n + "1" + close * n if open_ == "[" else '{"a":' * n + "1" + "}" * n


NONFINITE = "invalid_json: non-finite"
BIG = "integer_out_of_range"

# (name, record, the reason it must start with; None: accepted and stored as sent)
CORPUS: list[tuple[str, bytes, str | None]] = [
    # numbers a double cannot hold, anywhere in the record
    ("nan in arguments", call_args('{"n":NaN}'), NONFINITE),
    ("infinity in arguments", call_args('{"n":Infinity}'), NONFINITE),
    ("minus infinity in a fact value", fact("-Infinity"), NONFINITE),
    ("1e400 in a compaction summary", summary('{"x":1e400}'), NONFINITE),
    ("-1e400 in an unknown top-level field", event(extra="-1e400"), NONFINITE),
    ("nan as schema_version", event(schema_version="NaN"), NONFINITE),
    ("nan in an ignored payload field", event(payload='{"role":"user","text":"hi","junk":[NaN]}'), NONFINITE),
    # integers beyond 64 bits
    ("huge int in arguments", call_args('{"n":999999999999999999999999999999}'), BIG),
    ("int below -2**63 in a fact value", fact(str(-(2**63) - 1)), BIG),
    ("huge int nested in a summary", summary('{"a":[{"b":' + str(2**64) + "}]}"), BIG),
    ("huge exit code", event("tool_result", '{"call_id":"c","output":"o","exit_code":' + str(2**70) + "}"), BIG),
    ("huge int in an unknown field", event(extra=str(10**40)), BIG),
    # numbers at the edges that are fine
    ("2**64-1 in arguments", call_args('{"n":18446744073709551615}', "edge1"), None),
    ("-2**63 in a fact value", fact(str(-(2**63)), "edge2"), None),
    ("minus zero", call_args('{"n":-0,"f":-0.0}', "edge3"), None),
    ("an underflowing 1e-400", call_args('{"n":1e-400}', "edge4"), None),
    # repeated keys, at every depth
    ("kind twice", event(kind='message","kind":"goal'), "duplicate_key: kind"),
    ("thread_id twice", event(thread_id='"a","thread_id":"b"'), "duplicate_key: thread_id"),
    ("event_id twice", event(event_id='"p","event_id":"q"'), "duplicate_key: event_id"),
    ("payload text twice", event(payload='{"role":"user","text":"a","text":"b"}'), "duplicate_key: text"),
    ("a key twice deep in arguments", call_args('{"a":{"b":[{"c":1,"c":2}]}}'), "duplicate_key: c"),
    ("a key with an escaped quote twice", call_args('{"a\\"b":1,"a\\"b":2}'), 'duplicate_key: a"b'),
    ("a key twice, once written as escapes", event(payload='{"role":"user","text":"a","\\u0074ext":"b"}'),
     "duplicate_key: text"),
    ("a key twice in a fact value", fact('{"x":1,"x":1}'), "duplicate_key: x"),
    ("payload twice", event(payload='{"role":"user","text":"a"},"payload":{"role":"user","text":"b"}'),
     "duplicate_key: payload"),
    ("quotes in strings but no repeats", call_args('{"q":"say \\"hi\\"","r":"\\\\","s":"\\u0022"}', "q1"), None),
    # nesting
    ("10,000 nested arrays", call_args('{"a":' + deep(10_000, "[", "]") + "}"), "invalid_json"),
    ("10,000 nested objects", call_args(deep(10_000, "{", "}")), "invalid_json"),
    # encodings
    ("invalid UTF-8", event(payload=b'{"role":"user","text":"\xff\xfe"}'.decode("latin-1")), "invalid_json"),
    ("overlong UTF-8", event(payload=b'{"role":"user","text":"\xc0\xaf"}'.decode("latin-1")), "invalid_json"),
    ("a lone high surrogate", event(payload='{"role":"user","text":"\\ud800"}'), "invalid_json"),
    ("a lone low surrogate", event(payload='{"role":"user","text":"x\\udc00y"}'), "invalid_json"),
    ("a raw NUL byte in a string", event(payload='{"role":"user","text":"a\x00b"}'), "invalid_json"),
    ("an escaped NUL", event(payload='{"role":"user","text":"nul\\u0000byte"}', eid="nul1"), None),
    ("a paired surrogate", event(payload='{"role":"user","text":"\\ud83d\\ude00 grin"}', eid="emoji1"), None),
    ("a byte order mark", b"\xef\xbb\xbf" + event(), "invalid_json"),
    # size
    ("a 5 MB string", event(payload='{"role":"user","text":"' + "x" * 5_000_000 + '"}'), "too_large"),
    # not an event object
    ("an empty object", b"{}", "missing_field"),
    ("an array of events", b"[" + event() + b"]", "not_an_object"),
    ("a number", b"42", "not_an_object"),
    ("a string", b'"event"', "not_an_object"),
    ("null", b"null", "not_an_object"),
    ("true", b"true", "not_an_object"),
    ("truncated", event()[:-3], "invalid_json"),
    # wrong types of each field
    ("event_id a number", event(event_id="5"), "invalid_event"),
    ("thread_id null", event(thread_id="null"), "invalid_event"),
    ("kind a number", b'{"event_id":"p","thread_id":"t","kind":5,"ts":' + TS.encode() + b',"payload":{}}',
     "unknown_kind"),
    ("ts a number", event(ts="1767225600"), "invalid_event"),
    ("payload a string", event(payload='"hi"'), "invalid_payload"),
    ("payload an array", event(payload="[]"), "invalid_payload"),
    ("payload null", event(payload="null"), "invalid_payload"),
    ("schema_version a string", event(schema_version='"1"'), "invalid_event"),
    ("source unknown", event(source='"robot"'), "invalid_event"),
    ("agent_id a number", event(agent_id="5"), "invalid_event"),
    ("message text a number", event(payload='{"role":"user","text":5}'), "invalid_payload"),
    ("arguments a list", event("tool_call", '{"call_id":"c","tool_name":"t","arguments":[1]}'), "invalid_payload"),
    ("confirmed a string", event("fact", '{"key":"k","value":1,"evidence_type":"tool_observed","confirmed":"yes"}'),
     "invalid_payload"),
    # identifiers
    ("an id of 129 characters", event(eid="e" * 129), "invalid_event"),
    ("an id with a space", event(eid="a b"), "invalid_event"),
    ("an id with a slash", event(eid="../etc/passwd"), "invalid_event"),
    ("an empty id", event(eid=""), "invalid_event"),
    ("a thread id with an accent", event(thread_id='"caf\\u00e9"'), "invalid_event"),
    ("an id with a newline escape", event(eid="a\\nb"), "invalid_event"),
    # event time
    ("year 0", event(ts='"0000-01-01T00:00:00Z"'), "invalid_event"),
    ("year 9999", event(ts='"9999-12-31T23:59:59Z"'), "invalid_event"),
    ("year 1899", event(ts='"1899-12-31T23:59:59Z"'), "invalid_event"),
    ("no offset", event(ts='"2026-01-01T12:00:00"'), "invalid_event"),
    ("not a time", event(ts='"yesterday"'), "invalid_event"),
    ("February 30", event(ts='"2026-02-30T00:00:00Z"'), "invalid_event"),
    # kinds
    ("an unknown kind", event(kind="teleport"), "unknown_kind"),
    ("a kind in capitals", event(kind="MESSAGE"), "unknown_kind"),
    ("no kind", b'{"event_id":"p","thread_id":"t","ts":' + TS.encode() + b',"payload":{}}', "missing_field"),
]

ACCEPTED = [(name, rec) for name, rec, why in CORPUS if why is None]


def test_the_corpus_holds_at_least_fifty_poison_payloads() -> None:
    assert len([c for c in CORPUS if c[2] is not None]) >= 50
    assert len({name for name, _, _ in CORPUS}) == len(CORPUS)


@pytest.mark.parametrize(("name", "record", "reason"), CORPUS, ids=[c[0] for c in CORPUS])
def test_each_poison_payload_gets_its_documented_answer(name: str, record: bytes, reason: str | None) -> None:
    result = validate(record)
    if reason is None:
        assert not isinstance(result, Rejection), result
    else:
        assert isinstance(result, Rejection), name
        assert result.reason.startswith(reason), result.reason
        assert result.raw == record[: 1024 * 1024]


def body_of(records: list[bytes]) -> bytes:
    """The corpus as JSON lines, a valid event between every two poison records."""
    lines: list[bytes] = []
    for i, rec in enumerate(records):
        lines.append(raw(f"ok{i}", "message", {"role": "user", "text": f"valid neighbour {i}"}, i, thread="good"))
        lines.append(rec)
    lines.append(raw("ok-last", "message", {"role": "user", "text": "the last valid one"}, 999, thread="good"))
    assert all(b"\n" not in line and b"\r" not in line for line in lines)
    return b"\n".join(lines)


def expected_dead_letter(record: bytes) -> bytes:
    return record[: 1024 * 1024]


def test_the_corpus_through_the_service_rejects_each_with_its_reason_and_loses_nothing_valid(
    service: EmbeddedService,
) -> None:
    records = [rec for _, rec, _ in CORPUS]
    report = service.publish(body_of(records))
    poison = [(rec, why) for _, rec, why in CORPUS if why is not None]
    assert report.rejected == len(poison)
    assert report.accepted == len(records) + 1 + len(ACCEPTED)
    # Record n of the body is the corpus record (n // 2): every rejection names its own reason.
    for rejection in report.rejections:
        _, _, why = CORPUS[rejection["record"] // 2 - 1]
        assert why is not None and rejection["reason"].startswith(why), rejection
    service.catch_up()

    stored = service.log.rejected()
    assert [r for r, _ in stored] == [expected_dead_letter(rec) for rec, _ in poison]
    assert [w.split(":")[0] for _, w in stored] == [why.split(":")[0] for _, why in poison]
    good = service.sql("SELECT count() FROM events WHERE thread_id = 'good'").rows[0][0]
    assert good == len(records) + 1
    for name, rec in ACCEPTED:  # accepted odd records are stored exactly as sent
        eid = orjson.loads(rec)["event_id"]
        assert service.log.get(eid).raw == rec, name
    assert service.state("good")["event_count"] == len(records) + 1
    assert [h["event_id"] for h in service.search("nul byte")["hits"]] == ["nul1"]
    after_attack_is_still_ingested(service)


def after_attack_is_still_ingested(service: EmbeddedService) -> None:
    service.publish(raw("after1", "goal", {"text": "still ingesting zebracorn"}, 5, thread="after"))
    service.catch_up()
    assert service.state("after")["goal"]["text"] == "still ingesting zebracorn"
    assert service.sql("SELECT count() FROM events WHERE event_id = 'after1'").rows[0][0] == 1
    assert [h["event_id"] for h in service.search("zebracorn")["hits"]] == ["after1"]


def agentlog(env: dict[str, str], *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agentlog", *args], env=env, input=stdin, check=False,
                          capture_output=True, timeout=300)  # fmt: skip


def test_the_corpus_through_the_cli_exits_zero_and_the_data_directory_stays_usable(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    path = tmp_path / "poison.jsonl"
    path.write_bytes(body_of([rec for _, rec, _ in CORPUS]))
    published = agentlog(cli_env, "publish", str(path), "--json")
    assert published.returncode == 0, published.stderr
    report = json.loads(published.stdout)
    assert report["rejected"] == len([c for c in CORPUS if c[2] is not None])
    run = agentlog(cli_env, "run", "--until-idle")
    assert run.returncode == 0, run.stderr
    assert agentlog(cli_env, "publish", "-", stdin=raw("after1", "goal", {"text": "zebracorn"}, thread="after")).returncode == 0
    assert agentlog(cli_env, "run", "--until-idle").returncode == 0
    state = json.loads(agentlog(cli_env, "state", "after", "--json").stdout)
    assert state["goal"]["text"] == "zebracorn"
    sql = agentlog(cli_env, "sql", "SELECT count() AS n FROM events WHERE event_id = 'after1'", "--json")
    assert json.loads(sql.stdout) == [{"n": 1}], sql.stdout
    hits = json.loads(agentlog(cli_env, "search", "zebracorn", "--json").stdout)["hits"]
    assert [h["event_id"] for h in hits] == ["after1"]


def test_a_file_whose_every_record_is_rejected_exits_one_and_a_partly_rejected_one_zero(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"\n".join(rec for _, rec, why in CORPUS[:6]))
    all_rejected = agentlog(cli_env, "publish", str(bad))
    assert all_rejected.returncode == 1
    assert b"accepted 0, rejected 6" in all_rejected.stdout
    # Each rejection is said once, in the report (the log's line is the server's, and -v's).
    assert all_rejected.stderr.count(b"record 1:") == 1 and b"WARNING" not in all_rejected.stderr
    assert b"rejected record" in agentlog(cli_env, "-v", "publish", str(bad)).stderr
    drained = agentlog(cli_env, "run", "--until-idle")  # the dead letters are records processed: it says so
    assert b"processed 12 records (12 rejected, logged in rejected_events)" in drained.stdout, drained.stdout
    partly = tmp_path / "partly.jsonl"
    partly.write_bytes(bad.read_bytes() + b"\n" + raw("fine", "goal", {"text": "g"}))
    assert agentlog(cli_env, "publish", str(partly)).returncode == 0


# -- the same event id twice ------------------------------------------------------------


def test_the_same_event_id_with_other_content_is_a_visible_conflicting_duplicate(service: EmbeddedService) -> None:
    first = raw("d1", "goal", {"text": "the real goal"}, thread="dup")
    exact = raw("d1", "goal", {"text": "the real goal"}, thread="dup")
    reordered = orjson.dumps({**orjson.loads(first), "payload": {"text": "the real goal"}}, option=orjson.OPT_SORT_KEYS)
    other_payload = raw("d1", "goal", {"text": "a forged goal"}, thread="dup")
    other_thread = raw("d1", "goal", {"text": "the real goal"}, thread="elsewhere")
    other_kind = raw("d1", "message", {"role": "user", "text": "the real goal"}, thread="dup")
    assert service.publish(first).accepted == 1
    report = service.publish(b"\n".join([exact, reordered, other_payload, other_thread, other_kind]))
    assert (report.accepted, report.rejected) == (2, 3)
    assert [r["record"] for r in report.rejections] == [3, 4, 5]
    assert all(r["reason"].startswith("conflicting_duplicate: event_id d1") for r in report.rejections)
    service.catch_up()
    assert service.state("dup")["goal"]["text"] == "the real goal"
    assert [r for r, _ in service.log.rejected()] == [other_payload, other_thread, other_kind]
    assert service.sql("SELECT count() FROM events WHERE event_id = 'd1'").rows[0][0] == 1
    with pytest.raises(Exception):  # noqa: B017,PT011 - the forged thread never got the event
        service.state("elsewhere")


def test_a_conflict_within_one_body_keeps_the_first_copy() -> None:
    a = raw("d2", "goal", {"text": "one"})
    b = raw("d2", "goal", {"text": "two"})
    accepted, rejected, report = check_records([a, a, b], 1024 * 1024)
    assert [r for _, _, r in accepted] == [a, a]
    assert rejected == [(b, report.rejections[0]["reason"])]
    assert report.rejections[0]["record"] == 3


def test_content_equal_but_typed_differently_is_not_the_same_content() -> None:
    assert same_content(b'{"a":1,"b":[true]}', b'{ "b" : [true], "a" : 1 }')
    assert not same_content(b'{"a":1}', b'{"a":1.0}')
    assert not same_content(b'{"a":true}', b'{"a":1}')


def test_a_conflict_racing_past_the_publish_check_is_dead_lettered_by_the_driver(service: EmbeddedService) -> None:
    first = raw("d3", "goal", {"text": "first"}, thread="race")
    forged = raw("d3", "goal", {"text": "second"}, thread="race")
    service.bus.append([("race", "d3", first), ("race", "d3", forged)])  # as two racing publishers would
    service.catch_up()
    assert service.state("race")["goal"]["text"] == "first"
    assert service.log.rejected() == [(forged, service.log.rejected()[0][1])]
    assert service.log.rejected()[0][1].startswith("conflicting_duplicate")


# -- bodies and sizes -------------------------------------------------------------------


def test_a_json_array_body_keeps_each_item_as_the_bytes_received(service: EmbeddedService) -> None:
    a = b'{ "event_id" : "arr1", "thread_id":"arr", "kind":"goal","ts":"2026-01-01T12:00:00Z","payload":{"text":"caf\xc3\xa9"} }'
    b = b'{"thread_id":"arr","event_id":"arr2","kind":"goal","ts":"2026-01-01T12:00:01.000Z","payload":{"text":"\\u00e9"}}'
    body = b"[\n  " + a + b" ,\n" + b + b"\n]"
    assert split_records(body) == [a, b]
    service.publish(body)
    service.catch_up()
    assert service.log.get("arr1").raw == a
    assert service.log.get("arr2").raw == b


def test_a_sixty_megabyte_record_is_rejected_as_a_bounded_prefix_and_processing_goes_on(
    service: EmbeddedService, cli_env: dict[str, str], tmp_path: Path
) -> None:
    huge = event(payload='{"role":"user","text":"' + "y" * 60_000_000 + '"}', eid="huge")
    report = service.publish(huge + b"\n" + raw("small", "goal", {"text": "after the huge one"}, thread="big"))
    assert (report.accepted, report.rejected) == (1, 1)
    reason = report.rejections[0]["reason"]
    assert reason.startswith(f"too_large: {len(huge)} bytes") and hashlib.sha256(huge).hexdigest() in reason
    service.catch_up()
    stored = service.log.rejected()
    assert stored[0][0] == huge[: 1024 * 1024]
    assert service.state("big")["goal"]["text"] == "after the huge one"
    assert service.sql("SELECT max(length(raw)) FROM rejected_events").rows[0][0] == 1024 * 1024
    # The same through the command, into another data directory.
    path = tmp_path / "huge.jsonl"
    path.write_bytes(huge + b"\n" + raw("small", "goal", {"text": "g"}))
    published = agentlog(cli_env, "publish", str(path), "--json")
    assert published.returncode == 0 and json.loads(published.stdout)["rejected"] == 1
    assert agentlog(cli_env, "run", "--until-idle").returncode == 0
    sql = agentlog(cli_env, "sql", "SELECT 1", "--json")
    assert sql.returncode == 0, sql.stderr


def test_a_dead_letter_written_whole_by_an_older_release_is_clipped_before_the_column_writer(
    service: EmbeddedService,
) -> None:
    big = b"z" * 3_000_000
    service.bus.append((), [(big, "too_large: an older release kept it whole")])
    service.catch_up()
    [(kept, why)] = service.log.rejected()
    assert kept == big[: 1024 * 1024]
    assert "sha256 " + hashlib.sha256(big).hexdigest() in why


# -- a sink that refuses a record, a store that is down ---------------------------------
#
# After validation no record is known that tantivy refuses, so these indexes stand in for
# one: the real tantivy index underneath, with a refusal (the ValueError tantivy raises
# for a document it cannot take) or an outage (an OSError) injected.


class RefusingIndex(TantivySearchIndex):
    """Refuses, as tantivy does a document it cannot convert, at the one funnel both
    ``add`` and ``add_encoded`` go through."""

    def _add(self, docs: Any, new: bool = False) -> None:
        if any("poisonpill" in text for _, _, text in docs):
            raise ValueError("tantivy could not convert the document")
        super()._add(docs, new)


class FlakyIndex(TantivySearchIndex):
    down = False

    def _add(self, docs: Any, new: bool = False) -> None:
        if self.down:
            raise OSError(28, "No space left on device")
        super()._add(docs, new)


def service_with(index_class: type, settings: Settings, monkeypatch: pytest.MonkeyPatch) -> EmbeddedService:
    monkeypatch.setattr("agentlog.streams.embedded.service.open_search_index", lambda s: index_class(str(s.path("index"))))
    return EmbeddedService(settings)


def test_a_record_a_sink_refuses_is_dead_lettered_and_the_others_are_written(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    svc = service_with(RefusingIndex, settings, monkeypatch)
    try:
        records = [raw(f"r{i}", "goal", {"text": "poisonpill" if i == 3 else f"fine zebra {i}"}, i, thread="sr")
                   for i in range(6)]  # fmt: skip
        svc.publish(b"\n".join(records))
        assert svc.catch_up()["processed"] >= 6  # run --until-idle completes
        [(kept, why)] = svc.log.rejected()
        assert kept == records[3]
        assert why.startswith("sink_refused:index: ValueError: tantivy could not convert")
        assert sorted(h["event_id"] for h in svc.search("zebra", limit=50)["hits"]) == ["r0", "r1", "r2", "r4", "r5"]
        assert svc.sql("SELECT count() FROM events WHERE thread_id = 'sr'").rows[0][0] == 6  # the log has it
        assert svc.health()["status"] == "ok"
    finally:
        svc.close()


def wait_for(condition: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_store_that_is_down_is_retried_with_back_off_and_reported_degraded_until_it_is_back(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from prometheus_client import generate_latest  # noqa: PLC0415

    from agentlog.streams.metrics import METRICS  # noqa: PLC0415

    svc = service_with(FlakyIndex, settings, monkeypatch)
    stop = threading.Event()
    worker = threading.Thread(target=svc.run_forever, args=(stop,), daemon=True)
    try:
        FlakyIndex.down = True
        worker.start()
        svc.publish(raw("down1", "goal", {"text": "written while the index is down"}, thread="dn"))
        wait_for(lambda: svc.health()["status"] == "degraded")
        health = svc.health()
        assert "No space left on device" in health["failing"]["index"]
        metrics = generate_latest(METRICS.registry).decode()
        assert 'agentlog_store_degraded{error="index: OSError' in metrics and 'store="index"' in metrics
        found = svc.search("written", thread_id="dn")
        assert found["stale"] and "index failing" in found["warnings"][0]
        assert [h["source"] for h in found["hits"]] == ["active"]  # read-your-writes still holds
        assert svc.state("dn")["warnings"] and svc.state("dn")["goal"]["text"].startswith("written")
        FlakyIndex.down = False
        wait_for(lambda: svc.health()["status"] == "ok")
        assert svc.health()["failing"] == {}
        assert "agentlog_store_degraded{" not in generate_latest(METRICS.registry).decode()
        wait_for(lambda: [h["source"] for h in svc.search("written", thread_id="dn")["hits"]] == ["index"])
        assert "warnings" not in svc.state("dn")
        assert svc.log.rejected() == []  # an outage is never a dead letter
    finally:
        FlakyIndex.down = False
        stop.set()
        worker.join(30)
        svc.close()


def test_refusals_and_outages_are_told_apart() -> None:
    assert is_refusal(ValueError("cannot convert"))
    assert is_refusal(OverflowError("int too big"))
    assert is_refusal(RuntimeError("Code: 27. DB::Exception: Cannot parse input"))
    assert is_refusal(RuntimeError("bulk indexing: 1 of 3 documents failed, first: {'type': 'mapper_parsing_exception'}"))
    assert not is_refusal(OSError(28, "No space left on device"))
    assert not is_refusal(ConnectionError("refused"))
    assert not is_refusal(RuntimeError("Code: 164. DB::Exception: Cannot execute query in readonly mode"))
    assert not is_refusal(StoreUnavailable("log", ValueError("x")))


def test_a_search_index_whose_storage_fails_is_down_not_refusing_every_record(tmp_path: Path) -> None:
    # tantivy raises ValueError for its files too: every record of the batch would have
    # been dead-lettered as refused, with health saying ok.
    index = TantivySearchIndex(str(tmp_path / "index"))
    shutil.move(tmp_path / "index", tmp_path / "index.moved")
    (tmp_path / "index").write_text("")
    docs = [search_doc(ev(f"e{i}", "message", {"role": "user", "text": "hi"}), i, "w0") for i in (1, 2)]
    for _ in range(2):  # the commit that fails, then the writer it killed
        with pytest.raises(StoreUnavailable):
            write_isolating("index", lambda xs: (index.add(xs), index.refresh()), docs, lambda _doc: b"{}")
    assert not is_refusal(ValueError("An index writer was killed. ... (io::Error most likely)"))
    # A record ClickHouse refuses, whose text quotes an I/O error, is still refused (not
    # taken for an outage and retried forever).
    assert is_refusal(RuntimeError("Code: 27. DB::Exception: Cannot parse input: 'IoError { No such file or directory'"))


def test_isolation_writes_every_record_but_the_refused_one_and_raises_on_an_outage() -> None:
    written: list[str] = []

    def write(items: Any) -> None:
        if "bad" in items:
            raise ValueError("refused bad")
        written.extend(items)

    letters = write_isolating("log", write, ["a", "bad", "c"], str.encode)
    assert written == ["a", "c"]
    assert letters == [(b"bad", "sink_refused:log: ValueError: refused bad")]

    def down(items: Any) -> None:
        raise ConnectionError("gone")

    with pytest.raises(StoreUnavailable) as raised:
        write_isolating("index", down, ["a"], str.encode)
    assert raised.value.store == "index"


def accepted_items(n: int) -> list[Any]:
    from agentlog.processors.pipeline import Pipeline, Record  # noqa: PLC0415
    from agentlog.streams.kafka.accepted import sink_item  # noqa: PLC0415

    records = [Record(0, i + 1, raw(f"k{i}", "goal", {"text": f"kafka zebra {i}"}, i, thread="kf")) for i in range(4)]
    return [sink_item(a) for a in Pipeline().process(records).applied]


def with_changed(item: Any, part: str, **fields: object) -> Any:
    """An accepted item whose row or document has ``fields`` changed (encoded again)."""
    changed = {**orjson.loads(getattr(item, part)), **fields}
    return dataclasses.replace(item, **{part: orjson.dumps(changed)})


def test_the_kafka_log_sink_dead_letters_a_row_the_log_refuses_and_writes_the_rest(settings: Settings) -> None:
    from agentlog.sinks.clickhouse import ClickHouseLogStore  # noqa: PLC0415
    from agentlog.streams.kafka.accepted import write_log_guarded  # noqa: PLC0415

    store = ClickHouseLogStore.open(path=str(settings.path("log")))
    try:
        items = accepted_items(4)
        items[2] = with_changed(items[2], "row", ts="not a time at all")  # a row real ClickHouse refuses to parse
        count, letters = write_log_guarded(store, items, [])
        assert count == 3
        assert [raw_ for raw_, _ in letters] == [orjson.loads(items[2].row)["raw"].encode()]
        assert orjson.loads(letters[0][0])["event_id"] == "k2"  # the event as published
        assert letters[0][1].startswith("sink_refused:log: ")
        assert sorted(r[0] for r in store.query("SELECT event_id FROM events").rows) == ["k0", "k1", "k3"]
    finally:
        store.close()


def test_the_kafka_index_sink_dead_letters_a_document_the_index_refuses(tmp_path: Path) -> None:
    from agentlog.streams.kafka.accepted import index_guarded  # noqa: PLC0415

    index = RefusingIndex(str(tmp_path / "index"))
    try:
        items = accepted_items(4)
        items[1] = with_changed(items[1], "doc", text="poisonpill")
        letters = index_guarded(index, items)
        assert [raw_ for raw_, _ in letters] == [orjson.loads(items[1].row)["raw"].encode()]
        index.refresh()
        from agentlog.schemas.search import SearchFilters  # noqa: PLC0415

        assert sorted(h.event_id for h in index.search("zebra", SearchFilters(), 10)) == ["k0", "k2", "k3"]
    finally:
        index.close()


def test_the_processors_find_conflicts_against_wherever_the_first_copy_is() -> None:
    from agentlog.processors.duplicates import conflicts  # noqa: PLC0415
    from agentlog.processors.pipeline import Pipeline, Record  # noqa: PLC0415

    first = raw("c1", "goal", {"text": "one"})
    same = orjson.dumps(orjson.loads(first), option=orjson.OPT_INDENT_2)
    other = raw("c1", "goal", {"text": "two"})
    result = Pipeline().process([Record(0, 1, first), Record(0, 2, same), Record(0, 3, other)])
    assert [r.offset for r, _ in result.duplicates] == [2, 3]
    found = conflicts(result.duplicates, {"c1": first}.get)
    assert [(r.offset, why.split(":")[0]) for r, why in found] == [(3, "conflicting_duplicate")]
    assert conflicts(result.duplicates, {}.get) == []  # first copy unknown (beyond reach): no claim


def test_poison_an_older_release_accepted_into_the_topic_is_dead_lettered_when_processed(
    service: EmbeddedService,
) -> None:
    # Bytes that reached the topic without today's publish check (an older release took them).
    old = [call_args('{"n":999999999999999999999999999999}', "old1"), fact("NaN", "old2"),
           event(kind='message","kind":"goal', eid="old3")]  # fmt: skip
    service.bus.append([("poison", f"old{i + 1}", rec) for i, rec in enumerate(old)])
    service.catch_up()  # run --until-idle: no store refuses anything, nothing raises
    reasons = [why for _, why in service.log.rejected()]
    assert [r.split(":")[0] for r in reasons] == ["integer_out_of_range", "invalid_json", "duplicate_key"]
    assert service.sql("SELECT count() FROM events").rows[0][0] == 0
    after_attack_is_still_ingested(service)


def test_the_corpus_over_http_gets_the_same_answers_and_the_server_keeps_ingesting(server: Any) -> None:  # noqa: F811
    import httpx  # noqa: PLC0415

    url, env = server
    body = body_of([rec for _, rec, _ in CORPUS if len(rec) <= 1024 * 1024])
    report = httpx.post(f"{url}/events", content=body, headers={"Content-Type": "application/json"},
                        timeout=120).json()  # fmt: skip
    poison = [why for _, rec, why in CORPUS if why is not None and len(rec) <= 1024 * 1024]
    assert report["rejected"] == len(poison)
    assert [r["reason"].split(":")[0] for r in report["rejections"]] == [w.split(":")[0] for w in poison]
    assert httpx.get(f"{url}/healthz", timeout=10).json()["status"] == "ok"
    after = raw("after1", "goal", {"text": "still ingesting zebracorn"}, thread="after")
    httpx.post(f"{url}/events", content=after, headers={"Content-Type": "application/json"}, timeout=30)
    state = json.loads(agentlog(env, "state", "after", "--json").stdout)
    assert state["goal"]["text"] == "still ingesting zebracorn"
    sql = agentlog(env, "sql", "SELECT count() AS n FROM events WHERE event_id = 'after1'", "--json")
    assert json.loads(sql.stdout) == [{"n": 1}]
    hits = json.loads(agentlog(env, "search", "zebracorn", "--thread", "after", "--json").stdout)["hits"]
    assert [h["event_id"] for h in hits] == ["after1"]
    assert httpx.get(f"{url}/healthz", timeout=10).json()["status"] == "ok"


# -- the repeated-key check counts string tokens: a property check of that trick --------

_KEYS = st.text(alphabet=st.sampled_from('ab"\\/\n\u00e9\u2028x'), max_size=4)
_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(alphabet='q"\\\u00e9\x01', max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=3),
    max_leaves=12,
)


@hsettings(max_examples=400, deadline=None)
@given(st.dictionaries(_KEYS, _VALUES, min_size=1, max_size=4), st.booleans())
def test_json_without_repeated_keys_passes_and_one_repeated_key_is_always_found(
    tree: dict[str, Any], ascii_only: bool
) -> None:
    text = json.dumps(tree, ensure_ascii=ascii_only).encode()
    assert check_json(text) is None, text
    first = next(iter(tree))
    repeated = b"{" + json.dumps(first, ensure_ascii=ascii_only).encode() + b':"again",' + text[1:]
    assert check_json(repeated) == f"duplicate_key: {first}"[: len("duplicate_key: ") + 200], repeated
