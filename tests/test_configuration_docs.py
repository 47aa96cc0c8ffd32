"""Issue 13, item 5: docs/configuration.md documents every setting, and only real ones.

"What the code reads" is every `AGENTLOG_*` name written in the code (the installed
package, `infra/` and the tests): settings are read by name (`streams/config._ENV`, or
`os.environ.get("AGENTLOG_…")`), so a name that appears nowhere cannot be read, and a new
one cannot be added without appearing. Each must have a row in one of the page's tables;
the page may name no other; and for the variables behind `Settings`, the row's default is
the code's default.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agentlog.streams.config import _ENV, Settings

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "configuration.md"
CODE_DIRS = ("agentlog", "schemas", "processors", "sinks", "streams", "bench", "infra", "tests")
CODE_SUFFIXES = {".py", ".yml", ".yaml", ".toml", ".sql", ".sh", ""}  # "": infra/up, infra/down

# A whole name: `AGENTLOG_SQL_` (a prefix in a message) or `AGENTLOG_{x}` is not one.
_NAME = re.compile(r"\bAGENTLOG_[A-Z0-9]+(?:_[A-Z0-9]+)*\b")
_ROW = re.compile(r"^\|\s*`(AGENTLOG_[A-Z0-9_]+)`\s*\|\s*([^|]*?)\s*\|", re.M)


def code_files() -> list[Path]:
    files = [ROOT / "pyproject.toml"]
    for folder in CODE_DIRS:
        for path in (ROOT / folder).rglob("*"):
            if path.is_file() and path.suffix in CODE_SUFFIXES and "__pycache__" not in path.parts \
                    and path != Path(__file__).resolve():  # fmt: skip
                files.append(path)
    return files


def names_in_code() -> dict[str, Path]:
    """Every AGENTLOG_* name the code reads, with one file that names it."""
    found: dict[str, Path] = {}
    for path in code_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # a binary file
        for name in _NAME.findall(text):
            found.setdefault(name, path.relative_to(ROOT))
    return found


def documented_rows(text: str) -> dict[str, str]:
    """Variable -> its default cell, from the page's table rows."""
    return {name: default for name, default in _ROW.findall(text)}


def expected_default(field: str) -> str:
    """A Settings field's default as the page writes it."""
    value = getattr(Settings(), field)
    if value is None or value == "":
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`"


def test_every_setting_the_code_reads_has_a_row_in_the_configuration_page() -> None:
    rows = documented_rows(DOC.read_text(encoding="utf-8"))
    missing = {name: str(path) for name, path in names_in_code().items() if name not in rows}
    assert missing == {}, f"add a row to docs/configuration.md for: {missing}"


def test_the_configuration_page_names_no_variable_the_code_does_not_read() -> None:
    read = names_in_code()
    named = set(_NAME.findall(DOC.read_text(encoding="utf-8")))
    assert sorted(named - set(read)) == []


def test_every_settings_variable_is_read_through_the_config_module_and_documented() -> None:
    # The variables behind Settings are found by the scan too (config.py names them).
    assert set(_ENV.values()) <= set(names_in_code())


@pytest.mark.parametrize("field", sorted(_ENV), ids=lambda f: _ENV[f])
def test_the_configuration_page_gives_the_codes_default_for_each_setting(field: str) -> None:
    rows = documented_rows(DOC.read_text(encoding="utf-8"))
    assert rows.get(_ENV[field]) == expected_default(field)


def test_the_scan_finds_whole_names_and_the_rows_they_need() -> None:
    text = 'os.environ.get("AGENTLOG_NEW_THING") and f"AGENTLOG_{x}" or "AGENTLOG_SQL_ limits"'
    assert _NAME.findall(text) == ["AGENTLOG_NEW_THING"]
    page = "| `AGENTLOG_NEW_THING` | `3` | both | does |\n| other | x |\nsee `AGENTLOG_OLD`"
    assert documented_rows(page) == {"AGENTLOG_NEW_THING": "`3`"}
    assert "AGENTLOG_OLD" in _NAME.findall(page) and "AGENTLOG_OLD" not in documented_rows(page)
