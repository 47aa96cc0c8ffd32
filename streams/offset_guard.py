"""Every offset of a partition is processed, in order.

A skipped record is worse than a late one here: the thread's snapshot records the
offsets it holds, so a later delivery would be taken for a replay. faust-streaming
0.15.3 was seen to skip one (the record right after a restarted worker's first batch
never reached the agent and faust committed past it; faust-streaming #606, #312), which
is why the processor now reads the event topic with its own consumer. It still checks
each batch against the next offset it expects per partition (known durably from the
dedup table's last batch key) and reads again from any gap.
"""

from __future__ import annotations

from collections.abc import Sequence

from processors.pipeline import Record


def missing_ranges(expected: dict[int, int], records: Sequence[Record]) -> list[tuple[int, int, int]]:
    """The ``(partition, start, end)`` ranges (end exclusive) a batch leaves out after the
    expected next offsets; advances ``expected`` past the batch. Offsets below the
    expected one are redeliveries, not gaps. A partition with no expectation yet sets one."""
    gaps: list[tuple[int, int, int]] = []
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        want = expected.get(record.partition)
        if want is not None and record.offset > want:
            gaps.append((record.partition, want, record.offset))
        if want is None or record.offset >= want:
            expected[record.partition] = record.offset + 1
    return gaps


__all__ = ["missing_ranges"]
