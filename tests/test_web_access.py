"""Issue 17: the web view is protected as the API is (the token, which a browser gives once
and keeps in an HttpOnly cookie), and shows hostile text as text on every page. In
process (no browser needed to read the HTML the server sends)."""

from __future__ import annotations

import html
import re
import time
from collections.abc import Iterator
from urllib.parse import unquote, urlencode, urlsplit

import pytest
from starlette.testclient import TestClient

from agentlog.streams.api.guard import WEB_SESSION_SECONDS, Policy, session_valid, web_session
from agentlog.streams.api.http import build_app
from agentlog.streams.embedded.service import EmbeddedService
from tests.helpers import raw

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")
TOKEN = 's3cret; token "for" the web,view\\'  # characters a cookie must quote
JSON = {"Content-Type": "application/json"}
SCRIPT = "<script>alert(1)</script>"
PAGES = ("/", "/ui/threads/x1", "/ui/search?q=alert", "/ui/analytics", "/ui/memory")


@pytest.fixture
def guarded(service: EmbeddedService) -> Iterator[TestClient]:
    app = build_app(service, Policy(token=TOKEN), background=service.run_forever)
    with TestClient(app, base_url="http://localhost", follow_redirects=False) as client:
        yield client


def test_with_a_token_a_page_opened_without_it_goes_to_the_login_form_and_the_api_still_says_401(guarded: TestClient) -> None:
    for path in PAGES:
        answer = guarded.get(path)
        assert answer.status_code == 303, path
        assert answer.headers["location"].startswith("/ui/login?next="), path
    assert guarded.get("/threads").status_code == 401  # the API answers programs in JSON
    assert guarded.get("/ui/threads/x1/poll").status_code == 401
    form = guarded.get("/ui/login?next=%2Fui%2Fmemory")
    assert form.status_code == 200 and 'name="token"' in form.text and 'value="/ui/memory"' in form.text


def test_the_token_given_once_opens_the_pages_and_the_api_through_an_httponly_cookie(guarded: TestClient) -> None:
    assert guarded.post("/ui/login", data={"token": "wrong", "next": "/"}).status_code == 401
    assert "agentlog_token" not in guarded.cookies
    answer = guarded.post("/ui/login", data={"token": TOKEN, "next": "/ui/analytics"})
    assert (answer.status_code, answer.headers["location"]) == (303, "/ui/analytics")
    cookie = answer.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/" in cookie and "secure" not in cookie
    assert guarded.get("/").status_code == 200
    assert guarded.get("/ui/analytics").status_code == 200
    assert guarded.get("/threads").status_code == 200  # the cookie counts as the bearer token
    guarded.cookies.clear()
    guarded.cookies.set("agentlog_token", "forged")
    assert guarded.get("/").status_code == 303
    assert guarded.get("/threads").status_code == 401


def test_the_cookie_holds_a_session_not_the_token_and_is_no_bearer_token_for_the_api(guarded: TestClient) -> None:
    guarded.post("/ui/login", data={"token": TOKEN, "next": "/"})
    session = guarded.cookies["agentlog_token"]
    assert "s3cret" not in session and TOKEN not in session
    assert guarded.get("/threads").status_code == 200  # the browser's own requests still pass
    guarded.cookies.clear()
    assert guarded.get("/threads", headers={"Authorization": f"Bearer {session}"}).status_code == 401


def test_a_web_session_lasts_twelve_hours_and_a_copy_of_its_cookie_stops_working_then_too(
    guarded: TestClient,
) -> None:
    answer = guarded.post("/ui/login", data={"token": TOKEN, "next": "/"})
    assert f"max-age={WEB_SESSION_SECONDS}" in answer.headers["set-cookie"].lower()  # the browser forgets it then
    issued, _, _ = guarded.cookies["agentlog_token"].partition(".")
    assert abs(int(issued) - time.time()) < 60
    now = int(time.time())
    for stamped, opens in ((now - 60, True), (now - WEB_SESSION_SECONDS + 120, True),
                           (now - WEB_SESSION_SECONDS - 1, False), (now + 3600, False)):  # fmt: skip
        guarded.cookies.clear()
        guarded.cookies.set("agentlog_token", web_session(TOKEN, stamped))
        assert (guarded.get("/threads").status_code == 200) is opens, stamped
    old = web_session(TOKEN, now - WEB_SESSION_SECONDS - 60)
    moved = f"{now}.{old.partition('.')[2]}"  # its time altered to extend it: the hash no longer matches
    for forged in (moved, f"{now}", f"{now}.", ".abc", f"{'9' * 40}.{old.partition('.')[2]}", f"-{now}.x",
                   f" {now}.x"):
        guarded.cookies.clear()
        guarded.cookies.set("agentlog_token", forged)
        assert guarded.get("/threads").status_code == 401, forged
    guarded.cookies.clear()
    guarded.cookies.set("agentlog_token", web_session("another token", now))
    assert guarded.get("/threads").status_code == 401
    guarded.cookies.clear()  # a header is read as Latin-1: byte 0xb2 is "²", a digit to str.isdigit, not to int
    superscript = [(b"cookie", b"agentlog_token=" + str(now).encode() + b"\xb2.x")]
    assert guarded.get("/threads", headers=superscript).status_code == 401
    assert not session_valid(f"{now}\u00b2.x", TOKEN, now)  # the check itself never raises on it


