"""The data directory heals what is derived and names what is not (issue 12): each store
damaged by hand, then an ordinary command, as a user would meet it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from agentlog.sinks import sqlite_db
from agentlog.streams.cli.demo import synthetic_events
from agentlog.streams.embedded.datadir import CorruptStore, open_sqlite
from tests.test_e2e_embedded import agentlog

EVENTS = 3_000


@pytest.fixture
def filled(cli_env: dict[str, str], tmp_path: Path) -> tuple[dict[str, str], Path, dict]:
    events = tmp_path / "events.jsonl"
    events.write_bytes(b"\n".join(synthetic_events(EVENTS, 20)) + b"\n{not json")
    agentlog(cli_env, "publish", str(events))
    agentlog(cli_env, "run", "--until-idle")
    state = orjson.loads(agentlog(cli_env, "state", "--json", "bench-00003").stdout)
    return cli_env, Path(cli_env["AGENTLOG_DATA_DIR"]), state


def _sql(env: dict[str, str], query: str) -> list[str]:
    return agentlog(env, "sql", "--format", "csv", query).stdout.decode().splitlines()[1:]


def test_a_corrupt_state_db_is_moved_aside_and_rebuilt_from_the_topic_with_a_one_line_notice(filled) -> None:
    env, data, state = filled
    (data / "state.db").write_bytes(b"not a database" * 1000)
    proc = agentlog(env, "state", "--json", "bench-00003")
    assert orjson.loads(proc.stdout) == state
    notice = proc.stderr.decode()
    assert "agentlog: state.db was corrupt (not a SQLite database; moved to state.db.corrupt-" in notice
    assert f"rebuilt from the topic ({EVENTS + 1:,} records)" in notice and "Traceback" not in notice
    assert [p for p in data.iterdir() if p.name.startswith("state.db.corrupt-")]


def test_a_deleted_log_is_logged_again_from_the_topic_so_sql_never_answers_zero_events(filled) -> None:
    env, data, _state = filled
    shutil.rmtree(data / "log")
    assert _sql(env, "SELECT count(), uniqExact(event_id) FROM events") == [f"{EVENTS},{EVENTS}"]
    assert _sql(env, "SELECT count() FROM rejected_events") == ["1"]  # dead letters come back too
    assert _sql(env, "SELECT count() > 0 FROM tool_calls") == ["1"]


def test_a_deleted_index_is_rebuilt_so_search_finds_the_events_again(filled) -> None:
    env, data, _state = filled
    shutil.rmtree(data / "index")
    hits = orjson.loads(agentlog(env, "search", "--json", "module", "--limit", "5").stdout)["hits"]
    assert len(hits) == 5 and {h["source"] for h in hits} == {"index"}


def test_a_corrupt_or_truncated_topic_is_a_clear_error_naming_the_file_and_what_to_do(filled) -> None:
    env, data, _state = filled
    topic = data / "topic.db"
    original = topic.read_bytes()
    for damage in (lambda: os.truncate(topic, len(original) // 2), lambda: topic.write_bytes(b"garbage" * 999),
                   lambda: topic.write_bytes(b"")):  # fmt: skip
        topic.write_bytes(original)
        damage()
        proc = agentlog(env, "state", "bench-00003", check=False)
        message = proc.stderr.decode()
        assert proc.returncode == 1 and "Traceback" not in message, message
        assert str(topic) in message and "restore" in message and "backup" in message, message


def test_a_corrupt_memory_db_is_a_clear_error_saying_how_to_extract_memory_again(filled) -> None:
    env, data, _state = filled
    agentlog(env, "memory", "status")
    (data / "memory.db").write_bytes(b"\0garbage" * 500)
    proc = agentlog(env, "memory", "status", check=False)
    message = proc.stderr.decode()
    assert proc.returncode == 1 and "Traceback" not in message, message
    assert str(data / "memory.db") in message and "memory extract" in message, message


def test_sql_piped_into_head_ends_quietly_without_a_broken_pipe_error(filled) -> None:
    env, _data, _state = filled
    proc = subprocess.run(f'"{sys.executable}" -m agentlog sql "SELECT event_id FROM events" | head -2',
                          shell=True, env=env, capture_output=True, timeout=300)  # fmt: skip
    assert len(proc.stdout.splitlines()) == 2
    assert b"Broken pipe" not in proc.stderr and b"Traceback" not in proc.stderr, proc.stderr


def _log_one_event(data: Path, on_open: Callable[[], bool] = lambda: True) -> None:
    """Open the service on ``data`` (``on_open`` holds then), log one event, and read it back."""
    from agentlog.streams.config import Settings  # noqa: PLC0415
    from agentlog.streams.embedded.service import EmbeddedService  # noqa: PLC0415

    service = EmbeddedService(Settings(data_dir=data))
    try:
        assert on_open()
        service.publish(orjson.dumps({"event_id": "e1", "thread_id": "t1", "kind": "goal",
                                      "ts": "2026-01-01T00:00:00Z", "payload": {"text": "g"}}))  # fmt: skip
        service.catch_up()
        assert service.sql("SELECT count() FROM events").rows == [(1,)]
    finally:
        service.close()


def test_the_logs_insert_files_stay_inside_the_data_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """chDB inserts pass event bodies through temporary files: they are made in the data
    directory, never in the machine's /tmp; one left by a process killed mid-insert is gone
    at the next open; and the process's own temporary folder is left as it was."""
    import tempfile  # noqa: PLC0415

    data = tmp_path / "data"
    (data / "tmp-inserts").mkdir(parents=True)
    (data / "tmp-inserts" / "tmpleft.raw").write_text('{"event_id": "left by a kill -9"}')
    made_in: list[str] = []
    real = tempfile.NamedTemporaryFile

    def spy(*args, **kwargs):  # the real function, noting where it puts the file
        made_in.append(str(Path(tempfile.gettempdir()).resolve()))
        return real(*args, **kwargs)

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", spy)
    before = tempfile.gettempdir()
    _log_one_event(data, lambda: not (data / "tmp-inserts" / "tmpleft.raw").exists())
    assert made_in and set(made_in) == {str((data / "tmp-inserts").resolve())}
    assert tempfile.gettempdir() == before


