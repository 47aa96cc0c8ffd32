"""A faust worker in a child process, as a user starts it: for tests and benchmarks."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from agentlog.streams.config import Settings


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def worker_env(settings: Settings) -> dict[str, str]:
    """The environment of a user of this distributed deployment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTLOG_")}
    env.update(settings.to_env())
    return env


def log_path(settings: Settings, role: str = "all") -> Path:
    return Path(settings.data_dir) / ("sinks.log" if role == "sinks" else "worker.log")


def start_worker(settings: Settings, role: str = "all", verbose: bool = False) -> subprocess.Popen:
    """``agentlog [-v] run --role ROLE`` for ``settings``, logging to ``log_path(settings, role)``:
    a file, not a pipe, since a pipe nobody drains blocks a chatty worker mid-write."""
    Path(settings.data_dir).mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "agentlog", *(["-v"] if verbose else []), "run", "--role", role]
    with open(log_path(settings, role), "ab") as log:
        return subprocess.Popen(command, env=worker_env(settings), stdout=subprocess.DEVNULL, stderr=log)


def stop_worker(worker: subprocess.Popen, timeout: float = 60.0) -> None:
    """SIGTERM, and SIGKILL if it has not stopped within ``timeout`` seconds."""
    if worker.poll() is not None:
        return
    worker.terminate()
    try:
        worker.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait()


def worker_log(settings: Settings, tail: int = 3000, role: str = "all") -> str:
    """The end of the worker's log, for error reports."""
    path = log_path(settings, role)
    return path.read_text(errors="replace")[-tail:] if path.exists() else "(no worker log)"


__all__ = ["free_port", "log_path", "start_worker", "stop_worker", "worker_env", "worker_log"]
