"""Head + tail truncation of large tool outputs (SPEC §3): models see both ends and a
marker naming what was cut and which event holds the whole output."""

from __future__ import annotations

DEFAULT_OUTPUT_BUDGET_CHARS = 4_000


def truncate_output(output: str, event_id: str, budget_chars: int = DEFAULT_OUTPUT_BUDGET_CHARS,
                    what: str = "output") -> str:  # fmt: skip
    """``output`` if it fits ``budget_chars``, else its head and tail around a marker.

    The marker counts the characters and UTF-8 bytes cut and names ``event_id`` so a
    model (or a person) can ``read`` the whole ``what`` (output, arguments) from the log.
    """
    if len(output) <= budget_chars:
        return output
    keep = max(budget_chars, 2)
    head_len = keep * 2 // 3  # the start of an output (the command, the first error) matters more
    tail_len = keep - head_len
    head, tail = output[:head_len], output[len(output) - tail_len :]
    cut = output[head_len : len(output) - tail_len]
    marker = (
        f"\n[... {len(cut)} chars ({len(cut.encode())} bytes) cut; "
        f"full {what}: read {event_id} ...]\n"
    )
    return head + marker + tail


WORD_SLACK = 48
"""How far back ``clip_at_word`` looks for a space: a word longer than this keeps at least
this many characters, enough for redaction to still recognise it as a key or token."""


def clip_at_word(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, at a space when one is near the end:
    a quote cut before redaction must not leave half a secret that no pattern knows."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    space = max(head.rfind(" "), head.rfind("\n"), head.rfind("\t"))
    return head[:space] if space >= limit - WORD_SLACK else head


__all__ = ["DEFAULT_OUTPUT_BUDGET_CHARS", "WORD_SLACK", "clip_at_word", "truncate_output"]
