"""``agentlog bench``: the benchmarks, kept out of the runtime path (RESULTS.md holds the
figures of past runs)."""
