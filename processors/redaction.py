"""Secret redaction before anything reaches memory, the search index, the state, a
context or a compaction record (SPEC §6). The immutable log keeps the original.

Two entry points, both pure:

- ``redact(text)``: every secret-looking span of a text becomes ``[REDACTED]``: provider
  keys and tokens, ``Authorization`` headers (Basic, Bearer, ...), passwords in URLs
  (also without a scheme: ``admin:pw@db.internal``),
  private-key blocks, CLI password flags (``mysql -pX``, ``--password X``), and any
  assignment whose name says secret, in env (``DB_PASSWORD=x``, ``export X_API_KEY="x"``),
  JSON (``"client_secret": "x"``) or YAML (``password: x``) form; long high-entropy
  tokens too.
- ``redact_value(obj)``: the same through a JSON-like object: a key whose name says secret
  (``password``, ``db.password``, ``apiKey``, ``GITHUB_TOKEN``...) has its whole value
  replaced whatever its shape, recursively, as has the ``value`` of a ``{"key"|"name":
  NAME, "value": ...}`` pair whose NAME says secret (a fact, an env entry); every other
  string goes through ``redact``.

This is on the indexing hot path: each pattern runs only when the text holds one of its
cheap hints (a substring of the lower-cased text), and most text holds none.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping, MutableMapping
from functools import lru_cache
from typing import Any

import orjson

REDACTED = "[REDACTED]"

_SECRET_WORDS = frozenset({
    "secret", "secrets", "token", "password", "passwd", "passphrase", "pwd", "credential",
    "credentials", "authorization", "apikey", "privatekey", "accesskey", "secretkey",
    "cookie", "passcode",
})  # fmt: skip
_SECRET_LAST_WORDS = frozenset({"bearer", "otp", "totp", "hotp"})
"""Words that say secret only as a name's last word: ``BEARER``, ``github_otp``; but
``bearer_format`` or ``otp_length`` name a setting."""
_SECRET_PAIRS = frozenset({("api", "key"), ("private", "key"), ("access", "key"), ("secret", "key"),
                           ("auth", "key"), ("session", "key"), ("signing", "key"), ("encryption", "key"),
                           ("pass", "phrase")})  # fmt: skip
_SECRET_LAST_PAIRS = frozenset({("backup", "code"), ("backup", "codes"), ("recovery", "code"), ("recovery", "codes"),
                                ("webhook", "url"), ("mfa", "code"), ("2fa", "code"), ("otp", "code"),
                                ("totp", "code")})  # fmt: skip
"""Pairs that say secret only as a name's last two words: ``2fa.backup.code``, but not
``backup_code_count``."""
# Also inside a word (PGPASSWORD, DBPASS_SECRET); "token" only as a word (max_tokens stays).
_SECRET_STEMS = ("password", "passwd", "secret", "passphrase", "credential", "apikey", "privatekey",
                 "accesskey",
                 # the same words in the seeds' other languages, for keys a user's statement names
                 "密码", "口令", "密钥", "令牌", "凭据", "パスワード", "トークン", "秘密鍵", "暗証番号", "認証情報")
_NOT_SECRET_NAMES = frozenset({"pwd", "oldpwd"})  # the shell's working directory, not a password
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_WORD_SPLIT = re.compile(r"[^a-z0-9]+")


@lru_cache(maxsize=4096)
def is_secret_name(name: str) -> bool:
    """Whether a key or variable name says it holds a secret: ``DB_PASSWORD``, ``apiKey``,
    ``db.password``, ``x-api-key``, ``client_secret``; not ``max_tokens`` or ``PWD``.
    Remembered: redaction asks it of every key of every record it walks, and records
    share their few key names (a context step asks it of each recalled hit's fields)."""
    lowered = name.lower()
    if lowered in _NOT_SECRET_NAMES:
        return False
    for stem in _SECRET_STEMS:
        if stem in lowered:
            return True
    words = [w for w in _WORD_SPLIT.split(_CAMEL.sub("_", name).lower()) if w]
    if any(w in _SECRET_WORDS for w in words):
        return True
    if words and (words[-1] in _SECRET_LAST_WORDS or tuple(words[-2:]) in _SECRET_LAST_PAIRS):
        return True
    return any(pair in _SECRET_PAIRS for pair in zip(words, words[1:]))


def _keep_prefix(m: re.Match[str]) -> str:
    return m.group(1) + REDACTED


def _basic(m: re.Match[str]) -> str:
    """``Basic <base64>`` outside a header: only when it decodes to ``user:password``, so
    "Basic authentication" stays."""
    token = m.group(2)
    try:
        decoded = base64.b64decode(token + "=" * (-len(token) % 4), validate=True)
    except (binascii.Error, ValueError):
        return m.group(0)
    return m.group(1) + REDACTED if b":" in decoded else m.group(0)


# A quoted value, also with escaped quotes (JSON inside a JSON string: \\"password\\": \\"x\\").
_QUOTED = r"\\\"(?:(?!\\\")[^\n])*\\\"|\"(?:[^\"\\\n]|\\.)*\"|'[^'\n]*'|`[^`\n]*`"
_SCHEME = r"(?:(?i:basic|bearer|token|digest|negotiate|apikey)[ \t]+)?"

# Provider formats, one pass: each holds a run of 15+ token characters, which most text
# lacks (``_LONG_RUN`` gates the pass).
_PROVIDER = re.compile("|".join((
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|$)",
    r"\bsk-(?:proj-|ant-|live-|test-)?[A-Za-z0-9_\-]{16,}",  # OpenAI, Anthropic
    r"\b(?:ghp|gho|ghu|ghs|ghr|github_pat)_[A-Za-z0-9_]{20,}",  # GitHub
    r"\bglpat-[A-Za-z0-9_\-]{20,}",  # GitLab
    r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",  # AWS access key ids
    r"\bAIza[0-9A-Za-z_\-]{35}\b",  # Google
    r"\bxox[abprse]-[A-Za-z0-9\-]{10,}",  # Slack
    r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}",  # Stripe
)))
# Webhook URLs whose path is the secret (Slack, Discord); run only when the text names one.
_WEBHOOK = re.compile(r"(?<=hooks\.slack\.com/)(?:services|workflows|triggers)/[A-Za-z0-9/_\-]{15,}"
                      r"|(?<=/api/webhooks/)\d+/[A-Za-z0-9_\-]{15,}")
