"""The adapters and entry points around the pure core, one subpackage per role.

Where things live (and where a new one goes):

- ``api/``       the ``Service`` interface every deployment implements, the HTTP API over it
                 (one route table for both deployments), its access rules, and the HTTP client;
                 a new query or route starts in ``api/service.py``.
- ``embedded/``  the default deployment: the on-disk topic, the driver running the
                 processors over it, the service over a data directory (``service`` its
                 operations, ``live_loops`` what ``agentlog run`` runs beside its server,
                 ``sink_supervisor`` the sink stage and its process, ``dir_lock``), ``agentlog run``.
- ``kafka/``     the distributed deployment: publisher, faust worker (processor, sinks,
                 tables), feeds, topics, groups, the worker's service and the offline one.
- ``memory/``    long-term memory jobs (extraction, consolidation) and their topic view.
- ``web/``       the web view at ``/``: pages over the same ``Service``, added to the HTTP app.
- ``cli/``       the ``agentlog`` command: ``parser``, ``commands`` (a new command goes here),
                 ``render``, ``backend`` (which deployment answers), the demo.
- top level      what every deployment shares: ``config`` (settings), ``wiring`` (which store
                 adapter plays which role), ``publish_check`` (checks before a topic; ``Publisher``),
                 ``sink_guard`` (store failures), ``rebuild`` (log replay), ``metrics``,
                 ``llm_summary`` (the optional LLM summariser), ``summary_job`` (which runs it
                 beside ``agentlog run``'s loop), ``runtime`` (GC tuning).

A new event kind goes in ``schemas/events.py`` and ``processors/reducer.py``; a new store
adapter in ``sinks/`` behind an interface of ``sinks/base.py``; benchmarks in ``bench/``.
"""

if __name__ != "agentlog.streams":  # the folder is on the path (a checkout's root), not installed
    raise ImportError("agentlog installs this folder as `agentlog.streams`; run `pip install -e .` "
                      "and import `agentlog.streams` (or the public `agentlog`)")
