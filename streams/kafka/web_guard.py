"""The HTTP rules of ``agentlog.streams.api.guard`` on the Kafka worker's web server (faust's
aiohttp driver): the same Host, token, size and content-type checks before routing, and
the same JSON answers for refusals, unknown routes, wrong methods and failures."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from agentlog.schemas.requests import RequestError
from agentlog.streams.api.guard import Policy, read_body, refusal

log = logging.getLogger("agentlog.worker.http")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_SINGLE = ("host", "authorization", "content-length", "content-type")


def _json(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response(body, status=status, headers=headers)


def guard_middleware(policy: Policy) -> Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]:
    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        if any(len(request.headers.getall(name, [])) > 1 for name in _SINGLE):
            return _json(
                400, {"error": "a Host, Authorization, Content-Length or Content-Type header is given twice"}
            )
        headers = {k.lower(): v for k, v in request.headers.items()}
        refused = refusal(policy, request.method, request.path, headers)
        if refused is not None:
            return _json(refused.status, refused.body)
        try:
            return await handler(request)
        except RequestError as error:
            return _json(error.status, error.body)
        except web.HTTPException as error:
            if error.status < 400:
                raise
            allow = {"Allow": error.headers["Allow"]} if "Allow" in error.headers else None
            reason = ("method not allowed here (state changes only on POST)" if error.status == 405
                      else "no such route; GET /openapi.json lists them" if error.status == 404 else error.reason)  # fmt: skip
            return _json(error.status, {"error": reason}, allow)
        except Exception:  # noqa: BLE001 - a bug must answer, be logged, and spare the next request
            log.exception("%s %s failed", request.method, request.path)
            return _json(
                500, {"error": f"{request.method} {request.path} failed unexpectedly; the worker logged why"}
            )

    return guard


async def body_of(request: web.Request, limit: int) -> bytes:
    """The request body, read in chunks and refused (413) as soon as it passes ``limit``."""
    return await read_body(request.content.iter_chunked(64 * 1024), limit)


__all__ = ["body_of", "guard_middleware"]
