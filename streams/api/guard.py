"""Who may talk to the HTTP API, and how much they may send: the rules both servers apply
(``agentlog run``'s FastAPI app and the Kafka worker's faust web views) before routing.

- A token (``AGENTLOG_API_TOKEN``): required to start on a non-loopback address; when set,
  every route but ``OPEN_PATHS`` needs ``Authorization: Bearer <token>``, or the web view's
  cookie holding it (a page without either is sent to the login form).
- A Host allow-list: a loopback server answers only to the names of loopback (plus
  ``AGENTLOG_ALLOWED_HOSTS``), so a page whose DNS name is rebound to 127.0.0.1 cannot read
  it; a browser's ``Origin`` must be on the same list.
- Writes carry a JSON content type, so a cross-origin form or ``text/plain`` POST (which a
  browser sends without asking) is refused; state changes only on POST (the routing). The
  one form a browser posts is the web view's login (its ``Origin`` checked as above), so the
  token never travels in a URL.
- A body is refused (413) when its Content-Length, or what has been read of it, passes
  ``max_request_bytes``: it is never held whole in memory first.

The checks are plain functions over a method, a path and headers; ``Guard`` applies them
in front of the FastAPI app.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from http.cookies import CookieError, SimpleCookie
from urllib.parse import urlencode, urlsplit

from starlette.responses import JSONResponse, RedirectResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from agentlog.schemas.events import MAX_EVENT_BYTES
from agentlog.schemas.requests import RequestError
from agentlog.streams.config import Settings

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WRITE_TYPES = frozenset({"application/json", "application/x-ndjson", "application/jsonl"})
OTLP_PATH = "/v1/traces"
"""OpenTelemetry's route also takes its protobuf encoding (not a type a browser may send
cross-origin without asking first, so the rule above holds)."""
LOGIN_PATH = "/ui/login"
LOGOUT_PATH = "/ui/logout"
OPEN_PATHS = frozenset({"/healthz", LOGIN_PATH, LOGOUT_PATH, "/ui/static/app.js", "/ui/static/style.css"})
"""Routes that answer without the token: liveness, the web view's login form, its logout
(which only clears a cookie) and its two static files (no data)."""
FORM = "application/x-www-form-urlencoded"
TOKEN_COOKIE = "agentlog_token"
"""The web view's cookie (HttpOnly, SameSite=Strict; set by ``/ui/login``, cleared by
``/ui/logout``): a browser cannot send the ``Authorization`` header on a page load. It
holds :func:`web_session` of the token, not the token."""


WEB_SESSION_SECONDS = 12 * 3600
"""How long a web view login lasts: a copy of the cookie taken from a browser stops
working then too (a server cannot take back a cookie it set; it can make it expire)."""
_SESSION_SKEW_S = 300
"""A session stamped this far in the future still counts (clocks of one host agree)."""
_SECONDS = re.compile(r"[0-9]{1,12}")


def web_session(token: str, issued: int) -> str:
    """The cookie's value for ``token`` from ``issued`` (epoch seconds): the time, and a
    keyed hash of the token and that time, from which the token cannot be read back and
    which is no ``Authorization: Bearer`` value. It counts like the token for
    ``WEB_SESSION_SECONDS``, or until a new AGENTLOG_API_TOKEN ends every session at once."""
    mac = hmac.new(token.encode(), f"agentlog web session v2|{issued}".encode(), hashlib.sha256).hexdigest()
    return f"{issued}.{mac}"


def session_valid(session: str, token: str, now: float) -> bool:
    """Whether a cookie's ``session`` is one :func:`web_session` made for ``token`` that has
    not expired at ``now``: its time is read back and its hash made again (a time altered
    to extend it no longer matches)."""
    issued_text, _, _mac = session.partition(".")
    if not _SECONDS.fullmatch(issued_text):  # ASCII digits only: "²" is a digit to isdigit, not to int
        return False
    issued = int(issued_text)
    if not (now - WEB_SESSION_SECONDS < issued <= now + _SESSION_SKEW_S):
        return False
    return hmac.compare_digest(session.encode(), web_session(token, issued).encode())


def is_loopback(host: str) -> bool:
    """Whether a bind address or host name only reaches this machine."""
    name = host.strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def bind_refusal(bind_host: str, token: str | None) -> str | None:
    """Why a server must not start on ``bind_host``, if it must not."""
    if is_loopback(bind_host) or token:
        return None
    return (f"refusing to listen on {bind_host}, beyond loopback, without an API token: set "
            "AGENTLOG_API_TOKEN (e.g. `export AGENTLOG_API_TOKEN=$(openssl rand -hex 32)`) and send "
            "it as `Authorization: Bearer <token>`, or listen on 127.0.0.1")  # fmt: skip


@dataclass(frozen=True)
class Policy:
    token: str | None = field(default=None, repr=False)
    allowed_hosts: frozenset[str] | None = LOOPBACK_NAMES
    """Host names requests may address; ``None``: any (a non-loopback bind with no list)."""
    max_request_bytes: int = 64 * 1024 * 1024
    trust_proxy: bool = False
    """Whether a proxy in front says how the browser connected (``X-Forwarded-Proto``)."""
    max_event_bytes: int = MAX_EVENT_BYTES
    """The deployment's event size limit: what the server's own ingest (OTLP) cuts to fit."""

    @classmethod
    def of(cls, settings: Settings, bind_host: str) -> Policy:
        extra = frozenset(
            h.strip().lower().strip("[]") for h in (settings.allowed_hosts or "").split(",") if h.strip()
        )
        if is_loopback(bind_host):
            allowed: frozenset[str] | None = LOOPBACK_NAMES | extra
        else:
            allowed = extra or None
        return cls(settings.api_token or None, allowed, settings.max_request_bytes, settings.trust_proxy,
                   settings.max_event_bytes)


def host_name(authority: str) -> str:
    """``example.com:8787`` -> ``example.com``; ``[::1]:80`` -> ``::1``."""
    authority = authority.strip().lower()
    if authority.startswith("["):
        return authority[1:].split("]", 1)[0]
    if authority.count(":") == 1:
        return authority.split(":", 1)[0]
    return authority


def check_host(policy: Policy, host: str | None, origin: str | None) -> RequestError | None:
    if policy.allowed_hosts is None:
        return None
    if host is None or host_name(host) not in policy.allowed_hosts:
        named = f"Host {host!r}" if host is not None else "a request without a Host header"
        return RequestError(421, f"this server does not answer to {named}; address it as "
                            f"{', '.join(sorted(policy.allowed_hosts))} or add the name to AGENTLOG_ALLOWED_HOSTS")  # fmt: skip
    if origin is not None and host_name(urlsplit(origin).netloc) not in policy.allowed_hosts:
        return RequestError(403, f"requests from the web page at {origin!r} are refused "
                            "(cross-origin); call the API from a program, not a browser page")  # fmt: skip
    return None


def check_token(policy: Policy, path: str, authorization: str | None) -> RequestError | None:
    if not policy.token or path in OPEN_PATHS:
        return None
    scheme, _, given = (authorization or "").strip().partition(" ")
    if scheme.lower() != "bearer" or not given:
        return RequestError(
            401, "this server needs its API token: send `Authorization: Bearer <AGENTLOG_API_TOKEN>`"
        )
    if not hmac.compare_digest(given.strip().encode(), policy.token.encode()):
        return RequestError(
            401, "the API token is wrong: send the server's AGENTLOG_API_TOKEN as a Bearer token"
        )
    return None


def check_content_type(method: str, content_type: str | None, path: str = "") -> RequestError | None:
    if method.upper() != "POST":
        return None
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if path == OTLP_PATH and media == "application/x-protobuf":
        return None
    if path in (LOGIN_PATH, LOGOUT_PATH) and media == FORM:
        return None
    if media not in WRITE_TYPES and path == OTLP_PATH:
        return RequestError(415, f"POST {OTLP_PATH} takes OTLP as `Content-Type: application/x-protobuf` or "
                            f"application/json, not {content_type!r}")  # fmt: skip
    if media not in WRITE_TYPES:
        return RequestError(415, f"a POST must say `Content-Type: application/json` (or application/x-ndjson "
                            f"for JSON lines), not {content_type!r}")  # fmt: skip
    return None


def check_length(policy: Policy, content_length: str | None) -> RequestError | None:
    if content_length is None:
        return None
    if not content_length.strip().isdigit():
        return RequestError(400, f"Content-Length {content_length!r} is not a number of bytes")
    if int(content_length) > policy.max_request_bytes:
        return too_large(policy.max_request_bytes)
    return None


def too_large(limit: int) -> RequestError:
    return RequestError(413, f"the body passes the limit of {limit} bytes; send it in smaller parts "
                        "(or raise AGENTLOG_MAX_REQUEST_BYTES)", limit=limit)  # fmt: skip


def over_https(policy: Policy, scheme: str, headers: Mapping[str, str]) -> bool:
    """Whether the browser reached the server over HTTPS (then the cookie is ``Secure``): the
    connection's scheme, or, with ``AGENTLOG_TRUST_PROXY``, what the nearest proxy says (the
    last value of ``X-Forwarded-Proto``; a client could have sent the ones before)."""
    if scheme == "https":
        return True
    forwarded = headers.get("x-forwarded-proto", "") if policy.trust_proxy else ""
    return forwarded.split(",")[-1].strip().lower() == "https"


def refusal(policy: Policy, method: str, path: str, headers: Mapping[str, str]) -> RequestError | None:
    """The first rule a request breaks (``headers`` keyed in lower case), or None."""
    return (check_host(policy, headers.get("host"), headers.get("origin"))
            or check_token(policy, path, headers.get("authorization"))
            or check_length(policy, headers.get("content-length"))
            or check_content_type(method, headers.get("content-type"), path))  # fmt: skip


async def read_body(chunks: AsyncIterator[bytes], limit: int) -> bytes:
    """The body, read chunk by chunk; refused as soon as it passes ``limit``."""
    body = bytearray()
    async for chunk in chunks:
        body += chunk
        if len(body) > limit:
            raise too_large(limit)
    return bytes(body)


def _cookie(header: str, name: str) -> str | None:
    """The cookie's value, unquoted as it was set (a token may hold any character; a quoted
    value never holds a raw ``;``). Read on its own, so another site's odd cookie on the
    same host cannot hide it."""
    for part in header.split(";"):
        key, _, value = part.strip().partition("=")
        if key != name or not value:
            continue
        if not value.startswith('"'):
            return value
        jar: SimpleCookie = SimpleCookie()
        try:
            jar.load(f"{name}={value}")
        except CookieError:
            return None
        morsel = jar.get(name)
        return morsel.value if morsel is not None else None
    return None


def _is_page(scope: Scope) -> bool:
    """A web-view page a browser loads (not the API, not the live poll)."""
    path = scope["path"]
    return scope["method"] in ("GET", "HEAD") and (path == "/" or path.startswith("/ui/")) and not path.endswith("/poll")


class Guard:
    """These rules as ASGI middleware, before any routing (pure ASGI, so a refused body is
    never read)."""

    def __init__(self, app: ASGIApp, policy: Policy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers: dict[str, str] = {}
            refused: RequestError | None = None
            for key, value in scope["headers"]:
                name = key.decode("latin-1").lower()
                if name in headers and name in ("host", "authorization", "content-length", "content-type"):
                    refused = RequestError(400, f"the {name} header is given twice; give it once")
                headers[name] = value.decode("latin-1")
            if "host" not in headers and scope.get("http_version") == "1.1":
                # HTTP/1.1 requires a Host (RFC 9112 3.2); httptools, unlike h11, lets one
                # without it through to here.
                refused = refused or RequestError(400, "an HTTP/1.1 request must name its Host header")
            session = _cookie(headers.get("cookie", ""), TOKEN_COOKIE)
            if "authorization" not in headers and session and self.policy.token and session_valid(
                    session, self.policy.token, time.time()):  # fmt: skip
                headers["authorization"] = f"Bearer {self.policy.token}"
            refused = refused or refusal(self.policy, scope["method"], scope["path"], headers)
            if refused is not None and refused.status == 401 and _is_page(scope):
                # A person at a page without the cookie: the login form, then back here.
                target = scope["path"] + (f"?{scope['query_string'].decode('latin-1')}" if scope["query_string"] else "")
                await RedirectResponse(f"/ui/login?{urlencode({'next': target})}", 303)(scope, receive, send)
                return
            if refused is not None:
                await JSONResponse(refused.body, status_code=refused.status)(scope, receive, send)
                return
        await self.app(scope, receive, send)


__all__ = [
    "FORM", "Guard", "LOGIN_PATH", "LOGOUT_PATH", "OPEN_PATHS", "Policy", "TOKEN_COOKIE", "bind_refusal", "check_content_type", "check_host", "check_length",
    "check_token", "host_name", "is_loopback", "over_https", "read_body", "refusal", "session_valid", "web_session",
    "WEB_SESSION_SECONDS",
]  # fmt: skip