def test_log_out_clears_the_session_and_every_page_offers_it(guarded: TestClient) -> None:
    guarded.post("/ui/login", data={"token": TOKEN, "next": "/"})
    page = guarded.get("/ui/memory").text
    assert '<form method="post" action="/ui/logout"' in page
    answer = guarded.post("/ui/logout", headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert (answer.status_code, answer.headers["location"]) == (303, "/ui/login")
    assert "agentlog_token=" in answer.headers["set-cookie"] and "max-age=0" in answer.headers["set-cookie"].lower()
    assert "agentlog_token" not in guarded.cookies
    assert guarded.get("/ui/memory").status_code == 303 and guarded.get("/threads").status_code == 401
    refused = guarded.post("/ui/logout", headers={"Origin": "https://evil.example",
                                                  "Content-Type": "application/x-www-form-urlencoded"})  # fmt: skip
    assert refused.status_code == 403


def test_without_a_token_there_is_no_session_and_no_page_offers_to_log_out(open_client: TestClient) -> None:
    for path in ("/", "/ui/memory", "/ui/search", "/ui/analytics", "/ui/threads/nope"):
        page = open_client.get(path)
        assert "<header>" in page.text and "/ui/logout" not in page.text, path


def test_the_token_never_travels_in_a_url_a_login_by_get_logs_no_one_in_and_the_form_posts_it(guarded: TestClient) -> None:
    form = guarded.get("/ui/login?next=%2Fui%2Fmemory")
    assert re.search(r'<form method="post" action="/ui/login">', form.text), form.text
    for query in ({"token": TOKEN}, {"token": TOKEN, "next": "/ui/memory"}):
        answer = guarded.get("/ui/login", params=query)
        assert answer.status_code == 400 and "set-cookie" not in answer.headers, query
        assert "never taken from a URL" in answer.text and 'method="post"' in answer.text
        assert TOKEN not in answer.text and "s3cret" not in answer.text
    assert guarded.get("/ui/memory").status_code == 303  # still not logged in
    # Logged in, no page links to a URL holding the token (nor does the login redirect).
    login = guarded.post("/ui/login", data={"token": TOKEN, "next": "/ui/memory"})
    assert "s3cret" not in login.headers["location"]
    for path in PAGES:
        assert "s3cret" not in guarded.get(path).text, path


def test_the_cookie_is_secure_over_https_and_behind_a_proxy_only_when_the_deployment_trusts_it(
    service: EmbeddedService,
) -> None:
    proxied = {"X-Forwarded-Proto": "https"}
    for policy, base, headers, secure in (
        (Policy(token=TOKEN), "https://localhost", {}, True),
        (Policy(token=TOKEN), "http://localhost", proxied, False),  # anyone can send the header
        (Policy(token=TOKEN, trust_proxy=True), "http://localhost", proxied, True),
        (Policy(token=TOKEN, trust_proxy=True), "http://localhost", {"X-Forwarded-Proto": "https, http"}, False),
        (Policy(token=TOKEN, trust_proxy=True), "http://localhost", {}, False),
    ):  # fmt: skip
        with TestClient(build_app(service, policy), base_url=base, follow_redirects=False) as client:
            answer = client.post("/ui/login", data={"token": TOKEN}, headers=headers)
        cookie = answer.headers["set-cookie"].lower()
        assert answer.status_code == 303 and "httponly" in cookie and "samesite=strict" in cookie
        assert ("; secure" in cookie) is secure, (base, headers, policy.trust_proxy)


def test_the_login_form_is_refused_from_another_sites_page(guarded: TestClient) -> None:
    answer = guarded.post("/ui/login", data={"token": TOKEN}, headers={"Origin": "https://evil.example"})
    assert answer.status_code == 403 and "set-cookie" not in answer.headers


def test_the_login_sends_a_browser_back_only_to_this_servers_own_pages(guarded: TestClient) -> None:
    for target in ("//evil.example/", "https://evil.example/", "/\\evil.example", "javascript:alert(1)"):
        answer = guarded.post("/ui/login", data={"token": TOKEN, "next": target})
        assert answer.headers["location"] == "/", target


@pytest.fixture
def open_client(service: EmbeddedService) -> Iterator[TestClient]:
    with TestClient(build_app(service, background=service.run_forever), base_url="http://localhost") as client:
        yield client


def test_hostile_text_is_escaped_on_every_page_and_no_page_allows_inline_script(open_client: TestClient) -> None:
    events = [
        raw("h1", "goal", {"text": f"goal {SCRIPT}"}, 0, "x1", project="p<b>x</b>"),
        raw("h2", "message", {"role": "user", "text": f'alert "quoted" {SCRIPT} <img src=x onerror=alert(2)>'}, 1, "x1"),
        raw("h3", "tool_call", {"call_id": "c1", "tool_name": f"t{SCRIPT}", "arguments": {"a": SCRIPT}}, 2, "x1"),
        raw("h4", "tool_result", {"call_id": "c1", "output": f"out {SCRIPT}", "status": "ok"}, 3, "x1"),
        raw("h5", "plan", {"steps": [{"step_id": "s1", "text": SCRIPT, "status": "running"}]}, 4, "x1"),
        raw("h6", "file_change", {"path": f"src/{SCRIPT}.py", "change": "modified"}, 5, "x1"),
    ]
    assert open_client.post("/events", content=b"\n".join(events), headers=JSON).json()["accepted"] == len(events)
    open_client.post("/flush", headers=JSON)
    urls = [*PAGES, "/ui/threads/x1/poll?after=-1", f"/ui/analytics?sql=SELECT '{SCRIPT}' AS s, 1 AS n",
            f"/ui/search?q={SCRIPT}", f"/ui/threads/{SCRIPT}", f"/ui/threads/x1?model={SCRIPT}&budget=50",
            f"/?project={SCRIPT}", f"/ui/memory?project={SCRIPT}"]  # fmt: skip
    for url in urls:
        answer = open_client.get(url)
        body = answer.text if not url.endswith("-1") else "".join(str(v) for v in answer.json().values())
        assert answer.status_code in (200, 400, 404), (url, answer.status_code)
        assert "<script>alert" not in body and "<img src=x" not in body and "<b>x</b>" not in body, url
        if "text/html" in answer.headers["content-type"]:
            csp = answer.headers["content-security-policy"]
            assert "script-src 'self'" in csp and "unsafe-inline" not in csp, url
            scripts = re.findall(r"<script[^>]*>", body)
            assert all(s == '<script src="/ui/static/app.js" defer>' for s in scripts), (url, scripts)
    thread = open_client.get("/ui/threads/x1").text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in thread  # shown, as text


def test_a_bad_parameter_or_an_unknown_thread_is_an_html_page_with_the_apis_status(open_client: TestClient) -> None:
    assert open_client.post("/events", content=raw("k1", "goal", {"text": "g"}, 0, "k"), headers=JSON).status_code == 200
    open_client.post("/flush", headers=JSON)
    for url, status in (("/ui/threads/nope", 404), ("/ui/threads/k?before=abc", 400), ("/?status=sideways", 400),
                        ("/ui/threads/k?unknown=1", 400), ("/ui/threads/bad%20id", 400)):  # fmt: skip
        answer = open_client.get(url)
        assert (answer.status_code, answer.headers["content-type"].split(";")[0]) == (status, "text/html"), url
    budget = open_client.get("/ui/threads/k?budget=1")  # too small for the essentials: said in its panel
    assert budget.status_code == 200 and "budget" in budget.text and 'class="warn"' in budget.text


def test_the_memory_page_shows_each_fact_with_status_evidence_and_sources_and_a_revocation_as_needs_refresh(
    open_client: TestClient,
) -> None:
    facts = [raw("obs-8", "fact", {"key": "java.version", "value": "8", "evidence_type": "tool_observed", "confirmed": True},
                 0, "old", project="svc"),
             raw("user-17", "fact", {"key": "java.version", "value": "17", "evidence_type": "user_confirmed",
                                     "confirmed": True}, 3600, "new", project="svc")]  # fmt: skip
    assert open_client.post("/events", content=b"\n".join(facts), headers=JSON).json()["accepted"] == 2
    open_client.post("/flush", headers=JSON)
    open_client.post("/memory/extract", headers=JSON)
    open_client.post("/memory/consolidate", headers=JSON)
    page = open_client.get("/ui/memory?project=svc").text
    row = re.search(r'<tr class="fact s-ok">(.*?)</tr>', page, re.S)
    assert row is not None, page
    cells = re.findall(r"<td>(.*?)</td>", row[1], re.S)
    assert [re.sub(r"<[^>]+>", "", c) for c in cells[1:7]] == ["java.version", "17", "ok", "user_confirmed",
                                                               "2026-01-01T13:00:00Z", "user-17"]  # fmt: skip
    assert 'href="/ui/threads/new#ev-user-17"' in row[1]  # the source, in its thread's timeline
    assert open_client.post("/memory/revoke", json={"event_id": "user-17", "reason": "wrong"}).status_code == 200
    open_client.post("/memory/extract", headers=JSON)
    open_client.post("/memory/consolidate", headers=JSON)
    page = open_client.get("/ui/memory?project=svc").text
    row = re.search(r'<tr class="fact s-needs_refresh">(.*?)</tr>', page, re.S)
    assert row is not None and ">8<" in row[1] and "user-17" in row[1], page
    assert '<span class="st st-needs_refresh">needs_refresh</span>' in row[1]
    # Its jobs read as the CLI's status does: a row per phase, times in UTC, no JSON.
    jobs = page[page.index("<h2>Jobs</h2>"):]
    assert re.search(r"<tr><td>extract</td>(<td[^>]*>\d+</td>){6}<td[^>]*>\d{4}-\d\d-\d\dT[\d:]{8}Z</td>", jobs), jobs
    assert "lease: free" in jobs and "{" not in jobs and "&#x27;" not in jobs


def test_the_context_preview_shows_the_pinned_section_as_the_model_reads_it(open_client: TestClient) -> None:
    pinned = [raw("g1", "goal", {"text": "ship the release"}, 0, "pin"),
              raw("c1", "constraint", {"constraint_id": "db", "text": "never touch prod"}, 1, "pin")]  # fmt: skip
    assert open_client.post("/events", content=b"\n".join(pinned), headers=JSON).json()["accepted"] == 2
    page = open_client.get("/ui/threads/pin").text
    row = re.search(r'<tr class="section" data-section="pinned">(.*?)</tr>', page, re.S)
    assert row is not None and "<pre>Goal: ship the release\nConstraints:\n- never touch prod</pre>" in row[1], page


def test_a_long_threads_timeline_pages_back_without_losing_or_repeating_an_event(open_client: TestClient) -> None:
    n = 620  # more than one page (TIMELINE_PAGE), so the thread page shows its newest and links back
    events = [raw(f"L{i:04d}", "message", {"role": "user", "text": f"line {i}"}, i, "long") for i in range(n)]
    assert open_client.post("/events", content=b"\n".join(events), headers=JSON).json()["accepted"] == n
    open_client.post("/flush", headers=JSON)
    seen: list[str] = []
    url: str | None = "/ui/threads/long"
    while url:
        page = open_client.get(url).text
        seen[:0] = re.findall(r'<tr class="ev" id="ev-([^"]+)"', page)
        older = re.search(r'<a href="([^"]+)">earlier events</a>', page)
        url = older[1].replace("&amp;", "&") if older else None
    assert seen == [f"L{i:04d}" for i in range(n)]


def test_the_kafka_worker_serves_the_same_pages_under_the_same_token(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import httpx  # noqa: PLC0415

    from agentlog.streams.config import Settings  # noqa: PLC0415
    from agentlog.streams.kafka.app import create_app  # noqa: PLC0415 - needs faust
    from tests.conftest import free_port  # noqa: PLC0415
    from tests.test_http_worker import serving  # noqa: PLC0415

    # No broker answers: the rules and the static files need none.
    app = create_app(Settings(data_dir=tmp_path / "worker", kafka_bootstrap="127.0.0.1:1", api_token=TOKEN))
    port = free_port()
    try:
        with serving(app.conf.agentlog_http, port), httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:
            page = client.get("/ui/analytics")
            css = client.get("/ui/static/style.css")
            login = client.post("/ui/login", data={"token": TOKEN, "next": "/ui/memory"})
            wrong = client.post("/ui/login", data={"token": "wrong"})
    finally:
        app.conf.agentlog_log_store.close()  # chDB holds one data directory per process
    assert (page.status_code, page.headers["location"]) == (303, "/ui/login?next=%2Fui%2Fanalytics")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css") and "timeline" in css.text
    assert login.status_code == 303 and "httponly" in login.headers["set-cookie"].lower()
    assert wrong.status_code == 401


def test_a_large_tool_output_is_cut_in_the_waterfall_with_a_link_to_the_whole_event(open_client: TestClient) -> None:
    from agentlog.streams.web.queries import OUTPUT_CHARS  # noqa: PLC0415

    big = "".join(f"{i:05d} " for i in range(1000))  # 6,000 characters, each position tellable
    events = [raw("b1", "tool_call", {"call_id": "c9", "tool_name": "cat", "arguments": {}}, 0, "big"),
              raw("b2", "tool_result", {"call_id": "c9", "output": big}, 2, "big")]  # fmt: skip
    assert open_client.post("/events", content=b"\n".join(events), headers=JSON).json()["accepted"] == 2
    open_client.post("/flush", headers=JSON)
    page = open_client.get("/ui/threads/big").text
    call = re.search(r'<details class="call s-ok" id="call-c9".*?</details>', page, re.S)
    assert call is not None
    shown = re.search(r'<pre class="output">(.*?)</pre>', call[0], re.S)
    assert shown is not None and shown[1] == big[:OUTPUT_CHARS]
    assert f"output truncated at {OUTPUT_CHARS} of {len(big)} characters" in call[0]
    assert '<a href="/events/b2">the whole output</a>' in call[0]
    assert open_client.get("/events/b2").json()["event"]["payload"]["output"] == big


def test_the_sql_console_shows_and_charts_at_most_its_row_cap_and_says_how_many_there_were(open_client: TestClient) -> None:
    from agentlog.streams.web.pages import CONSOLE_ROWS  # noqa: PLC0415

    query = urlencode({"sql": "SELECT number AS x, number * 2 AS y FROM numbers(100000)"})
    page = open_client.get(f"/ui/analytics?{query}").text
    result = page[page.index('<div id="result">'):]
    assert result.count("<tr") == CONSOLE_ROWS + 1  # the header and the capped rows
    assert f"the first {CONSOLE_ROWS:,} of 100,000 rows" in result and len(page) < 2_000_000
    assert result.count("<circle") == CONSOLE_ROWS  # the chart draws the rows shown, no more
    small = open_client.get("/ui/analytics?" + urlencode({"sql": "SELECT number FROM numbers(3)"})).text
    assert "3 rows</p>" in small


def test_a_query_parameter_given_twice_on_a_page_is_refused_with_400_naming_it(open_client: TestClient) -> None:
    assert open_client.post("/events", content=raw("r1", "goal", {"text": "g"}, 0, "r"), headers=JSON).status_code == 200
    open_client.post("/flush", headers=JSON)
    for url, name in (("/ui/threads/r?budget=1&budget=2000", "budget"), ("/?project=a&project=b", "project"),
                      ("/ui/search?q=g&q=h", "q"), ("/ui/analytics?sql=SELECT+1&sql=SELECT+2", "sql"),
                      ("/ui/memory?key=a&key=b", "key"), ("/ui/thread?id=r&id=s", "id"),
                      ("/ui/login?next=/&next=/ui/memory", "next")):  # fmt: skip
        answer = open_client.get(url)
        assert answer.status_code == 400 and answer.headers["content-type"].startswith("text/html"), url
        assert f"parameter &#x27;{name}&#x27; is given twice" in answer.text, (url, answer.text)
    poll = open_client.get("/ui/threads/r/poll?after=1&after=-1")
    assert poll.status_code == 400 and "'after' is given twice" in poll.json()["error"]
    form = open_client.post("/ui/login", content="next=/&next=/ui/memory",
                            headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert form.status_code == 400 and "&#x27;next&#x27; is given twice" in form.text


def _survives_a_browser(url: str) -> bool:
    """A browser resolves "." and ".." path segments (percent-encoded too) before asking."""
    return all(unquote(s) not in (".", "..") for s in urlsplit(url).path.split("/"))


@pytest.mark.parametrize("thread_id", [".", "..", "...", ".a", "a.."])
def test_every_legal_thread_id_opens_in_the_web_view_dots_included(open_client: TestClient, thread_id: str) -> None:
    first = raw("d1", "goal", {"text": "dots"}, 0, thread_id, project="dots")
    assert open_client.post("/events", content=first, headers=JSON).json()["accepted"] == 1
    open_client.post("/flush", headers=JSON)
    listing = open_client.get("/?project=dots").text
    link = re.search(r'<td><a href="([^"]+)">' + re.escape(thread_id) + "</a>", listing)
    assert link is not None, listing
    target = link[1].replace("&amp;", "&")
    assert _survives_a_browser(target), target
    page = open_client.get(target)
    assert page.status_code == 200 and f"Thread <code>{html.escape(thread_id)}</code>" in page.text
    poll = re.search(r'data-poll="([^"]+)"', page.text)
    assert poll is not None and _survives_a_browser(poll[1]), poll
    more = raw("d2", "message", {"role": "user", "text": "another"}, 1, thread_id)
    assert open_client.post("/events", content=more, headers=JSON).json()["accepted"] == 1
    open_client.post("/flush", headers=JSON)
    rows = open_client.get(poll[1].replace("&amp;", "&") + "&after=-1").json()["rows"]
    assert 'id="ev-d1"' in rows and 'id="ev-d2"' in rows
    # The context form keeps the thread when its query carries it.
    form = re.search(r'<form class="filters" method="get" action="([^"#]+)#context">(.*?)</form>', page.text, re.S)
    assert form is not None
    fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', form[2]))
    assert urlsplit(form[1]).path + ("?" + urlencode(fields) if fields else "") == target


def test_agentlog_run_never_prints_the_token_of_a_login_or_of_a_refused_url(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import httpx  # noqa: PLC0415

    from tests.client_server import Server  # noqa: PLC0415
    from tests.conftest import free_port  # noqa: PLC0415

    secret = "printed-nowhere-7f3a"
    server = Server(tmp_path / "data", free_port(), token=secret).start()
    try:
        with httpx.Client(base_url=server.url, follow_redirects=False) as client:
            assert client.get("/ui/login", params={"token": secret}).status_code == 400
            assert client.post("/ui/login", data={"token": secret, "next": "/ui/memory"}).status_code == 303
            assert client.get("/ui/memory").status_code == 200
            assert client.get("/ui/threads/nope").status_code == 404
    finally:
        server.stop()
    said = server.proc.stderr.read().decode()  # type: ignore[union-attr]
    assert "serving" in said and secret not in said


def test_the_events_per_minute_table_names_each_minute_as_a_utc_time(open_client: TestClient) -> None:
    events = [raw(f"m{i}", "message", {"role": "user", "text": "hi"}, 60 * i, "minutes") for i in range(3)]
    assert open_client.post("/events", content=b"\n".join(events), headers=JSON).json()["accepted"] == 3
    open_client.post("/flush", headers=JSON)
    page = open_client.get("/ui/analytics").text
    card = page[page.index("events per minute by kind"):]
    card = card[:card.index("</section>")]
    assert "<td>2026-01-01T12:01:00Z</td><td>message</td>" in card, card
    from agentlog.schemas.events import utc_text  # noqa: PLC0415

    assert (utc_text(0), utc_text(-60), utc_text(None)) == ("1970-01-01T00:00:00Z", "1969-12-31T23:59:00Z", "-")


def test_the_search_page_says_each_hits_role_or_status_and_exit_code(open_client: TestClient) -> None:
    open_client.post("/events", content=b"\n".join([
        raw("q1", "message", {"role": "user", "text": "why does the deploy fail"}, 0, "x1"),
        raw("q2", "tool_call", {"call_id": "k", "tool_name": "bash", "arguments": {"cmd": "deploy"}}, 1, "x1"),
        raw("q3", "tool_result", {"call_id": "k", "output": "deploy refused", "status": "error", "exit_code": 2}, 2, "x1"),
    ]), headers={"Content-Type": "application/x-ndjson"})  # fmt: skip
    page = open_client.get("/ui/search?q=deploy&thread=x1").text
    cells = dict(re.findall(r'#ev-(q\d)">q\d</a></td><td>([^<]*)</td>', page))
    assert cells == {"q1": "message(user)", "q2": "tool_call", "q3": "tool_result(error, exit 2)"}