_LONG_RUN = re.compile(r"[A-Za-z0-9_\-]{15}")

# A URL's password (``redis://:pw@``, ``postgres://app:pw@db``): the part after the user's
# ``:`` up to the ``@``. Found from each ``://`` (``_url_passwords``): one pattern that
# tried a scheme at every word start read a long dotted run ("a.a.a…") to its end each time.
_SCHEME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-")
_URL_USER_THEN_PASSWORD = re.compile(r"[^\s:/@]*:([^\s@/]+)(?=@)")
# A JWT: ``eyJ…`` (8+), ``.``, 8+, ``.``, 8+ of ``[A-Za-z0-9_-]``. Found by its dotted
# segments (``_jwts``): one pattern tried at every ``eyJ`` read a long "-eyJ-eyJ…" to its end.
_TOKEN_RUN = re.compile(r"(?<![A-Za-z0-9_.\-])[A-Za-z0-9_.\-]+")
# The same without a scheme (``admin:pw@db.internal:5432/app``, a DSN's user part): only
# before a host that looks like one (dotted, localhost, with a port, or Go's MySQL
# ``@tcp(host:port)`` and ``@unix(socket)``), so ``12:30@home``
# stays; a user part inside a URL (after ``/``) is the rule above's. Found from the ``:``
# (a search from every word start cost half of ``redact`` on a git log).
_PASSWORD_AT_HOST = re.compile(
    r":(?!\[REDACTED\])[^\s@/:]+(?=@(?:localhost\b|[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)+|[A-Za-z0-9.\-]+:\d|(?:tcp|unix)\())")
_USER_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.%+-")
_BEFORE_USER = frozenset("./:@-")


