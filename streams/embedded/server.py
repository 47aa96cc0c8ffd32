"""``agentlog run``: the HTTP API and the processor, holding the data directory, and the
sink process it starts and stops (``agentlog.streams.embedded.sink_process``)."""

from __future__ import annotations

import json
import logging
import os
import secrets
import signal
import sys
from types import FrameType

import uvicorn

from agentlog.streams.api.client import SERVER_FILE, data_dir_identity, server_url
from agentlog.streams.api.http_parser import BoundedHttpToolsProtocol
from agentlog.streams.config import Settings
from agentlog.streams.api.http import build_app
from agentlog.streams.api.guard import Policy, bind_refusal
from agentlog.streams.embedded.dir_lock import DataDirLock
from agentlog.streams.embedded.service import EmbeddedService

log = logging.getLogger("agentlog.server")

SWITCH_INTERVAL_S = 0.001
"""How long a thread may hold the interpreter lock while another waits (Python's default: 5 ms)."""


def client_url(host: str, port: int) -> str:
    """Where a client on this machine reaches a server bound to ``host``."""
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def serve(settings: Settings, host: str, port: int) -> int:
    refused = bind_refusal(host, settings.api_token)
    if refused:
        print(f"agentlog: {refused}", file=sys.stderr)
        return 2
    lock = DataDirLock(settings)
    if not lock.acquire(timeout=5):
        url = server_url(settings)
        where = f"already served at {url} (commands on this directory go to it)" if url else \
            "already served or in use by another agentlog process"  # fmt: skip
        print(f"agentlog: {settings.data_dir} is {where}", file=sys.stderr)
        return 1
    # A thread waiting for the interpreter lock (a request, while the processor's loop
    # applies or checkpoints) gets it after 1 ms instead of Python's 5: the agent step's
    # tail, not its throughput (the loops rarely contend).
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    service = EmbeddedService(settings, sinks_apart=True)
    try:
        if service.sink_process is None:  # a store was rebuilt here, or is a server's
            service.split_sinks()  # the log, the index and their writes in a second process
    except BaseException:
        service.close()
        lock.release()
        raise
    # Clients check this identity at /healthz before trusting server.json (a stale file
    # may name a port another data directory's server holds now).
    identity = {"instance": secrets.token_hex(16), "data_dir": data_dir_identity(settings)}
    marker = settings.path(SERVER_FILE)
    marker.write_text(json.dumps({"url": client_url(host, port), "pid": os.getpid(), **identity}))
    try:
        print(f"agentlog: serving {settings.data_dir} on http://{host}:{port}", file=sys.stderr)
        app = build_app(service, Policy.of(settings, host), identity, background=service.run_forever)
        # A proxy's X-Forwarded-* headers are believed only with AGENTLOG_TRUST_PROXY (guard.over_https).
        # No access log: at "warning" it never prints, yet uvicorn formats its arguments
        # (client address, quoted path) for every response while the logger has handlers.
        _run(service, uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False,
                                     proxy_headers=False, http=BoundedHttpToolsProtocol))  # fmt: skip
    finally:
        marker.unlink(missing_ok=True)
        service.close()
        lock.release()
    return 0


class _Server(uvicorn.Server):
    """uvicorn's server, which also tells the service to stop (a rebuild in progress ends
    at its next batch rather than holding the shutdown for minutes)."""

    def __init__(self, config: uvicorn.Config, service: EmbeddedService) -> None:
        super().__init__(config)
        self.service = service

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.service.stopping.set()
        super().handle_exit(sig, frame)


def _run(service: EmbeddedService, config: uvicorn.Config) -> None:
    # uvicorn raises the signal it caught again once it has shut down; with the default
    # handlers that killed the process before `serve` could close the stores and remove
    # server.json. These handlers let it return instead.
    previous = {sig: signal.signal(sig, lambda *_: service.stopping.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        _Server(config, service).run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


__all__ = ["client_url", "serve"]
