"""A child process that ends with its parent, even when the parent is killed with -9.

Linux's parent-death signal (``prctl(PR_SET_PDEATHSIG)``) does it, but a spawned child can
only arm it once it runs its own code, after its imports (about a second): a parent killed
before then sends nothing, and the child would wait forever for work, holding its stores
or the server's stderr. So the child also checks, once armed and then every half second,
that its parent is still the process that started it (elsewhere than Linux, that check
alone ends it).
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading
from collections.abc import Callable

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


__all__ = ["CHECK_SECONDS", "die_with", "watch"]
