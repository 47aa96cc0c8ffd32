"""``agentlog run``'s sink process: the sink stage on the second core.

chDB and tantivy's writer lock their files to one process, so the process that writes
them is also the one that reads them: it owns the chDB log and the index, runs the sink
stage (``agentlog.streams.embedded.sink_stage``) on the ``accepted`` queue with its own
committed positions, and answers the serving process's calls on them (``sql``,
``search``, ``read`` from the log, the memory mirror) over a local socket. The serving
process keeps the topic, the processor and the state, and answers ``state`` and
``context`` alone.

One ``agentlog run`` starts it and stops it: it is spawned by the server, dies with it
(``PR_SET_PDEATHSIG``: a server killed with -9 leaves no child holding the stores), and
on a graceful stop writes and commits what is queued before it exits.
"""

from __future__ import annotations

import fcntl
import logging
import os
import pickle
import queue
import secrets
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Client, Connection, Listener
from typing import Any

from agentlog.sinks.base import StoreError
from agentlog.sinks.sqlite_db import READ_CACHE_KIB
from agentlog.streams.config import Settings
from agentlog.streams.embedded import parent_death
from agentlog.streams.embedded.accepted import AcceptedQueue
from agentlog.streams.embedded.cpu_share import CpuShare
from agentlog.streams.embedded.encoding import Encoder, default_helpers
from agentlog.streams.embedded.sink_stage import FlushPolicy, SinkStage
from agentlog.streams.embedded.topic import SqliteEventBus
from agentlog.streams.sink_guard import StoreUnavailable
from agentlog.streams.wiring import open_log_store, open_search_index

log = logging.getLogger("agentlog.sinks")

RETRY_MAX_S = 30.0
SINKS_LOCK = "sinks.lock"
"""Held by the sink process while it has the stores open; whoever opens them next waits
for it (a server killed with -9 takes a moment to lose its child)."""


