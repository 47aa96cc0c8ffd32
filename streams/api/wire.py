"""The HTTP client's hot path: one kept-alive connection per calling thread.

An agent's step is two small requests (publish, then state or context). Measured on
loopback, httpx spent about 0.4 ms of Python per request on top of the standard library's
``http.client`` (0.8 against 0.4 ms a state read): most of an agent step's time over HTTP.
``KeepAlive`` sends those requests on ``http.client`` connections kept between calls, one
per thread (a connection carries one exchange at a time). ``RemoteService`` uses it for
plain ``http://`` servers that no proxy setting covers; anything else (TLS, proxies) keeps
going through httpx.
"""

from __future__ import annotations

import http.client
import select
import socket
import threading
import urllib.request
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import orjson

WIRE_ERRORS = (OSError, http.client.HTTPException)
"""What a request on the wire raises when no answer came back (refused, reset, timed out)."""

_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)
"""What a kept connection the server closed meanwhile raises."""

ONE_WRITE_BYTES = 256 * 1024
"""A body up to this size goes out in the same write as the request's head."""

_IDEMPOTENT = frozenset({"GET", "HEAD"})
"""Requests sent again on a fresh connection when a kept one fails: a POST may have reached
the server before the connection dropped, and is never sent twice."""


@dataclass(frozen=True)
class Answer:
    """A server's answer, with the attributes ``answer_of`` reads (as on httpx's response)."""

    status_code: int
    content: bytes
    headers: http.client.HTTPMessage | Mapping[str, str] = field(default_factory=dict)
    """From the wire, ``http.client``'s message: ``get`` is case-insensitive, as on httpx's
    response (the default, empty, has nothing to match)."""

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        return orjson.loads(self.content)


def plain_http(url: str) -> bool:
    """Whether ``url`` is served over plain HTTP with no proxy in the way (the environment's
    ``http_proxy``, ``all_proxy`` and ``no_proxy``, read as httpx and urllib read them)."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        return False
    proxies = urllib.request.getproxies()
    if "http" not in proxies and "all" not in proxies:
        return True
    return bool(urllib.request.proxy_bypass(parts.hostname))


class KeepAlive:
    """Requests to one ``http://`` server, each thread on a connection of its own kept open."""

    def __init__(self, url: str, headers: dict[str, str], timeout: float) -> None:
        parts = urlsplit(url)
        self._host, self._port = parts.hostname or "127.0.0.1", parts.port or 80
        self._prefix = parts.path.rstrip("/")
        self._headers = headers
        self._timeout = timeout
        self._local = threading.local()
        # Every thread's connection (one dies with its thread), and those in an exchange now.
        self._opened: weakref.WeakSet[http.client.HTTPConnection] = weakref.WeakSet()
        self._busy: set[http.client.HTTPConnection] = set()
        self._lock = threading.Lock()
        self._closed = False

    def request(self, method: str, target: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> Answer:  # fmt: skip
        """One exchange; ``target`` is the path with its query string."""
        conn, kept = self._take()
        sent = {**self._headers, **(headers or {})}
        try:
            try:
                return _exchange(conn, method, self._prefix + target, body, sent)
            except _STALE:
                # Closed by the server as this request went out (its idle timeout): a read
                # is sent again, once, on a fresh connection.
                if not kept or method not in _IDEMPOTENT or self._closed:
                    raise
            return _exchange(conn, method, self._prefix + target, body, sent)  # it reconnects
        finally:
            with self._lock:
                self._busy.discard(conn)

    def _take(self) -> tuple[http.client.HTTPConnection, bool]:
        """This thread's connection, marked busy, and whether it is one kept from before;
        one the server closed while it was idle is reopened first."""
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        kept = conn is not None and conn.sock is not None
        if conn is not None and conn.sock is not None and _closed_by_peer(conn.sock):
            conn.close()
            kept = False
        with self._lock:
            if self._closed:
                raise RuntimeError("the client is closed")
            if conn is None:
                conn = self._local.conn = _Connection(self._host, self._port, timeout=self._timeout)
                self._opened.add(conn)
            self._busy.add(conn)
        return conn, kept

    def close(self) -> None:
        """Close every thread's connection; one in an exchange now is shut down instead (its
        thread gets a connection error, and closes it)."""
        with self._lock:
            self._closed = True
            busy, idle = list(self._busy), [c for c in self._opened if c not in self._busy]
        for conn in idle:
            conn.close()
        for conn in busy:
            sock = conn.sock
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


class _Connection(http.client.HTTPConnection):
    """``http.client``'s connection, sending a small body in the same write as the head.
    The standard library writes them apart: on loopback each write wakes the server and
    costs about 0.1-0.2 ms here (a profiled agent step: most of the client's own time), so
    a publish paid it twice."""

    def _send_output(self, message_body: Any = None, encode_chunked: bool = False) -> None:
        if not isinstance(message_body, bytes) or encode_chunked or not 0 < len(message_body) <= ONE_WRITE_BYTES:
            super()._send_output(message_body, encode_chunked)
            return
        self._buffer.extend((b"", message_body))  # type: ignore[attr-defined]  # the head's lines, a blank line, the body
        head_and_body = b"\r\n".join(self._buffer)  # type: ignore[attr-defined]
        del self._buffer[:]  # type: ignore[attr-defined]
        self.send(head_and_body)


def _closed_by_peer(sock: socket.socket) -> bool:
    """Whether an idle connection has something to read: the server's close (or data it
    had no reason to send). Either way it cannot carry the next exchange."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def _exchange(conn: http.client.HTTPConnection, method: str, target: str, body: bytes | None,
              headers: dict[str, str]) -> Answer:  # fmt: skip
    try:
        conn.request(method, target, body=body, headers=headers)
        response = conn.getresponse()
        return Answer(response.status, response.read(), response.msg)
    except BaseException:
        conn.close()  # a half-read answer must not be read as the next one's
        raise


__all__ = ["WIRE_ERRORS", "Answer", "KeepAlive", "plain_http"]
