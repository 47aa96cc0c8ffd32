"""A child process that ends with its parent, even when the parent is killed with -9.

Linux's parent-death signal (``prctl(PR_SET_PDEATHSIG)``) does it, but a spawned child can
only arm it once it runs its own code, after its imports (about a second): a parent killed
before then sends nothing, and the child would wait forever for work, holding its stores
or the server's stderr. So the child also checks, once armed and then every half second,
that its parent is still the process that started it (elsewhere than Linux, that check
alone ends it).

A child must also be able to start at all once its parent is gone: ``multiprocessing``'s
spawn starts the child, then writes it what to run into a pipe; a parent killed in between
leaves a child that reads an empty pipe and prints a Traceback (``EOFError``) into the
stderr it shares with the server. Children started with ``spawn_context()`` find all of it
in the pipe from their first instant.
"""

from __future__ import annotations

import ctypes
import fcntl
import io
import multiprocessing.context
import os
import select
import signal
import threading
from collections.abc import Callable
from multiprocessing import popen_spawn_posix, resource_tracker, spawn, util
from typing import Any

PR_SET_PDEATHSIG = 1
CHECK_SECONDS = 0.5
"""How often a child checks that its parent is still the process that started it."""


def die_with(parent: int) -> bool:
    """Arm the parent-death signal (SIGKILL); whether ``parent`` is still this process's
    parent (``False``: it died before the signal was armed, and none will come)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:  # not Linux: ``watch`` ends it
        pass
    return os.getppid() == parent


def watch(parent: int, on_gone: Callable[[], None], stop: threading.Event | None = None) -> None:
    """On a daemon thread: call ``on_gone`` once ``parent`` is no longer this process's
    parent (checked every ``CHECK_SECONDS`` until ``stop`` is set)."""
    stop = stop or threading.Event()

    def check() -> None:
        while not stop.wait(CHECK_SECONDS):
            if os.getppid() != parent:
                on_gone()
                return

    threading.Thread(target=check, name="agentlog-parent-watch", daemon=True).start()


class _DataFirst(popen_spawn_posix.Popen):
    """``spawn``'s start with the order of its last two steps swapped: the child's start
    data (how to prepare, then the pickled process) goes into its pipe, and only then is
    the child started on it. Data larger than the pipe can take (1 MiB at most) is written
    after the start, as ``spawn`` does."""

    def _launch(self, process_obj: Any) -> None:
        tracker_fd = resource_tracker.getfd()
        self._fds.append(tracker_fd)
        data = _start_data(self, process_obj)
        parent_r = child_w = child_r = parent_w = None
        try:
            parent_r, child_w = os.pipe()
            child_r, parent_w = os.pipe()
            written = _written_ahead(parent_w, data)
            cmd = spawn.get_command_line(tracker_fd=tracker_fd, pipe_handle=child_r)
            self._fds.extend([child_r, child_w])
            self.pid = util.spawnv_passfds(spawn.get_executable(), cmd, self._fds)
            self.sentinel = parent_r
            if not written:
                with open(parent_w, "wb", closefd=False) as pipe:
                    pipe.write(data)
        finally:  # as ``spawn``: the parent keeps its ends until the process object goes
            self.finalizer = util.Finalize(self, util.close_fds, [fd for fd in (parent_r, parent_w) if fd is not None])
            for fd in (child_r, child_w):
                if fd is not None:
                    os.close(fd)


def _start_data(popen: popen_spawn_posix.Popen, process_obj: Any) -> bytes:
    """What a spawned child reads first: the preparation data, then the process object
    (pickled while ``popen`` is the spawning one, as the pickling of its resources asks)."""
    out = io.BytesIO()
    multiprocessing.context.set_spawning_popen(popen)
    try:
        multiprocessing.context.reduction.dump(spawn.get_preparation_data(process_obj._name), out)
        multiprocessing.context.reduction.dump(process_obj, out)
    finally:
        multiprocessing.context.set_spawning_popen(None)
    return out.getvalue()


PIPE_MAX = 1 << 20
"""The largest pipe an unprivileged process may ask Linux for (``fs.pipe-max-size``)."""


def _written_ahead(fd: int, data: bytes) -> bool:
    """Whether all of ``data`` went into the empty pipe ``fd`` without blocking (the pipe
    grown to hold it if need be); ``False`` (nothing written) when it cannot hold it."""
    if len(data) > PIPE_MAX:
        return False  # no pipe grown for nothing: it would keep that size for the child's life
    try:
        if len(data) > fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ):
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, len(data))
        if len(data) > fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ):
            return False
    except (AttributeError, OSError):  # not Linux: an empty pipe takes PIPE_BUF bytes at once
        if len(data) > select.PIPE_BUF:
            return False
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    return True


class _DataFirstProcess(multiprocessing.context.SpawnProcess):
    @staticmethod
    def _Popen(process_obj: Any) -> _DataFirst:  # noqa: N802 - multiprocessing's name
        return _DataFirst(process_obj)


class _DataFirstContext(multiprocessing.context.SpawnContext):
    Process = _DataFirstProcess  # type: ignore[assignment]


def spawn_context() -> multiprocessing.context.SpawnContext:
    """A ``spawn`` context whose children start with all they need to, whenever their
    parent dies (also for a ``ProcessPoolExecutor``'s workers)."""
    return _DataFirstContext()


__all__ = ["CHECK_SECONDS", "die_with", "spawn_context", "watch"]