def test_checking_a_store_this_process_holds_open_keeps_its_wal_when_another_process_closes(tmp_path: Path) -> None:
    # `agentlog memory ...` beside `agentlog run`: the server reopened memory.db while it held
    # it, read its header raw (dropping its SQLite locks), and the command's exit then deleted
    # the WAL under the server, whose memory runner failed with "disk I/O error" ever after.
    path = tmp_path / "memory.db"
    held = open_sqlite(path, lambda p: sqlite_db.connect(p, timeout=5), lambda p: "")
    held.execute("CREATE TABLE t (x)")
    held.execute("INSERT INTO t VALUES (1)")
    again = open_sqlite(path, lambda p: sqlite_db.connect(p, timeout=5), lambda p: "")
    other = "import sqlite3, sys; db = sqlite3.connect(sys.argv[1]); db.execute('SELECT count(*) FROM t'); db.close()"
    subprocess.run([sys.executable, "-c", other, str(path)], check=True, timeout=60)
    assert path.with_name("memory.db-wal").exists() and path.with_name("memory.db-shm").exists()
    held.execute("INSERT INTO t VALUES (2)")
    assert again.execute("SELECT count(*) FROM t").fetchone() == (2,)
    held.close()
    again.close()
    path.write_bytes(b"not a database at all" * 10)
    with pytest.raises(CorruptStore):  # closed connections do not hide a damaged file
        open_sqlite(path, lambda p: sqlite_db.connect(p, timeout=5), lambda p: "")


def _files(data: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(data)): (p.stat().st_size, p.stat().st_mtime_ns) for p in data.rglob("*") if p.is_file()}


def test_reads_without_a_server_write_no_file_of_the_data_directory(filled) -> None:
    """SPEC §4: a context request is a read. Opening the log used to rewrite two tables'
    metadata files (a column declared since the first release, added again each time)."""
    env, data, _state = filled
    before = _files(data)
    for command in (["state", "--json", "bench-00003"], ["context", "--json", "bench-00003", "--budget", "2000"],
                    ["sql", "SELECT count() FROM events"], ["search", "--json", "module"], ["threads", "--json"]):  # fmt: skip
        agentlog(env, *command)
    after = _files(data)
    assert {k: (before.get(k), v) for k, v in after.items() if before.get(k) != v} == {}
    assert set(before) == set(after)


@pytest.mark.parametrize("odd", ["link", "file", "folder inside"])
def test_an_odd_insert_folder_is_replaced_never_followed_so_no_file_outside_the_data_directory_is_touched(
        tmp_path: Path, odd: str) -> None:  # fmt: skip
    """The log's insert folder is its own: a symbolic link standing at its name (or a file)
    is replaced, the folder it points at keeps its ``tmp*`` files and gets no insert; a
    ``tmp*`` folder inside it no longer stops every command with a bare errno."""

    data, outside = tmp_path / "data", tmp_path / "outside"
    outside.mkdir()
    (outside / "tmpIMPORTANT.txt").write_text("keep me")
    data.mkdir()
    inserts = data / "tmp-inserts"
    if odd == "link":
        inserts.symlink_to(outside, target_is_directory=True)
    elif odd == "file":
        inserts.write_text("not a folder")
    else:
        (inserts / "tmpdir").mkdir(parents=True)
    _log_one_event(data)
    assert inserts.is_dir() and not inserts.is_symlink()
    assert [p.name for p in outside.iterdir()] == ["tmpIMPORTANT.txt"]


def test_a_query_of_a_data_directory_that_does_not_exist_answers_as_an_empty_one_and_creates_nothing(
        cli_env: dict[str, str], tmp_path: Path) -> None:  # fmt: skip
    """A read never writes: a mistyped AGENTLOG_DATA_DIR used to be created (stores and all)
    by the first query; the answers, and the refusals of bad arguments, are an empty one's."""
    empty, missing = tmp_path / "empty", tmp_path / "not" / "there"
    agentlog({**cli_env, "AGENTLOG_DATA_DIR": str(empty)}, "threads", "--json")  # an existing, empty one
    for command in (["threads", "--json"], ["state", "--json", "t1"], ["context", "--json", "t1", "--budget", "500"],
                    ["search", "--json", "anything"], ["search", "--json", "x", "--limit", "2000000000"],
                    ["read", "--json", "e1"], ["sql", "--format", "csv", "SELECT count() FROM events"],
                    ["memory", "show", "--json"], ["memory", "status", "--json"]):  # fmt: skip
        there = agentlog({**cli_env, "AGENTLOG_DATA_DIR": str(empty)}, *command, check=False)
        here = agentlog({**cli_env, "AGENTLOG_DATA_DIR": str(missing)}, *command, check=False)
        assert not missing.exists() and not missing.parent.exists(), command
        assert (here.returncode, here.stdout) == (there.returncode, there.stdout), command
        assert b"does not exist" in here.stderr and b"AGENTLOG_DATA_DIR" in here.stderr
