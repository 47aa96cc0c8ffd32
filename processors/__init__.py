"""The pure core: validation, pairing, reduction, truncation, context and memory logic.

Nothing here does I/O or reads the clock: event time drives every decision, so a replay
of the log gives the same result as the live run.
"""