class SinkHost:
    """The sink process's stores, its sink stage and the loop that drives it."""

    def __init__(self, settings: Settings, cpus: CpuShare | None = None) -> None:
        self.settings = settings
        self.cpus = cpus
        self.bus = SqliteEventBus(str(settings.path("topic.db")), READ_CACHE_KIB)  # reads in offset order
        self.log = open_log_store(settings)
        self.index = open_search_index(settings)
        self.queue = AcceptedQueue(str(settings.path("state.db")))
        self.lock = threading.RLock()
        self.failing: dict[str, str] = {}
        self.hurry = threading.Event()
        self.encoder = Encoder(default_helpers())  # a catch-up's end on every core
        self.sinks = self._new_stage()

    def _new_stage(self) -> SinkStage:
        s = self.settings
        policy = FlushPolicy(s.sink_flush_rows, s.sink_flush_ms / 1000.0, s.refresh_seconds, s.max_event_bytes)
        return SinkStage(self.queue, self.bus, self.log, self.index, policy, encoder=self.encoder)

    def run(self, stop: threading.Event, idle_sleep: float = 0.01) -> None:
        delay, retry = 0.0, False
        while not stop.is_set():
            try:
                with self.lock:
                    if retry:
                        self.sinks = self._new_stage()  # from the committed positions
                    if retry or self.hurry.is_set():
                        self.hurry.clear()
                        n = self.sinks.drain()
                    else:
                        n = self.sinks.step()
            except Exception as error:  # noqa: BLE001 - a store failed: back off, retry from the commit
                store = error.store if isinstance(error, StoreUnavailable) else "sinks"
                self.failing[store] = str(error).strip()[:500] or type(error).__name__
                delay = min(max(1.0, delay * 2), RETRY_MAX_S)
                log.exception("the %s store failed; retrying from the last commit in %.0f s", store, delay)
                retry = True
                stop.wait(delay)
                continue
            if retry:
                self.failing.clear()
            retry, delay = False, 0.0
            if self.cpus is not None:
                self.cpus.follow(self.sinks.backlog)
            if n == 0:
                self.hurry.wait(idle_sleep)

    def status(self) -> dict[str, Any]:
        s = self.sinks
        return {"pos": s.pos, "dlq_pos": s.dlq_pos, "committed": s.committed(), "logged": s.logged,
                "lag": s.lag(), "visible": self.index.visible_offsets().get(0, 0),
                "failing": dict(self.failing)}  # fmt: skip

    def call(self, target: str, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if target == "host":
            if name == "flush":
                self.hurry.set()
                return None
            return self.status()
        store = self.log if target == "log" else self.index
        return getattr(store, name)(*args, **kwargs)

    def close(self) -> None:
        with self.lock:
            try:
                self.sinks.drain()
            except Exception as error:  # noqa: BLE001 - the queue keeps it for the next start
                log.error("stopping with a store failing (written on the next start): %s", error)
            self.encoder.close()
            for store in (self.queue, self.index, self.bus, self.log):
                store.close()


def main(env: dict[str, str], address: str, authkey: bytes, parent: int) -> None:
    """The sink process's entry point (``multiprocessing`` spawn)."""
    if not parent_death.die_with(parent):
        return  # the server died before the signal was armed
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C goes to the server, which stops this
    settings = Settings.from_env(env)
    if settings.sink_nice > 0:  # the serving process's reads win the contended cores
        os.nice(settings.sink_nice)
    cpus = CpuShare(settings.sink_spare_cpus)  # before chDB and tantivy start their threads
    hold = os.open(settings.path(SINKS_LOCK), os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(hold, fcntl.LOCK_EX)  # released by the kernel when this process ends, however
    try:
        host = SinkHost(settings, cpus)
    except StoreError as error:  # the server opens the stores itself, moves a bad one aside, rebuilds
        log.info("the sink process cannot open its stores: %s", error)
        raise SystemExit(1) from None
    listener = Listener(address, family="AF_UNIX", authkey=authkey)
    threading.Thread(target=_serve, args=(listener, host), daemon=True).start()
    parent_death.watch(parent, stop.set, stop)  # a graceful stop: what is queued is written
    try:
        host.run(stop)
    finally:
        host.close()
        listener.close()


def _serve(listener: Listener, host: SinkHost) -> None:
    while True:
        try:
            conn = listener.accept()
        except (OSError, EOFError):
            return
        threading.Thread(target=_answer, args=(conn, host), daemon=True).start()


def _answer(conn: Connection, host: SinkHost) -> None:
    """Every call on one connection, one after another, until the server closes it."""
    with conn:
        while True:
            try:
                target, name, args, kwargs = conn.recv()
            except (EOFError, OSError):
                return
            try:
                reply: tuple[str, Any] = ("ok", host.call(target, name, args, kwargs))
            except Exception as error:  # noqa: BLE001 - raised again in the server
                reply = ("error", _portable(error))
            try:
                conn.send(reply)
            except (OSError, pickle.PicklingError, TypeError, AttributeError) as error:
                try:
                    conn.send(("error", StoreError(f"the sink process could not send its answer: {error}")))
                except OSError:
                    return


def _exchange(conn: Connection, request: tuple[Any, ...]) -> tuple[str, Any]:
    conn.send(request)
    reply: tuple[str, Any] = conn.recv()
    return reply


def _portable(error: Exception) -> Exception:
    """The error itself when it survives pickling, else a ``StoreError`` with its message."""
    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:  # noqa: BLE001
        return StoreError(str(error))


_SPAWNER: tuple[threading.Thread, "queue.SimpleQueue[Callable[[], None]]"] | None = None
_SPAWNER_LOCK = threading.Lock()


def _spawn(start: Callable[[], None]) -> None:
    """Run ``start`` (a child process's start) on one thread that lives as long as this
    process: the child's parent-death signal fires when the thread that forked it ends,
    not the process, so a child started from a request's worker thread or a watcher that
    stops first would be killed with that thread."""
    global _SPAWNER
    with _SPAWNER_LOCK:
        if _SPAWNER is None or not _SPAWNER[0].is_alive():
            jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
            thread = threading.Thread(target=_serve_spawns, args=(jobs,), name="agentlog-spawner", daemon=True)
            thread.start()
            _SPAWNER = (thread, jobs)
        jobs = _SPAWNER[1]
    done: queue.SimpleQueue[BaseException | None] = queue.SimpleQueue()

    def job() -> None:
        try:
            start()
        except BaseException as error:  # noqa: BLE001 - handed back to the caller
            done.put(error)
        else:
            done.put(None)

    jobs.put(job)
    error = done.get()
    if error is not None:
        raise error


def _serve_spawns(jobs: "queue.SimpleQueue[Callable[[], None]]") -> None:
    while True:
        jobs.get()()


class SinkProcess:
    """The server's handle on its sink process: start, calls, stop."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        # An abstract socket (Linux): no file to leave behind, no path-length limit.
        self.address = f"\0agentlog-sinks-{os.getpid()}-{secrets.token_hex(8)}"
        self.authkey = secrets.token_bytes(16)
        self.process = parent_death.spawn_context().Process(
            target=main, name="agentlog-sinks", daemon=False,
            args=(settings.to_env(), self.address, self.authkey, os.getpid()),
        )  # fmt: skip
        # Connections between calls, each used by one call at a time (a call takes one).
        self._idle: list[Connection] = []
        self._idle_lock = threading.Lock()

    def start(self, timeout: float = 120.0) -> None:
        _spawn(self.process.start)
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.call("host", "status")
                return
            except (OSError, EOFError) as error:  # not listening yet (or killed meanwhile)
                if not self.process.is_alive() or time.monotonic() > deadline:
                    raise StoreError(f"the sink process did not start (exit code {self.process.exitcode})") from error
                time.sleep(0.05)

    def call(self, target: str, name: str, *args: Any, **kwargs: Any) -> Any:
        """One call, on a connection kept from an earlier one when there is one (opening a
        connection, with its authentication, cost more than most calls themselves)."""
        request = (target, name, args, kwargs)
        conn = self._idle_connection()
        if conn is not None:
            try:
                reply = _exchange(conn, request)
            except (OSError, EOFError):  # closed since (the sink process was restarted): a fresh one
                conn.close()
                conn = None
            except BaseException:  # an interrupt mid-answer, say: never handed to another call
                conn.close()
                raise
        if conn is None:
            conn = Client(self.address, family="AF_UNIX", authkey=self.authkey)
            try:
                reply = _exchange(conn, request)
            except BaseException:
                conn.close()
                raise
        with self._idle_lock:
            self._idle.append(conn)
        status, value = reply
        if status == "error":
            raise value
        return value

    def _idle_connection(self) -> Connection | None:
        with self._idle_lock:
            return self._idle.pop() if self._idle else None

    def _close_connections(self) -> None:
        with self._idle_lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def stop(self, timeout: float = 120.0) -> None:
        """Ask it to write what is queued and exit; kill it if it does not."""
        self._close_connections()
        if self.process.is_alive():
            self.process.terminate()  # SIGTERM: it drains, commits and closes its stores
            self.process.join(timeout)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()


class Remote:
    """A store of the sink process, called as if it were here (``log.query(...)``);
    ``attributes``: its plain attributes, read once."""

    def __init__(self, process: SinkProcess, target: str, attributes: dict[str, Any] | None = None) -> None:
        self._process, self._target, self._attributes = process, target, attributes or {}

    def __getattr__(self, name: str) -> Any:
        if name in self._attributes:
            return self._attributes[name]
        return lambda *args, **kwargs: self._process.call(self._target, name, *args, **kwargs)

    search_later = None
    """Not a search started beside the caller: a forwarded call is I/O, asked in order."""

    @property
    def warnings(self) -> list[str]:
        """A search answer says nothing of the sink process's index (tantivy: an outdated
        one is rebuilt when opened)."""
        return []

    exact_holders = None
    """Not looked up apart from a search: a forwarded call costs more than it saves."""

    def close(self) -> None:
        """The sink process closes its own stores."""


class IndexSearchedHere(Remote):
    """The sink process's tantivy index, searched in this process through a reader of its
    directory (an agent's context runs several searches: a call each to the sink process
    was most of the context's time); writes and the rest still go to the sink process."""

    def __init__(self, process: SinkProcess, reader: Any) -> None:
        super().__init__(process, "index")
        self._reader = reader

    def search(self, query: str, filters: Any, limit: int = 10) -> Any:
        return self._reader.search(query, filters, limit)

    def search_later(self, query: str, filters: Any, limit: int = 10) -> Any:
        return self._reader.search_later(query, filters, limit)

    def close(self) -> None:
        """The reader here (its search threads); the index stays the sink process's."""
        self._reader.close()

    def visible_offsets(self) -> dict[int, int]:
        return dict(self._reader.visible_offsets())

    def visible_ids(self, event_ids: Any) -> set[str]:
        return set(self._reader.visible_ids(event_ids))

    def exact_holders(self, query: str, filters: Any, most: int) -> Any:
        return self._reader.exact_holders(query, filters, most)

    def doc_count(self) -> int:
        return int(self._reader.doc_count())


def index_of(process: SinkProcess, settings: Settings) -> Remote:
    """The sink process's index as this process uses it: searched here when it is the
    embedded tantivy index and a reader opens, else every call forwarded."""
    if settings.opensearch_url:  # OpenSearch answers its own searches, over HTTP
        return Remote(process, "index")
    from agentlog.sinks.tantivy_index import TantivyIndexReader  # noqa: PLC0415 - the embedded deployment's

    try:
        return IndexSearchedHere(process, TantivyIndexReader(str(settings.path("index"))))
    except StoreError as error:
        log.warning("searching through the sink process (%s)", error)
        return Remote(process, "index")


class RemoteSinks:
    """The sink stage as the server sees it. Its positions for a wait are asked fresh; what
    ``read`` and ``/healthz`` show comes from the last status the server polled, so a
    sink process that is slow or stopped never holds them up (a stale ``logged`` only
    says ``active`` a moment longer)."""

    def __init__(self, process: SinkProcess, bus: SqliteEventBus) -> None:
        self._process, self._bus = process, bus
        self.last = self.status()

    def status(self) -> dict[str, Any]:
        self.last = self._process.call("host", "status")
        return self.last

    @property
    def logged(self) -> int:
        return int(self.last["logged"])

    @property
    def visible(self) -> int:
        return int(self.last["visible"])

    def written(self) -> tuple[int, int]:
        s = self.status()
        return int(s["pos"]), int(s["dlq_pos"])

    def committed(self) -> tuple[int, int]:
        accepted, dlq = self.status()["committed"]
        return int(accepted), int(dlq)

    def lag(self) -> int:
        return int(self.last["lag"])

    def pending(self) -> int:
        return self.lag() + max(0, self._bus.end_offsets()[1] - int(self.last["dlq_pos"]))

    def hurry(self) -> None:
        self._process.call("host", "flush")


def wait_for_sink_process(settings: Settings, timeout: float = 30.0) -> None:
    """Wait until no sink process of this data directory holds its stores."""
    fd = os.open(settings.path(SINKS_LOCK), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    return  # opening the stores says what holds them
                time.sleep(0.02)
    finally:
        os.close(fd)


__all__ = ["IndexSearchedHere", "Remote", "RemoteSinks", "SinkHost", "SinkProcess", "index_of", "main", "wait_for_sink_process"]
