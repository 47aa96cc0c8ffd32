"""The Kafka processor's dedup ids (agentlog.streams.kafka.batch_seen): exact within a horizon of source
offsets per partition, bounded beyond it."""

from __future__ import annotations

from agentlog.streams.kafka.batch_seen import BatchSeen


def write(seen: BatchSeen, partition: int, offset: int, ids: list[str]) -> list[tuple[str, bytes | None]]:
    assert seen.unseen(ids) == set(ids)
    seen.add(ids)
    return seen.batch_written(partition, offset, ids)


def test_an_id_applied_in_an_earlier_batch_is_not_unseen() -> None:
    seen = BatchSeen({}, horizon=100)
    write(seen, 0, 9, ["a", "b"])
    assert seen.unseen(["a", "c"]) == {"c"}


def test_ids_applied_but_not_yet_written_are_already_seen() -> None:
    seen = BatchSeen({}, horizon=100)
    seen.add(["a"])
    assert seen.unseen(["a"]) == set()


def test_a_batch_more_than_the_horizon_behind_is_forgotten_with_a_tombstone() -> None:
    table: dict[str, bytes] = {}
    seen = BatchSeen(table, horizon=100)
    write(seen, 0, 9, ["old"])
    write(seen, 0, 100, ["mid"])
    records = write(seen, 0, 110, ["new"])
    assert records[0][0] == "0:110" and ("0:9", None) in records
    assert set(table) == {"0:100", "0:110"}
    assert seen.unseen(["old", "mid", "new"]) == {"old"}
    assert len(seen) == 2


def test_the_horizon_is_per_partition() -> None:
    table: dict[str, bytes] = {}
    seen = BatchSeen(table, horizon=100)
    write(seen, 0, 5, ["p0"])
    write(seen, 1, 500, ["p1"])
    assert seen.unseen(["p0", "p1"]) == set()
    assert set(table) == {"0:5", "1:500"}


def test_the_newest_batch_of_a_partition_is_kept_whatever_its_age() -> None:
    seen = BatchSeen({}, horizon=10)
    write(seen, 0, 5, ["a"])
    seen.batch_written(0, 5_000, [])  # an empty batch still marks the partition's offset
    assert seen.last_offset(0) == 5_000 and seen.unseen(["a"]) == {"a"}


def test_an_id_written_again_in_a_newer_batch_survives_pruning_of_the_older_one() -> None:
    # A redelivery after a crash re-records ids its snapshot had already applied.
    seen = BatchSeen({}, horizon=100)
    write(seen, 0, 9, ["a"])
    seen.add(["a"])
    seen.batch_written(0, 50, ["a"])
    seen.batch_written(0, 150, [])
    assert seen.unseen(["a"]) == set()


def test_the_index_rebuilt_from_the_table_after_a_rebalance_gives_the_same_answers() -> None:
    table: dict[str, bytes] = {}
    seen = BatchSeen(table, horizon=100)
    write(seen, 0, 9, ["a"])
    write(seen, 1, 20, ["b"])
    write(seen, 0, 150, ["c"])
    before = (seen.unseen(["a", "b", "c", "d"]), seen.last_offset(0), seen.last_offset(1))
    seen.forget()
    restored = BatchSeen(dict(table), horizon=100)
    for s in (seen, restored):
        assert (s.unseen(["a", "b", "c", "d"]), s.last_offset(0), s.last_offset(1)) == before
    assert before[0] == {"a", "d"}
    assert restored.last_offset(2) is None


def test_memory_stays_bounded_over_many_batches() -> None:
    seen = BatchSeen({}, horizon=1_000)
    for batch in range(1_000):
        write(seen, 0, batch * 100 + 99, [f"e{batch}.{i}" for i in range(100)])
    assert len(seen) <= 1_100
    assert len(seen.data) <= 11
