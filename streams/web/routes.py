"""The web view's routes, added to the one FastAPI app by ``build_app``: pages at ``/`` and
under ``/ui/``, served in both deployments over the ``Service`` the API holds.

Parameters are checked by the API's own request models (the same limits and refusals as
``GET /threads``, ``/search`` and ``/context``). A page answers its failures as an HTML page
(escaped), never a traceback. Access is the API's: when ``AGENTLOG_API_TOKEN`` is set, a
browser opens ``/ui/login?token=...`` once, which checks it and keeps it in an HttpOnly,
SameSite=Strict cookie the access rules read like the ``Authorization`` header."""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable
from importlib.resources import files
from typing import Any

from fastapi import FastAPI, Request
from pydantic import ValidationError
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from agentlog.schemas.requests import (
    ContextQuery, MemoryQuery, RequestError, SearchQuery, SqlBody, ThreadListQuery, ThreadPath, parse_path, parse_query,
)  # fmt: skip
from agentlog.schemas.responses import READS, errors
from agentlog.sinks.base import StoreError
from agentlog.sinks.sql_sandbox import SqlBusy
from agentlog.streams.api.guard import TOKEN_COOKIE, Policy
from agentlog.streams.api.service import NotFound, Service, Unavailable
from agentlog.streams.web import pages
from agentlog.streams.web.html import CSP
from agentlog.streams.web.queries import CHARTS, events_after, timeline, tool_calls

log = logging.getLogger("agentlog.web")

DEFAULT_BUDGET = 4000
OPEN = (403, 421, 500)
"""What a route that needs no token may answer (the Host and Origin rules still hold)."""
STATIC = {"app.js": "text/javascript; charset=utf-8", "style.css": "text/css; charset=utf-8"}
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
           "Cache-Control": "no-store", "X-Frame-Options": "DENY"}  # fmt: skip


def _html(text: str, status: int = 200, headers: dict[str, str] | None = None) -> HTMLResponse:
    return HTMLResponse(text, status_code=status, headers={**HEADERS, **(headers or {})})


def _given(request: Request, *names: str) -> list[tuple[str, str]]:
    """The query parameters a form sent, its empty fields left out (a form sends every field)."""
    return [(k, v) for k, v in request.query_params.multi_items() if v != "" and (not names or k in names)]


def _failure(error: Exception, what: str) -> HTMLResponse:
    if isinstance(error, RequestError):
        return _html(pages.problem_page(error.status, str(error.body.get("error", error))), error.status)
    if isinstance(error, NotFound):
        return _html(pages.problem_page(404, str(error)), 404)
    if isinstance(error, (Unavailable, SqlBusy)):
        return _html(pages.problem_page(503, f"{error}; this page reloads when asked again"), 503, {"Retry-After": "2"})
    if isinstance(error, (ValueError, StoreError)):
        return _html(pages.problem_page(400, str(error)), 400)
    log.error("page %s failed", what, exc_info=error)
    return _html(pages.problem_page(500, f"{what} failed unexpectedly; the server logged why"), 500)


def _page(render: Callable[[Request], str], what: str) -> Callable[[Request], Response]:
    def answer(request: Request) -> Response:
        try:
            return _html(render(request))
        except Exception as error:  # noqa: BLE001 - a page answers every failure as a page
            return _failure(error, what)

    return answer


def _text_error(error: Exception) -> str:
    """What a part of a page says when its query failed (the rest of the page still shows)."""
    if isinstance(error, RequestError):
        return str(error.body.get("error", error))
    if isinstance(error, (NotFound, Unavailable, ValueError, StoreError)):
        return str(error)
    log.error("a page's query failed", exc_info=error)
    return "this part failed unexpectedly; the server logged why"


