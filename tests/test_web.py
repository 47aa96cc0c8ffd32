"""Issue 17: the web view, in a real headless Chromium (Debian's ``chromium`` and its
``chromedriver``, driven by Selenium; nothing is downloaded) against ``agentlog run``
serving a scripted thread. One server and one browser for the module.

Screenshots of every page are saved under the test's temporary directory; with
``AGENTLOG_WRITE_DOCS=1`` the thread and analytics pages are also written to
``docs/images/`` for the README."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.client_server import Server
from tests.conftest import free_port
from tests.helpers import raw

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.chrome.service import Service as DriverService  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
DOCS_IMAGES = Path(__file__).resolve().parent.parent / "docs" / "images"
THREAD = "web-t1"
JSON = {"Content-Type": "application/json"}
HOSTILE = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'

# The scripted thread: two turns, a failing and a passing call, an orphan result, a call
# left without a result when its turn ends (synthetic missing), a sub-agent, a hostile text.
SCRIPT = [
    raw("w01", "goal", {"text": "fix the login redirect"}, 0, THREAD, turn_id="T1", project="web"),
    raw("w02", "constraint", {"constraint_id": "c", "text": "never touch production"}, 1, THREAD, turn_id="T1"),
    raw("w03", "message", {"role": "user", "text": "the login page loops"}, 2, THREAD, turn_id="T1"),
    raw("w04", "tool_call", {"call_id": "c1", "tool_name": "pytest", "arguments": {"k": "login"}}, 3, THREAD, turn_id="T1"),
    raw("w05", "tool_result", {"call_id": "c1", "output": "AssertionError: redirect loop", "status": "error"}, 5.5, THREAD, turn_id="T1"),
    raw("w06", "tool_result", {"call_id": "ghost", "output": "nobody called me"}, 6, THREAD, turn_id="T1"),
    raw("w07", "tool_call", {"call_id": "c2", "tool_name": "grep", "arguments": {"pattern": "redirect"}}, 7, THREAD, turn_id="T1"),
    raw("w08", "tool_call", {"call_id": "c3", "tool_name": "slow_tool", "arguments": {}}, 7.5, THREAD, turn_id="T1"),
    raw("w09", "tool_result", {"call_id": "c2", "output": "src/auth.py:12 redirect_url", "status": "ok"}, 8.25, THREAD, turn_id="T1"),
    raw("w10", "agent_spawn", {"child_agent_id": "scout", "role": "code search", "child_thread_id": "web-t2"}, 9, THREAD, turn_id="T1"),
    raw("w11", "message", {"role": "assistant", "text": HOSTILE}, 10, THREAD, turn_id="T1", agent_id="scout"),
    raw("w12", "turn_end", {}, 11, THREAD, turn_id="T1"),
    raw("w13", "message", {"role": "user", "text": "and now?"}, 12, THREAD, turn_id="T2"),
    raw("w14", "plan", {"steps": [{"step_id": "s1", "text": "reproduce", "status": "done"}]}, 13, THREAD, turn_id="T2"),
]
EVENT_IDS = [json.loads(r)["event_id"] for r in SCRIPT]
# A second thread over a few minutes and a malformed record, so the charts have something to draw.
BACKGROUND = [
    raw(f"bg{i:02d}", kind, payload, 60.0 * (i // 3) + i, "web-bg", project="web")
    for i, (kind, payload) in enumerate(
        [("tool_call", {"call_id": f"b{n}", "tool_name": tool, "arguments": {}}) if n % 2 == 0 else
         ("tool_result", {"call_id": f"b{n - 1}", "output": "done", "status": "ok" if n % 3 else "timeout"})
         for n, tool in enumerate(["pytest", "pytest", "grep", "grep", "bash", "bash", "pytest", "pytest",
                                   "bash", "bash", "grep", "grep", "pytest", "pytest"])])
] + [b'{"event_id": "broken", "kind": "message"']  # fmt: skip


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    running = Server(tmp_path_factory.mktemp("web-data"), free_port(), token=None).start()
    url, env = running.url, running.env
    report = httpx.post(f"{url}/events", content=b"\n".join(SCRIPT + BACKGROUND), headers=JSON, timeout=30).json()
    assert (report["accepted"], report["rejected"]) == (len(SCRIPT) + len(BACKGROUND) - 1, 1), report
    httpx.post(f"{url}/flush", headers=JSON, timeout=60)
    yield url, env
    running.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip("Debian's chromium and chromium-driver are not installed (.ci/run installs them)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,860"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=DriverService(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("screenshots")


def _open(driver: Any, url: str) -> list[dict[str, Any]]:
    """Load a page; what the browser's console said while loading it (errors only)."""
    driver.get_log("browser")  # forget what earlier pages said
    driver.get(url)
    WebDriverWait(driver, 10).until(lambda d: d.execute_script("return document.readyState") == "complete")
    return [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def _shot(driver: Any, shots: Path, name: str) -> None:
    path = shots / f"{name}.png"
    driver.save_screenshot(str(path))
    if os.environ.get("AGENTLOG_WRITE_DOCS") and name in ("thread", "analytics"):
        DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, DOCS_IMAGES / f"{name}.png")


