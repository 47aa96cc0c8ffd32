from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from streams.config import Settings
from streams.service import EmbeddedService


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path / "data")


@pytest.fixture
def service(settings: Settings) -> Iterator[EmbeddedService]:
    svc = EmbeddedService(settings)
    yield svc
    svc.close()


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTLOG_")}
    env["AGENTLOG_DATA_DIR"] = str(tmp_path / "cli-data")
    return env
