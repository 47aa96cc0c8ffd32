"""Explicit statements in a user's message, in English, Japanese and Chinese.

A statement is a sentence that opens with a trigger ("remember ...", "from now on ...",
"for this project, ...", "our X is Y"; 「覚えておいて」, 今後は, このプロジェクトでは; 记住,
以后, 这个项目, 我们的) and says "X is Y" (a fact keyed by X) or, after "remember" or
"from now on", anything else (a ``preference.`` of the user's). X's words, joined by dots,
are the key: "our Java version is 21" and ``java -version`` speak of one ``java.version``. Hedged sentences ("maybe",
たぶん, 可能), questions and hostile text are never statements. "the X is Y" alone is no
statement: it needs a trigger that gives it this project's scope.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agentlog.processors.memory_extract.text import (
    clean_value, is_hedged, is_hostile, names_steering, privileged, sentences, slug,
)


@dataclass(frozen=True, slots=True)
class Statement:
    key: str
    value: str


_I = re.IGNORECASE
_PROJECT_EN = r"(?:\s+(?:for|in)\s+(?:this|the|our)\s+project)?"
# Each trigger: (pattern with a ``rest`` group, whether a non-"X is Y" rest is a preference).
TRIGGERS: tuple[tuple[re.Pattern[str], bool], ...] = (
    (re.compile(rf"^(?:please\s+)?(?:remember|keep\s+in\s+mind){_PROJECT_EN}(?:\s+that)?{_PROJECT_EN}\s*[:,\-]?\s*(?P<rest>.+)$", _I), True),
    (re.compile(r"^(?:and\s+)?(?:from\s+now\s+on|going\s+forward|henceforth)\s*[:,]?\s*(?P<rest>.+)$", _I), True),
    (re.compile(r"^(?:for|in)\s+(?:this|the|our)\s+project\s*[:,]?\s*(?P<rest>.+)$", _I), False),
    (re.compile(r"^(?P<rest>our\s+.+)$", _I), False),
    (re.compile(r"^(?P<rest>the\s+.+?\s+(?:for|of|in)\s+this\s+project\s+(?:is|are)\s+.+)$", _I), False),
    # Japanese: 覚えておいて (before or after), 今後は, このプロジェクトでは, 私たちの/うちの
    (re.compile(r"^(?:このプロジェクトでは[、,]?\s*)?覚えて(?:おいて)?(?:ください|下さい|ね)?[：:、,]\s*(?P<rest>.+)$"), True),
    (re.compile(r"^(?P<rest>.+?)(?:ということ|こと)?(?:と|って|を)覚えて(?:おいて)?(?:ください|下さい|ね)?[。！!]?$"), True),
    (re.compile(r"^(?:今後は|これからは|以後は)[、,]?\s*(?P<rest>.+)$"), True),
    (re.compile(r"^(?:このプロジェクトでは|本プロジェクトでは)[、,]?\s*(?P<rest>.+)$"), False),
    (re.compile(r"^(?P<rest>(?:私たちの|うちの|我々の).+)$"), False),
    # Chinese: 记住, 以后/今后/从现在开始, 这个项目/本项目, 我们的
    (re.compile(r"^(?:请)?记住(?:一下)?[：:，,]?\s*(?P<rest>.+)$"), True),
    (re.compile(r"^(?:以后|今后|从现在开始|从现在起)[，,：:]?\s*(?P<rest>.+)$"), True),
    (re.compile(r"^(?:在)?(?:这个项目|本项目)(?:中|里|里面)?[，,：:]\s*(?P<rest>.+)$"), False),
    (re.compile(r"^(?P<rest>(?:这个项目的|本项目的|我们的).+)$"), False),
)  # fmt: skip

_IS = (
    re.compile(r"^(?:(?:the|our)\s+)?(?P<x>[^,:;=?]{1,60}?)(?:\s+(?:for|of|in)\s+this\s+project)?\s+(?:is|are)\s+(?:now\s+)?(?P<y>\S.*)$", _I),
    re.compile(r"^(?:このプロジェクトの|私たちの|うちの|我々の)?(?P<x>[^、,。は]{1,30})は\s*(?P<y>.*?\S)\s*(?:です|だ|である|になります)?(?:よ|ね)?[。！!]?$"),
    re.compile(r"^(?:这个项目的|本项目的|我们的|项目的)?(?P<x>[^，,。是为]{1,30})(?:是|为)\s*(?P<y>.+?)[。！!]?$"),
)  # fmt: skip
r"""A value ends on a visible character (``.*?\S``): a lazy value followed by ``\s*`` would
read each white space run again from each of its characters."""
_REQUEST = re.compile(r"(?:ください|下さい|して|しないで|すること|ように|してね|请|吧)$|^请")
"""A value that asks for something (「スカッシュマージしてください」, 请使用): a request, not a value."""
_NEGATED = re.compile(r"^(?:not|no\s+longer|never|ではない|じゃない|不是|没有)\b", _I)
_DENIES = re.compile(
    r"\b(?:is|are|was|were)\s+(?:not|no\s+longer|never)\b|\b(?:isn|aren|wasn|weren)['’]t\b|"
    r"不是|不再是|并非|并不是|不为|是否|ではな|ではありません|じゃな|じゃありません|でない",
    _I,
)
"""A sentence that says what X is not ("isn't pg-1", 不是, ではありません), or asks whether
(是否): neither a fact nor, after "remember", a preference."""
MAX_KEY_WORDS = 6
MAX_VALUE_CHARS = 160


REFUSED = Statement("", "")
"""An "X is Y" whose X names what steers an agent (policy, permission, system...): nothing."""
_AFTER_VALUE = re.compile(r",\s|\s[(\-–—]\s?|\s(?:so|because|since|which|but)\s|[、，（(;；]", _I)
"""Where a value ends and the sentence goes on ("release-7, so use it"; 「pg-1です、よろしく」)."""
_COPULA = re.compile(r"\s*(?:です|だ|である|になります)(?:よ|ね)?$")


def _value(said: str) -> str:
    return clean_value(_COPULA.sub("", _AFTER_VALUE.split(said.strip(), maxsplit=1)[0]))


def _is_statement(rest: str) -> Statement | None:
    """``rest`` as "X is Y": a fact keyed by X, or ``None``."""
    for pattern in _IS:
        m = pattern.match(rest.strip())
        if m is None:
            continue
        x, y = m["x"].strip(), _value(m["y"])
        if not y or len(y) > MAX_VALUE_CHARS or _NEGATED.match(y) or _REQUEST.search(y) or len(x.split()) > MAX_KEY_WORDS:
            return None
        key = slug(x, ".")  # "the java version" speaks of what ``java -version`` observes: java.version
        if names_steering(key):
            return REFUSED  # "our (security) policy is ...": no one's words make a policy, not as a preference either
        return Statement(key, y) if key else None
    return None


def _preference(rest: str) -> Statement | None:
    value = clean_value(re.sub(r"^(?:to|please)\s+", "", rest.strip(), flags=_I))
    key = slug(value)[:48].rstrip("_")
    # "our policy is: ..." misses the "X is Y" patterns: its X still may not steer.
    subject = re.sub(r"^(?:(?:the|our|my)_)+", "", key)
    if not key or len(value) > MAX_VALUE_CHARS or privileged(key) or privileged(subject):
        return None
    return Statement(f"preference.{key}", value)


def one_spaced(sentence: str) -> str:
    """``sentence`` with each run of white space as one space. Spacing says nothing about
    a fact ("our  db is\tpg-1" states what "our db is pg-1" does), and the patterns here
    retry a white space run from each of its characters: one of a few thousand spaces
    after "the" took minutes (cubic), where a single space costs nothing."""
    return " ".join(sentence.split())


def statement(sentence: str) -> Statement | None:
    """The statement one sentence makes, if it makes one."""
    sentence = one_spaced(sentence)
    if is_hedged(sentence) or _DENIES.search(sentence):
        return None
    for pattern, may_prefer in TRIGGERS:
        m = pattern.match(sentence.strip())
        if m is None:
            continue
        found = _is_statement(m["rest"])
        if found is None and may_prefer:
            found = _preference(m["rest"])
        if found is not None:
            return None if found is REFUSED else found
    return None


_CONFIRM = (
    re.compile(r"^(?:yes|yep|yeah|correct|exactly|right|that's right|that is right|confirmed)[,.!]?\s*"
               r"(?:please\s+)?remember\s+(?:that|it|this)[.!]?$", _I),
    re.compile(r"^(?:はい|そうです|その通り(?:です)?|正しい(?:です)?)[、。,]?\s*(?:それを)?覚えておいて(?:ください|下さい)?[。！!]?$"),
    re.compile(r"^(?:对|是的|没错|正确)[，,。]?\s*(?:请)?记住(?:这个|它|这一点)?[。！!]?$"),
)  # fmt: skip


def confirms(text: str) -> bool:
    """Whether a user's whole message confirms what the assistant just said and asks to
    keep it ("Yes, remember that."; 「はい、覚えておいて。」; 对，记住。)."""
    return any(p.match(text.strip()) for p in _CONFIRM)


def claims(text: str) -> list[Statement]:
    """The plain "X is Y" claims of an assistant's message, for a user to confirm: no
    trigger needed, but never a hedged sentence, a question, or hostile text."""
    if is_hostile(text):
        return []
    out: dict[str, Statement] = {}
    for s in map(one_spaced, sentences(text)):
        found = None if is_hedged(s) or _DENIES.search(s) else _is_statement(s)
        if found is not None and found is not REFUSED and found.key not in out:
            out[found.key] = found
    return list(out.values())


def statements(text: str) -> list[Statement]:
    """Every statement of a message, first one per key; none at all from hostile text (a
    message that carries an injected instruction or a forged memory line)."""
    if is_hostile(text):
        return []
    out: dict[str, Statement] = {}
    for s in sentences(text):
        found = statement(s)
        if found is not None and found.key not in out:
            out[found.key] = found
    return list(out.values())


__all__ = ["Statement", "TRIGGERS", "claims", "confirms", "one_spaced", "statement", "statements"]
