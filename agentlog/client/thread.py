"""A thread handle: one method per thing an agent does, each publishing one event of
the thread (``docs/events.md`` has every kind's fields), and the thread's reads.

The same handle serves ``Client`` and ``AsyncClient``: a publishing method hands its
event to the client's ``_send``, which returns the event id (``Client``) or an awaitable
of it (``AsyncClient``: ``await t.goal(...)``). Events get their id and time here, when
they are created, never at send time.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from agentlog.client.events import envelope, fitted, history_events
from agentlog.client.results import Context, SearchAnswer, State
from agentlog.processors.fitting import as_text, fit

if TYPE_CHECKING:
    from agentlog.client.client import Client

R = TypeVar("R")  # what a publishing method returns: the event id, or an awaitable of it
Step = str | tuple[str, str] | tuple[str, str, str] | dict[str, Any]


class ThreadBase(Generic[R]):
    """The thread's events, whichever client sends them."""

    def __init__(self, client: Any, thread_id: str, project: str | None = None, agent_id: str | None = None,
                 window_id: str | None = None, parent: ThreadBase[R] | None = None) -> None:  # fmt: skip
        self.client = client
        self.thread_id = thread_id
        self.project = project
        self.agent_id = agent_id
        self.window_id = window_id
        self.parent = parent  # the thread that spawned this one (``spawn``), for ``exit``
        self.turn = 1
        self._envelope = self._fields()

    @property
    def turn_id(self) -> str:
        """The current turn's id (``end_turn`` starts the next one)."""
        return f"turn-{self.turn}"

    def _fields(self) -> dict[str, Any]:
        # Once per turn, not per event.
        return envelope(project=self.project, agent_id=self.agent_id, turn_id=self.turn_id, window_id=self.window_id)

    def history(self, items: Iterable[Mapping[str, Any]], format: str, system: str | None = None,  # noqa: A002
                at: str | None = None) -> list[R]:  # fmt: skip
        """A provider's conversation (``format``: ``openai`` Chat Completions messages,
        ``openai_responses`` Responses input items, ``anthropic`` Messages with its
        ``system``) as this thread's events, every tool call with its result. ``at``: when
        the conversation started (RFC 3339), its events a millisecond apart. Ids follow
        from the thread and each item's position: importing it again with the same ``at``,
        or a longer version of it, stores nothing twice."""
        events = history_events(items, format, self.thread_id, self.project or "default", system,
                                self.agent_id or "main", at)  # fmt: skip
        limit = self.client.max_event_bytes  # a tool result of megabytes is cut to fit, as in ``publish``
        return [self.client._send(e.event_id, fit(e.model_dump(mode="json", exclude_none=True), limit, "agentlog client"))
                for e in events]  # fmt: skip

    def publish(self, kind: str, payload: dict[str, Any], event_id: str | None = None) -> R:
        """Any kind of event with this thread's envelope (the typed methods cover the usual ones)."""
        event_id = event_id or self.client.ids.next()
        raw = fitted(event_id, self.thread_id, kind, payload, self._envelope, self.client.max_event_bytes)
        return self.client._send(event_id, raw)  # type: ignore[no-any-return]

    # -- conversation -------------------------------------------------------------------------

    def user(self, text: str) -> R:
        """What the user said."""
        return self.publish("message", {"role": "user", "text": text})

    def assistant(self, text: str) -> R:
        """What the model answered."""
        return self.publish("message", {"role": "assistant", "text": text})

    def system(self, text: str) -> R:
        """A system instruction."""
        return self.publish("message", {"role": "system", "text": text})

    def end_turn(self) -> R:
        """End the current turn (its calls still open get ``missing`` results) and start the next."""
        sent = self.publish("turn_end", {})
        self.turn += 1
        self._envelope = self._fields()
        return sent

    # -- what the agent works towards ----------------------------------------------------------

    def goal(self, text: str) -> R:
        """The thread's goal (a later one replaces it)."""
        return self.publish("goal", {"text": text})

    def constraint(self, text: str, constraint_id: str | None = None) -> R:
        """Add a constraint; its id is ``constraint_id`` or, if not given, the event id
        (what ``remove_constraint`` takes)."""
        event_id = self.client.ids.next()
        payload = {"constraint_id": constraint_id or event_id, "text": text, "op": "add"}
        return self.publish("constraint", payload, event_id)

    def remove_constraint(self, constraint_id: str) -> R:
        """Drop a constraint added before (by its id)."""
        return self.publish("constraint", {"constraint_id": constraint_id, "op": "remove"})

    def plan(self, steps: Iterable[Step]) -> R:
        """The plan, whole: each step a text (ids ``s1``, ``s2``, ... in order), a
        ``(step_id, text[, status])`` tuple or a dict of ``step_id``/``text``/``status``."""
        return self.publish("plan", {"steps": [_step(i, s) for i, s in enumerate(steps, 1)]})

    def task(self, task_id: str, status: str, text: str | None = None, owner: str | None = None) -> R:
        """A task's status (``pending``, ``running``, ``done``, ``failed``, ``cancelled``), with its text and owner."""
        return self.publish("task", _some(task_id=task_id, status=status, text=text, owner=owner))

    def file_changed(self, path: str, change: str = "modified", confirmed: bool = True) -> R:
        """A file the agent created, modified or deleted (``confirmed``: seen on disk, not just intended)."""
        return self.publish("file_change", {"path": path, "change": change, "confirmed": confirmed})

    def fact(self, key: str, value: Any, evidence_type: str = "tool_observed", confirmed: bool = True,
             scope: str | None = None) -> R:  # fmt: skip
        """A fact for long-term memory, with how it is known."""
        payload = _some(key=key, value=value, evidence_type=evidence_type, confirmed=confirmed, scope=scope)
        return self.publish("fact", payload)

    def error(self, message: str, code: str | int | None = None) -> R:
        """Something that went wrong outside a tool call (a model error, a crash)."""
        return self.publish("error", _some(message=message, code=code))

    # -- approvals -----------------------------------------------------------------------------

    def approval(self, action: str, detail: str | None = None, approval_id: str | None = None) -> R:
        """Ask for approval of ``action``; its id is ``approval_id`` or, if not given, the
        event id (what ``decision`` takes)."""
        event_id = self.client.ids.next()
        payload = _some(approval_id=approval_id or event_id, action=action, detail=detail)
        return self.publish("approval_request", payload, event_id)

    def decision(self, approval_id: str, decision: str, by: str | None = None) -> R:
        """The decision (``approved`` or ``denied``) on a requested approval."""
        return self.publish("approval_decision", _some(approval_id=approval_id, decision=decision, by=by))

    # -- tools -----------------------------------------------------------------------------------

    def tool_progress(self, call_id: str, text: str) -> R:
        """Progress of a running tool call."""
        return self.publish("tool_progress", {"call_id": call_id, "text": text})

    def tool_result(self, call_id: str, output: Any, status: str = "ok", tool_name: str | None = None,
                    exit_code: int | None = None) -> R:  # fmt: skip
        """A tool call's result, published on its own (``tool_call`` blocks do it for you).
        ``output`` is text; what a tool returns otherwise (a dict, a list, a number, bytes,
        ``None``) is published as its text (JSON), so the call never loses its result to a type."""
        payload: dict[str, Any] = {"call_id": call_id, "output": as_text(output), "status": status}
        if tool_name is not None:
            payload["tool_name"] = tool_name
        if exit_code is not None:
            payload["exit_code"] = exit_code
        return self.publish("tool_result", payload)

    # -- sub-agents ----------------------------------------------------------------------------

    def _spawned(self, child_thread_id: str, agent_id: str | None, project: str | None) -> ThreadBase[R]:
        return type(self)(self.client, child_thread_id, project or self.project, agent_id or child_thread_id,
                          parent=self)  # fmt: skip

    def _spawn_event(self, child: ThreadBase[R], role: str | None) -> R:
        payload = _some(child_agent_id=child.agent_id, role=role, child_thread_id=child.thread_id)
        return self.publish("agent_spawn", payload)

    def _exit_event(self, status: str | None, summary: str | None) -> R:
        if self.parent is None:
            raise ValueError("exit() is for a thread started with spawn(): it reports to its parent")
        payload = _some(child_agent_id=self.agent_id, status=status, summary=summary)
        return self.parent.publish("agent_exit", payload)


