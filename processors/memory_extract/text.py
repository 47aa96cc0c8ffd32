"""Text helpers of phase-1 extraction: sentences, keys, and the two refusals that keep
memory honest: a hedged or questioning sentence is no statement, and hostile text
(injected instructions, forged memory lines, privileged key names) is no memory at all."""

from __future__ import annotations

import re
import unicodedata

_SENTENCE_END = re.compile(r"(?<=[。！？!?])|(?<=[.;])\s+|\n+")
"""A sentence ends at CJK or !/? punctuation, at '.' or ';' followed by space, or a line
break; a dot inside a value (``pg-stage-3.internal``, ``21.0.2``) does not end one."""

_HEDGES_EN = re.compile(
    r"\b(maybe|perhaps|probably|possibly|might|may be|i think|i guess|i believe|i suppose|not sure|"
    r"suppose|supposing|if|whether|unless|could|would|should we|assume|assuming|guess|likely|"
    r"hypothetically|imagine|what if|let's say|do you know|is it|are we|does|do we)\b",
    re.IGNORECASE,
)
_HEDGES_CJK = re.compile(
    r"かもしれ|たぶん|多分|おそらく|でしょう|だろう|かな|と思う|思います|可能性|もし|ですか|ますか|"
    r"可能|也许|大概|或许|应该是|好像|似乎|如果|假如|假设|我猜|我觉得|吧|吗|呢"
)

PRIVILEGED_WORDS = frozenset({
    "preference", "preferences", "instruction", "instructions", "policy", "policies", "rule", "rules",
    "permission", "permissions", "system", "prompt", "role", "roles", "admin", "sudo", "approval",
    "approvals", "memory", "override", "guardrail", "guardrails",
})  # fmt: skip
"""First words a statement's key may not start with: they name what steers an agent."""

_HOSTILE = re.compile(
    r"ignore\s+(?:all\s+|any\s+|the\s+)?(?:previous|prior|above|earlier|preceding)|disregard\s+(?:all|any|the|previous|prior)|"
    r"forget\s+(?:all|everything|previous|prior)|system\s*(?:prompt|override|message)|you\s+are\s+now|new\s+instructions|"
    r"developer\s+mode|jailbreak|memory\.md|\bmemory\s*[:=\]]|\[\s*memory|<\|[a-z_]+\|>|\[/?inst\]|^[^\S\n]*#{2,}\s*(?:system|instruction)|"
    r"\b(?:preference|instruction|policy|rule|permission|system|approval)s?\.[a-z0-9_]|"
    r"以前の指示|これまでの指示|指示を無視|システムプロンプト|忽略(?:之前|以上|上面|所有|先前)|无视(?:之前|以上)|系统提示|新的指令",
    re.IGNORECASE | re.MULTILINE,
)


def sentences(text: str) -> list[str]:
    """A text's sentences, stripped, terminators kept (a question keeps its '?')."""
    return [s.strip() for s in _SENTENCE_END.split(text) if s and s.strip()]


def is_question(sentence: str) -> bool:
    return sentence.rstrip().endswith(("?", "？"))


def is_hedged(sentence: str) -> bool:
    """A guess, a hypothetical or a question: never a statement of fact."""
    return is_question(sentence) or bool(_HEDGES_EN.search(sentence)) or bool(_HEDGES_CJK.search(sentence))


def plain(text: str) -> str:
    """``text`` as a model reads it: invisible format characters (zero-width spaces and
    joiners, soft hyphens, direction marks) dropped, compatibility letters (full width,
    mathematical, circled, half-width kana) as the letters they show (NFKC), case folded."""
    visible = "".join(c for c in text if unicodedata.category(c) != "Cf")
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", visible).casefold())


_LOOK_ALIKES = str.maketrans({
    # Cyrillic
    "а": "a", "в": "b", "е": "e", "ё": "e", "һ": "h", "і": "i", "ї": "i", "ј": "j", "к": "k", "ӏ": "l",
    "м": "m", "н": "h", "о": "o", "р": "p", "ԛ": "q", "г": "r", "ѕ": "s", "т": "t", "с": "c", "у": "y",
    "ү": "y", "х": "x", "ԁ": "d", "ԝ": "w", "ь": "b", "п": "n", "и": "u",
    # Greek
    "α": "a", "β": "b", "ϲ": "c", "ε": "e", "η": "n", "ι": "i", "κ": "k", "ν": "v", "ο": "o", "ρ": "p",
    "τ": "t", "υ": "u", "χ": "x", "γ": "y", "ω": "w", "ϳ": "j", "ς": "c",
    # Armenian
    "ա": "w", "հ": "h", "ո": "n", "ս": "u", "օ": "o", "ց": "g", "զ": "q",
    # Latin letters that are not a-z but look like them (small capitals, IPA, dotless i)
    "ı": "i", "ɪ": "i", "ɩ": "i", "ɑ": "a", "ɡ": "g", "ɢ": "g", "ᴀ": "a", "ʙ": "b", "ᴄ": "c", "ᴅ": "d",
    "ᴇ": "e", "ғ": "f", "ʜ": "h", "ᴊ": "j", "ᴋ": "k", "ʟ": "l", "ᴍ": "m", "ɴ": "n", "ᴏ": "o", "ᴘ": "p",
    "ʀ": "r", "ꜱ": "s", "ᴛ": "t", "ᴜ": "u", "ᴠ": "v", "ᴡ": "w", "ʏ": "y", "ᴢ": "z",
})  # fmt: skip
"""Letters of other alphabets that a reader (and a model) takes for a Latin letter. Only
the hostile-text and steering-key checks read text through this table; what is stored
keeps its own letters."""


