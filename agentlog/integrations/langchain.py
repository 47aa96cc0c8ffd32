"""A LangChain/LangGraph callback handler that publishes what an agent does as events.

    handler = AgentlogCallbackHandler(service, thread_id="t1")
    agent.invoke(inputs, config={"callbacks": [handler]})

or name the thread per run: ``config={"callbacks": [handler], "metadata": {"thread_id": "t1"}}``
(LangGraph copies ``configurable.thread_id`` into the metadata, so a graph's own thread
id is used as is). What is published, through an ``agentlog.Client``'s buffer (or an
``AsyncClient``'s) or through ``service.publish`` (an ``EmbeddedService``, a
``RemoteService`` or anything with the ``Service`` protocol's ``publish``):

- a chat model's start: the new input messages (those after the model's last answer or
  tool result: every call re-sends the whole history) as ``message`` events;
- its end: the answer's text as an assistant ``message``; the tool calls it asks for are
  published when each tool starts (so a call's latency is the tool's), with the model's
  call id and arguments; calls that never start are published when the run ends, before
  its ``turn_end``, which gives them synthetic results;
- a tool's end or error: a ``tool_result`` (``error`` status for an exception, or for a
  ``ToolMessage`` whose status is ``error``), found by the tool's run id;
- a model's error: an ``error`` event; the outermost run's end: ``turn_end`` (after an
  ``error`` event if it failed). The outermost run is the turn (``turn_id``).

Event ids are derived from LangChain's run ids (and the model's call ids), so a callback
delivered twice publishes the same event twice, which changes nothing.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Protocol
from uuid import UUID

import orjson
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage, ToolMessage
from langchain_core.outputs import LLMResult

from agentlog.processors.fitting import fit
from agentlog.schemas.events import MAX_EVENT_BYTES

log = logging.getLogger("agentlog.integrations.langchain")

INPUT_ROLES = {"human": "user", "system": "system", "developer": "developer"}
THREAD_KEYS = ("agentlog_thread_id", "thread_id")
"""Metadata keys naming the thread, first found wins (LangGraph puts ``thread_id`` there)."""


class Publishes(Protocol):
    """What the handler needs of a service: the ``Service`` protocol's ``publish`` (an
    ``agentlog.Client`` is taken too: the handler then uses its ``publish_raw``)."""

    def publish(self, data: bytes) -> Any: ...


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def text_of(content: Any) -> str:
    """A message's content as text: a string as is, the text blocks of a list joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [b if isinstance(b, str) else b.get("text", "") for b in content
                 if isinstance(b, str) or (isinstance(b, dict) and b.get("type") == "text")]  # fmt: skip
        return "".join(p for p in parts if isinstance(p, str))
    return ""


@dataclass
class _Run:
    thread_id: str
    turn_id: str
    root: bool
    call_id: str | None = None
    tool_name: str | None = None


@dataclass
class _Turn:
    """Tool calls a model asked for in this turn, by call id, until their tool starts."""

    asked: dict[str, tuple[str, dict[str, Any], str]] = field(default_factory=dict)  # id -> (name, args, ts)