class Thread(ThreadBase[str]):
    """A thread of ``Client`` (``client.thread("t1", project="billing")``). Every
    publishing method returns the event's id; reads first flush the client."""

    client: Client

    def tool_call(self, tool_name: str, arguments: dict[str, Any] | str | None = None,
                  call_id: str | None = None) -> ToolCall:  # fmt: skip
        """``with t.tool_call("pytest", {"k": "login"}) as call: ... call.result(out)``:
        the call is published when the block starts, its latency measured until
        ``result``; an exception in the block becomes an ``error`` result (and is
        raised again); a call still without a result when the client closes gets a
        ``timeout`` result then."""
        return ToolCall(self, tool_name, arguments, call_id)

    def spawn(self, child_thread_id: str, role: str | None = None, agent_id: str | None = None,
              project: str | None = None) -> Thread:  # fmt: skip
        """Start a sub-agent on a thread of its own; returns the child's handle (its
        ``exit()`` reports back here)."""
        child = self._spawned(child_thread_id, agent_id, project)
        self._spawn_event(child, role)
        return child  # type: ignore[return-value]

    def exit(self, status: str | None = "done", summary: str | None = None) -> str:
        """This sub-agent ended: an ``agent_exit`` on the parent thread."""
        return self._exit_event(status, summary)

    def state(self) -> State:
        """This thread's working state (``Client.state``)."""
        return self.client.state(self.thread_id)

    def context(self, budget: int, query: str | None = None, model: str | None = None,
                format: str = "generic") -> Context:  # noqa: A002 # fmt: skip
        """This thread's context within ``budget`` tokens (``Client.context``)."""
        return self.client.context(self.thread_id, budget=budget, query=query, model=model, format=format)

    def search(self, query: str, **filters: Any) -> SearchAnswer:
        """Full-text search within this thread (``Client.search``)."""
        return self.client.search(query, thread_id=self.thread_id, **filters)


