"""A child of the server's (its sink process, an encoding helper) ends with its parent
without a Traceback, whenever the parent is killed: even in the instant between the
child's start and the data it starts on (``agentlog.streams.embedded.parent_death``)."""

from __future__ import annotations

import errno
import gc
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import resource_tracker
from pathlib import Path

import pytest

from agentlog.streams.embedded.parent_death import _written_ahead, spawn_context

# The parent is killed right after the child exists, before anything else it would do:
# the moment spawn's own start writes the child its data. The child's work, were it to
# run, is to check its parent is there (``_helper_start``), as every child of ours does.
KILLED_IN_THE_START = r"""
import multiprocessing, os, signal, sys
from multiprocessing import util
from agentlog.streams.embedded.encoding import _helper_start
from agentlog.streams.embedded.parent_death import spawn_context

started = util.spawnv_passfds
def start_then_die(path, args, passfds):
    pid = started(path, args, passfds)
    if "--multiprocessing-fork" in args:  # the child (not the resource tracker spawn starts first)
        print(pid, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    return pid
util.spawnv_passfds = start_then_die

ctx = spawn_context() if sys.argv[1] == "ours" else multiprocessing.get_context("spawn")
ctx.Process(target=_helper_start, args=(os.getpid(),)).start()
"""


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _killed_in_the_start(tmp_path: Path, context: str) -> str:
    """The stderr the parent and its child shared, once the child is gone."""
    out, err = tmp_path / f"{context}.out", tmp_path / f"{context}.err"
    with out.open("wb") as stdout, err.open("wb") as stderr:  # files: a child left would hold a pipe
        code = subprocess.run([sys.executable, "-c", KILLED_IN_THE_START, context], stdout=stdout, stderr=stderr,
                              timeout=60).returncode  # fmt: skip
    assert code == -signal.SIGKILL, err.read_text()[-2000:]
    (child,) = [int(p) for p in out.read_text().split()]
    deadline = time.monotonic() + 30
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _alive(child):
        os.kill(child, signal.SIGKILL)
        pytest.fail("the child outlived its parent")
    return err.read_text()


def test_a_child_whose_parent_is_killed_as_it_starts_ends_without_a_traceback(tmp_path: Path) -> None:
    assert "EOFError" in _killed_in_the_start(tmp_path, "stock")  # the moment this test reaches
    assert _killed_in_the_start(tmp_path, "ours") == ""


def _exit_unless_length(data: bytes, n: int) -> None:
    sys.exit(0 if len(data) == n else 3)


def test_start_data_larger_than_any_pipe_still_reaches_the_child() -> None:
    big = b"x" * (3 << 20)  # written after the start, as spawn does
    process = spawn_context().Process(target=_exit_unless_length, args=(big, len(big)))
    process.start()
    process.join(60)
    assert process.exitcode == 0


def test_a_process_pool_runs_on_children_started_so() -> None:
    with ProcessPoolExecutor(2, mp_context=spawn_context()) as pool:  # the encoding helpers' pool
        assert list(pool.map(len, [b"a" * n for n in (0, 10, 1 << 20)])) == [0, 10, 1 << 20]


def test_data_that_fits_goes_into_the_pipe_before_the_start_and_more_does_not() -> None:
    r, w = os.pipe()
    try:
        assert _written_ahead(w, b"a" * 100_000)  # the pipe grown past its 64 KiB
        assert os.read(r, 200_000) == b"a" * 100_000
        assert not _written_ahead(w, b"b" * (2 << 20))  # more than any pipe: nothing written
        os.set_blocking(r, False)
        with pytest.raises(BlockingIOError):
            os.read(r, 1)
    finally:
        os.close(r)
        os.close(w)


def test_a_start_that_fails_for_want_of_descriptors_leaves_none_open(monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[int] = []
    pipe = os.pipe

    def second_refused() -> tuple[int, int]:
        if opened:
            raise OSError(errno.EMFILE, "Too many open files")
        fds = pipe()
        opened.extend(fds)
        return fds

    resource_tracker.ensure_running()  # its own pipe is not the one refused
    monkeypatch.setattr(os, "pipe", second_refused)
    with pytest.raises(OSError, match="Too many open files"):
        spawn_context().Process(target=print).start()
    monkeypatch.setattr(os, "pipe", pipe)
    gc.collect()  # the failed process object's finalizer closes what it holds
    still = [fd for fd in opened if _is_open(fd)]
    assert len(opened) == 2 and still == []


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False
