"""The heap a service starts with, kept out of the garbage collector's full passes.

A full collection walks every object the collector tracks. Once the service is open those
are tens of thousands (the modules, pydantic's validators, whose traversal is deep): a
full pass costs tens of milliseconds whatever the threads hold, and it lands on whichever
agent step is running, every few hundred steps. Frozen (``gc.freeze``) when the service
opens, they are never walked again, and a full pass walks what came since. A catch-up
(a backlog applied at once: threads of thousands of events) freezes what it built too,
after a collection, so no garbage is frozen. Reference counting still frees a frozen
object; only a cycle among them waits for the last open service to close (``thaw``),
when the freeze is undone.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_open = 0
"""Services that froze the heap and are still open: the last one to close thaws it."""


def freeze() -> None:
    global _open
    with _lock:
        _open += 1
        gc.freeze()


def settle() -> None:
    """After bulk work under a freeze: what it left alive joins the frozen heap (the
    collection first walks only what came since the last freeze)."""
    with _lock:
        if _open:
            gc.collect()
            gc.freeze()


def thaw() -> None:
    global _open
    with _lock:
        _open = max(0, _open - 1)
        if _open == 0:
            gc.unfreeze()


_pausing = 0
"""Blocks inside ``paused`` now, in any thread: the last one out enables the collector."""
_paused_it = False
"""Whether ``paused`` disabled the collector (one disabled by the caller stays disabled)."""


@contextmanager
def paused() -> Iterator[None]:
    """No collection while the block builds a large answer (a long thread's state: about
    ten thousand lists and dicts): started in the middle, collections would move those
    young objects, still being built, into the older generations, and a full pass of the
    caller's whole heap would follow every few hundred steps. After the block the
    collector counts them as any other new objects.

    Blocks of several threads overlap: the collector is enabled again when the last one
    ends (not when the first does, in the middle of another's answer), and only if a
    block disabled it: a caller's own ``gc.disable()`` before the first stays in force."""
    global _pausing, _paused_it
    with _lock:
        if _pausing == 0:
            _paused_it = gc.isenabled()
            gc.disable()
        _pausing += 1
    try:
        yield
    finally:
        with _lock:
            _pausing -= 1
            if _pausing == 0 and _paused_it:
                _paused_it = False
                gc.enable()


__all__ = ["freeze", "paused", "settle", "thaw"]
