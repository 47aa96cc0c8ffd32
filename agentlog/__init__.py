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

__all__ = ["KINDS", "Envelope", "Settings", "__version__"]
