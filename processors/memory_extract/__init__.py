"""Phase 1 of long-term memory from raw events (pure): what a thread's user said to
remember, what its tools observed, what its approvals decided. ``thread.scan`` walks a
thread; ``user_statements``, ``tool_observations`` and ``approvals`` read one event each;
``origin`` gives the evidence type; ``proposals`` checks an LLM's proposals against the
events they cite. ``agentlog.processors.memory.extract`` turns findings into candidates."""
