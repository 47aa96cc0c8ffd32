"""``agentlog run``: the HTTP API and the live driver, holding the data directory."""

from __future__ import annotations

import json
import logging
import signal
import sys
from types import FrameType

import uvicorn

from streams.client import SERVER_FILE
from streams.config import Settings
from streams.http import build_app
from streams.service import DataDirLock, EmbeddedService

log = logging.getLogger("agentlog.server")


def serve(settings: Settings, host: str, port: int) -> int:
    lock = DataDirLock(settings)
    if not lock.acquire(timeout=5):
        print(f"agentlog: {settings.data_dir} is already served or in use by another agentlog process",
              file=sys.stderr)  # fmt: skip
        return 1
    service = EmbeddedService(settings)
    marker = settings.path(SERVER_FILE)
    marker.write_text(json.dumps({"url": f"http://{host}:{port}"}))
    try:
        print(f"agentlog: serving {settings.data_dir} on http://{host}:{port}", file=sys.stderr)
        _run(service, uvicorn.Config(build_app(service), host=host, port=port, log_level="warning"))
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


__all__ = ["serve"]
