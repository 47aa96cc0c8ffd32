"""The pure core: validation, pairing, reduction, truncation, context and memory logic.

Nothing here does I/O or reads the clock: event time drives every decision, so a replay
of the log gives the same result as the live run.
"""

if __name__ != "agentlog.processors":  # the folder is on the path (a checkout's root), not installed
    raise ImportError("agentlog installs this folder as `agentlog.processors`; run `pip install -e .` "
                      "and import `agentlog.processors` (or the public `agentlog`)")
