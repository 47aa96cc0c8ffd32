"""Head + tail truncation of large tool outputs (SPEC §3): models see both ends and a
marker naming what was cut and which event holds the whole output."""

from __future__ import annotations

DEFAULT_OUTPUT_BUDGET_CHARS = 4_000


def truncate_output(output: str, event_id: str, budget_chars: int = DEFAULT_OUTPUT_BUDGET_CHARS) -> str:
    """``output`` if it fits ``budget_chars``, else its head and tail around a marker.

    The marker counts the characters and UTF-8 bytes cut and names ``event_id`` so a
    model (or a person) can ``read`` the whole output from the log.
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
        f"full output: read {event_id} ...]\n"
    )
    return head + marker + tail


__all__ = ["DEFAULT_OUTPUT_BUDGET_CHARS", "truncate_output"]
