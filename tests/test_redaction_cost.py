"""Redaction runs on every text an event carries, at every read and every index write: no
text, however it repeats a rule's words, may make it take more than a moment.

Three rules were single patterns retried at every possible start, each retry reading to the
end of a long run, so their cost grew with the square of the text: the MySQL ``-p`` rule
(from every client name: 60 KB of "mysql mysql ..." took four seconds), the URL password
rule (a scheme tried at every word start of "a.a.a…") and the JWT rule (at every "eyJ" of
"-eyJ-eyJ…"). A 300 KB message stalled the sink and every state read for fifty seconds.
Each is now found from its anchor; its answers are the old pattern's (kept here as the
oracle)."""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentlog.processors.redaction import (
    _WORD_AT, _WORD_AT_ANY_CASE, REDACTED, _assignments, _jwts, _mysql_passwords, _url_passwords, redact,
)
from agentlog.processors.tokens import pieces

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


OLD_URL_PASSWORD = re.compile(r"\b([A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@]*:)[^\s@/]+(?=@)")
OLD_JWT = re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}")

URL_PIECES = ["a", "Z", "9", "+", ".", "-", "_", "é", "://", ":", "/", "@", " ", "\n", "pw", "user", "redis",
              "postgres", "db.internal", ":5432", "%40", "x://", "://:", "a.a.a"]  # fmt: skip
JWT_PIECES = ["eyJ", "eyJhbGciOi", ".", "-", "_", "a", "Z", "9", "abcdefgh", "12345678", " ", "é", "x", "..",
              "-eyJ", "sk-", ":"]  # fmt: skip


@settings(max_examples=2000, deadline=None)
@given(st.lists(st.sampled_from(URL_PIECES), max_size=30).map("".join))
def test_the_url_password_rule_redacts_exactly_what_the_single_pattern_did(text: str) -> None:
    assert _url_passwords(text) == OLD_URL_PASSWORD.sub(lambda m: m.group(1) + REDACTED, text)


@settings(max_examples=2000, deadline=None)
@given(st.lists(st.sampled_from(JWT_PIECES), max_size=30).map("".join))
def test_the_jwt_rule_redacts_exactly_what_the_single_pattern_did(text: str) -> None:
    assert _jwts(text) == OLD_JWT.sub(REDACTED, text)


@pytest.mark.parametrize("text", [
    "connect redis://:hunter22@cache:6379/0 and postgres://app:s3cr3t@db.internal:5432/x",
    "éredis://:pw@h", "_x://u:pw@h", "see a.b+c-d://u:p:w@h then x://y@z",
    "Authorization: eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.abcdefghijkl end",
    "éeyJabcdefghi.abcdefghi.abcdefghi", "-eyJabcdefghi.abcdefghi.abcdefghi.eyJabcdefghi.abcdefghi.abcdefghi",
])  # fmt: skip
def test_the_url_and_jwt_rules_on_text_as_written(text: str) -> None:
    assert _url_passwords(text) == OLD_URL_PASSWORD.sub(lambda m: m.group(1) + REDACTED, text)
    assert _jwts(text) == OLD_JWT.sub(REDACTED, text)


OLD_ASSIGN_RX = (r"(?:secret|token|pass|passphrase|pwd|key|credential|auth|cookie)[\w.\-]{0,60}?"
                 r"(?P<sep>\\?[\"'`]?[ \t]*(?::=|[:=]|%3[Dd])[ \t]*)")
OLD_ASSIGN, OLD_ASSIGN_ANY_CASE = re.compile(OLD_ASSIGN_RX), re.compile(OLD_ASSIGN_RX, re.IGNORECASE)
"""The assignment rule as one pattern, tried from every secret word (4.7 s a megabyte of
"key"): the oracle of the scan from each name that a separator follows."""
ASSIGN_PIECES = ["key", "token", "secret", "passw", "pass", "%3D", "%3d", "%3", "passphrase", "pwd", "auth", "cookie", "credential", "secretoken",
                 "a", "_", ".", "-", "é", "K", "KEY", "\u212a", "=", ":", ":=", "\\", '"', "'", "`", " ", "\t",
                 "\n", "x" * 25, "y" * 30, "İ", "api_"]  # fmt: skip


def _spans(found: object) -> list[tuple[int, int, int]]:
    return [(m.start(), m.start("sep"), m.end()) for m in found]  # type: ignore[attr-defined]


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from(ASSIGN_PIECES), max_size=30).map("".join))
def test_the_assignment_scan_finds_exactly_what_the_single_pattern_found(text: str) -> None:
    lowered = text.lower()
    assert list(_assignments(lowered, _WORD_AT)) == _spans(OLD_ASSIGN.finditer(lowered))
    assert list(_assignments(text, _WORD_AT_ANY_CASE)) == _spans(OLD_ASSIGN_ANY_CASE.finditer(text))


HOSTILE = {  # each ends with a command whose password must still go
    "client names without a flag": "mysql " * 100_000 + "\nmysql -pS3cret",
    "client names and a flag far away": "mariadb x " * 60_000 + " -pS3cret",
    "a flag after every name": "mysql -pS3cret " * 40_000,
    "names across many commands": "mysql;" * 100_000 + "mysql -pS3cret",
    "a dotted run before a scheme": "a." * 300_000 + " redis://:S3cret@cache",
    "a run of eyJ without dots": "-eyJ" * 150_000 + " postgres://u:S3cret@db",
    "a run of eyJ with dots far away": "-eyJ" * 150_000 + ".x.y mysql -pS3cret",
    "secret words without a separator": "key" * 200_000 + " api_key=S3cret",
    "secret words and separators": ("key" * 20 + "=") * 10_000 + " api_key=S3cret",
    "secret words before spaces": "key" * 100_000 + " " * 100_000 + " token: S3cret",
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


def test_a_megabyte_of_newlines_is_cut_into_pieces_in_moments() -> None:
    """``pieces`` added each line to its piece as it came, copying the piece every time: a
    megabyte of newlines (one piece) took seconds, growing with the square of its length."""
    started = time.perf_counter()
    cut = pieces("\n" * 1_000_000 + "x\n/y\n" * 1_000)
    assert time.perf_counter() - started < 5.0
    assert "".join(cut) == "\n" * 1_000_000 + "x\n/y\n" * 1_000 and len(cut) == 1_001
