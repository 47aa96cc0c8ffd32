"""Issue 15, the state step: a dict whose keys hide nothing is redacted without asking each
key again (``redaction._may_hide``, remembered per key set). Same result as asking each
key, whatever the keys, nesting and secret-named pairs."""

from __future__ import annotations

from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from agentlog.processors.redaction import (
    _hides,
    _masked,
    _names_secret,
    _redact_leaf,
    _redact_short,
    _short_texts,
    redact_value,
)

KEYS = st.sampled_from(["text", "kind", "count", "password", "apiKey", "key", "name", "value", "Value", "Name",
                        "max_tokens", "db.password", "source_event_ids", "token", "x-api-key", "PWD"])  # fmt: skip
LEAVES = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                   st.sampled_from(["", "DB_PASSWORD", "plain words", "export API_TOKEN=abcd1234efgh5678",
                                    "postgres://u:hunter2@db/x", "sk-proj-" + "A1b2C3d4E5f6G7h8J9k0" * 2]))  # fmt: skip
VALUES = st.recursive(LEAVES, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=6),
                      max_leaves=30)  # fmt: skip


def asked_key_by_key(value: Any) -> Any:
    """The walk that asks every key of every dict (before the remembered key sets)."""
    if isinstance(value, dict):
        pair = ("value" in value or "Value" in value) and _names_secret(value)
        return {k: (_masked(v) if _hides(k, pair) else asked_key_by_key(v)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if value and _short_texts(value):
            return list(map(_redact_short, value))
        return [asked_key_by_key(v) for v in value]
    return _redact_leaf(value)


@settings(max_examples=300, deadline=None)
@given(VALUES)
@example({"Name": "DB_PASSWORD", "Value": "hunter2"})
@example([{"key": "apiKey", "value": {"a": "b"}}, {"name": "region", "value": "eu"}])
def test_a_value_is_redacted_the_same_with_remembered_key_sets_as_asking_every_key(value: Any) -> None:
    expected = asked_key_by_key(value)
    assert redact_value(value) == expected
    assert redact_value(value) == expected  # again, with its key sets remembered
    assert redact_value(value, {}) == expected
