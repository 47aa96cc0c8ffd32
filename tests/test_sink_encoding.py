"""The sink stage's encoding: each applied record's log row and search document, encoded
here or shared with helper processes at a catch-up's end, is the same bytes in the same
order, and every event is still written once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from itertools import islice
from pathlib import Path

from agentlog.processors.pipeline import Record
from agentlog.streams.cli.demo import iter_synthetic_events
from agentlog.streams.config import Settings
from agentlog.streams.embedded.encoding import Encoder, encode, helpers_for
from agentlog.streams.embedded.service import EmbeddedService
from agentlog.streams.embedded.sink_stage import SinkStage


def _wanted(n: int) -> list:
    raws = list(islice(iter_synthetic_events(n, 7), n))
    return [(Record(0, i + 1, r), f"w{i % 3}", None) for i, r in enumerate(raws)]


def test_a_group_shared_with_helpers_is_byte_for_byte_the_encoding_done_here_in_order() -> None:
    wanted = _wanted(3001)
    encoder = Encoder(helpers=2)
    try:
        encoding = encoder.start(wanted, share=True)
        assert len(encoder.helper_pids()) == 2  # the helpers took shares
        assert encoding.items() == encode(wanted)
        assert encoding.records == [r for r, _, _ in wanted]
    finally:
        encoder.close()
    assert encoder.helper_pids() == []


def _peak_rss_mib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmHWM:")[1].split()[0]) // 1024


def test_a_helper_holds_a_task_at_a_time_not_its_whole_share_of_a_large_group() -> None:
    wanted = _wanted(20_000)  # a catch-up group: 14,000 events for the one helper
    encoder = Encoder(helpers=1)
    try:
        assert encoder.start(wanted, share=True).items() == encode(wanted)
        (pid,) = encoder.helper_pids()
        # Started, a helper holds about 52 MiB; given its whole share at once, 250 MiB.
        assert _peak_rss_mib(pid) < 120
    finally:
        encoder.close()


def test_a_group_not_shared_is_encoded_here_without_starting_a_helper() -> None:
    encoder = Encoder(helpers=1)
    wanted = _wanted(50)
    assert encoder.start(wanted, share=False).items() == encode(wanted)
    assert encoder.helper_pids() == []


def test_a_helper_killed_mid_catch_up_costs_nothing_its_share_is_encoded_here_and_another_starts() -> None:
    wanted = _wanted(800)
    encoder = Encoder(helpers=1)
    try:
        assert encoder.start(wanted, share=True).items() == encode(wanted)
        for pid in encoder.helper_pids():
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.3)
        assert encoder.start(wanted, share=True).items() == encode(wanted)  # encoded here
        assert encoder.start(wanted, share=True).items() == encode(wanted)  # a new helper's share
        assert len(encoder.helper_pids()) == 1
    finally:
        encoder.close()


# A process that starts two helpers and is killed with -9 at once: the helpers are still
# importing then, before their death signal is armed.
KILLED_AT_ONCE = r"""
import os, signal, sys
from agentlog.processors.pipeline import Record
from agentlog.streams.embedded.encoding import Encoder
encoder = Encoder(helpers=2)
encoder.start([(Record(0, i, b"{}"), "w", None) for i in range(1, 2001)], share=True)
print(*encoder.helper_pids(), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_helpers_die_with_a_sink_process_killed_before_they_started(tmp_path: Path) -> None:
    # Files, not pipes: a helper left behind would hold a pipe open and hang the read.
    out, err = tmp_path / "out", tmp_path / "err"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        code = subprocess.run([sys.executable, "-c", KILLED_AT_ONCE], stdout=stdout, stderr=stderr,
                              timeout=60).returncode  # fmt: skip
    assert code == -signal.SIGKILL, err.read_text()[-2000:]
    helpers = [int(p) for p in out.read_text().split()]
    assert len(helpers) == 2
    deadline = time.monotonic() + 30
    while any(map(_alive, helpers)) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [p for p in helpers if _alive(p)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)  # not to leave them behind for the next test
    assert left == [], "helpers outlived the sink process that started them"


def test_one_helper_fewer_than_the_machine_s_cores() -> None:
    assert [helpers_for(n) for n in (1, 2, 8)] == [0, 1, 7]


def _stage_with_helpers(svc: EmbeddedService, encoder: Encoder) -> SinkStage:
    policy = svc.sinks.policy
    return SinkStage(svc.queue, svc.bus, svc.log, svc.index, policy, encoder=encoder)


def test_at_a_catch_up_s_end_the_helpers_encode_and_every_event_is_logged_and_indexed_once(tmp_path: Path) -> None:
    svc = EmbeddedService(Settings(data_dir=tmp_path / "d", sink_flush_rows=100, batch_size=100))
    encoder = Encoder(helpers=1)
    try:
        svc.publish(b"\n".join(islice(iter_synthetic_events(1500, 5), 1500)))
        svc.driver.run_until_idle()  # the processor is done: the topic's end is queued
        stage = _stage_with_helpers(svc, encoder)
        assert stage.drain() == 1500
        assert len(encoder.helper_pids()) == 1  # the helpers took part
        assert svc.sql("SELECT count(), uniqExact(event_id) FROM events").rows == [(1500, 1500)]
        assert svc.index.visible_offsets().get(0, 0) == svc.bus.end_offsets()[0]
    finally:
        encoder.close()
        svc.close()


def test_while_the_processor_is_still_behind_the_sink_stage_leaves_the_other_core_to_it(tmp_path: Path) -> None:
    svc = EmbeddedService(Settings(data_dir=tmp_path / "d", sink_flush_rows=100, batch_size=100))
    encoder = Encoder(helpers=1)
    try:
        svc.publish(b"\n".join(islice(iter_synthetic_events(1500, 5), 1500)))
        for _ in range(5):
            svc.driver.step()  # 500 applied, 1,000 still ahead of the processor
        stage = _stage_with_helpers(svc, encoder)
        assert stage.drain() == 500
        assert encoder.helper_pids() == []
    finally:
        encoder.close()
        svc.close()