def test_each_page_loads_with_no_console_errors_and_is_saved_as_a_screenshot(server: tuple[str, dict[str, str]], browser: Any, shots: Path) -> None:
    url, _ = server
    pages = {"threads": "/", "thread": f"/ui/threads/{THREAD}", "search": "/ui/search?q=redirect",
             "analytics": "/ui/analytics?sql=SELECT+offset+AS+x,+length(raw)+AS+y+FROM+events+ORDER+BY+x",
             "memory": "/ui/memory"}  # fmt: skip
    for name, path in pages.items():
        errors = _open(browser, url + path)
        assert errors == [], f"{name}: {errors}"
        assert browser.find_element(By.TAG_NAME, "h1").text, name
        _shot(browser, shots, name)
        assert (shots / f"{name}.png").stat().st_size > 1000
    browser.get(url + "/")
    listed = [a.text for a in browser.find_elements(By.CSS_SELECTOR, "table.threads td a")]
    assert sorted(listed) == ["web-bg", THREAD]


def test_the_timeline_of_a_scripted_thread_shows_every_event_in_order(server: tuple[str, dict[str, str]], browser: Any) -> None:
    url, _ = server
    assert _open(browser, f"{url}/ui/threads/{THREAD}") == []
    rows = browser.find_elements(By.CSS_SELECTOR, "#timeline tr.ev")
    assert [r.get_attribute("id") for r in rows][: len(EVENT_IDS)] == [f"ev-{i}" for i in EVENT_IDS]
    turns = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "#timeline tr.turn")]
    assert turns[:2] == ["turn T1", "turn T2"]
    # A sub-agent's event is marked as such, and hostile text is shown as text, never run.
    scout = browser.find_element(By.ID, "ev-w11")
    assert scout.find_element(By.CSS_SELECTOR, ".agent.sub").text == "scout"
    assert "<script>" in scout.find_element(By.CSS_SELECTOR, "td.txt").text
    assert browser.execute_script("return window.__pwned === undefined") is True


def test_clicking_a_tool_call_shows_its_output_and_latency(server: tuple[str, dict[str, str]], browser: Any) -> None:
    url, _ = server
    assert _open(browser, f"{url}/ui/threads/{THREAD}") == []
    call = browser.find_element(By.ID, "call-c1")
    output = call.find_element(By.CSS_SELECTOR, "pre.output")
    assert not output.is_displayed()
    call.find_element(By.TAG_NAME, "summary").click()
    assert output.is_displayed() and output.text == "AssertionError: redirect loop"
    assert call.find_element(By.CSS_SELECTOR, ".latency").text == "2500 ms"  # result 5.5 s - call 3 s
    assert call.get_attribute("data-status") == "error"


def test_an_orphan_and_a_synthetic_missing_result_are_flagged(server: tuple[str, dict[str, str]], browser: Any) -> None:
    url, _ = server
    assert _open(browser, f"{url}/ui/threads/{THREAD}") == []
    orphan = browser.find_element(By.ID, "call-w06")  # keyed by its own event id
    assert [f.text.lower() for f in orphan.find_elements(By.CSS_SELECTOR, ".flag")] == ["orphan"]
    missing = browser.find_element(By.ID, "call-c3")
    assert [f.text.lower() for f in missing.find_elements(By.CSS_SELECTOR, ".flag")] == ["synthetic", "missing"]
    ok = browser.find_element(By.ID, "call-c2")
    assert ok.find_elements(By.CSS_SELECTOR, ".flag") == []


def test_the_context_previews_token_counts_sum_to_what_agentlog_context_json_reports(server: tuple[str, dict[str, str]], browser: Any) -> None:
    url, env = server
    assert _open(browser, f"{url}/ui/threads/{THREAD}?budget=900") == []
    shown = {r.get_attribute("data-section"): int(r.find_element(By.CSS_SELECTOR, ".tokens").text)
             for r in browser.find_elements(By.CSS_SELECTOR, "table.context tr.section")}  # fmt: skip
    cli = subprocess.run([sys.executable, "-m", "agentlog", "context", THREAD, "--budget", "900", "--json"],
                         env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    reported = json.loads(cli.stdout)
    assert shown == {s["name"]: s["tokens"] for s in reported["sections"]}
    total = int(browser.find_element(By.CSS_SELECTOR, "table.context .total").text)
    assert total == sum(shown.values()) == reported["meta"]["used_tokens"]


def test_a_chart_draws_the_points_a_sql_query_returns(server: tuple[str, dict[str, str]], browser: Any) -> None:
    url, _ = server
    sql = f"SELECT offset AS x, length(raw) AS y FROM events WHERE thread_id = '{THREAD}' ORDER BY x"
    expected = httpx.post(f"{url}/sql", json={"sql": sql}, timeout=30).json()["rows"]
    assert len(expected) >= len(SCRIPT)
    assert _open(browser, f"{url}/ui/analytics?{httpx.QueryParams({'sql': sql})}") == []
    points = browser.find_elements(By.CSS_SELECTOR, "#result svg.console circle.pt")
    drawn = [[float(p.get_attribute("data-x")), float(p.get_attribute("data-y"))] for p in points]
    assert drawn == [[float(x), float(y)] for x, y in expected]
    cells = [r.find_elements(By.TAG_NAME, "td") for r in browser.find_elements(By.CSS_SELECTOR, "#result table.result tbody tr")]
    assert [[int(c.text) for c in row] for row in cells] == expected
    # The fixed charts draw too: tool latency has a bar for each tool with a latency.
    bars = {b.get_attribute("data-label") for b in browser.find_elements(By.CSS_SELECTOR, "svg.bars rect.bar")}
    assert {"pytest", "grep"} <= bars


def test_search_hits_are_labelled_and_link_to_their_event_in_the_timeline(server: tuple[str, dict[str, str]], browser: Any) -> None:
    url, _ = server
    assert _open(browser, f"{url}/ui/search?q=redirect&thread={THREAD}") == []
    hits = browser.find_elements(By.CSS_SELECTOR, "table.hits tr.hit")
    assert hits, "no hits"
    assert {h.find_element(By.CSS_SELECTOR, ".src").text for h in hits} <= {"index", "active"}
    link = hits[0].find_element(By.CSS_SELECTOR, "a.hit-link")
    target = link.text
    link.click()
    WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.ID, f"ev-{target}"))
    assert browser.execute_script("return location.hash") == f"#ev-{target}"


