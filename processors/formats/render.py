"""An assembled context's answer in the shape a provider's request takes. Pure."""

from __future__ import annotations

from typing import Any

from agentlog.processors.formats import anthropic, openai_chat
from agentlog.schemas.requests import CONTEXT_FORMATS


def render_context(context: dict[str, Any], format: str = "generic") -> dict[str, Any]:  # noqa: A002
    """A ``context`` answer with its ``messages`` in ``format``: ``generic`` is the answer as
    it is; ``openai`` gives Chat Completions ``messages``; ``anthropic`` a Messages request's
    ``system`` and ``messages``. Sections and meta stay; ``format`` names the shape."""
    if format == "generic":
        return context
    if format == "openai":
        return {**context, "format": format, "messages": openai_chat.render(context["messages"])}
    if format == "anthropic":
        return {**context, "format": format, **anthropic.render(context["messages"])}
    raise ValueError(f"context format must be one of {', '.join(CONTEXT_FORMATS)}, not {format!r}")


__all__ = ["render_context"]
