"""Every offset of a partition is processed, in order.

A skipped record is worse than a late one here: the thread's snapshot records the
offsets it holds, so a later delivery would be taken for a replay. faust-streaming
0.15.3 was seen to skip one (the record right after a restarted worker's first batch
never reached the agent and faust committed past it; faust-streaming #606, #312), which
is why the processor now reads the event topic with its own consumer. It still checks
each batch against the next offset it expects per partition (known durably from the
dedup table's last batch key) and reads again from any gap, once: offsets that are still
missing after the re-read are not in the topic (a transactional producer's commit
markers, or records deleted by retention while no worker ran), and waiting for them
would stop the partition for good.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from agentlog.processors.pipeline import Record


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


@dataclass(slots=True)
class Checked:
    """What to do with a batch: apply ``records``; seek each partition of ``reread`` back
    to its offset; ``absent`` are ranges found missing again after a re-read (not in the
    topic), ``recovered`` the partitions and offsets a re-read did find (a consumer had
    skipped them: worth an error)."""

    records: list[Record]
    reread: dict[int, int] = field(default_factory=dict)
    absent: list[tuple[int, int, int]] = field(default_factory=list)
    recovered: list[tuple[int, int]] = field(default_factory=list)


class OffsetGuard:
    """The next offset to apply per partition, and what a batch does to it."""

    def __init__(self) -> None:
        self.expected: dict[int, int] = {}
        self._reread: dict[int, int] = {}  # partition -> the gap start it was sent back to

    def reset(self, positions: Mapping[int, int | None]) -> None:
        """After an assignment: where each partition resumes (``None``: not known yet)."""
        self.expected = {p: o for p, o in positions.items() if o is not None}
        self._reread.clear()

    def check(self, records: Sequence[Record]) -> Checked:
        out = Checked(list(records))
        for r in records:
            if self._reread.get(r.partition) == r.offset:
                out.recovered.append((r.partition, r.offset))
                del self._reread[r.partition]
        gaps = missing_ranges(self.expected, records)
        cut: dict[int, int] = {}
        for p, start, end in gaps:
            if p in cut:
                continue  # the batch is cut at the partition's first gap already
            if self._reread.get(p) == start:
                out.absent.append((p, start, end))
            else:
                cut[p] = start
        if cut:
            for p, start in cut.items():
                self.expected[p] = start
                self._reread[p] = start
            out.records = [r for r in records if r.offset < cut.get(r.partition, r.offset + 1)]
            out.reread = cut
        return out


__all__ = ["Checked", "OffsetGuard", "missing_ranges"]
