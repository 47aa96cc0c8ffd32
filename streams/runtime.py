"""Process-wide tuning for a long-running stream processor."""

from __future__ import annotations

import gc


def tune_gc() -> None:
    """Collect less often, and never rescan what was alive at start-up.

    The pipeline allocates several container objects per event (events, pairs, state
    items); with CPython's default thresholds the cyclic collector runs every 700
    allocations and, as the per-thread state grows, full collections rescan all of it.
    Measured by ``agentlog bench``: processors alone go from about 28k to 47k events/s.
    Reference cycles are rare here, so memory stays bounded.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 50)


__all__ = ["tune_gc"]
