"""agentlog: an event pipeline for AI agents' context and memory.

The code installs under this one name (``agentlog.schemas``, ``agentlog.processors``,
``agentlog.sinks``, ``agentlog.streams``, ``agentlog.bench``); this module re-exports what
a user calls from Python. ``python -m agentlog`` is the ``agentlog`` command.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from agentlog.schemas.events import KINDS, Envelope
from agentlog.streams.config import Settings

try:
    __version__ = version("agentlog")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0+unknown"

_CLIENT = ("AsyncClient", "Client")


def __getattr__(name: str) -> object:
    """``agentlog.Client`` and ``agentlog.AsyncClient``, imported when first named (``import
    agentlog`` stays light for the command and the publishers)."""
    if name in _CLIENT:
        import agentlog.client  # noqa: PLC0415

        return getattr(agentlog.client, name)
    raise AttributeError(f"module 'agentlog' has no attribute {name!r}")


__all__ = ["KINDS", "AsyncClient", "Client", "Envelope", "Settings", "__version__"]
