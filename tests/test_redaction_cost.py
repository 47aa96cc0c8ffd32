"""Redaction runs on every text an event carries, at every read and every index write: no
text, however it repeats a rule's words, may make it take more than a moment.

The MySQL ``-p`` rule was one lazy pattern from a client's name to its flag, restarted at
every name: a 60 KB line of "mysql mysql ..." took four seconds, growing with the square of
its length. It is now found flag by flag; its answers are the old pattern's (kept here as
the oracle)."""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentlog.processors.redaction import REDACTED, _mysql_passwords, redact

OLD_MYSQL_FLAG = re.compile(
    r"(\b(?:mysql|mysqldump|mysqladmin|mysqlsh|mariadb|mariadb-dump)\b[^\n|;&]*?[ \t]-p)(?![ \t])[^\s]+")


def old_rule(text: str) -> str:
    return OLD_MYSQL_FLAG.sub(lambda m: m.group(1) + REDACTED, text)


PIECES = ["mysql", "mysqldump", "mariadb", "mariadb-dump", "mysqlsh", " ", "\t", "-p", " -p", "-pS3cret", "p",
          "\n", "|", ";", "&", "\r", "x", "-", "_", "é", "--port", "-u", "root", "mysqlx"]  # fmt: skip


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=40).map("".join))
def test_the_mysql_password_rule_redacts_exactly_what_the_single_pattern_did(text: str) -> None:
    assert _mysql_passwords(text) == old_rule(text)


@pytest.mark.parametrize("text", [
    "mysql -u root -pS3cret app < dump.sql",
    "mysqldump -uroot -pS3cret app; mysql -pOther db",
    "mariadb-dump -pA | mysql -pB",
    "echo mysql\n -pNotAFlagOfIt",
    "mysql --port 3306 -p\r -pLater",
])  # fmt: skip
def test_the_mysql_password_rule_on_commands_as_written(text: str) -> None:
    assert _mysql_passwords(text) == old_rule(text)


HOSTILE = {  # each ends with a command whose password must still go
    "client names without a flag": "mysql " * 100_000 + "\nmysql -pS3cret",
    "client names and a flag far away": "mariadb x " * 60_000 + " -pS3cret",
    "a flag after every name": "mysql -pS3cret " * 40_000,
    "names across many commands": "mysql;" * 100_000 + "mysql -pS3cret",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_no_text_that_repeats_a_rules_words_takes_redaction_more_than_a_moment(name: str) -> None:
    """About 600 KB each: the old rule took minutes on the first (quadratic); linear work
    is tens of milliseconds, and the bound leaves a slow machine a hundredfold margin."""
    text = HOSTILE[name]
    started = time.perf_counter()
    redacted = redact(text)
    assert time.perf_counter() - started < 5.0
    assert "S3cret" not in redacted