def _redact_host_passwords(text: str) -> str:
    out: list[str] = []
    done = 0
    for m in _PASSWORD_AT_HOST.finditer(text):
        user = m.start()
        while user > 0 and text[user - 1] in _USER_CHARS:
            user -= 1
        if user == m.start() or not (text[user].isalpha() or text[user] == "_"):
            continue  # no user name before the colon (a time, a port)
        if user > 0 and (text[user - 1] in _BEFORE_USER or text[user - 1].isalnum()):
            continue
        out += (text[done : m.start() + 1], REDACTED)
        done = m.end()
    if not out:
        return text
    out.append(text[done:])
    return "".join(out)


_BEARER = re.compile(r"\b((?i:bearer|token)[ \t]+)[A-Za-z0-9._~+/\-]{12,}=*")
_BASIC = re.compile(r"\b((?i:basic)[ \t]+)([A-Za-z0-9+/]{8,}={0,2})(?![A-Za-z0-9+/=])")
# A MySQL client's ``-pPASSWORD``: the first ``-p`` flag after the client's name in the same
# command (up to a newline, ``|``, ``;`` or ``&``). Found flag by flag (``_mysql_passwords``):
# one lazy pattern from the name to the flag restarted at every name, and a line of
# "mysql mysql mysql ..." took seconds per 60 KB, growing with the square of its length.
_MYSQL_CLIENT = re.compile(r"\b(?:mysql|mysqldump|mysqladmin|mysqlsh|mariadb|mariadb-dump)\b")
_P_FLAG = re.compile(r"[ \t]-p(?=\S)")
_LOGIN = re.compile(r"(?i)\blogin\b")
_LOGIN_P_FLAG = re.compile(r"[ \t]-p(?:[ \t]+|=)(?=[^\s\[])")  # a login's -p is its password
# "the login for staging is admin / Tr0ub4dor&3": "login" (for a place of up to three words), is/was,
# a user name that starts with a letter, then ":" or "/" close to it or " / " spaced on both
# sides, then the password. "The login endpoint is POST /api/login" or "last login was
# 10:15:32" are no such thing.
_LOGIN_PAIR = re.compile(
    r"(?i)(\b(?:login|logon|sign[- ]?in)(?:[ \t]+(?:for|to|on|of)(?:[ \t]+[^\s:/]{1,40}){1,3}?)?[ \t]+(?:is|was)[ \t]*:?[ \t]+"
    r"[A-Za-z_][^\s/:]{0,63}(?::|/|[ \t]+/[ \t]+))(?![/\[])(\S+)")
_COMMAND_END = re.compile(r"[\n|;&]")
_NON_SPACE = re.compile(r"\S+")

def _prose_value(m: re.Match[str]) -> str:
    """"the password is X": X when it is quoted, or looks like a secret rather than a word
    ("the token is expired", "the password is wrong" stay): four characters or more, with
    a digit or a symbol."""
    value = m.group(2)
    if value[:1] in "\"'`" and len(value) >= 2 and value[-1] == value[0]:
        return m.group(1) + value[0] + REDACTED + value[0]
    if _looks_secret(value):
        core = value.rstrip(".,;:!?)]")
        return m.group(1) + REDACTED + value[len(core):]
    return m.group(0)


_SECRET_LIKE = re.compile(r"[0-9!@#$%^&*+/=~_\-]")


def _looks_secret(value: str) -> bool:
    """A value rather than a word: four characters or more with a digit or a symbol."""
    core = value.rstrip(".,;:!?)]")
    return len(core) >= 4 and _SECRET_LIKE.search(core) is not None


def _named_value(m: re.Match[str]) -> str:
    """The value after ``m.group(1)``, ``[REDACTED]`` when the name it holds (group 2) says secret."""
    return m.group(1) + REDACTED if is_secret_name(m.group(2)) else m.group(0)

