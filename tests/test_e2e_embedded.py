"""End to end on the embedded default, through the `agentlog` command as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx

from tests.helpers import raw


def agentlog(env: dict[str, str], *args: str, stdin: bytes | None = None, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "agentlog", *args], env=env, input=stdin,
                          capture_output=True, timeout=300)  # fmt: skip
    if check and proc.returncode != 0:
        raise AssertionError(f"agentlog {args} failed: {proc.stderr.decode()}")
    return proc


def session() -> list[bytes]:
    return [
        raw("e1", "goal", {"text": "fix the flaky login test"}, 0),
        raw("e2", "constraint", {"constraint_id": "ro", "text": "read-only database"}, 1),
        raw("e3", "message", {"role": "user", "text": "please look at the login failure"}, 2),
        raw("e4", "tool_call", {"call_id": "c1", "tool_name": "pytest", "arguments": {"k": "login"}}, 3, turn_id="T1"),
        raw("e5", "tool_result", {"call_id": "c1", "output": "AssertionError in test_login_redirect", "status": "error"}, 5, turn_id="T1"),
        raw("e5", "tool_result", {"call_id": "c1", "output": "AssertionError in test_login_redirect", "status": "error"}, 5, turn_id="T1"),
        raw("e6", "tool_result", {"call_id": "ghost", "output": "who called me"}, 6, turn_id="T1"),
        raw("e7", "tool_call", {"call_id": "c2", "tool_name": "grep", "arguments": {"path": "src/auth.py"}}, 7, turn_id="T1"),
        raw("e8", "turn_end", {}, 8, turn_id="T1"),
        raw("e9", "tool_result", {"call_id": "c2", "output": "src/auth.py:12 redirect_url"}, 9, turn_id="T1"),
        raw("e10", "file_change", {"path": "src/auth.py", "change": "modified"}, 10),
        b"{this is not json",
        raw("e11", "message", {"role": "user", "text": "x"}, 11, kind_extra=1)[:-1] + b',"payload":5}',
    ]


def test_publish_run_then_state_search_read_and_sql_give_the_right_answers(cli_env: dict[str, str], tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"\n".join(session()) + b"\n")
    report = json.loads(agentlog(cli_env, "publish", str(path), "--json").stdout)
    assert (report["accepted"], report["rejected"]) == (11, 2)
    agentlog(cli_env, "run", "--until-idle")

    state = json.loads(agentlog(cli_env, "state", "t1", "--json").stdout)
    assert state["goal"]["text"] == "fix the flaky login test"
    assert [c["text"] for c in state["constraints"]] == ["read-only database"]
    assert state["files"][0]["path"] == "src/auth.py" and state["pending_calls"] == []
    assert state["event_count"] == 10

    rows = json.loads(agentlog(cli_env, "sql", "SELECT call_id, status, synthetic, result_event_id FROM tool_calls FINAL "
                                              "ORDER BY call_id, orphan_event_id", "--format", "json").stdout)  # fmt: skip
    assert [(r["call_id"], r["status"], r["synthetic"], r["result_event_id"]) for r in rows] == [
        ("c1", "error", False, "e5"), ("c2", "ok", False, "e9"), ("ghost", "orphan", False, "e6")]
    counts = json.loads(agentlog(cli_env, "sql", "SELECT count() AS n, uniqExact(event_id) AS d FROM events", "--json").stdout)
    assert counts == [{"n": 10, "d": 10}]
    rejected = json.loads(agentlog(cli_env, "sql", "SELECT reason FROM rejected_events", "--json").stdout)
    assert len(rejected) == 2

    hits = json.loads(agentlog(cli_env, "search", "AssertionError login", "--json").stdout)["hits"]
    assert hits[0]["event_id"] == "e5" and hits[0]["source"] == "index"
    first = hits[0]
    assert (first["kind"], first["status"], first["exit_code"], first["role"]) == ("tool_result", "error", None, "")
    said = agentlog(cli_env, "search", "AssertionError login").stdout.decode()
    assert " e5 t1 tool_result(error) pytest " in said  # the text output says what failed
    assert all(h["thread_id"] == "t1" for h in hits)
    tool_hits = json.loads(agentlog(cli_env, "search", "src", "--tool", "grep", "--json").stdout)["hits"]
    assert {h["event_id"] for h in tool_hits} == {"e7", "e9"}
    late = json.loads(agentlog(cli_env, "search", "src", "--since", "2026-01-01T12:00:08Z", "--json").stdout)["hits"]
    early = json.loads(agentlog(cli_env, "search", "src", "--until", "2026-01-01T13:00:07+01:00", "--json").stdout)["hits"]
    assert {h["event_id"] for h in late} == {"e9", "e10"} and [h["event_id"] for h in early] == ["e7"]
    bad = agentlog(cli_env, "search", "src", "--since", "yesterday", check=False)
    assert bad.returncode == 1 and b"RFC 3339" in bad.stderr

    read = json.loads(agentlog(cli_env, "read", "e5", "--json").stdout)
    assert read["event"]["payload"]["output"] == "AssertionError in test_login_redirect"
    assert read["source"] == "log"
    missing = agentlog(cli_env, "read", "nope", check=False)
    assert missing.returncode == 1 and b"never accepted" in missing.stderr

    text = agentlog(cli_env, "context", "t1", "--budget", "4000").stdout.decode()
    # A tool call reads as one: its id, tool and arguments, not the request's JSON list.
    assert '--- assistant\ncall c1: pytest {"k":"login"}\n--- tool c1\n' in text and '"function"' not in text

    rebuilt = json.loads(agentlog(cli_env, "rebuild", "--json").stdout)
    assert rebuilt["events"] == 10
    assert json.loads(agentlog(cli_env, "state", "t1", "--json").stdout) == state


def test_sql_is_read_only(cli_env: dict[str, str]) -> None:
    agentlog(cli_env, "publish", "-", stdin=raw("e1", "goal", {"text": "g"}))
    proc = agentlog(cli_env, "sql", "DROP TABLE events", check=False)
    assert proc.returncode == 1 and b"only one read-only select" in proc.stderr.lower()
    assert json.loads(agentlog(cli_env, "sql", "SELECT count() AS n FROM events", "--json").stdout) == [{"n": 1}]


NDJSON = {"Content-Type": "application/x-ndjson"}




def test_while_run_serves_other_commands_go_through_its_http_api_without_lock_errors(server) -> None:
    url, env = server
    agentlog(env, "publish", "-", stdin=raw("s1", "goal", {"text": "served goal"}, thread="srv"))
    state = json.loads(agentlog(env, "state", "srv", "--json").stdout)
    assert state["goal"]["text"] == "served goal"
    rows = json.loads(agentlog(env, "sql", "SELECT count() AS n FROM events", "--json").stdout)
    assert rows == [{"n": 1}]
    assert httpx.get(f"{url}/metrics").text.count("agentlog_events_applied_total") >= 1
    second = agentlog({**env, "AGENTLOG_HTTP_PORT": "1"}, "run", check=False)  # the directory is taken
    assert second.returncode == 1 and f"already served at {url}".encode() in second.stderr


def test_read_your_writes_a_search_naming_the_last_event_never_misses_it(server) -> None:
    url, _env = server
    # The index refreshes every 30 s here, so each fresh write must come from active state.
    sources = set()
    for i in range(25):
        eid = f"w{i}"
        body = raw(eid, "message", {"role": "assistant", "text": f"kiwi observation {i}"}, i, thread="ryw")
        report = httpx.post(f"{url}/events", content=body, headers=NDJSON).json()
        assert report["accepted"] == 1
        hits = httpx.get(f"{url}/search", params={"q": "kiwi", "after": eid, "limit": 50}).json()["hits"]
        found = {h["event_id"]: h["source"] for h in hits}
        assert eid in found, f"search after {eid} missed it"
        sources.add(found[eid])
        read = httpx.get(f"{url}/events/{eid}").json()
        assert read["event"]["event_id"] == eid
    assert "active" in sources
    windowed = httpx.get(f"{url}/search", params={"q": "kiwi", "thread": "ryw", "limit": 50,
                                                  "since": "2026-01-01T12:00:20Z", "until": "2026-01-01T12:00:22Z"})  # fmt: skip
    assert sorted(h["event_id"] for h in windowed.json()["hits"]) == ["w20", "w21", "w22"]
    assert httpx.get(f"{url}/search", params={"q": "kiwi", "since": "soon"}).status_code == 400


def test_health_and_state_routes(server) -> None:
    url, _env = server
    httpx.post(f"{url}/events", content=raw("h1", "task", {"task_id": "t", "status": "running"}, thread="h"),
               headers=NDJSON)
    assert httpx.get(f"{url}/healthz").json()["status"] == "ok"
    assert httpx.get(f"{url}/threads/h/state").json()["tasks"][0]["status"] == "running"
    assert httpx.get(f"{url}/threads/nobody/state").status_code == 404


def test_memory_over_http_extract_consolidate_show_revoke_and_status(server) -> None:
    url, _env = server
    fact = raw("f1", "fact", {"key": "java.version", "value": "17", "evidence_type": "user_confirmed",
                              "confirmed": True}, 0, thread="mem", project="svc")  # fmt: skip
    httpx.post(f"{url}/events", content=fact, headers=NDJSON)
    assert httpx.post(f"{url}/memory/extract", json={}).json()["extracted_threads"] == ["mem"]
    assert httpx.post(f"{url}/memory/consolidate", json={}).json()["published"] is True
    facts = httpx.get(f"{url}/memory", params={"project": "svc"}).json()["facts"]
    assert [(f["key"], f["value"], f["source_event_id"]) for f in facts] == [("java.version", "17", "f1")]
    assert httpx.get(f"{url}/memory", params={"project": "other"}).json()["facts"] == []
    assert httpx.post(f"{url}/memory/revoke", json={"event_id": "f1"}).json()["revoked"] == "f1"
    assert httpx.post(f"{url}/memory/revoke", json={"event_id": "nope"}).status_code == 404
    # The revoke rebuilt the view at once: its only source withdrawn, the fact is gone.
    assert httpx.get(f"{url}/memory/status").json()["published_version"] == 2
    assert httpx.get(f"{url}/memory", params={"project": "svc"}).json()["facts"] == []


def test_verbose_logs_name_the_thread_and_event_of_every_applied_event_and_of_a_duplicate(
        cli_env: dict[str, str], tmp_path: Path) -> None:  # fmt: skip
    """`agentlog -v` says it logs what happens per thread and event: each applied event is
    one line naming both; a duplicate id ignored too. Without -v, none of them."""
    events = tmp_path / "events.jsonl"
    events.write_bytes(b"\n".join(session()) + b"\n")  # e5 comes twice
    agentlog(cli_env, "publish", str(events))
    quiet = agentlog(cli_env, "run", "--until-idle").stderr.decode()
    assert "applied thread=" not in quiet
    agentlog(cli_env, "publish", str(events))  # every id again: duplicates of applied events
    verbose = agentlog(cli_env, "-v", "run", "--until-idle").stderr.decode()
    assert "duplicate thread=t1 event=e1 " in verbose, verbose[-2000:]
    fresh = {**cli_env, "AGENTLOG_DATA_DIR": str(tmp_path / "fresh")}
    agentlog(fresh, "publish", str(events))
    applied = agentlog(fresh, "-v", "run", "--until-idle").stderr.decode()
    ids = [line.split("event=")[1].split()[0] for line in applied.splitlines() if "applied thread=t1 " in line]
    assert ids == [f"e{i}" for i in range(1, 11)]  # in topic order, once each (e11 was rejected)
    assert "duplicate thread=t1 event=e5 " in applied


def test_text_output_writes_out_control_and_direction_characters_a_terminal_would_obey(cli_env: dict[str, str], tmp_path: Path) -> None:
    # Anyone's text (a goal, a tool's output, a fact's key) reaches the terminal: an escape
    # sequence there could clear the screen or retitle the window, \u202e reorder the line.
    hostile = "evil\x1b]0;pwned\x07\x1b[2J\rover\u202eright\x9bend"
    events = [raw("h1", "goal", {"text": hostile}, 0, thread="th"),
              raw("h2", "fact", {"key": "k\x1b[31m", "value": hostile, "evidence_type": "user_confirmed",
                                 "confirmed": True}, 1, thread="th")]  # fmt: skip
    path = tmp_path / "h.jsonl"
    path.write_bytes(b"\n".join(events) + b"\n")
    agentlog(cli_env, "publish", str(path))
    agentlog(cli_env, "run", "--until-idle")
    agentlog(cli_env, "memory", "extract")
    agentlog(cli_env, "memory", "consolidate")
    outputs = {
        "state": agentlog(cli_env, "state", "th").stdout.decode(),
        "search": agentlog(cli_env, "search", "evil").stdout.decode(),
        "sql": agentlog(cli_env, "sql", "SELECT payload FROM events WHERE event_id = 'h1'").stdout.decode(),
        "memory": agentlog(cli_env, "memory", "show").stdout.decode(),
        "not found": agentlog(cli_env, "state", "no\x1b[2Jsuch", check=False).stderr.decode(),
    }
    for name, out in outputs.items():
        assert not any(c in out for c in "\x1b\x07\r\x9b\u202e"), (name, out)
    assert "\\u001b[2J" in outputs["state"] and "\\u202e" in outputs["state"]
    # A provider payload printed as text is still JSON a program can load.
    payload = agentlog(cli_env, "context", "th", "--budget", "3000", "--format", "openai").stdout.decode()
    assert "\x9b" not in payload and "\u202e" not in payload and json.loads(payload)["messages"]
    assert json.loads(agentlog(cli_env, "state", "th", "--json").stdout)["goal"]["text"] == hostile  # JSON keeps it exact


def test_memory_commands_answer_people_in_sentences_and_machines_with_json(cli_env: dict[str, str], tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_bytes(raw("f1", "fact", {"key": "db.host", "value": "pg-1", "evidence_type": "user_confirmed",
                                        "confirmed": True}, 0, thread="tm") + b"\n")  # fmt: skip
    agentlog(cli_env, "publish", str(path))
    said = agentlog(cli_env, "memory", "extract").stdout.decode()
    assert said.startswith("extracted 1 thread: 1 candidate, 0 refused"), said
    assert agentlog(cli_env, "memory", "consolidate").stdout.decode() == "published memory view version 1: 1 fact\n"
    assert agentlog(cli_env, "memory", "consolidate").stdout.decode() == "nothing published: no change (view version 1 stays)\n"
    status = agentlog(cli_env, "memory", "status").stdout.decode()
    assert status.startswith("memory view version 1; 1 thread, 0 with events not extracted yet") and "lease: free" in status
    revoked = agentlog(cli_env, "memory", "revoke", "f1", "--reason", "wrong host").stdout.decode()
    assert revoked.startswith("revoked f1 (") and "published memory view version 2: 0 facts" in revoked
    assert json.loads(agentlog(cli_env, "memory", "status", "--json").stdout)["published_version"] == 2
