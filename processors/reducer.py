"""The working-state reducer (SPEC §3): one event (and the pair rows it produced) at a time.

Deterministic and monotonic: statuses only move forward, a confirmed file change stays,
an approval leaves the queue only on its decision, goal and constraints are pinned.
Idempotence across re-delivery is the caller's dedup (``ThreadProcessor``), since
``event_count`` and ``failures`` are counts and histories.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from agentlog.processors.truncation import clip_at_word
from agentlog.schemas.events import STATUS_RANK, TERMINAL_STATUSES, Envelope, epoch_ms_of
from agentlog.schemas.state import (
    MAX_FAILURES,
    AgentItem,
    ApprovalItem,
    ConstraintItem,
    Failure,
    FileItem,
    PendingCall,
    Pinned,
    StepItem,
    TaskItem,
    ToolPair,
    WorkingState,
)

FAILED_PAIR_STATUSES = frozenset({"error", "timeout", "cancelled", "missing"})
FAILURE_MESSAGE_CHARS = 200
"""A failed tool's output is quoted in ``failures`` up to this many characters."""


def advances(old: str, new: str) -> bool:
    """Whether a work status may replace another: forward only, first terminal wins."""
    if old in TERMINAL_STATUSES:
        return False
    return STATUS_RANK[new] > STATUS_RANK[old]


def _message(s: WorkingState, e: Envelope) -> None:
    """The latest user message is the one with the latest event time: one that arrives
    late, with an older time, does not replace it (ties: the later arrival)."""
    if e.payload.role == "user":  # type: ignore[attr-defined]
        latest = s.latest_user_message_ts
        if latest is None or e.epoch_ms >= epoch_ms_of(latest):
            s.latest_user_message_id, s.latest_user_message_ts = e.event_id, e.ts


def _goal(s: WorkingState, e: Envelope) -> None:
    s.goal = Pinned(text=e.payload.text, event_id=e.event_id)  # type: ignore[attr-defined]


def _constraint(s: WorkingState, e: Envelope) -> None:
    p = e.payload
    if p.op == "remove":  # type: ignore[attr-defined]
        s.constraints.pop(p.constraint_id, None)  # type: ignore[attr-defined]
    else:
        s.constraints[p.constraint_id] = ConstraintItem(  # type: ignore[attr-defined]
            constraint_id=p.constraint_id, text=p.text, event_id=e.event_id  # type: ignore[attr-defined]
        )


def _plan(s: WorkingState, e: Envelope) -> None:
    for step in e.payload.steps:  # type: ignore[attr-defined]
        old = s.plan.get(step.step_id)
        if old is None:
            s.plan[step.step_id] = StepItem(
                step_id=step.step_id, text=step.text, status=step.status, event_id=e.event_id
            )
        elif advances(old.status, step.status) or (
            old.status == step.status and old.status not in TERMINAL_STATUSES
        ):
            s.plan[step.step_id] = replace(
                old, status=step.status, text=old.text if step.text is None else step.text, event_id=e.event_id
            )


def _task(s: WorkingState, e: Envelope) -> None:
    p = e.payload
    old = s.tasks.get(p.task_id)  # type: ignore[attr-defined]
    if old is None:
        s.tasks[p.task_id] = TaskItem(  # type: ignore[attr-defined]
            task_id=p.task_id, text=p.text, owner=p.owner, status=p.status, event_id=e.event_id  # type: ignore[attr-defined]
        )
    elif advances(old.status, p.status) or (  # type: ignore[attr-defined]
        old.status == p.status and old.status not in TERMINAL_STATUSES  # type: ignore[attr-defined]
    ):
        s.tasks[p.task_id] = replace(  # type: ignore[attr-defined]
            old, status=p.status, event_id=e.event_id,  # type: ignore[attr-defined]
            text=old.text if p.text is None else p.text,  # type: ignore[attr-defined]
            owner=old.owner if p.owner is None else p.owner,  # type: ignore[attr-defined]
        )  # fmt: skip


