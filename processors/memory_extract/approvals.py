"""Decisions on approvals: the user approved or denied an action the agent asked for.
Remembered as ``approval.<action>`` = ``approved`` | ``denied``, keyed by the request's
action (a decision on a request the thread never made names nothing and is skipped)."""

from __future__ import annotations

from agentlog.processors.memory_extract.text import is_hostile, slug
from agentlog.processors.redaction import redact
from agentlog.schemas.events import Envelope

HUMAN = frozenset({"user", "human", "owner", "operator"})


def decision_key(action: str) -> str | None:
    # Redacted first: an action that carries a secret ("mysql -pS3cret") would put it in the key.
    key = slug(redact(action))[:60].rstrip("_")
    return f"approval.{key}" if key and not is_hostile(action) else None


def decision_evidence(event: Envelope) -> str | None:
    """``user_confirmed`` when a person decided, ``tool_observed`` when the harness
    recorded it; ``None`` (no memory) for a decision that came from outside."""
    if event.source == "external":
        return None
    by = (getattr(event.payload, "by", None) or "").lower()
    return "user_confirmed" if event.source == "user" or by in HUMAN else "tool_observed"


__all__ = ["HUMAN", "decision_evidence", "decision_key"]
