"""The evidence type an event's content carries, from where it came: a user's message is
``user_confirmed``, a tool's result ``tool_observed``, an assistant's message
``model_inferred``, and anything a tool fetched from outside (a web fetch, a browser, curl,
or an event marked ``source: "external"``) ``external_content``, whatever it says."""

from __future__ import annotations

import re

from agentlog.schemas.events import Envelope

_EXTERNAL_TOOL = re.compile(r"fetch|brows|curl|wget|http|url|scrap|crawl|web|search|download|navigat|request", re.IGNORECASE)
_EXTERNAL_COMMAND = re.compile(r"^\s*(?:\S*/)?(?:curl|wget|http|https|lynx|w3m|aria2c)\b|\|\s*(?:curl|wget)\b")


def fetches_external(tool_name: str, command: str = "") -> bool:
    """Whether a tool (or the shell command it ran) brings in content from outside."""
    return bool(_EXTERNAL_TOOL.search(tool_name)) or bool(_EXTERNAL_COMMAND.search(command))


def message_evidence(event: Envelope) -> str:
    """A message's evidence: the user's own words, or an assistant's (inferred) words."""
    if event.source == "external":
        return "external_content"
    role = getattr(event.payload, "role", "")
    return "user_confirmed" if role == "user" and event.effective_source == "user" else "model_inferred"


def result_evidence(event: Envelope, tool_name: str, command: str) -> str:
    if event.source == "external" or fetches_external(tool_name, command):
        return "external_content"
    return "tool_observed"


__all__ = ["fetches_external", "message_evidence", "result_evidence"]
