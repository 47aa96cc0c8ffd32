"""The HTTP/1.1 parser every server of agentlog runs: uvicorn's httptools protocol, with a
bound on what a request may make the server hold before it is answered.

httptools (C, llhttp) parses a request about 0.1-0.2 ms faster than uvicorn's pure-Python
h11, which counts on an agent step of two requests. But httptools keeps a header line of
any length while it arrives: a client sending one endless header made the server hold
190 MiB for a 100 MB header and still answer 200. h11 refuses a head over 16 KiB. Here
the bytes read while the parser makes no progress (no head completed, no body byte, no
request completed: a head, a chunked body's trailers or chunk extensions, blank lines
before a request) are counted, and past ``MAX_HEAD_BYTES`` the request is refused with 431
and its connection closed. The count is by the chunks read (up to 256 KiB each), but a
chunk in which the parser progresses is not counted, so it never exceeds the head's own
bytes: a request pipelined behind a large body is never refused for the body's bytes. A
head that arrives whole in one such chunk is measured as it is parsed instead (its target
and header fields), and held to the same bound.

Four more differences from httptools as uvicorn runs it, each one h11 did not have:
- A head holds at most ``MAX_HEADERS`` fields: 1 MiB of ``a:`` lines made 250,000 Python
  header pairs (+27 MiB) where h11 held about 16 KiB of them.
- llhttp skips the body of a request that asks for an upgrade (``Connection: upgrade``) and
  reads what follows as the next request: a POST's body became a second request. A request
  with a body asking for an upgrade other than a WebSocket is refused (400); one without a
  body is answered and its connection closed (what followed it in the same read is lost).
- A chunked body's trailers are dropped, as uvicorn does with h11: httptools' uvicorn added
  them to the request's headers after the guard had checked them (a ``Content-Encoding``
  trailer changed how ``/v1/traces`` read its body).
- A refusal of a request pipelined behind one still being answered is sent after that
  answer, not in its place (uvicorn wrote its 400 at once and closed: the earlier request's
  answer was lost).
"""

from __future__ import annotations

import logging

import orjson
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

log = logging.getLogger("agentlog.http")

MAX_HEAD_BYTES = 64 * 1024
"""Bytes read without the parser making progress (a request line and headers, trailers, a
chunk extension) past which the request is refused (431). Above any valid request (a
4096-character search or context query, percent-encoded, is at most 48 KiB) and four times
h11's 16 KiB; at 1 MiB, 100 connections each holding a 1 MB head kept 99 MiB (h11: none),
and a 1 MB header sent in 250-byte pieces cost 0.23 s of CPU (httptools copies a growing
header once a read)."""
MAX_HEADERS = 1000
"""Header fields (and trailers) a request may carry; real clients send a few dozen."""

_TOO_LONG = (b'{"error":"the request line and headers exceed %d bytes; send large data in the body"}'
             % MAX_HEAD_BYTES)  # fmt: skip
_TOO_MANY = b'{"error":"a request may carry at most %d header fields"}' % MAX_HEADERS
_UPGRADE = (b'{"error":"this server upgrades no connection but a WebSocket: send the request '
            b'without Connection: upgrade"}')  # fmt: skip
_JSON = b"application/json"


class _Refused(Exception):
    """Raised in a parser callback: httptools stops and uvicorn calls ``send_400_response``."""


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """``HttpToolsProtocol`` with the bounds and fixes above."""

    _in_body = False  # the request's headers are complete (what follows is body, or trailers)
    _progressed = False  # the parser completed a head, body bytes or a request in this read
    _stalled = 0  # bytes read since the parser last progressed (by whole chunks)
    _refusal: tuple[int, bytes] | None = None  # the status and body a callback refused with
    _held: bytes | None = None  # a refusal waiting for the answers to requests before it

    _head_bytes = 0  # the request line's target and the header fields parsed so far

    def on_message_begin(self) -> None:
        self._head_bytes = 0
        super().on_message_begin()

    def on_url(self, url: bytes) -> None:
        self._count_head(len(url))
        super().on_url(url)

    def _count_head(self, n: int) -> None:
        """A head that arrived whole in one read (the parser progressed in it, so the
        stall count never saw it) is still held to ``MAX_HEAD_BYTES``."""
        self._head_bytes += n
        if self._head_bytes > MAX_HEAD_BYTES:
            self._refusal = (431, _TOO_LONG)
            raise _Refused

    def on_header(self, name: bytes, value: bytes) -> None:
        # uvicorn's own, inline (it runs once a header: calling it cost ~1.5 us a request),
        # with the bounds; a chunked body's trailer is dropped (uvicorn added it to the headers).
        headers = self.headers
        if self._in_body:
            return
        if len(headers) >= MAX_HEADERS:
            self._refusal = (431, _TOO_MANY)
            raise _Refused
        self._count_head(len(name) + len(value) + 4)  # ": " and CRLF
        name = name.lower()
        if name == b"expect" and value.lower() == b"100-continue":
            self.expect_100_continue = True
        headers.append((name, value))

    def on_headers_complete(self) -> None:
        self._progressed = True
        upgrade = self.parser.should_upgrade() and not self._should_upgrade()
        if upgrade and self._has_body():  # llhttp would read the body as the next request
            self._refusal = (400, _UPGRADE)
            raise _Refused
        super().on_headers_complete()
        self._in_body = True
        if upgrade:  # the parser stops here; the rest of this read is dropped
            self.cycle.keep_alive = False

    def _has_body(self) -> bool:
        for name, value in self.headers:
            if name == b"transfer-encoding" or (name == b"content-length" and value.strip() != b"0"):
                return True
        return False

    def on_body(self, body: bytes) -> None:
        self._progressed = True
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._progressed, self._in_body = True, False
        super().on_message_complete()

    def data_received(self, data: bytes) -> None:
        if self._held is not None:
            return  # refused: nothing more is parsed or held
        self._progressed = False
        super().data_received(data)
        if self.transport.is_closing() or self._held is not None:
            return
        if self._progressed:
            self._stalled = 0
            return
        self._stalled += len(data)
        if self._stalled > MAX_HEAD_BYTES:
            log.warning("refused a request whose head exceeds %d bytes", MAX_HEAD_BYTES)
            self._refuse(431, _JSON, _TOO_LONG)

    def send_400_response(self, msg: str) -> None:
        """A request the parser could not read is answered in JSON, as every other refusal
        (uvicorn's answer is plain text: a client reading ``error`` found none)."""
        status, body = self._refusal or (400, orjson.dumps({"error": f"{msg.rstrip('.')}: not a valid HTTP/1.1 "
                                                                     "request (check the request line and headers)"}))
        self._refuse(status, _JSON, body)

    def _refuse(self, status: int, content_type: bytes, body: bytes) -> None:
        """Answer ``status`` and close; after the answer to a request before it still in flight."""
        head = [STATUS_LINE[status]]
        head += [b"%s: %s\r\n" % header for header in self.server_state.default_headers]
        head.append(b"content-type: %s\r\ncontent-length: %d\r\nconnection: close\r\n\r\n" % (content_type, len(body)))
        answer = b"".join(head) + body
        cycle = self.cycle
        if cycle is not None and not cycle.more_body and not cycle.response_complete:
            self._held = answer  # sent by on_response_complete, once every earlier answer is out
            self.flow.pause_reading()
            return
        self.transport.write(answer)
        self.transport.close()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._held is not None and self.cycle.response_complete and not self.transport.is_closing():
            self.transport.write(self._held)
            self.transport.close()


__all__ = ["MAX_HEADERS", "MAX_HEAD_BYTES", "BoundedHttpToolsProtocol"]