def skeleton(text: str) -> str:
    """``text`` as its Latin look-alike: :func:`plain`, accents dropped ("ïgnóre" is
    "ignore"), and letters of other alphabets that look Latin read as that letter
    ("prev\u0456ous", with a Cyrillic i, is "previous")."""
    # Translated before case folding too: folding turns some look-alikes ("ϲ", "ς") into
    # letters that look like none ("σ").
    bare = plain(text.translate(_LOOK_ALIKES))
    bare = "".join(c for c in unicodedata.normalize("NFD", bare) if unicodedata.category(c) != "Mn")
    return unicodedata.normalize("NFC", bare).translate(_LOOK_ALIKES)


def is_hostile(text: str) -> bool:
    """Injected instructions or forged memory lines anywhere in ``text``, however written
    ("ｉｇｎｏｒｅ ｐｒｅｖｉｏｕｓ", "ig\u200bnore previous" or "іgnоrе previous" in
    Cyrillic letters read as "ignore previous")."""
    folded = plain(text)
    return bool(_HOSTILE.search(folded)) or bool(_HOSTILE.search(skeleton(text)))


def slug(phrase: str, joiner: str = "_") -> str:
    """A key from a phrase: lower case, words joined by ``joiner`` (CJK kept as written)."""
    words = re.findall(r"\w+", phrase.lower())
    return joiner.join(words)[:80]


def privileged(key: str) -> bool:
    """Whether a key starts with a word that names what steers an agent."""
    # "ｐｏｌｉｃｙ" (full width) or "pol\u200bicy" reads as "policy" to a model; leading punctuation hides nothing either.
    bare = re.sub(r"^[\W_]+", "", skeleton(key))
    first = re.split(r"[._\s]", bare, maxsplit=1)[0]
    return first in PRIVILEGED_WORDS


STEERING_NOUNS = frozenset({
    "permission", "permissions", "approval", "approvals", "instruction", "instructions", "guideline", "guidelines",
    "guardrail", "guardrails", "prompt", "override", "preference", "preferences",
})  # fmt: skip
"""Last words a fact's key may not end with: "the agent permissions are ..." or "the deploy
approval is ..." name what steers an agent as surely as "permission.agent" does."""
STEERING_WHEN_GENERAL = frozenset({"policy", "policies", "rule", "rules", "behavior", "behaviour"})
"""Last words that steer when what comes before them is the agent's work in general
("our security policy", "the merge rules", "our default behavior"), not a system's own
setting ("the log retention policy", "the eslint rules", "the retry behavior" are facts)."""
GENERAL_SUBJECTS = frozenset({
    "security", "agent", "agents", "assistant", "ai", "model", "default", "deploy", "deployment", "release",
    "merge", "review", "coding", "code", "approval", "tool", "tools", "access", "usage", "safety", "team",
    "company", "general", "operating", "bot", "our", "the", "project",
})  # fmt: skip


def names_steering(key: str) -> bool:
    """Whether a fact's key names what steers an agent: by its first word (:func:`privileged`),
    by the noun it ends with ("agent.permissions"), or by "policy", "rules" or "behavior"
    after a word for the agent's work in general ("security.policy", "default.behavior")."""
    words = [w for w in re.split(r"[._\s]+", skeleton(key)) if w]
    if privileged(key) or (words and words[-1] in STEERING_NOUNS):
        return True
    return bool(words) and words[-1] in STEERING_WHEN_GENERAL and (len(words) == 1 or words[-2] in GENERAL_SUBJECTS)


def clean_value(value: str) -> str:
    """A stated value without the sentence's closing punctuation, quotes or backticks."""
    v = value.strip().rstrip("。．.!！;；,，、")
    for a, b in ('""', "''", "``", "「」", "『』", "“”"):
        if len(v) >= 2 and v[0] == a[0] and v[-1] == b[-1]:
            v = v[1:-1]
    return v.strip()


__all__ = [
    "GENERAL_SUBJECTS", "PRIVILEGED_WORDS", "STEERING_NOUNS", "STEERING_WHEN_GENERAL", "clean_value", "is_hedged", "is_hostile", "is_question", "names_steering", "plain", "privileged", "sentences", "skeleton",
    "slug",
]  # fmt: skip
