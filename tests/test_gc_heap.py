"""An embedded service keeps the heap it opened with out of the collector's full passes,
until it closes (``agentlog.streams.gc_heap``)."""

from __future__ import annotations

import gc
import time
from pathlib import Path

from agentlog.streams import gc_heap
from agentlog.streams.config import Settings
from agentlog.streams.embedded.service import EmbeddedService
from tests.helpers import raw


def _full_collection_ms() -> float:
    t0 = time.perf_counter()
    gc.collect()
    return (time.perf_counter() - t0) * 1000


def test_an_open_service_freezes_the_heap_it_opened_with_and_its_close_thaws_it(tmp_path: Path) -> None:
    before = gc.get_freeze_count()
    svc = EmbeddedService(Settings(data_dir=tmp_path / "data"))
    try:
        assert gc.get_freeze_count() > before
    finally:
        svc.close()
    assert gc.get_freeze_count() == 0  # the last open service thawed it: frozen cycles can be reclaimed


def test_a_full_collection_with_a_service_open_skips_its_startup_heap(tmp_path: Path) -> None:
    """What the freeze is for: the full pass walks what came since the service opened."""
    svc = EmbeddedService(Settings(data_dir=tmp_path / "data"))
    try:
        frozen = min(_full_collection_ms() for _ in range(3))
        walked = len(gc.get_objects())
    finally:
        svc.close()
    assert walked < gc.get_freeze_count() + len(gc.get_objects())  # the walk leaves the frozen out
    assert walked * 10 < len(gc.get_objects())
    assert frozen < min(_full_collection_ms() for _ in range(3))


def test_the_heap_stays_frozen_until_the_last_service_that_froze_it_closes() -> None:
    gc_heap.freeze()  # two services open (each its own data directory and log server)
    gc_heap.freeze()
    gc_heap.thaw()
    try:
        assert gc.get_freeze_count() > 0
    finally:
        gc_heap.thaw()
    assert gc.get_freeze_count() == 0


def test_a_service_with_the_freeze_off_leaves_the_collector_as_it_was(tmp_path: Path) -> None:
    svc = EmbeddedService(Settings(data_dir=tmp_path / "data", gc_freeze=False))
    try:
        assert gc.get_freeze_count() == 0
    finally:
        svc.close()


def test_a_catch_up_freezes_the_threads_it_built_and_no_garbage(tmp_path: Path) -> None:
    svc = EmbeddedService(Settings(data_dir=tmp_path / "data"))
    try:
        steps = [{"step_id": f"s{i}", "text": f"step {i}"} for i in range(300)]
        svc.publish(raw("p", "plan", {"steps": steps}))
        before = gc.get_freeze_count()
        svc.catch_up()
        assert gc.get_freeze_count() > before + 300  # the plan's steps among them
        tracked = {id(o) for o in gc.get_objects()}
        assert not any(id(s) in tracked for s in svc.driver.pipeline.thread("t1").state.plan.values())
        assert gc.collect() == 0  # collected before it froze: nothing unreachable is left
    finally:
        svc.close()


def test_agentlog_run_s_loop_freezes_what_the_events_it_applied_built_once_it_is_idle(
    tmp_path: Path, monkeypatch
) -> None:
    """A long-running server's threads join the frozen heap too (else every full
    collection walks them, a pause that grows with the threads)."""
    import threading  # noqa: PLC0415

    from agentlog.streams.embedded import live_loops  # noqa: PLC0415

    monkeypatch.setattr(live_loops, "SETTLE_AFTER_EVENTS", 50)
    svc = EmbeddedService(Settings(data_dir=tmp_path / "data"))
    stop = threading.Event()
    loop = threading.Thread(target=svc.run_forever, args=(stop,), daemon=True)
    try:
        opened = gc.get_freeze_count()
        loop.start()
        svc.publish(b"\n".join(raw(f"m{i}", "message", {"role": "user", "text": f"note {i}"}, i, thread="long")
                               for i in range(60)))  # fmt: skip
        deadline = time.monotonic() + 30
        while gc.get_freeze_count() <= opened and time.monotonic() < deadline:
            time.sleep(0.05)
        assert gc.get_freeze_count() > opened  # the 60 events' objects (threads, state) frozen
        assert svc.state("long")["event_count"] == 60
    finally:
        stop.set()
        loop.join(30)
        svc.close()


def test_overlapping_pauses_of_two_threads_keep_the_collector_off_until_the_last_one_ends() -> None:
    assert gc.isenabled()
    first, second = gc_heap.paused(), gc_heap.paused()
    first.__enter__()
    second.__enter__()  # another thread's answer, begun while the first is built
    first.__exit__(None, None, None)
    assert not gc.isenabled(), "the first block to end enabled the collector in the middle of the other's"
    second.__exit__(None, None, None)
    assert gc.isenabled()


def test_a_pause_leaves_a_collector_the_caller_disabled_disabled() -> None:
    gc.disable()
    try:
        with gc_heap.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