def _file_change(s: WorkingState, e: Envelope) -> None:
    p = e.payload
    old = s.files.get(p.path)  # type: ignore[attr-defined]
    if old is not None and old.confirmed and not p.confirmed:  # type: ignore[attr-defined]
        return  # a proposal never overwrites what was confirmed
    s.files[p.path] = FileItem(  # type: ignore[attr-defined]
        path=p.path, change=p.change, confirmed=p.confirmed, event_id=e.event_id, ts=e.ts  # type: ignore[attr-defined]
    )


def _approval_request(s: WorkingState, e: Envelope) -> None:
    p = e.payload
    old = s.approvals.get(p.approval_id)  # type: ignore[attr-defined]
    if old is None:
        s.approvals[p.approval_id] = ApprovalItem(  # type: ignore[attr-defined]
            approval_id=p.approval_id, action=p.action, detail=p.detail, event_id=e.event_id  # type: ignore[attr-defined]
        )
    elif old.action is None:  # the decision came first; record what it was about
        s.approvals[p.approval_id] = replace(old, action=p.action, detail=p.detail)  # type: ignore[attr-defined]


def _approval_decision(s: WorkingState, e: Envelope) -> None:
    p = e.payload
    old = s.approvals.get(p.approval_id)  # type: ignore[attr-defined]
    if old is None:
        old = ApprovalItem(approval_id=p.approval_id, event_id=e.event_id)  # type: ignore[attr-defined]
    if old.decision is None:
        s.approvals[p.approval_id] = replace(old, decision=p.decision, decided_by=p.by)  # type: ignore[attr-defined]


def _agent_spawn(s: WorkingState, e: Envelope) -> None:
    p = e.payload
    if p.child_agent_id not in s.agents:  # type: ignore[attr-defined]
        s.agents[p.child_agent_id] = AgentItem(  # type: ignore[attr-defined]
            agent_id=p.child_agent_id, role=p.role, thread_id=p.child_thread_id,  # type: ignore[attr-defined]
            event_id=e.event_id,
        )


def _agent_exit(s: WorkingState, e: Envelope) -> None:
    p = e.payload
    agent = s.agents.get(p.child_agent_id)  # type: ignore[attr-defined]
    if agent is None:
        agent = AgentItem(agent_id=p.child_agent_id, event_id=e.event_id)  # type: ignore[attr-defined]
    if agent.status == "active":
        s.agents[p.child_agent_id] = replace(  # type: ignore[attr-defined]
            agent, status="finished", exit_status=p.status, summary=p.summary  # type: ignore[attr-defined]
        )


def _window_switch(s: WorkingState, e: Envelope) -> None:
    s.closed_windows[e.event_id] = s.window_id
    s.window_id = e.payload.new_window_id  # type: ignore[attr-defined]
    s.window_started_by = e.event_id


def _compaction(s: WorkingState, e: Envelope) -> None:
    s.summary = e.payload.summary  # type: ignore[attr-defined]
    s.summary_covers_through = e.payload.covers_through  # type: ignore[attr-defined]
    s.summary_event_id = e.event_id


def _error(s: WorkingState, e: Envelope) -> None:
    code = e.payload.code  # type: ignore[attr-defined]
    _fail(s, Failure(
        event_id=e.event_id, kind="error", ts=e.ts, status=None if code is None else str(code),
        message=e.payload.message,  # type: ignore[attr-defined]
    ))  # fmt: skip


def _forget_synthetic_failure(s: WorkingState, call_id: str) -> None:
    """A real result replaces the synthetic one (SPEC §3): the call was not "missing" after all."""
    for i, f in enumerate(s.failures):  # a call is synthesized at most once
        if f.call_id == call_id and f.status == "missing":
            del s.failures[i]
            return


