"""The web view's routes, added to the one FastAPI app by ``build_app``: pages at ``/`` and
under ``/ui/``, served in both deployments over the ``Service`` the API holds.

Parameters are checked by the API's own request models (the same limits and refusals as
``GET /threads``, ``/search`` and ``/context``; a parameter given twice is refused). A page
answers its failures as an HTML page (escaped), never a traceback. Access is the API's: when
``AGENTLOG_API_TOKEN`` is set, a browser posts it once through the form at ``/ui/login``
(never in a URL), which checks it and keeps it in an HttpOnly, SameSite=Strict cookie
(``Secure`` over HTTPS) the access rules read like the ``Authorization`` header."""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Callable
from importlib.resources import files
from typing import Any
from urllib.parse import parse_qsl

from fastapi import FastAPI, Request
from pydantic import ValidationError
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from agentlog.schemas.requests import (
    ContextQuery, MemoryQuery, RequestError, SearchQuery, SqlBody, ThreadListQuery, ThreadPath, once, parse_path,
    parse_query,
)  # fmt: skip
from agentlog.schemas.responses import READS, errors
from agentlog.sinks.base import StoreError
from agentlog.sinks.sql_sandbox import SqlBusy
from agentlog.streams.api.guard import (
    FORM, LOGOUT_PATH, TOKEN_COOKIE, WEB_SESSION_SECONDS, Policy, over_https, web_session,
)  # fmt: skip
from agentlog.streams.api.service import NotFound, Service, Unavailable
from agentlog.streams.web import pages
from agentlog.streams.web.html import CSP, LOGOUT
from agentlog.streams.web.queries import CHARTS, events_after, timeline, tool_calls

log = logging.getLogger("agentlog.web")

DEFAULT_BUDGET = 4000
OPEN = (403, 421, 500)
"""What a route that needs no token may answer (the Host and Origin rules still hold)."""
STATIC = {"app.js": "text/javascript; charset=utf-8", "style.css": "text/css; charset=utf-8"}
# "same-origin", not "no-referrer": under no-referrer a browser sends "Origin: null" with
# the page's own form posts (the login, the logout), which the Origin rule must refuse.
# No other site is told which page linked to it either way.
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin",
           "Cache-Control": "no-store", "X-Frame-Options": "DENY"}  # fmt: skip


def _html(text: str, status: int = 200, headers: dict[str, str] | None = None) -> HTMLResponse:
    return HTMLResponse(text, status_code=status, headers={**HEADERS, **(headers or {})})


def _given(request: Request, *names: str) -> list[tuple[str, str]]:
    """The query parameters a form sent, its empty fields left out (a form sends every field).
    One given twice is refused as the API refuses it (a page would silently take either)."""
    return _filled(request.query_params.multi_items(), names)


