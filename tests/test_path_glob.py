"""A fact's ``recheck_when`` glob against later file changes: ``fnmatch``'s answers, at a
cost bounded whatever the publisher sent (it was the path's length times the glob's, on
every consolidation, for every pair)."""

from __future__ import annotations

import fnmatch
import time

from hypothesis import given
from hypothesis import settings as examples
from hypothesis import strategies as st

from agentlog.processors.path_glob import MAX_GLOB_CHARS, MAX_PATH_CHARS, glob_matches
from agentlog.streams.config import Settings
from agentlog.streams.memory.jobs import Memory
from tests.helpers import raw
from tests.test_memory import fact, mem, publish  # noqa: F401 - the memory jobs of the test's data directory

paths = st.lists(st.sampled_from(["a", "b", "/", ".", "ab", "src/", ".py", "*", "?"]), max_size=12).map("".join)
globs = st.lists(st.sampled_from(["a", "b", "/", ".", "*", "**", "?", "[ab]", "[!a]", "src/", ".py"]),
                 max_size=10).map("".join)  # fmt: skip


@examples(max_examples=3_000, deadline=None)
@given(paths, globs)
def test_a_glob_matches_exactly_the_paths_fnmatch_matches(path: str, glob: str) -> None:
    assert glob_matches(path, glob) == fnmatch.fnmatchcase(path, glob)


def test_a_star_glob_crosses_directories_as_fnmatch_does() -> None:
    assert glob_matches("src/app/main.py", "src/*.py") and glob_matches("build.gradle.kts", "build.*")
    assert not glob_matches("src/app/main.py", "*.js") and not glob_matches("build", "build.*")


def test_a_path_or_glob_longer_than_any_real_one_matches_nothing() -> None:
    assert glob_matches("a" * MAX_PATH_CHARS, "*") and not glob_matches("a" * (MAX_PATH_CHARS + 1), "*")
    assert not glob_matches("a", "*" * (MAX_GLOB_CHARS + 1))


def test_the_longest_path_against_the_longest_hostile_glob_costs_milliseconds() -> None:
    started = time.perf_counter()
    for glob in ("*" + "a" * (MAX_GLOB_CHARS - 2) + "b", "*" + "?" * (MAX_GLOB_CHARS - 2) + "b",
                 "*a" * (MAX_GLOB_CHARS // 2)):  # fmt: skip
        glob_matches("a" * MAX_PATH_CHARS, glob)
    assert time.perf_counter() - started < 1.0


def test_consolidating_a_hostile_recheck_glob_against_a_hostile_path_ends_at_once(settings: Settings,
                                                                                  mem: Memory) -> None:  # noqa: F811 # fmt: skip
    # 200,000 characters of path against a 100,000-character glob: about a minute before.
    publish(settings, fact("f1", "build.tool", "gradle", "tool_observed", 0,
                           recheck_when={"path": "*" + "a" * 100_000 + "b"}))  # fmt: skip
    publish(settings, raw("fc", "file_change", {"path": "a" * 200_000, "change": "modified"}, 10, project="svc"))
    mem.extract()
    started = time.perf_counter()
    mem.consolidate()
    assert time.perf_counter() - started < 3.0
    assert mem.show("svc")["facts"][0]["status"] == "ok"  # no real path changed


def test_a_listed_file_whose_path_holds_glob_or_json_characters_is_rechecked_by_that_path_alone(
    settings: Settings, mem: Memory,  # noqa: F811
) -> None:  # fmt: skip
    # The condition was built by pasting the path into JSON text: a '"' broke it, and a
    # listed directory's '*' or '[' read as a glob that other paths matched.
    def listing(eid: str, directory: str, t: float) -> list[bytes]:
        return [raw(f"{eid}c", "tool_call", {"call_id": eid, "tool_name": "bash",
                                             "arguments": {"command": f"ls {directory}"}}, t, project="svc"),
                raw(eid, "tool_result", {"call_id": eid, "output": "app.yaml\n", "status": "ok", "exit_code": 0},
                    t + 1, project="svc")]  # fmt: skip

    publish(settings, *listing("l1", "'we\"ird[1]'", 0), *listing("l2", "'a*b'", 2))
    mem.extract()
    mem.consolidate()
    status = lambda: {f["key"]: f["status"] for f in mem.show("svc")["facts"]}  # noqa: E731
    assert status() == {'file.we"ird[1]/app.yaml': "ok", "file.a*b/app.yaml": "ok"}
    publish(settings, raw("fc1", "file_change", {"path": "weird1/app.yaml", "change": "modified"}, 10, project="svc"),
            raw("fc2", "file_change", {"path": "a-other-b/app.yaml", "change": "modified"}, 11, project="svc"))  # fmt: skip
    mem.extract()
    mem.consolidate()
    assert status() == {'file.we"ird[1]/app.yaml': "ok", "file.a*b/app.yaml": "ok"}  # other files: no recheck
    publish(settings, raw("fc3", "file_change", {"path": 'we"ird[1]/app.yaml', "change": "modified"}, 12,
                          project="svc"))  # fmt: skip
    mem.extract()
    mem.consolidate()
    assert status()['file.we"ird[1]/app.yaml'] == "needs_refresh"
