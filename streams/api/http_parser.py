"""The HTTP/1.1 parser every server of agentlog runs: uvicorn's httptools protocol, with a
bound on a request's head.

httptools (C, llhttp) parses a request about 0.1-0.2 ms faster than uvicorn's pure-Python
h11, which counts on an agent step of two requests. But httptools keeps a header line of
any length while it arrives: a client sending one endless header made the server hold
190 MiB for a 100 MB header and still answer 200. h11 refuses a head over 16 KiB. Here
the bytes read while a request's head is still incomplete are counted, and past
``MAX_HEAD_BYTES`` the request is refused with 431 and its connection closed. The count
is by the chunks read (up to 256 KiB each): the chunk in which a head begins is counted
whole, so the bound is set well above one chunk and no legitimate head comes near it.
"""

from __future__ import annotations

import logging

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger("agentlog.http")

MAX_HEAD_BYTES = 1024 * 1024
"""A request line and headers longer than this are refused (431): about 1 MiB a
connection at most, where httptools alone would keep any length."""

_REFUSAL = (b'{"error":"the request line and headers exceed %d bytes; send large data in the body"}'
            % MAX_HEAD_BYTES)  # fmt: skip


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """``HttpToolsProtocol`` that refuses a request whose head outgrows ``MAX_HEAD_BYTES``."""

    _in_head = False  # a request began and its headers are not complete yet
    _head_bytes = 0  # bytes read since that request began (by whole chunks)
    _heads_done = 0  # heads completed on this connection

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head, self._head_bytes = True, 0

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._heads_done += 1
        super().on_headers_complete()

    def data_received(self, data: bytes) -> None:
        heads_done = self._heads_done
        super().data_received(data)
        if not self._in_head or self._heads_done != heads_done or self.transport.is_closing():
            return
        self._head_bytes += len(data)
        if self._head_bytes > MAX_HEAD_BYTES:
            log.warning("refused a request whose head exceeds %d bytes", MAX_HEAD_BYTES)
            self.transport.write(b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
                                 b"content-type: application/json\r\ncontent-length: %d\r\n"
                                 b"connection: close\r\n\r\n%s" % (len(_REFUSAL), _REFUSAL))  # fmt: skip
            self.transport.close()


__all__ = ["MAX_HEAD_BYTES", "BoundedHttpToolsProtocol"]
