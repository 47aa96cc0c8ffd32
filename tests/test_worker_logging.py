"""A Kafka worker logs at the level it was started with, and builds no record below it:
a per-event INFO line costs nothing unless ``agentlog -v`` asked for it. (That the lines
reach the worker's log with ``-v``, and only then, is checked on a real broker in
``test_distributed``.)"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import faust
import pytest

from agentlog.streams.config import Settings
from agentlog.streams.kafka.app import create_app, quiet_worker


@pytest.fixture
def app(tmp_path: Path) -> Iterator[faust.App]:
    app = create_app(Settings(data_dir=tmp_path, kafka_bootstrap="127.0.0.1:9", kafka_namespace="quiet"))
    yield app  # connects to no broker
    app.conf.agentlog_log_store.close()  # chDB holds one data directory per process


@pytest.fixture
def root_logging() -> Iterator[None]:
    """The worker configures the root logger: put it back for the other tests."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.mark.parametrize(("loglevel", "info_enabled"), [("warn", False), ("info", True)])
def test_a_worker_builds_no_log_record_below_its_level(app: faust.App, root_logging: None, loglevel: str,
                                                       info_enabled: bool) -> None:  # fmt: skip
    worker = quiet_worker(app, loglevel=loglevel)
    worker.redirect_stdouts = False  # pytest holds stdout
    worker._setup_logging()  # what the worker does as it starts
    assert logging.getLogger("agentlog.processor").isEnabledFor(logging.INFO) is info_enabled
    assert not logging.getLogger("aiokafka").isEnabledFor(logging.DEBUG)
    assert logging.getLogger().getEffectiveLevel() == (logging.WARNING if loglevel == "warn" else logging.INFO)