def test_a_just_published_event_appears_in_the_open_thread_page_within_2_s(server: tuple[str, dict[str, str]], browser: Any) -> None:
    url, _ = server
    assert _open(browser, f"{url}/ui/threads/{THREAD}") == []
    fresh = raw("w99", "message", {"role": "user", "text": "a live one"}, 30, THREAD, turn_id="T3")
    t0 = time.monotonic()
    assert httpx.post(f"{url}/events", content=fresh, headers=JSON, timeout=10).json()["accepted"] == 1
    WebDriverWait(browser, 2, poll_frequency=0.05).until(lambda d: d.find_elements(By.ID, "ev-w99"))
    assert time.monotonic() - t0 < 2.0
    ids = [r.get_attribute("id") for r in browser.find_elements(By.CSS_SELECTOR, "#timeline tr.ev")]
    assert ids[-1] == "ev-w99" and ids.index("ev-w14") < ids.index("ev-w99")
    assert [f for f in browser.get_log("browser") if f["level"] == "SEVERE"] == []


def test_threads_named_dot_and_dot_dot_open_from_the_list_and_stay_live(server: tuple[str, dict[str, str]], browser: Any) -> None:
    # Its own project, so the thread list of the tests above is as they published it.
    url, _ = server
    dots = [raw(f"dot{n}", "goal", {"text": f"thread {tid}"}, 40 + n, tid, project="dots") for n, tid in enumerate([".", ".."])]
    assert httpx.post(f"{url}/events", content=b"\n".join(dots), headers=JSON, timeout=10).json()["accepted"] == 2
    for tid in (".", ".."):
        assert _open(browser, f"{url}/?project=dots") == []
        browser.find_element(By.XPATH, f"//table[contains(@class,'threads')]//td/a[text()='{tid}']").click()
        WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.CSS_SELECTOR, "h1 code"))
        assert browser.find_element(By.CSS_SELECTOR, "h1 code").text == tid
        assert [r.get_attribute("id") for r in browser.find_elements(By.CSS_SELECTOR, "#timeline tr.ev")] == [f"ev-dot{len(tid) - 1}"]
        fresh = raw(f"dot-live{len(tid)}", "message", {"role": "user", "text": "live"}, 50, tid)
        assert httpx.post(f"{url}/events", content=fresh, headers=JSON, timeout=10).json()["accepted"] == 1
        WebDriverWait(browser, 5, poll_frequency=0.05).until(lambda d: d.find_elements(By.ID, f"ev-dot-live{len(tid)}"))
        assert [f for f in browser.get_log("browser") if f["level"] == "SEVERE"] == []


def test_an_open_thread_page_whose_login_ends_goes_to_the_login_form_and_back(
        tmp_path: Path, browser: Any) -> None:  # fmt: skip
    running = Server(tmp_path / "guarded", free_port(), token="web-s3cret").start()
    try:
        url = running.url
        event = raw("g1", "goal", {"text": "a guarded goal"}, 0, "guarded-t")
        assert httpx.post(f"{url}/events", content=event, headers={**JSON, **running.auth}, timeout=30).status_code == 200
        _open(browser, f"{url}/ui/threads/guarded-t")
        browser.find_element(By.NAME, "token").send_keys("web-s3cret")
        browser.find_element(By.TAG_NAME, "button").click()
        # The form posts with the page's own Origin (a no-referrer policy made it "null": refused).
        WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.ID, "ev-g1"))
        browser.delete_cookie("agentlog_token")  # as when its 12 hours end
        WebDriverWait(browser, 10).until(lambda d: "/ui/login" in d.current_url)
        assert "next=%2Fui%2Fthreads%2Fguarded-t" in browser.current_url  # back to the page after the login
    finally:
        running.stop()
