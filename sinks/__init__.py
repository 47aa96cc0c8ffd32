"""Adapters to the stores, one module each, behind the interfaces of ``agentlog.sinks.base``."""

if __name__ != "agentlog.sinks":  # the folder is on the path (a checkout's root), not installed
    raise ImportError("agentlog installs this folder as `agentlog.sinks`; run `pip install -e .` "
                      "and import `agentlog.sinks` (or the public `agentlog`)")
