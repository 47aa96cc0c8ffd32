"""``agentlog run`` for the client's tests: started on a chosen port (so a restart comes
back on the same address) with an API token, and killed like a crash."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

TOKEN = "client-test-token"


class Server:
    def __init__(self, data_dir: Path, port: int, token: str | None = TOKEN, **extra_env: str) -> None:
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTLOG_")}
        self.env |= {"AGENTLOG_DATA_DIR": str(data_dir), "AGENTLOG_HTTP_PORT": str(port), **extra_env}
        if token is not None:
            self.env["AGENTLOG_API_TOKEN"] = token
        self.auth = {} if token is None else {"Authorization": f"Bearer {token}"}
        self.url = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Server:
        self.proc = subprocess.Popen([sys.executable, "-m", "agentlog", "run"], env=self.env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1, headers=self.auth).is_success:
                    return self
            except httpx.HTTPError:
                time.sleep(0.1)
        self.proc.kill()
        raise AssertionError(f"agentlog run did not start: {self.proc.stderr.read().decode()}")  # type: ignore[union-attr]

    def kill(self) -> None:
        """SIGKILL, as a crash: nothing is flushed or closed."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=60)
