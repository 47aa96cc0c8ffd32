"""The contract's data shapes, declared once: events, working state, thread snapshots,
tables and index."""

if __name__ != "agentlog.schemas":  # the folder is on the path (a checkout's root), not installed
    raise ImportError("agentlog installs this folder as `agentlog.schemas`; run `pip install -e .` "
                      "and import `agentlog.schemas` (or the public `agentlog`)")
