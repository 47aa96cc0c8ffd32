"""The one interface every deployment answers through (SPEC §7's operations).

The embedded service (a data directory in this process), the Kafka worker's service,
the offline service (Kafka with no worker answering: the log and the index) and the HTTP
client (a server elsewhere) all implement ``Service``; the CLI and the HTTP routes are
written once, over it. A new operation is added here first, then to each implementation
(``tests/test_service_contract.py`` drives them all through the same scenario).

Answers are JSON-shaped dicts, the same ones the HTTP API sends, so a caller cannot tell
an in-process answer from a remote one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from agentlog.processors.state_sections import Held, StateBody
from agentlog.sinks.base import QueryResult
from agentlog.streams.publish_check import PublishReport

Progress = Callable[[int, int], None]
"""``update(done, total)``: how long work (a rebuild, a drain) reports progress."""


class NotFound(LookupError):
    """The thread or event does not exist (and is not pending either): HTTP 404."""


class Unavailable(RuntimeError):
    """The service cannot answer now (restoring state after a rebalance, still catching
    up, a store busy); the same request later will be answered: HTTP 503."""


class NotServedHere(RuntimeError):
    """This service does not do that operation (a Kafka worker does not rebuild while it
    runs, for one); the message says which command does: HTTP 501."""


@runtime_checkable
class StateJson(Protocol):
    """A service that writes a thread's state as JSON itself: the HTTP route sends these
    bytes as they are (the embedded service keeps unchanged sections serialised, with their
    digests: ``agentlog.processors.state_sections``)."""

    def state_json(self, thread_id: str, held: Held | None = None) -> StateBody:
        """``orjson.dumps(self.state(thread_id))``, byte for byte, but for the sections the
        reader ``held`` (shown as null, or as a patch when it takes them)."""

    def state_json_now(self, thread_id: str, held: Held | None = None) -> StateBody | None:
        """``state_json``, if it can answer without waiting (a lock, a long backlog, a
        store); else ``None`` (then ``state_json`` is called where blocking is fine)."""


@runtime_checkable
class Service(Protocol):
    """Publish, query and maintain one deployment's threads."""

    def publish(self, data: bytes, dead_letters: Sequence[tuple[bytes, str]] = ()) -> PublishReport:
        """Validate JSON or JSON-lines ``data`` and append what is valid to the topic;
        the report counts accepted and rejected records, with each rejection's reason.
        ``dead_letters`` (bytes, reason) are records an ingest adapter could not map to
        events (OTLP spans): dead-lettered beside the rejections, counted, not listed."""

    def thread_list(self, project: str | None = None, status: str | None = None,
                    limit: int = 100) -> dict[str, Any]:  # fmt: skip
        """Threads' summary rows, newest activity first."""

    def state(self, thread_id: str) -> dict[str, Any]:
        """The thread's working state (``NotFound`` if it has no events)."""

    def context(self, thread_id: str, budget: int, query: str | None = None,
                model: str | None = None, format: str = "generic") -> dict[str, Any]:  # noqa: A002 # fmt: skip
        """The model's working set for the thread within ``budget`` tokens; ``format``
        (generic, openai, anthropic) is the shape of its messages (docs/providers.md)."""

    def search(self, query: str, thread_id: str | None = None, kind: str | None = None,
               tool_name: str | None = None, window_id: str | None = None, project: str | None = None,
               after: str | None = None, since_ms: int | None = None, until_ms: int | None = None,
               limit: int = 10) -> dict[str, Any]:  # fmt: skip
        """Full-text search of the index, with read-your-writes for the named thread."""

    def read(self, event_id: str) -> dict[str, Any]:
        """One event as logged (or accepted and not yet logged: ``source: active``)."""

    def sql(self, statement: str) -> QueryResult:
        """One read-only analyst query on the log's tables, inside the SQL sandbox."""

    def catch_up(self, on_progress: Progress | None = None) -> dict[str, Any]:
        """Process what is pending and flush the sinks before returning (``POST /flush``:
        a serving process waits for its own loop to have applied what was published)."""

    def rebuild(self, on_progress: Progress | None = None) -> dict[str, Any]:
        """Replay the immutable log into fresh state, pairs and index."""

    def health(self) -> dict[str, Any]:
        """Liveness and each store's condition (``degraded`` with reasons)."""

    # -- long-term memory (SPEC §6); ``agentlog.streams.memory.jobs.MemoryOperations`` --

    def memory_show(self, project: str | None = None, key: str | None = None) -> dict[str, Any]:
        """The published view's facts, of one project or key if named."""

    def memory_status(self) -> dict[str, Any]:
        """The jobs' leases, watermarks, failures and what waits for which phase."""

    def memory_extract(self, lease_seconds: float = 60.0) -> dict[str, Any]:
        """Phase 1: extract candidates from the threads with new events."""

    def memory_consolidate(self, lease_seconds: float = 60.0,
                           high_risk: list[str] | None = None) -> dict[str, Any]:  # fmt: skip
        """Phase 2: consolidate the candidates into a new published view."""

    def memory_revoke(self, event_id: str, reason: str | None = None) -> dict[str, Any]:
        """Withdraw the facts a source event gave (``NotFound`` if it was never accepted)."""

    def close(self) -> None:
        """Release what the service holds (stores, connections)."""


__all__ = ["NotFound", "NotServedHere", "Progress", "Service", "StateJson", "Unavailable"]
