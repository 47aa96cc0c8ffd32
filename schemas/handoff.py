"""The structured handoff record a compaction writes (SPEC §5)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Sourced(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str
    source_event_id: str
    # Repeated identical observations are one entry: how many, and every source id.
    count: int = 1
    source_event_ids: list[str] = Field(default_factory=list)
    kind: str | None = None
    """What it came from (``user``, ``tool``, ``failure``, ``error``; in ``done``: ``step``,
    ``task``, ``call``, ``agent``; in ``hypotheses``: ``guess``, ``inferred``): which to keep longest."""


class HandoffRecord(BaseModel):
    """What a fresh window needs to carry on. Observations (seen in tool output, said by
    the user) and hypotheses (what the model marked or phrased as a guess) are separate
    lists, never merged; ``done`` is the work that finished (plan steps, tasks, calls
    that were pending jobs, sub-agents), each with the event that finished it."""

    model_config = ConfigDict(extra="forbid")

    goal: str | None = None
    constraints: list[str] = Field(default_factory=list)
    observations: list[Sourced] = Field(default_factory=list)
    hypotheses: list[Sourced] = Field(default_factory=list)
    done: list[Sourced] = Field(default_factory=list)
    pending_jobs: list[str] = Field(default_factory=list)
    next_action: str | None = None
    unknowns: list[str] = Field(default_factory=list)
    modified_files: list[str] = Field(default_factory=list)


__all__ = ["HandoffRecord", "Sourced"]