class ToolCallBase:
    """One tool call between its start and its result."""

    def __init__(self, thread: ThreadBase[Any], tool_name: str, arguments: dict[str, Any] | str | None,
                 call_id: str | None) -> None:  # fmt: skip
        self.thread = thread
        self.tool_name = tool_name
        self.arguments = {} if arguments is None else arguments
        self.call_id = call_id or f"call-{thread.client.ids.next()}"
        self.started = 0.0
        self.latency_ms: float | None = None  # measured when the result is given
        self.status: str | None = None  # the result's status once given

    def _start(self) -> Any:
        self.started = time.perf_counter()
        sent = self.thread.publish("tool_call", {"call_id": self.call_id, "tool_name": self.tool_name,
                                                 "arguments": self.arguments})  # fmt: skip
        # Open only once published: a call the client refused (closed) gets no result at close.
        self.thread.client._open_calls[self.call_id] = self
        return sent

    def _result(self, output: Any, status: str, exit_code: int | None) -> Any:
        if self.status is not None:
            raise RuntimeError(f"tool call {self.call_id} already has a result ({self.status})")
        self.latency_ms = (time.perf_counter() - self.started) * 1000.0
        self.status = status
        self.thread.client._open_calls.pop(self.call_id, None)
        return self.thread.tool_result(self.call_id, output, status, self.tool_name, exit_code)

    def _failed(self, error: BaseException | None) -> tuple[str, str] | None:
        """The result an exception leaving the block stands for (``None``: no exception, or
        a result was already given)."""
        if error is None or self.status is not None:
            return None
        status = "error" if isinstance(error, Exception) else "cancelled"  # Ctrl-C, task cancelled
        try:
            said = str(error)
        except Exception:  # noqa: BLE001 - a broken __str__ must not hide the agent's own exception
            said = "(the exception's message could not be read)"
        return f"{type(error).__name__}: {said}", status


class ToolCall(ToolCallBase):
    def __enter__(self) -> ToolCall:
        """Publish the call; its latency counts from here."""
        self._start()
        return self

    def result(self, output: Any, status: str = "ok", exit_code: int | None = None) -> str:
        """The call's result (``status``: ``ok``, ``error``, ``timeout`` or ``cancelled``;
        ``output``: text, or any value, published as its JSON text)."""
        return self._result(output, status, exit_code)  # type: ignore[no-any-return]

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: Any) -> None:
        """An exception leaving the block becomes an ``error`` (or ``cancelled``) result, and goes on."""
        failed = self._failed(error)
        if failed is not None:
            self.result(*failed)


def _step(i: int, step: Step) -> dict[str, Any]:
    if isinstance(step, str):
        return {"step_id": f"s{i}", "text": step}
    if isinstance(step, tuple):
        return dict(zip(("step_id", "text", "status"), step))
    return dict(step)


def _some(**fields: Any) -> dict[str, Any]:
    """The payload without its fields left ``None`` (the schema's defaults apply)."""
    return {k: v for k, v in fields.items() if v is not None}


__all__ = ["Thread", "ThreadBase", "ToolCall", "ToolCallBase"]
