"""The processor's guard against a consumer that skips source records."""

from processors.pipeline import Record
from streams.offset_guard import missing_ranges


def records(partition: int, *offsets: int) -> list[Record]:
    return [Record(partition, o, b"{}") for o in offsets]


def test_a_batch_that_starts_after_the_expected_offset_names_the_skipped_range() -> None:
    expected = {1: 6636}
    assert missing_ranges(expected, records(1, 6637, 6638)) == [(1, 6636, 6637)]
    assert expected == {1: 6639}


def test_a_jump_inside_a_batch_is_a_gap_too() -> None:
    expected = {0: 10}
    assert missing_ranges(expected, records(0, 10, 11, 15, 16)) == [(0, 12, 15)]
    assert expected[0] == 17


def test_a_redelivery_below_the_expected_offset_is_not_a_gap() -> None:
    expected = {2: 100}
    assert missing_ranges(expected, records(2, 90, 91, 99, 100)) == []
    assert expected[2] == 101


def test_a_partition_seen_for_the_first_time_sets_its_expectation_without_a_gap() -> None:
    expected: dict[int, int] = {}
    assert missing_ranges(expected, records(0, 500, 501) + records(1, 7)) == []
    assert expected == {0: 502, 1: 8}


def test_partitions_are_checked_independently_whatever_order_the_batch_interleaves_them() -> None:
    expected = {0: 5, 1: 5}
    batch = [Record(1, 5, b""), Record(0, 5, b""), Record(1, 7, b""), Record(0, 6, b"")]
    assert missing_ranges(expected, batch) == [(1, 6, 7)]
