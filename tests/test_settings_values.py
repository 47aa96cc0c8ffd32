"""A setting that is not a number says which setting it is, whether it came from the
environment or from ``agentlog.toml``, and the command exits with that message."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agentlog.streams.config import Settings


@pytest.mark.parametrize(("var", "value"), [("AGENTLOG_COMPACT_WINDOW_TOKENS", "abc"), ("AGENTLOG_GRACE_SECONDS", "abc"),
                                            ("AGENTLOG_GRACE_SECONDS", "nan"), ("AGENTLOG_REFRESH_SECONDS", "inf"),
                                            ("AGENTLOG_BATCH_SIZE", "1.5")])  # fmt: skip
def test_a_setting_that_is_not_a_number_names_its_variable(tmp_path: Path, var: str, value: str) -> None:
    with pytest.raises(ValueError, match=f"{var}='{value}' is not"):
        Settings.from_env({"AGENTLOG_DATA_DIR": str(tmp_path), var: value})


def test_a_setting_in_the_config_file_that_is_not_a_number_names_the_file_and_key(tmp_path: Path) -> None:
    (tmp_path / "agentlog.toml").write_text('grace_seconds = "soon"\n')
    with pytest.raises(ValueError, match="agentlog.toml: grace_seconds='soon' is not a number"):
        Settings.from_env({"AGENTLOG_DATA_DIR": str(tmp_path)})
    assert Settings.from_env({"AGENTLOG_DATA_DIR": str(tmp_path), "AGENTLOG_GRACE_SECONDS": "12"}).grace_seconds == 12.0


def test_a_command_given_a_setting_that_is_not_a_number_says_so_and_exits(tmp_path: Path) -> None:
    env = {"AGENTLOG_DATA_DIR": str(tmp_path), "AGENTLOG_COMPACT_WINDOW_TOKENS": "abc", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", "agentlog", "state", "t1"], env=env, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert done.returncode != 0
    assert "AGENTLOG_COMPACT_WINDOW_TOKENS='abc' is not a whole number" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(("var", "value"), [("AGENTLOG_SQL_TIMEOUT_SECONDS", "0"), ("AGENTLOG_SQL_TIMEOUT_SECONDS", "-1"),
                                            ("AGENTLOG_SQL_MAX_ROWS", "0"), ("AGENTLOG_SQL_MAX_ROWS", "-5"),
                                            ("AGENTLOG_SQL_MAX_MEMORY_BYTES", "0"), ("AGENTLOG_MAX_EVENT_BYTES", "-1"),
                                            ("AGENTLOG_BATCH_SIZE", "0")])  # fmt: skip
def test_a_limit_of_zero_or_less_is_refused_naming_its_variable_never_taken_as_no_limit(
        tmp_path: Path, var: str, value: str) -> None:  # fmt: skip
    with pytest.raises(ValueError, match=f"{var}='{value}' must be above 0"):
        Settings.from_env({"AGENTLOG_DATA_DIR": str(tmp_path), var: value})
    assert Settings.from_env({"AGENTLOG_DATA_DIR": str(tmp_path), "AGENTLOG_SQL_TIMEOUT_SECONDS": "0.5"}).sql_timeout_seconds == 0.5