# Rules about a named secret; they run only when the text holds one of these words.
_NAMED_HINTS = ("key", "secret", "token", "pass", "pwd", "auth", "credential", "cookie")
_NAMED: tuple[tuple[tuple[str, ...], re.Pattern[str], Callable[[re.Match[str]], str]], ...] = tuple(
    (hints, re.compile(rx), repl)
    for hints, rx, repl in (
        # Before the assignments: "Authorization: Basic X" must lose X, not the word Basic.
        (("authorization",),
         r"(?i)(\b(?:proxy-)?authorization[\"']?[ \t]*[:=][ \t]*[\"']?" + _SCHEME + r")[^\s\"',;]+", _keep_prefix),
        (("sshpass",), r"(\bsshpass[ \t]+-p[ \t]*)[^\s]+", _keep_prefix),
        (("-pass", "-pwd", "-token", "-secret", "-api", "-access", "-auth", "-client", "-private"),
         r"(?i)((?<![\w-])--?(?:password|passwd|pass|pwd|token|secret|api-key|apikey|access-key|secret-key"
         r"|auth-token|client-secret|private-key)(?:[ \t]+|[ \t]*=[ \t]*))(?!-)(?:" + _QUOTED + r"|[^\s\"'`]+)",
         _keep_prefix),
        # In prose: "the db password is X", "my API key was 'X'", "token is: X", "set the password to X".
        (("pass", "secret", "token", "key", "credential"),
         r"(?i)(\b(?:password|passwd|passphrase|secret|token|api[ _-]?key|access[ _-]?key|secret[ _-]?key"
         r"|private[ _-]?key|credentials?)[ \t]+(?:is|was|to)(?:[ \t]*:)?[ \t]+)(" + _QUOTED + r"|[^\s\"'`]+)",
         _prose_value),
        # An element that names a secret: <password>X</password>, <ns:apiKey>X</ns:apiKey>.
        (("</",), r"(<(?:[\w.\-]+:)?([\w.\-]+)>)([^<\s][^<]*)(?=</)", _named_value),
        # A tool's own setting command: `aws configure set aws_secret_access_key X`, `npm config set _authToken X`.
        (("config",), r"(?i)(\bconfig(?:ure)?[ \t]+set[ \t]+([\w.\-]+)[ \t]+)(" + _QUOTED + r"|[^\s\"'`]+)",
         _named_value),
    )
)

# curl, wget and the like: `-u user:password`, `--user user:password` (the user stays).
_USER_FLAG = re.compile(r"((?<![\w-])(?:-u|--user)[ \t]*=?[ \t]*[^\s:\"'`/]{1,256}:)(?!\[REDACTED\])[^\s\"'`]+")

# ``NAME <sep> value`` in env, JSON, YAML or code form: a secret word in a name's last 60
# characters, then the separator. Found from each run of name characters that a separator
# follows, and only in that run's end: a single pattern tried from every secret word read
# up to 60 characters after each one ("key" repeated: 4.7 s a megabyte).
_NAME_WORDS = r"secret|token|passphrase|pass|pwd|key|credential|auth|cookie"  # a word before its prefix
_NAME_TAIL = 60
"""Name characters at most between the secret word and the separator."""
_LONGEST_WORD = 10
_ASSIGN_SEP = re.compile(r"\\?[\"'`]?[ \t]*(?::=|[:=]|%3[Dd])[ \t]*")  # %3D: "=" in a URL-encoded body
_NAME_BEFORE_SEP = re.compile(r"(?<![\w.\-])[\w.\-]++(?=\\?[\"'`]?[ \t]*(?:[:=]|%3[Dd]))")
# Each place a secret word starts (overlapping ones too). In the lower-cased text: a
# case-sensitive search skips ahead on the first letters, ten times faster.
_WORD_AT = re.compile(rf"(?=({_NAME_WORDS}))")
_WORD_AT_ANY_CASE = re.compile(rf"(?=({_NAME_WORDS}))", re.IGNORECASE)
_VALUE = re.compile(r"(?!\[REDACTED\])" + _SCHEME + r"(?P<value>" + _QUOTED + r"|[^\s\"'`]+)")
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


def _assignments(text: str, words: re.Pattern[str]) -> Iterator[tuple[int, int, int]]:
    """``(secret word's start, separator's start, separator's end)`` of each assignment, in
    order: in each run of name characters that a separator follows, the first secret word
    at most ``_NAME_TAIL`` characters before the run's end. A word and its name's tail are
    name characters and a separator starts with none, so the tail always ends at the run's
    end, and a run holds at most one assignment: a linear scan."""
    for run in _NAME_BEFORE_SEP.finditer(text):
        run_start, sep = run.span()
        for word in words.finditer(text, max(run_start, sep - _NAME_TAIL - _LONGEST_WORD), sep):
            if sep - word.end(1) <= _NAME_TAIL:
                sep_match = _ASSIGN_SEP.match(text, sep)
                if sep_match is not None:
                    yield word.start(), sep, sep_match.end()
                break


