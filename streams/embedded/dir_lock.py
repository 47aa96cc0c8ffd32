"""The data directory's lock: chDB and tantivy lock their files to one process, so a
process takes ``agentlog.lock`` before it opens them; ``agentlog run`` holds it while it
serves, and other commands then go through its HTTP API."""

from __future__ import annotations

import fcntl
import os
import time

from agentlog.streams.config import Settings


class DataDirLock:
    """An exclusive ``flock`` on the data directory's stores."""

    def __init__(self, settings: Settings) -> None:
        self.path = settings.path("agentlog.lock")
        self._fd: int | None = None

    def acquire(self, timeout: float) -> bool:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self._fd = fd
                return True
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    return False
                time.sleep(0.05)

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