def _filled(items: list[tuple[str, str]], names: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    once(items)
    return [(k, v) for k, v in items if v != "" and (not names or k in names)]


def _thread_id(request: Request, given: dict[str, str]) -> str:
    """The thread a page shows: its path's, or ``?id=`` (``/ui/thread``, for "." and "..")."""
    raw = request.path_params["thread_id"] if "thread_id" in request.path_params else given.pop("id", "")
    return parse_path(ThreadPath, {"thread_id": raw}).thread_id


def _problem(error: Exception, what: str) -> tuple[str, int, dict[str, str] | None]:
    """The page (its HTML, status and headers) that answers a page's failure."""
    if isinstance(error, RequestError):
        return pages.problem_page(error.status, str(error.body.get("error", error))), error.status, None
    if isinstance(error, NotFound):
        return pages.problem_page(404, str(error)), 404, None
    if isinstance(error, (Unavailable, SqlBusy)):
        return pages.problem_page(503, f"{error}; this page reloads when asked again"), 503, {"Retry-After": "2"}
    if isinstance(error, (ValueError, StoreError)):
        return pages.problem_page(400, str(error)), 400, None
    log.error("page %s failed", what, exc_info=error)
    return pages.problem_page(500, f"{what} failed unexpectedly; the server logged why"), 500, None


def _page(render: Callable[[Request], str], what: str, signed_in: bool) -> Callable[[Request], Response]:
    """A page's route; ``signed_in``: the API takes a token, so a browser holds a session
    its page can end (without one there is nothing to log out of: no button)."""

    def answer(request: Request) -> Response:
        try:
            text, status, headers = render(request), 200, None
        except Exception as error:  # noqa: BLE001 - a page answers every failure as a page
            text, status, headers = _problem(error, what)
        return _html(text if signed_in else text.replace(LOGOUT, "", 1), status, headers)

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
        given = dict(_given(request))
        thread_id = _thread_id(request, given)
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
            given = dict(_given(request))
            thread_id = _thread_id(request, given)
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
        statement = dict(_given(request)).get("sql", "")
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

    def login_form(target: str, said: str = "") -> str:
        return (f'<h1>agentlog</h1>{said}<p>This server needs its API token (AGENTLOG_API_TOKEN).</p>'
                f'<form method="post" action="/ui/login"><input type="hidden" name="next" value="{pages.e(target)}">'
                '<input type="password" name="token" placeholder="API token" autocomplete="current-password" autofocus>'
                '<button>open</button></form>')  # fmt: skip

    def login(request: Request) -> Response:
        """The form (``GET``); a token in the URL is refused unread, since the URL stays in
        the browser's history and in any log of requests."""
        try:
            given = dict(_given(request, "next", "token"))
        except RequestError as error:
            return _html(pages.page("login", login_form("/", f"<p class=warn>{pages.e(error)}</p>")), 400)
        target = _own_page(given.get("next", "/"))
        if not policy.token:
            return RedirectResponse(target, status_code=303)
        if "token" in given:
            said = ("<p class=warn>the token is never taken from a URL (it would stay in the browser's history "
                    "and in request logs): type it here</p>")  # fmt: skip
            return _html(pages.page("login", login_form(target, said)), 400)
        return _html(pages.page("login", login_form(target)))

    async def login_post(request: Request) -> Response:
        """The form's ``token`` (in the body): checked, then kept in a cookie; the page asked for next."""
        try:
            sent = dict(_filled(parse_qsl((await request.body()).decode("utf-8", "replace"), keep_blank_values=True)))
        except RequestError as error:
            return _html(pages.page("login", login_form("/", f"<p class=warn>{pages.e(error)}</p>")), 400)
        token, target = sent.get("token", ""), _own_page(sent.get("next", "/"))
        if not policy.token:
            return RedirectResponse(target, status_code=303)
        if token and hmac.compare_digest(token.encode(), policy.token.encode()):
            answer = RedirectResponse(target, status_code=303)
            answer.set_cookie(TOKEN_COOKIE, web_session(token, int(time.time())), max_age=WEB_SESSION_SECONDS,
                              httponly=True, samesite="strict", path="/",
                              secure=over_https(policy, request.url.scheme, request.headers))  # fmt: skip
            return answer
        said = "<p class=warn>that token is wrong</p>" if token else "<p class=warn>type the token</p>"
        return _html(pages.page("login", login_form(target, said)), 401)

    def logout(request: Request) -> Response:
        """The cookie cleared (the browser forgets the session), then the login form."""
        answer = RedirectResponse("/ui/login" if policy.token else "/", status_code=303)
        answer.delete_cookie(TOKEN_COOKIE, path="/", httponly=True, samesite="strict",
                             secure=over_https(policy, request.url.scheme, request.headers))  # fmt: skip
        return answer

    signed_in = bool(policy.token)
    for path, endpoint, summary, takes, answers in (
        ("/", _page(thread_list, "the thread list", signed_in), "web view: the thread list (HTML)",
         ("q", "project", "status"), (400,)),
        ("/ui/threads/{thread_id}", _page(thread, "the thread page", signed_in),
         "web view: a thread's timeline, tool calls, working state and context preview (HTML)",
         ("thread_id", "before", "budget", "model", "query"), (400, 404)),
        ("/ui/threads/{thread_id}/poll", poll, "web view: what an open thread page has not shown yet (JSON)",
         ("thread_id", "after", "turn", "window"), (400,)),
        ("/ui/thread", _page(thread, "the thread page", signed_in),
         "web view: the thread page for any thread id, \".\" and \"..\" too (HTML)",
         ("id", "before", "budget", "model", "query"), (400, 404)),
        ("/ui/thread/poll", poll, "web view: what an open thread page has not shown yet, for any thread id (JSON)",
         ("id", "after", "turn", "window"), (400,)),
        ("/ui/search", _page(search, "the search page", signed_in), "web view: search across threads (HTML)",
         pages.SEARCH_FIELDS, (400,)),
        ("/ui/analytics", _page(analytics, "the analytics page", signed_in), "web view: charts and the SQL console (HTML)",
         ("sql",), (400,)),
        ("/ui/memory", _page(memory, "the memory page", signed_in), "web view: the published memory (HTML)",
         ("project", "key"), (400,)),
        ("/ui/static/{name}", static, "web view: its stylesheet and script (no token needed)", (), (404, *OPEN)),
        ("/ui/login", login, "web view: the login form (no token needed; a token in the URL is refused)",
         ("next",), (400, *OPEN)),
    ):  # fmt: skip
        media = "application/json" if path.endswith("poll") else "text/css" if "static" in path else "text/html"
        # a metrics label per page: "web thread", "web poll", "web static", ...
        name = "web " + {"/": "threads", "/ui/threads/{thread_id}": "thread", "/ui/static/{name}": "static",
                         "/ui/thread/poll": "poll"}.get(path, path.split("/")[-1])  # fmt: skip
        app.add_api_route(path, endpoint, methods=["GET"], name=name, summary=summary,
                          response_class={"application/json": JSONResponse, "text/html": HTMLResponse}.get(media, Response),
                          responses={200: {"content": {media: {}}}, **errors(*answers, *(() if OPEN[0] in answers else READS))},
                          openapi_extra={"parameters": [_parameter(path, p) for p in takes]} if takes else None)  # fmt: skip


    # The token travels only in a POST body, never in a URL.
    app.add_api_route("/ui/login", login_post, methods=["POST"], name="web login", response_class=HTMLResponse,
                      summary="web view: the API token from the login form, into a cookie (no token needed)",
                      openapi_extra={"requestBody": {"required": True, "content": {FORM: {"schema": {
                          "type": "object", "properties": {"token": {"type": "string"}, "next": {"type": "string"}}}}}}},
                      responses={200: {"content": {"text/html": {}}}, 303: {"description": "logged in: to `next`"},
                                 **errors(400, 401, *OPEN)})  # fmt: skip
    app.add_api_route(LOGOUT_PATH, logout, methods=["POST"], name="web logout", response_class=HTMLResponse,
                      summary="web view: forget this browser's session (its cookie); then the login form",
                      responses={303: {"description": "logged out: to the login form"}, **errors(401, *OPEN)})  # fmt: skip


def _own_page(target: str) -> str:
    """``target`` if it is a path of this server, else ``/`` (the login sends nowhere else)."""
    return target if target.startswith("/") and not target.startswith("//") and "\\" not in target else "/"


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