def _maybe_secret_name(name: str) -> bool:
    """A name that holds a secret when its value looks like one (``_looks_secret``):
    ``pass`` (``DB_PASS=h2x!9``, but ``pass=3``, a count of passed tests, stays) and an
    environment variable's ``…_KEY`` (``STRIPE_KEY=…``, but ``SORT_KEY=name`` stays)."""
    words = [w for w in _WORD_SPLIT.split(name.lower()) if w]
    if not words:
        return False
    return words[-1] == "pass" or (words[-1] == "key" and len(words) > 1 and name.isupper())


def _redact_assignments(text: str, lowered: str) -> str:
    """The value of every assignment whose whole name says secret (by words, so
    ``max_tokens=5`` and ``KeyError: x`` stay)."""
    out: list[str] = []
    done = 0
    # Lower-casing keeps offsets but for a few letters (İ): then search the text itself.
    found = _assignments(lowered, _WORD_AT) if len(lowered) == len(text) else _assignments(text, _WORD_AT_ANY_CASE)
    for word, sep, end in found:
        start = word
        if start < done:
            continue  # inside a value already replaced
        while start > 0 and start - word > -80 and text[start - 1] in _NAME_CHARS:
            start -= 1
        strict = is_secret_name(text[start:sep])
        if not strict and not _maybe_secret_name(text[start:sep]):
            continue
        v = _VALUE.match(text, end)
        if v is None:
            continue
        value = v.group("value")
        if not strict and not _looks_secret(value.strip("\"'`\\")):
            continue
        if value.startswith('\\"') and len(value) >= 4 and value.endswith('\\"'):
            masked = '\\"' + REDACTED + '\\"'
        elif value[:1] in "\"'`" and len(value) >= 2 and value[-1] == value[0]:
            masked = value[0] + REDACTED + value[0]
        else:
            masked = REDACTED
        out += (text[done:v.start("value")], masked)
        done = v.end()
    if not out:
        return text
    out.append(text[done:])
    return "".join(out)


_CANDIDATE = re.compile(r"[A-Za-z0-9+/_\-]{32,}={0,2}")
_LOWER, _UPPER, _DIGIT = re.compile(r"[a-z]"), re.compile(r"[A-Z]"), re.compile(r"[0-9]")


def _entropy(token: str) -> float:
    counts = Counter(token)
    n = len(token)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def _high_entropy(match: re.Match[str]) -> str:
    token = match.group(0)
    classes = sum(bool(rx.search(token)) for rx in (_LOWER, _UPPER, _DIGIT))
    # Hex digests and paths are long but low-entropy or single-class; keys are mixed.
    if classes >= 3 and _entropy(token) >= 4.0:
        return REDACTED
    return token


def _url_passwords(text: str) -> str:
    """Each URL password ``[REDACTED]``, found from each ``://``: its scheme is the run of
    scheme characters before it (from its first letter at a word start), its user and
    password the text after it up to an ``@``. Each character is read a bounded number of
    times: the runs before two ``://`` never overlap (``:`` is not a scheme character)."""
    out: list[str] = []
    done = 0
    for sep in re.finditer("://", text):
        at = sep.start()
        if at < done:
            continue  # inside a password already replaced
        start = at
        while start > done and text[start - 1] in _SCHEME_CHARS:
            start -= 1
        while start < at and not (text[start].isascii() and text[start].isalpha() and _word_starts(text, start)):
            start += 1
        if start == at:
            continue  # no scheme: no letter starts a word before the "://"
        rest = _URL_USER_THEN_PASSWORD.match(text, sep.end())
        if rest is None:
            continue
        out += (text[done:rest.start(1)], REDACTED)
        done = rest.end(1)
    if not out:
        return text
    out.append(text[done:])
    return "".join(out)