def _output_head(event: Envelope, pair: ToolPair) -> str:
    """What a failed tool said, when this event is its result (a result that waited for its
    call is paired by the call's event, and the state keeps no outputs)."""
    if event.kind != "tool_result" or event.event_id != pair.result_event_id:
        return ""
    output: str = event.payload.output  # type: ignore[attr-defined]
    return output if len(output) <= FAILURE_MESSAGE_CHARS else clip_at_word(output, FAILURE_MESSAGE_CHARS - 1) + "…"


def _fail(s: WorkingState, failure: Failure) -> None:
    s.failures.append(failure)
    if len(s.failures) > MAX_FAILURES:
        del s.failures[: len(s.failures) - MAX_FAILURES]


_HANDLERS: dict[str, Callable[[WorkingState, Envelope], None]] = {
    "message": _message, "goal": _goal, "constraint": _constraint, "plan": _plan,
    "task": _task, "file_change": _file_change, "approval_request": _approval_request,
    "approval_decision": _approval_decision, "agent_spawn": _agent_spawn,
    "agent_exit": _agent_exit, "window_switch": _window_switch, "compaction": _compaction,
    "error": _error,
}  # fmt: skip


_TOUCHES: dict[str, frozenset[str]] = {
    "goal": frozenset({"goal"}), "constraint": frozenset({"constraints"}), "plan": frozenset({"plan"}),
    "task": frozenset({"tasks"}), "file_change": frozenset({"files"}),
    "approval_request": frozenset({"approvals"}), "approval_decision": frozenset({"approvals"}),
    "agent_spawn": frozenset({"agents"}), "agent_exit": frozenset({"agents"}), "error": frozenset({"failures"}),
}  # fmt: skip
"""The sections (``WorkingState`` fields holding items) each kind's handler may change."""
_PAIRS_TOUCH = frozenset({"pending_calls", "failures"})
_NONE: frozenset[str] = frozenset()


def reduce(state: WorkingState, event: Envelope, pairs: list[ToolPair], opened: bool) -> frozenset[str]:
    """Apply one new event and the pair rows its pairing produced; return the sections it
    may have changed (a state read renders those again and no other).

    ``opened`` says the event is a ``tool_call`` that the pairer left open (pending).
    """
    handler = _HANDLERS.get(event.kind)
    if handler is not None:
        handler(state, event)
    touched = _TOUCHES.get(event.kind, _NONE)
    if opened or pairs:
        touched |= _PAIRS_TOUCH
    if opened:
        p = event.payload
        state.pending_calls[p.call_id] = PendingCall(  # type: ignore[attr-defined]
            call_id=p.call_id, tool_name=p.tool_name, event_id=event.event_id,  # type: ignore[attr-defined]
            ts=event.ts, turn_id=event.turn_id,
        )  # fmt: skip
    for pair in pairs:
        if pair.status != "orphan":
            state.pending_calls.pop(pair.call_id, None)
        if not pair.synthetic and pair.status != "orphan":
            _forget_synthetic_failure(state, pair.call_id)
        if pair.status in FAILED_PAIR_STATUSES:
            _fail(state, Failure(
                event_id=pair.result_event_id or pair.call_event_id, kind="tool_result",
                ts=pair.result_ts or pair.call_ts or event.ts, call_id=pair.call_id,
                tool_name=pair.tool_name, status=pair.status,
                message="no result (synthetic)" if pair.synthetic else _output_head(event, pair),
            ))  # fmt: skip
    # By event time, not arrival: a late event does not make the thread look older. Ties
    # keep the first string, so a replay in the same order lands on the same value; a
    # snapshot from before ``newest_ts`` existed starts from its ``last_ts``.
    newest = state.newest_ts or state.last_ts
    if newest is None or event.epoch_ms > epoch_ms_of(newest):
        newest = event.ts
    state.newest_ts = newest
    state.event_count += 1
    state.last_event_id = event.event_id
    state.last_ts = event.ts
    return touched


__all__ = ["FAILED_PAIR_STATUSES", "advances", "reduce"]
