"""Issue 15: the processor's loop writes its checkpoints without the processor's lock.

A checkpoint is taken under the lock (the snapshots encoded while nothing can change them)
and written after the loop lets the lock go, so a request that comes meanwhile waits for
the encoding only. Written later, checkpoints still land in the order they were taken,
an applied id stays applied while its checkpoint is being written, and after a failed
write nothing later is written.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from agentlog.processors.pipeline import Record
from agentlog.streams.config import Settings
from agentlog.streams.embedded.service import EmbeddedService
from agentlog.streams.sink_guard import StoreUnavailable
from tests.test_apply_then_answer import goal, in_time, live_loops


class GatedWrite:
    """The state store's checkpoint writes held until ``gate`` opens (a slow disk)."""

    def __init__(self, service: EmbeddedService) -> None:
        self.gate = threading.Event()
        self.entered = threading.Event()
        self._write = service.states.write
        service.states.write = self.write  # type: ignore[method-assign]

    def write(self, rows: Sequence[tuple[str, str]], seen: Sequence[str], offsets: dict[str, int]) -> None:
        self.entered.set()
        assert self.gate.wait(60), "the gate was never opened"
        self._write(rows, seen, offsets)


@pytest.fixture
def fresh(settings: Settings) -> Iterator[EmbeddedService]:
    svc = EmbeddedService(Settings(data_dir=settings.data_dir, checkpoint_seconds=0))  # always due
    try:
        yield svc
    finally:
        svc.close()


def test_a_state_read_never_waits_for_the_processor_s_loop_writing_a_checkpoint(settings: Settings) -> None:
    svc = EmbeddedService(Settings(data_dir=settings.data_dir, checkpoint_seconds=0))
    gated = GatedWrite(svc)
    with live_loops(svc, gated.gate):
        svc.publish(goal(1))
        assert gated.entered.wait(10), "the processor's loop never wrote a checkpoint"
        for i in range(2, 6):  # the checkpoint's write is held the whole time
            svc.publish(goal(i))
            assert in_time(lambda: svc.state("step"), 2.0)["goal"]["text"] == f"walrus step {i}"
        assert svc.states.offsets().get("events", 0) == 0  # nothing written yet
    again = EmbeddedService(settings)
    try:
        assert again.state("step")["goal"]["text"] == "walrus step 5"
        assert again.states.offsets()["events"] == 5
    finally:
        again.close()


def test_a_checkpoint_taken_later_is_written_only_after_the_one_taken_before_it(fresh: EmbeddedService) -> None:
    driver = fresh.driver
    fresh.publish(goal(1, thread="a"))
    with fresh.lock:
        driver.apply_at_most(10)
        first = driver.take_checkpoint()
        fresh.publish(goal(2, thread="b"))
        driver.apply_at_most(10)
        second = driver.take_checkpoint()
    assert first is not None and second is not None
    assert [t for t, _ in first.rows] == ["a"] and [t for t, _ in second.rows] == ["b"]
    later = threading.Thread(target=driver.write_checkpoint, args=(second,), daemon=True)
    later.start()
    later.join(0.5)
    assert later.is_alive() and fresh.states.offsets().get("events", 0) == 0  # waits for its turn
    driver.write_checkpoint(first)
    later.join(10)
    assert not later.is_alive()
    assert fresh.states.offsets()["events"] == 2 and sorted(fresh.states.threads()) == ["a", "b"]


def test_an_event_applied_again_while_its_checkpoint_is_being_written_is_still_a_duplicate(
    fresh: EmbeddedService,
) -> None:
    driver = fresh.driver
    fresh.publish(goal(1))
    with fresh.lock:
        driver.apply_at_most(10)
        taken = driver.take_checkpoint()  # g1's id is in it, not in the store yet
        assert taken is not None and "g1" in taken.seen
        result = driver.pipeline.process([Record(0, 99, goal(1))])  # a redelivery of g1
    assert [e.event_id for _, e in result.duplicates] == ["g1"] and not result.applied
    driver.write_checkpoint(taken)
    assert driver.seen.writing == () and fresh.states.unseen(["g1"]) == set()


def test_after_a_failed_checkpoint_write_no_later_one_is_written(fresh: EmbeddedService) -> None:
    driver = fresh.driver
    write = fresh.states.write
    calls: list[dict[str, int]] = []

    def failing(rows: Any, seen: Any, offsets: dict[str, int]) -> None:
        calls.append(offsets)
        if len(calls) == 1:
            raise OSError("disk full")
        write(rows, seen, offsets)

    fresh.states.write = failing  # type: ignore[method-assign]
    fresh.publish(goal(1))
    with fresh.lock:
        driver.apply_at_most(10)
        first = driver.take_checkpoint()
        fresh.publish(goal(2))
        driver.apply_at_most(10)
        second = driver.take_checkpoint()
    assert first is not None and second is not None
    with pytest.raises(OSError):
        driver.write_checkpoint(first)
    with pytest.raises(StoreUnavailable):
        driver.write_checkpoint(second)  # it holds only what changed since the first
    assert len(calls) == 1 and fresh.states.offsets().get("events", 0) == 0
    fresh.states.write = write  # type: ignore[method-assign]
    with fresh.lock:  # as the processor's loop does after a failure: again from the last written
        fresh.driver = fresh._new_driver()
        fresh.driver.apply_pending()
    assert fresh.states.offsets()["events"] == 2
    assert fresh.state("step")["goal"]["text"] == "walrus step 2"


def test_a_new_driver_starts_from_a_checkpoint_still_being_written_once_it_is(fresh: EmbeddedService) -> None:
    """A request whose apply failed starts the processor again from the last checkpoint:
    one the loop is writing is waited for, or the new driver would start before it."""
    gated = GatedWrite(fresh)
    fresh.publish(goal(1))
    with fresh.lock:
        fresh.driver.apply_at_most(10)
        taken = fresh.driver.take_checkpoint()
    writer = threading.Thread(target=fresh.driver.write_checkpoint, args=(taken,), daemon=True)
    writer.start()
    assert gated.entered.wait(10)
    made: list[Any] = []
    starting = threading.Thread(target=lambda: made.append(fresh._new_driver()), daemon=True)
    starting.start()
    starting.join(0.5)
    assert starting.is_alive() and not made  # waits for the write in flight
    gated.gate.set()
    starting.join(10)
    writer.join(10)
    assert made[0].events_pos == 1