class AgentlogCallbackHandler(BaseCallbackHandler):
    """Publishes chat-model, tool and chain callbacks as events of one thread (or of the
    thread a run's metadata names). ``clock`` gives RFC 3339 event times."""

    raise_error = False  # a publish that fails is logged by LangChain; the agent goes on

    def __init__(self, service: Publishes, thread_id: str | None = None, project: str | None = None,
                 agent_id: str | None = None, clock: Callable[[], str] = now_rfc3339) -> None:  # fmt: skip
        self.service, self.thread_id, self.clock = service, thread_id, clock
        # An ``agentlog.Client`` (or ``AsyncClient``) publishes through its buffer, with its
        # retries: a server away for a moment loses no callback. A service publishes at once.
        client = getattr(service, "sync", service)
        self._publish_bytes: Callable[[bytes], Any] = getattr(client, "publish_raw", None) or service.publish
        self.max_event_bytes: int = getattr(client, "max_event_bytes", MAX_EVENT_BYTES)
        self.envelope = {k: v for k, v in (("project", project), ("agent_id", agent_id)) if v}
        self._runs: dict[UUID, _Run] = {}
        self._turns: dict[str, _Turn] = {}
        self._lock = threading.Lock()

    # -- bookkeeping -------------------------------------------------------------------

    def _thread(self, metadata: dict[str, Any] | None) -> str | None:
        for key in THREAD_KEYS:
            if isinstance((metadata or {}).get(key), str):
                return str(metadata[key])  # type: ignore[index]
        return self.thread_id

    def _start(self, run_id: UUID, parent_run_id: UUID | None, metadata: dict[str, Any] | None) -> _Run | None:
        """Remember a run: its thread, and its turn (the outermost run's id)."""
        with self._lock:
            parent = self._runs.get(parent_run_id) if parent_run_id else None
            thread = self._thread(metadata) or (parent.thread_id if parent else None)
            if thread is None:
                return None  # no thread named anywhere: nothing to publish to
            run = _Run(thread, parent.turn_id if parent else str(run_id), root=parent is None)
            self._runs[run_id] = run
            self._turns.setdefault(run.turn_id, _Turn())
            return run

    def _event(self, run: _Run, event_id: str, kind: str, payload: dict[str, Any], ts: str) -> dict[str, Any]:
        return {"event_id": event_id, "thread_id": run.thread_id, "kind": kind, "ts": ts, "turn_id": run.turn_id,
                **self.envelope, "payload": payload}  # fmt: skip

    def _publish(self, run: _Run, event_id: str, kind: str, payload: dict[str, Any], ts: str | None = None) -> None:
        self._send([self._event(run, event_id, kind, payload, ts or self.clock())])

    def _send(self, events: Sequence[dict[str, Any]]) -> None:
        if events:
            # ``fit``: arguments JSON cannot hold are made JSON, an output over the size limit cut
            report = self._publish_bytes(b"\n".join(fit(e, self.max_event_bytes, "agentlog handler") for e in events))
            # A callback must not raise into the agent's run; a refused event is said, not
            # dropped in silence (a LangGraph thread id outside the id alphabet, say).
            for rejection in getattr(report, "rejections", None) or ():
                n = rejection.get("record")
                event = events[n - 1] if isinstance(n, int) and 1 <= n <= len(events) else events[0]
                log.warning("agentlog refused event %s of thread %s: %s", event.get("event_id"),
                            event.get("thread_id"), rejection.get("reason"))  # fmt: skip

    # -- chat models -------------------------------------------------------------------

    def on_chat_model_start(self, serialized: dict[str, Any], messages: list[list[BaseMessage]], *, run_id: UUID,
                            parent_run_id: UUID | None = None, metadata: dict[str, Any] | None = None,
                            **kwargs: Any) -> None:  # fmt: skip
        run = self._start(run_id, parent_run_id, metadata)
        if run is None:
            return
        history = messages[0] if messages else []
        new: list[BaseMessage] = []
        for message in reversed(history):  # the messages after the model's last answer
            if message.type not in INPUT_ROLES:
                break
            new.append(message)
        ts = self.clock()
        payloads = [{"role": INPUT_ROLES[m.type], "text": text_of(m.content)} for m in reversed(new)]
        self._send([self._event(run, f"lc:{run_id}:in:{n}", "message", p, ts) for n, p in enumerate(payloads)])

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        run = self._runs.pop(run_id, None)
        if run is None:
            return
        ts = self.clock()
        generation = response.generations[0][0] if response.generations and response.generations[0] else None
        message = getattr(generation, "message", None)
        text = text_of(message.content) if message is not None else (generation.text if generation else "")
        with self._lock:
            if run.root:  # a model called alone: its calls will be the tools' own runs, if any
                self._turns.pop(run.turn_id, None)
            elif (turn := self._turns.get(run.turn_id)) is not None:
                for call in getattr(message, "tool_calls", None) or []:
                    if call.get("id"):
                        turn.asked[call["id"]] = (call["name"], dict(call.get("args") or {}), ts)
        if text:
            self._publish(run, f"lc:{run_id}:out", "message", {"role": "assistant", "text": text}, ts)

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        run = self._runs.pop(run_id, None)
        if run is not None and run.root:
            self._turns.pop(run.turn_id, None)
        if run is not None:
            self._publish(run, f"lc:{run_id}:error", "error", {"message": str(error), "code": type(error).__name__})

    # -- tools -------------------------------------------------------------------------

    def on_tool_start(self, serialized: dict[str, Any], input_str: str, *, run_id: UUID,
                      parent_run_id: UUID | None = None, metadata: dict[str, Any] | None = None,
                      inputs: dict[str, Any] | None = None, tool_call_id: str | None = None,
                      **kwargs: Any) -> None:  # fmt: skip
        run = self._start(run_id, parent_run_id, metadata)
        if run is None:
            return
        name = kwargs.get("name") or (serialized or {}).get("name") or "tool"
        arguments: dict[str, Any] | str = inputs if isinstance(inputs, dict) else input_str
        with self._lock:
            asked = self._turns[run.turn_id].asked.pop(tool_call_id, None) if tool_call_id else None
        if asked is not None:  # the model's own name and arguments for its call
            name, arguments = asked[0], asked[1]
        run.call_id, run.tool_name = tool_call_id or str(run_id), str(name)
        self._publish(run, f"lc:{run_id}:call", "tool_call",
                      {"call_id": run.call_id, "tool_name": run.tool_name, "arguments": arguments})  # fmt: skip

    def _result(self, run_id: UUID, output: str, status: str) -> None:
        run = self._runs.pop(run_id, None)
        if run is not None and run.root:  # a tool called alone is its own turn
            self._turns.pop(run.turn_id, None)
        if run is not None and run.call_id is not None:
            payload = {"call_id": run.call_id, "output": output, "status": status, "tool_name": run.tool_name}
            self._publish(run, f"lc:{run_id}:result", "tool_result", payload)

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        if isinstance(output, ToolMessage):
            self._result(run_id, text_of(output.content), "error" if output.status == "error" else "ok")
        else:
            self._result(run_id, output if isinstance(output, str) else orjson.dumps(output, default=str).decode(), "ok")

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._result(run_id, f"{type(error).__name__}: {error}", "error")

    # -- chains: the outermost run is the turn -----------------------------------------

    def on_chain_start(self, serialized: dict[str, Any], inputs: dict[str, Any], *, run_id: UUID,
                       parent_run_id: UUID | None = None, metadata: dict[str, Any] | None = None,
                       **kwargs: Any) -> None:  # fmt: skip
        self._start(run_id, parent_run_id, metadata)

    def _end_turn(self, run_id: UUID, error: BaseException | None) -> None:
        run = self._runs.pop(run_id, None)
        if run is None or not run.root:
            return
        with self._lock:
            turn = self._turns.pop(run.turn_id, _Turn())
            for rid in [r for r, other in self._runs.items() if other.turn_id == run.turn_id]:
                del self._runs[rid]
        for call_id, (name, args, ts) in turn.asked.items():  # asked for, never started
            self._publish(run, f"lc:{run_id}:asked:{call_id}", "tool_call",
                          {"call_id": call_id, "tool_name": name, "arguments": args}, ts)  # fmt: skip
        if error is not None:
            self._publish(run, f"lc:{run_id}:error", "error", {"message": str(error), "code": type(error).__name__})
        self._publish(run, f"lc:{run_id}:turn_end", "turn_end", {})

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._end_turn(run_id, None)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._end_turn(run_id, error)


__all__ = ["AgentlogCallbackHandler", "text_of"]
