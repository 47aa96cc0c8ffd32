"""``agentlog run``: the HTTP API and the live driver, holding the data directory."""

from __future__ import annotations

import json
import logging
import sys

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
        uvicorn.run(build_app(service), host=host, port=port, log_level="warning")
    finally:
        marker.unlink(missing_ok=True)
        service.close()
        lock.release()
    return 0


__all__ = ["serve"]
