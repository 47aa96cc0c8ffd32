"""The processor's guard against a consumer that skips source records."""

from agentlog.processors.pipeline import Record
from agentlog.streams.kafka.offset_guard import OffsetGuard, missing_ranges


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


def test_a_gap_cuts_the_batch_there_and_sends_the_feed_back_to_read_it_again() -> None:
    guard = OffsetGuard()
    guard.reset({0: 10, 1: 5})
    checked = guard.check(records(0, 10, 11, 14, 15) + records(1, 5, 6))
    assert [(r.partition, r.offset) for r in checked.records] == [(0, 10), (0, 11), (1, 5), (1, 6)]
    assert checked.reread == {0: 12} and checked.absent == []
    assert guard.expected == {0: 12, 1: 7}


def test_offsets_still_missing_after_the_reread_are_not_in_the_topic_and_are_passed_over() -> None:
    # A transactional producer's commit markers, or records deleted by retention while
    # no worker ran: waiting for them would stop the partition for good.
    guard = OffsetGuard()
    guard.reset({0: 12})
    assert guard.check(records(0, 14, 15)).reread == {0: 12}
    checked = guard.check(records(0, 14, 15))  # the re-read finds the same gap
    assert checked.reread == {} and checked.absent == [(0, 12, 14)]
    assert [r.offset for r in checked.records] == [14, 15]
    assert guard.expected == {0: 16}


def test_a_new_assignment_forgets_the_gaps_read_again_before() -> None:
    guard = OffsetGuard()
    guard.reset({0: 12})
    guard.check(records(0, 14))
    guard.reset({0: 12})
    assert guard.check(records(0, 14)).reread == {0: 12}


def test_a_reread_that_finds_the_missing_records_says_the_consumer_had_skipped_them() -> None:
    guard = OffsetGuard()
    guard.reset({0: 12})
    guard.check(records(0, 14))
    checked = guard.check(records(0, 12, 13, 14))
    assert checked.recovered == [(0, 12)] and checked.reread == {} and checked.absent == []
    assert [r.offset for r in checked.records] == [12, 13, 14]