def _jwts(text: str) -> str:
    """Each JWT ``[REDACTED]``: in each run of ``[A-Za-z0-9_.-]``, three ``.``-separated
    segments, the first holding ``eyJ`` at a word start with 8+ characters after it (from
    the first such ``eyJ``), the other two 8+ long; the search goes on after the third."""
    out: list[str] = []
    done = 0
    for run in _TOKEN_RUN.finditer(text):
        if run.group().count(".") < 2 or "eyJ" not in run.group():
            continue
        offset, segments = run.start(), run.group().split(".")
        i = 0
        while i + 2 < len(segments):
            first, second, third = segments[i : i + 3]
            begin = _jwt_start(first, offset > run.start() or _word_starts(text, offset))
            if begin is not None and len(second) >= 8 and len(third) >= 8:
                out += (text[done : offset + begin], REDACTED)
                done = offset + len(first) + len(second) + len(third) + 2
                offset, i = done + 1, i + 3
                continue
            offset, i = offset + len(first) + 1, i + 1
    if not out:
        return text
    out.append(text[done:])
    return "".join(out)


def _word_starts(text: str, at: int) -> bool:
    """Whether a word starts at ``at`` (``\\b`` before a word character): nothing before it,
    or a character that is not one of ``\\w`` (``isalnum`` or ``_``, as ``re`` has it)."""
    return at == 0 or not (text[at - 1].isalnum() or text[at - 1] == "_")


def _jwt_start(segment: str, word_at_start: bool) -> int | None:
    """Where a JWT's first part starts in ``segment`` (one dot-free piece of a run): its
    first ``eyJ`` at a word start (after a ``-``, or at the segment's start when
    ``word_at_start``) with 8+ after it."""
    at = segment.find("eyJ")
    while at != -1 and len(segment) - at - 3 >= 8:
        if segment[at - 1] == "-" if at else word_at_start:
            return at
        at = segment.find("eyJ", at + 1)
    return None


def _mysql_passwords(text: str) -> str:
    """Each MySQL client's first ``-p`` flag value in its command, ``[REDACTED]``."""
    return _first_flag_values(text, _MYSQL_CLIENT, _P_FLAG)


def _login_passwords(text: str) -> str:
    """``docker login -u me -p X`` (any command's ``login``): X, ``[REDACTED]``."""
    return _first_flag_values(text, _LOGIN, _LOGIN_P_FLAG)


def _first_flag_values(text: str, clients: re.Pattern[str], flag: re.Pattern[str]) -> str:
    """The value of each command's first ``flag`` after one of the ``clients`` (in the
    same command), ``[REDACTED]``: the flags and the command ends are each found once, and
    each client name looks its flag up (``bisect``), so the cost grows with the text,
    whatever it repeats."""
    flags = [m.end() for m in flag.finditer(text)]  # where each flag's value starts
    if not flags:
        return text
    ends = [m.start() for m in _COMMAND_END.finditer(text)]
    out: list[str] = []
    done = 0
    for client in clients.finditer(text):
        if client.start() < done:
            continue  # inside a value already replaced
        i = bisect_left(flags, client.end() + 3)  # a flag " -p" starts at the name's end or after it
        if i == len(flags):
            break  # no flag after this name, nor after any later one
        value_at = flags[i]
        j = bisect_left(ends, client.end())
        if j < len(ends) and ends[j] < value_at:
            continue  # its command ended before the flag
        value = _NON_SPACE.match(text, value_at)
        assert value is not None  # a flag is followed by a non-space character
        out += (text[done:value_at], REDACTED)
        done = value.end()
    if not out:
        return text
    out.append(text[done:])
    return "".join(out)