def add_pages(app: FastAPI, service: Service, policy: Policy) -> None:
    """The pages over ``service``, on ``app`` (with its route class, so measured like the
    API's routes, and in its OpenAPI document); ``policy`` is the API's (for the login)."""

    def thread_list(request: Request) -> str:
        params = dict(_given(request))
        q = params.pop("q", "")
        query = parse_query(ThreadListQuery, list({"limit": "1000", **params}.items()))
        answer = service.thread_list(query.project, query.status, query.limit)
        return pages.thread_list(answer, query.project or "", query.status or "", q)

    def thread(request: Request) -> str:
        thread_id = parse_path(ThreadPath, {"thread_id": request.path_params["thread_id"]}).thread_id
        given = dict(_given(request))
        before = _offset(given.pop("before", None))
        ctx_query = parse_query(ContextQuery, list({"budget": str(DEFAULT_BUDGET), **given}.items()))
        state = service.state(thread_id)  # NotFound for a thread without events
        tl = timeline(service, thread_id, before)
        calls = tool_calls(service, thread_id)
        try:
            ctx, error = service.context(thread_id, ctx_query.budget, ctx_query.query, ctx_query.model), None
        except Exception as failed:  # noqa: BLE001 - a budget too small says so in its panel
            ctx, error = None, _text_error(failed)
        panel = pages.context_panel(ctx, error, ctx_query.budget, ctx_query.model or "", ctx_query.query or "",
                                    pages.thread_link(thread_id))  # fmt: skip
        return pages.thread_page(thread_id, tl, calls, state, panel, live=before is None)

    def poll(request: Request) -> Response:
        """What an open thread page has not shown yet: new timeline rows and, when there
        are any, the waterfall and the state panel again."""
        try:
            thread_id = parse_path(ThreadPath, {"thread_id": request.path_params["thread_id"]}).thread_id
            given = dict(_given(request))
            after = _offset(given.get("after", "-1"), lowest=-1)
            events = events_after(service, thread_id, after if after is not None else -1)
            if not events:
                return JSONResponse({"after": after, "rows": ""}, headers=HEADERS)
            rows = pages.timeline_rows(events, given.get("turn", ""), given.get("window", ""))
            answer = {"after": int(events[-1]["offset"]), "rows": rows, "turn": events[-1]["turn_id"],
                      "window": events[-1]["window_id"], "calls": pages.waterfall(tool_calls(service, thread_id)),
                      "state": pages.state_panel(service.state(thread_id))}  # fmt: skip
            return JSONResponse(answer, headers=HEADERS)
        except Exception as error:  # noqa: BLE001 - the page keeps polling; it shows this
            status = error.status if isinstance(error, RequestError) else 503 if isinstance(error, (Unavailable, SqlBusy)) else 500
            return JSONResponse({"error": _text_error(error)}, status_code=status, headers=HEADERS)

    def search(request: Request) -> str:
        given = _given(request)
        params = dict(given)
        if "q" not in params:
            return pages.search_page(params, None, None)
        try:
            q = parse_query(SearchQuery, given)
            answer = service.search(q.q, q.thread, q.kind, q.tool, q.window, q.project, q.after, *q.bounds(), q.limit)
            return pages.search_page(params, answer, None)
        except Exception as error:  # noqa: BLE001 - the form stays, with what was wrong
            return pages.search_page(params, None, _text_error(error))

    def analytics(request: Request) -> str:
        charts = []
        for title, (statement, shape) in CHARTS.items():
            try:
                charts.append((title, statement, shape, service.sql(statement)))
            except Exception as error:  # noqa: BLE001 - one chart's failure leaves the others
                charts.append((title, statement, shape, _text_error(error)))
        statement = request.query_params.get("sql", "")
        result, error = None, None
        if statement.strip():
            try:
                result = service.sql(SqlBody.model_validate({"sql": statement}).sql)
            except ValidationError as refused:  # too long: the body's bound, said as POST /sql says it
                error = f"bad query: {refused.errors()[0]['msg']}"
            except Exception as failed:  # noqa: BLE001 - a refused query is said beside the console
                error = _text_error(failed)
        return pages.analytics_page(charts, statement or "SELECT count() AS n FROM events", result, error)

    def memory(request: Request) -> str:
        q = parse_query(MemoryQuery, _given(request, "project", "key"))
        try:
            view = service.memory_show(q.project, q.key)
            status = service.memory_status()
        except Exception as error:  # noqa: BLE001 - e.g. memory not served by this deployment
            return pages.memory_page(None, None, q.project or "", _text_error(error))
        return pages.memory_page(view, status, q.project or "", None)

    def static(name: str) -> Response:
        if name not in STATIC:
            return Response("no such file", status_code=404, media_type="text/plain")
        body = files("agentlog.streams.web").joinpath("static", name).read_bytes()
        return Response(body, media_type=STATIC[name], headers={"Cache-Control": "max-age=300",
                                                                "X-Content-Type-Options": "nosniff"})  # fmt: skip

    def login(request: Request) -> Response:
        """``?token=`` once: checked, then kept in a cookie; the page asked for next."""
        token = request.query_params.get("token", "")
        target = request.query_params.get("next", "/")
        target = target if target.startswith("/") and not target.startswith("//") and "\\" not in target else "/"
        if not policy.token:
            return RedirectResponse(target, status_code=303)
        if token and hmac.compare_digest(token.encode(), policy.token.encode()):
            answer = RedirectResponse(target, status_code=303)
            answer.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="strict", path="/",
                              secure=request.url.scheme == "https")  # fmt: skip
            return answer
        said = "<p class=warn>that token is wrong</p>" if token else ""
        form = (f'<h1>agentlog</h1>{said}<p>This server needs its API token (AGENTLOG_API_TOKEN).</p>'
                f'<form method="get" action="/ui/login"><input type="hidden" name="next" value="{pages.e(target)}">'
                '<input type="password" name="token" placeholder="API token" autofocus><button>open</button></form>')  # fmt: skip
        return _html(pages.page("login", form), 401 if token else 200)

    for path, endpoint, summary, takes, answers in (
        ("/", _page(thread_list, "the thread list"), "web view: the thread list (HTML)",
         ("q", "project", "status"), (400,)),
        ("/ui/threads/{thread_id}", _page(thread, "the thread page"),
         "web view: a thread's timeline, tool calls, working state and context preview (HTML)",
         ("thread_id", "before", "budget", "model", "query"), (400, 404)),
        ("/ui/threads/{thread_id}/poll", poll, "web view: what an open thread page has not shown yet (JSON)",
         ("thread_id", "after", "turn", "window"), (400,)),
        ("/ui/search", _page(search, "the search page"), "web view: search across threads (HTML)",
         pages.SEARCH_FIELDS, (400,)),
        ("/ui/analytics", _page(analytics, "the analytics page"), "web view: charts and the SQL console (HTML)",
         ("sql",), (400,)),
        ("/ui/memory", _page(memory, "the memory page"), "web view: the published memory (HTML)",
         ("project", "key"), (400,)),
        ("/ui/static/{name}", static, "web view: its stylesheet and script (no token needed)", (), (404, *OPEN)),
        ("/ui/login", login, "web view: the API token, once, into a cookie (no token needed)", ("token", "next"),
         (401, *OPEN)),
    ):  # fmt: skip
        media = "application/json" if path.endswith("/poll") else "text/css" if "static" in path else "text/html"
        # a metrics label per page: "web thread", "web poll", "web static", ...
        name = "web " + {"/": "threads", "/ui/threads/{thread_id}": "thread", "/ui/static/{name}": "static"}.get(path, path.split("/")[-1])
        app.add_api_route(path, endpoint, methods=["GET"], name=name, summary=summary,
                          response_class={"application/json": JSONResponse, "text/html": HTMLResponse}.get(media, Response),
                          responses={200: {"content": {media: {}}}, **errors(*answers, *(() if OPEN[0] in answers else READS))},
                          openapi_extra={"parameters": [_parameter(path, p) for p in takes]} if takes else None)  # fmt: skip


def _parameter(path: str, name: str) -> dict[str, Any]:
    where = "path" if "{" + name + "}" in path else "query"
    return {"name": name, "in": where, "required": where == "path", "schema": {"type": "string"}}


def _offset(value: Any, lowest: int = 0) -> int | None:
    if value in (None, ""):
        return None
    try:
        number = int(value)
    except ValueError:
        raise RequestError(400, f"bad query parameter: an offset is a whole number, not {value!r}") from None
    if number < lowest:
        raise RequestError(400, f"bad query parameter: an offset is at least {lowest}")
    return number


__all__ = ["add_pages"]
