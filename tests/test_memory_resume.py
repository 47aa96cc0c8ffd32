"""Issue 18: phase 1 resumes each thread where its last run stopped (a stored position and
the few events later ones need), so a run after N new events parses those N only, and
what it extracts is what one run over the whole thread extracts."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson
from hypothesis import given
from hypothesis import settings as examples
from hypothesis import strategies as st

from agentlog.processors import memory
from agentlog.processors.memory_extract.thread import context
from agentlog.processors.validation import validate
from agentlog.schemas.events import Envelope
from agentlog.streams.config import Settings
from agentlog.streams.embedded.publisher import LocalPublisher
from agentlog.streams.memory.jobs import Memory
from tests.helpers import raw

HEAD = "0123456789abcdef0123456789abcdef01234567"


def _call(eid: str, call_id: str, command: str, t: float, **extra: Any) -> bytes:
    return raw(eid, "tool_call", {"call_id": call_id, "tool_name": "bash", "arguments": {"command": command}}, t, **extra)


def _result(eid: str, call_id: str, output: str, t: float, **extra: Any) -> bytes:
    return raw(eid, "tool_result", {"call_id": call_id, "output": output, "status": "ok", "exit_code": 0}, t, **extra)


def _say(eid: str, text: str, t: float, role: str = "user", **extra: Any) -> bytes:
    return raw(eid, "message", {"role": role, "text": text}, t, **extra)


# A thread whose later events lean on earlier ones: results of calls made long before, a
# commit printed by `git rev-parse`, an assistant's claim the user confirms next, a decision
# on an earlier request, a fact and its revocation.
SCRIPT = [
    _say("m0", "hello", 0, repo_commit="aaaaaaa"),
    _call("g1", "cg", "git rev-parse HEAD", 1),
    _call("j1", "cj", "java -version", 2),
    _result("g2", "cg", HEAD + "\n", 3),
    raw("q1", "approval_request", {"approval_id": "a1", "action": "run database migrations"}, 4),
    _say("m1", "Remember: our deploy branch is release-7.", 5),
    _call("l1", "cl", "ls config", 6),
    _say("a1", "The staging database host is pg-stage-7.internal.", 7, role="assistant"),
    _say("u1", "Yes, remember that.", 8),
    _result("j2", "cj", 'openjdk version "21.0.2"', 9),
    raw("f1", "fact", {"key": "cache.ttl", "value": "30s", "evidence_type": "user_confirmed", "confirmed": True}, 10),
    raw("d1", "approval_decision", {"approval_id": "a1", "decision": "denied", "by": "user"}, 11),
    _result("l2", "cl", "app.yaml\nlogging.yaml\n", 12),
    _say("m2", "From now on, our region is eu-west-1.", 13, repo_commit="bbbbbbb"),
    _call("n1", "cn", "node -v", 14),
    _say("a2", "Our queue is sqs-main.", 15, role="assistant"),
    _result("n2", "cn", "v20.11.0", 16),
    _say("u2", "Yes, remember that.", 17),
    raw("rv", "revoke", {"target_event_id": "f1", "reason": "wrong"}, 18),
    _say("m3", "Remember: our cache TTL is 45s.", 19),
]


def _events(records: list[bytes]) -> list[Envelope]:
    return [e for r in records if isinstance(e := validate(r), Envelope)]


def _all(found: memory.Extraction) -> dict[str, Any]:
    return {"candidates": sorted(orjson.dumps(asdict(c), option=orjson.OPT_SORT_KEYS) for c in found.candidates),
            "revocations": sorted(map(repr, found.revocations)), "touches": sorted(map(repr, found.file_touches)),
            "refused": sorted(map(repr, found.refused)), "commits": {c.commit for c in found.commits}}  # fmt: skip


@given(cuts=st.sets(st.integers(min_value=1, max_value=len(SCRIPT) - 1), max_size=8))
@examples(max_examples=150, deadline=None)
def test_extracting_from_the_kept_context_finds_what_one_run_over_the_whole_thread_finds(cuts: set[int]) -> None:
    events = _events(SCRIPT)
    whole = memory.extract(events, "default")
    kept: list[Envelope] = []
    pieces = memory.Extraction()
    bounds = [0, *sorted(cuts), len(events)]
    for lo, hi in zip(bounds, bounds[1:]):
        run = kept + events[lo:hi]
        found = memory.extract(run, "default", len(kept))
        for name in ("candidates", "revocations", "file_touches", "refused", "commits"):
            getattr(pieces, name).extend(getattr(found, name))
        kept = [run[i] for i in context(run)]
    assert _all(pieces) == _all(whole)
    assert len(whole.candidates) >= 8  # the script does find what it plants


def test_the_context_kept_is_the_few_events_later_ones_lean_on_not_the_thread() -> None:
    events = _events(SCRIPT + [_say(f"x{i}", f"line {i}", 30 + i) for i in range(200)])
    kept = {events[i].event_id for i in context(events)}
    # Every call (a result may come for any), the request, the last message, the commit's setter.
    assert kept == {"g1", "j1", "l1", "n1", "q1", "x199", "m2"}


def _publish(settings: Settings, records: list[bytes]) -> None:
    pub = LocalPublisher(settings)
    pub.publish(b"\n".join(records))
    pub.close()


def _view(job: Memory) -> list[dict[str, Any]]:
    job.consolidate()
    return sorted((f for f in job.show()["facts"]), key=lambda f: f["key"])


def test_a_run_after_n_new_events_parses_only_those_n_and_publishes_what_one_whole_run_publishes(tmp_path: Path) -> None:
    resumed, whole = Settings(data_dir=tmp_path / "resumed"), Settings(data_dir=tmp_path / "whole")
    job = Memory(resumed)
    parsed = []
    try:
        for lo, hi in ((0, 5), (5, 9), (9, 14), (14, len(SCRIPT))):
            # A copy of an event the thread already holds comes again: counted once, as a whole run counts it.
            _publish(resumed, SCRIPT[lo:hi] + ([SCRIPT[1]] if lo else []))
            report = job.extract()
            assert report.failed == {}, report.failed
            parsed.append(report.parsed)
        assert job.extract().parsed == 0  # nothing new: nothing read
        resumed_view = _view(job)
    finally:
        job.close()
    assert parsed == [5, 5, 6, 7]  # each run's new records (and the repeated copy), never the thread again
    _publish(whole, SCRIPT + [SCRIPT[1]] * 3)
    job = Memory(whole)
    try:
        assert job.extract().parsed == len(SCRIPT) + 3
        whole_view = _view(job)
    finally:
        job.close()
    for f in resumed_view + whole_view:
        f.pop("note", None)
    assert resumed_view == whole_view
    assert {f["key"] for f in whole_view} >= {"deploy.branch", "java.version", "region", "cache.ttl"}


def test_a_revoke_after_resumed_runs_and_a_fresh_memory_from_the_same_events_still_work(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data")
    job = Memory(settings)
    try:
        _publish(settings, SCRIPT[:10])
        job.extract()
        _publish(settings, SCRIPT[10:])
        job.extract()
        before = {f["key"]: f["value"] for f in _view(job)}
        assert before["deploy.branch"] == "release-7"
        job.revoke("m1", "moved to release-8")
        assert job.extract().parsed == 1  # the revoke event only
        after = {f["key"]: (f["status"], f["value"]) for f in _view(job)}
        assert "deploy.branch" not in after and after["java.version"] == ("ok", "21.0.2")  # its only source withdrawn
    finally:
        job.close()
    # Memory rebuilt from the events alone (its file gone): read from the start, the same view.
    (settings.data_dir / "memory.db").unlink()
    again = Memory(settings)
    try:
        assert again.extract().parsed == len(SCRIPT) + 1
        rebuilt = {f["key"]: (f["status"], f["value"]) for f in _view(again)}
    finally:
        again.close()
    assert rebuilt == after


def test_the_context_kept_for_the_next_run_holds_no_secret_and_a_confirmed_secret_is_still_refused(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "d")
    secret = "Tr0ub4dor-x9Q"
    job = Memory(settings)
    try:
        _publish(settings, [
            _call("c1", "k1", f"mysql -uroot -p{secret} prod", 0),
            raw("q1", "approval_request", {"approval_id": "a1", "action": f"deploy with DB_PASSWORD={secret}"}, 1),
            _say("a1", f"The staging db password is {secret}.", 2, role="assistant"),
        ])  # fmt: skip
        job.extract()
        # The next run confirms the claim it finds only in the kept (redacted) context.
        _publish(settings, [_say("u1", "Yes, remember that.", 3), _result("r1", "k1", "ok", 4),
                            raw("d1", "approval_decision", {"approval_id": "a1", "decision": "approved", "by": "user"}, 5)])  # fmt: skip
        job.extract()
        facts = _view(job)
    finally:
        job.close()
    stored = b"".join(p.read_bytes() for p in settings.data_dir.rglob("memory*") if p.is_file())
    assert stored and secret.encode() not in stored
    assert [f["key"] for f in facts] == ["approval.deploy_with_db_password_redacted"]


def test_a_context_kept_in_clear_by_an_older_version_is_redacted_by_the_next_extraction_run(tmp_path: Path) -> None:
    import sqlite3  # noqa: PLC0415

    settings = Settings(data_dir=tmp_path / "d")
    secret = "Tr0ub4dor-x9Q"
    job = Memory(settings)
    try:
        # A record longer than a page: its old overflow pages are freed, not rewritten, and
        # only secure_delete overwrites them (without it the secret stays on disk).
        _publish(settings, [_call("c1", "k1", "echo " + "x " * 6000 + f"; mysql -uroot -p{secret} prod", 0)])
        job.extract()
    finally:
        job.close()
    memory_db = next(p for p in settings.data_dir.rglob("memory*.db") if p.is_file())
    with sqlite3.connect(memory_db) as db:  # as a version before redaction left it: the record in clear
        (records,) = db.execute("SELECT records FROM extraction_context").fetchone()
        clear = orjson.loads(records)
        clear[0] = clear[0].replace("[REDACTED]", secret)
        db.execute("UPDATE extraction_context SET records = ?", (orjson.dumps(clear),))
        db.execute("PRAGMA user_version = 0")
    assert secret.encode() in b"".join(p.read_bytes() for p in settings.data_dir.rglob("memory*") if p.is_file())
    again = Memory(settings)
    try:
        again.extract()  # no new event in the thread: its context is rewritten all the same
    finally:
        again.close()
    with sqlite3.connect(memory_db) as db:
        (records,) = db.execute("SELECT records FROM extraction_context").fetchone()
    records = "".join(orjson.loads(records))
    assert secret not in records and "[REDACTED]" in records and '"call_id":"k1"' in records
    assert secret.encode() not in b"".join(p.read_bytes() for p in settings.data_dir.rglob("memory*") if p.is_file())


def test_a_damaged_kept_context_is_dropped_by_the_rewrite_and_blocks_no_other_thread(tmp_path: Path) -> None:
    import sqlite3  # noqa: PLC0415

    settings = Settings(data_dir=tmp_path / "d")
    job = Memory(settings)
    try:
        _publish(settings, [_call("c1", "k1", "make build", 0), _call("c2", "k2", "make test", 1, thread_id="t2")])
        job.extract()
    finally:
        job.close()
    memory_db = next(p for p in settings.data_dir.rglob("memory*.db") if p.is_file())
    with sqlite3.connect(memory_db) as db:
        threads = [t for (t,) in db.execute("SELECT thread_id FROM extraction_context ORDER BY thread_id")]
        assert len(threads) == 2
        for damaged, thread in zip(('["not json {", 5]', "[[1]]"), threads):  # neither a context this store wrote
            db.execute("UPDATE extraction_context SET records = ? WHERE thread_id = ?", (damaged, thread))
        db.execute("INSERT INTO extraction_context SELECT 'bad', upto, 'garbage' FROM extraction_context LIMIT 1")
        db.execute("PRAGMA user_version = 0")
    again = Memory(settings)
    try:
        again.extract()  # runs: the damaged rows are dropped, not a failure of every run
        _publish(settings, [_call("c3", "k3", "make lint", 2)])
        again.extract()
    finally:
        again.close()
    with sqlite3.connect(memory_db) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] >= 1
        kept = dict(db.execute("SELECT thread_id, records FROM extraction_context").fetchall())
    assert "bad" not in kept and all(isinstance(r, str) for r in orjson.loads(kept["t1"]))
