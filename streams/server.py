"""``agentlog run``: the HTTP API and the live driver, holding the data directory."""

from __future__ import annotations

import json
import logging
import os
import secrets
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn

from streams.client import SERVER_FILE, data_dir_identity
from streams.config import Settings
from streams.http import build_app
from streams.http_guard import Policy, bind_refusal
from streams.service import DataDirLock, EmbeddedService

log = logging.getLogger("agentlog.server")


def client_url(host: str, port: int) -> str:
    """Where a client on this machine reaches a server bound to ``host``."""
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


@contextmanager
def _stop_signals_return() -> Iterator[None]:
    """uvicorn stops gracefully on SIGTERM/SIGINT, then raises the signal again with the
    handler it found: by default that ends the process (SIGTERM) or raises
    KeyboardInterrupt before ``serve``'s cleanup, leaving a stale ``server.json``. Here the
    handler it finds returns, so the cleanup runs; a second signal during it acts as usual."""
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def serve(settings: Settings, host: str, port: int) -> int:
    refused = bind_refusal(host, settings.api_token)
    if refused:
        print(f"agentlog: {refused}", file=sys.stderr)
        return 2
    lock = DataDirLock(settings)
    if not lock.acquire(timeout=5):
        print(f"agentlog: {settings.data_dir} is already served or in use by another agentlog process",
              file=sys.stderr)  # fmt: skip
        return 1
    service = EmbeddedService(settings)
    # Clients check this identity at /healthz before trusting server.json (a stale file
    # may name a port another data directory's server holds now).
    identity = {"instance": secrets.token_hex(16), "data_dir": data_dir_identity(settings)}
    marker = settings.path(SERVER_FILE)
    marker.write_text(json.dumps({"url": client_url(host, port), "pid": os.getpid(), **identity}))
    try:
        print(f"agentlog: serving {settings.data_dir} on http://{host}:{port}", file=sys.stderr)
        with _stop_signals_return():
            app = build_app(service, Policy.of(settings, host), identity)
            uvicorn.run(app, host=host, port=port, log_level="warning")
    finally:
        marker.unlink(missing_ok=True)
        service.close()
        lock.release()
    return 0


__all__ = ["client_url", "serve"]