def redact(text: str) -> str:
    """``text`` with every secret-looking span replaced by ``[REDACTED]``."""
    if not text:
        return text
    # Cheap checks first: most text holds none of these hints and no long token, and a
    # dozen regex passes per event would dominate the indexing path.
    long_run = _LONG_RUN.search(text) is not None
    if long_run or "PRIVATE KEY" in text:
        if "eyJ" in text:  # first: a key pattern inside a JWT would leave the JWT's other parts
            text = _jwts(text)
        text = _PROVIDER.sub(REDACTED, text)
        if "hooks.slack.com/" in text or "/api/webhooks/" in text:
            text = _WEBHOOK.sub(REDACTED, text)
    lowered = text.lower()
    if "://" in lowered:
        text = _url_passwords(text)
    if "@" in text and ":" in text:
        text = _redact_host_passwords(text)
    if "mysql" in lowered or "mariadb" in lowered:
        text = _mysql_passwords(text)
    if "login" in lowered:  # docker login -u me -p X
        text = _login_passwords(text)
    if "login" in lowered or "logon" in lowered or "sign" in lowered:  # the login for X is user / pw
        text = _LOGIN_PAIR.sub(_prose_value, text)
    if "bearer" in lowered or "token" in lowered:
        text = _BEARER.sub(_keep_prefix, text)
    if "basic" in lowered:
        text = _BASIC.sub(_basic, text)
    if "-u" in lowered:  # curl -u user:password (--user too)
        text = _USER_FLAG.sub(_keep_prefix, text)
    for word in _NAMED_HINTS:  # a plain loop: a third faster than any() over a generator
        if word in lowered:
            for hints, pattern, replacement in _NAMED:
                for hint in hints:
                    if hint in lowered:
                        text = pattern.sub(replacement, text)
                        break
            text = _redact_assignments(text, text.lower())
            break
    # A high-entropy token is a run of 32+: none without a run of 15 (redaction makes none).
    if not long_run or _CANDIDATE.search(text) is None:
        return text
    return _CANDIDATE.sub(_high_entropy, text)


def _names_secret(pair: dict[Any, Any]) -> bool:
    """A ``{"key"|"name": NAME, "value": ...}`` pair (a fact, a Kubernetes env entry, an AWS
    tag) whose NAME says secret."""
    for field in ("key", "name", "Key", "Name"):
        named = pair.get(field)
        if isinstance(named, str):
            return is_secret_name(named)
    return False


def _hides(key: Any, in_secret_pair: bool) -> bool:
    """Whether the value under ``key`` goes whole: the key names a secret, or it is the
    ``value`` of a pair whose name does."""
    return isinstance(key, str) and (is_secret_name(key) or (in_secret_pair and key in ("value", "Value")))


def _walk(value: Any, leaf: Callable[[Any], Any]) -> Any:
    if isinstance(value, dict):
        if len(value) <= _FEW_KEYS and not _may_hide(tuple(value)):  # most dicts: keys seen before, none hides
            return {k: leaf(v) if type(v) in _SCALARS else _walk(v, leaf) for k, v in value.items()}
        pair = ("value" in value or "Value" in value) and _names_secret(value)
        return {k: (_masked(v) if _hides(k, pair) else _walk(v, leaf)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if leaf is _redact_leaf and value and _short_texts(value):
            return list(map(_redact_short, value))  # ids, names: each text is one cache hit, in C
        return [_walk(v, leaf) for v in value]
    return leaf(value)


_FEW_KEYS = 16
_SCALARS = frozenset({str, int, float, bool, type(None)})
"""Types ``_walk`` hands straight to its leaf (what it does with them anyway)."""


@lru_cache(maxsize=4096)
def _may_hide(keys: tuple[Any, ...]) -> bool:
    """Whether a dict with these keys may have a value to mask: a key names a secret, or it
    may be a secret-named pair (``_names_secret`` decides that from its values)."""
    return "value" in keys or "Value" in keys or any(isinstance(k, str) and is_secret_name(k) for k in keys)


def _short_texts(values: list[Any] | tuple[Any, ...]) -> bool:
    """Whether every value is a ``str`` that ``_redact_leaf`` redacts through the cache."""
    return set(map(type, values)) == {str} and max(map(len, values)) <= _SHORT


def _masked(value: Any) -> Any:
    # Nothing to hide in an absent value or a flag; anything else goes, whatever its shape.
    return value if value is None or value == "" or isinstance(value, bool) else REDACTED


def _as_is(value: Any) -> Any:
    return value


@lru_cache(maxsize=16384)
def _redact_short(text: str) -> str:
    """``redact``, remembered: states and contexts are read again and again with the same
    short strings (ids, names, texts). Not on the indexing path, where every text is new."""
    return redact(text)


def _redact_leaf(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    return _redact_short(value) if len(value) <= _SHORT else redact(value)


_SHORT = 512
"""Texts up to this long are redacted through the cache."""


def mask_secret_keys(value: Any) -> Any:
    """``value`` with the whole value of every key that names a secret replaced, at any
    depth; other strings are left for ``redact`` (the caller redacts the text it renders
    from them, once)."""
    return _walk(value, _as_is)


def redact_value(value: Any, memo: MutableMapping[bytes, bytes] | None = None) -> Any:
    """A JSON-like ``value`` with secret-named keys masked and every string redacted.

    ``memo`` (a list item's JSON -> its redaction's JSON) spares the items of a long list
    that are the same as last time: a state read after one more event finds all its plan
    steps, files and failures but the changed one there. A list item is redacted on its own
    (nothing outside it changes what it hides), so the result is the same with or without."""
    if memo is None:
        return _walk(value, _redact_leaf)
    if isinstance(value, dict):
        pair = ("value" in value or "Value" in value) and _names_secret(value)
        return {k: (_masked(v) if _hides(k, pair) else redact_value(v, memo)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        # A whole list that did not change is one lookup; one that did, one per item.
        return _remembered(value, memo, lambda: [_remembered(v, memo, lambda v=v: _walk(v, _redact_leaf))
                                                 if isinstance(v, dict) else redact_value(v, memo) for v in value])
    return _redact_leaf(value)


def _remembered(value: Any, memo: MutableMapping[bytes, bytes], redacted: Callable[[], Any]) -> Any:
    try:
        key = orjson.dumps(value)
    except TypeError:  # not plain JSON: nothing to remember it by
        return redacted()
    done = memo.get(key)
    if done is not None:
        return orjson.loads(done)  # a fresh copy: the caller may change what it gets
    out = redacted()
    memo[key] = orjson.dumps(out)
    return out


def redact_fields(record: dict[str, Any], keys: Collection[str]) -> dict[str, Any]:
    """``redact_value(record)`` with only its ``keys`` (those it has): a caller that reads a
    few fields of a wide record redacts just those. A field is redacted as in the whole
    (masked whole when its key names a secret, or when it is the value of a secret pair)."""
    pair = ("value" in record or "Value" in record) and _names_secret(record)
    return {k: (_masked(v) if _hides(k, pair) else _redact_leaf(v) if type(v) is str else _walk(v, _redact_leaf))
            for k, v in record.items() if k in keys}  # fmt: skip


def redact_reusing(value: Any, redact: bool, last: Mapping[int, tuple[Any, Any]], kept: dict[int, tuple[Any, Any]],
                   finish: Callable[[Any], Any]) -> Any:  # fmt: skip
    """``finish(redact_if(redact, value))``, ``finish`` applied to every dict and list
    (``read_only``). A dict entry of a list that is the very object (``is``) of one in
    ``last`` (id -> (entry, what this made of it): the memo ``kept`` got the last time)
    is taken as it was made: a rolling summary keeps its unchanged entries as the same
    objects from fold to fold, so a new one costs its new entries only."""
    if isinstance(value, dict):
        pair = redact and ("value" in value or "Value" in value) and _names_secret(value)
        return finish({k: (finish(_masked(v)) if redact and _hides(k, pair) else
                           redact_reusing(v, redact, last, kept, finish)) for k, v in value.items()})  # fmt: skip
    if isinstance(value, (list, tuple)):
        if value and set(map(type, value)) == {dict}:
            out = []
            for item in value:
                held = last.get(id(item))
                made = held[1] if held is not None and held[0] is item else finish(
                    _walk(item, _redact_leaf) if redact else item)
                kept[id(item)] = (item, made)
                out.append(made)
            return finish(out)
        return finish([redact_reusing(v, redact, last, kept, finish) for v in value])
    return _redact_leaf(value) if redact else value


def redact_if(enabled: bool, value: Any, memo: MutableMapping[bytes, bytes] | None = None) -> Any:
    """``redact_value(value, memo)`` unless redaction is turned off (``AGENTLOG_REDACT=off``)."""
    return redact_value(value, memo) if enabled else value


def contains_secret(text: str) -> bool:
    return redact(text) != text


__all__ = [
    "REDACTED", "contains_secret", "is_secret_name", "mask_secret_keys", "redact", "redact_if",
    "redact_fields", "redact_reusing", "redact_value",
]  # fmt: skip
