"""Each page of the web view as HTML, from what ``queries`` and the ``Service`` answer.
Server-rendered: every table reads without JavaScript; the script only keeps an open
thread page live. Every value is escaped by ``html.e``."""

from __future__ import annotations

from itertools import groupby
from typing import Any
from urllib.parse import parse_qsl, urlencode

import orjson

from agentlog.processors.context import pinned_text
from agentlog.schemas.events import KINDS, utc_text
from agentlog.schemas.search import kind_said
from agentlog.streams.web.html import Html, bar_chart, e, href, number, page, table, xy_chart
from agentlog.streams.web.queries import OUTPUT_CHARS, Timeline

TEXT_CHARS = 300
"""An event's line in the timeline shows this much of its text (the event is a link away)."""
FAILED = frozenset({"error", "timeout", "cancelled", "missing"})


def _clip(text: str, limit: int = TEXT_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _compact(value: Any) -> str:
    return orjson.dumps(value).decode() if value not in (None, {}, []) else ""


def event_text(kind: str, p: dict[str, Any]) -> str:
    """One line saying what an event is about."""
    if kind == "message":
        return f"{p.get('role', '?')}: {p.get('text', '')}"
    if kind == "tool_call":
        return f"{p.get('tool_name', '?')}({_compact(p.get('arguments'))}) [{p.get('call_id', '')}]"
    if kind == "tool_result":
        return f"[{p.get('call_id', '')}] {p.get('status', 'ok')}: {p.get('output', '')}"
    if kind == "plan":
        return "; ".join(f"{s.get('step_id')} {s.get('status', '')} {s.get('text') or ''}".strip() for s in p.get("steps", []))
    if kind == "task":
        return f"{p.get('task_id', '')} {p.get('status') or ''} {p.get('text') or ''}"
    if kind == "file_change":
        return f"{p.get('change', '')} {p.get('path', '')}"
    if kind in ("approval_request", "approval_decision"):
        return f"{p.get('approval_id', '')} {p.get('decision') or ''} {p.get('action') or ''} {p.get('decided_by') or ''}"
    if kind in ("agent_spawn", "agent_exit"):
        return f"{p.get('child_agent_id') or p.get('agent_id', '')} {p.get('role') or p.get('status') or ''} {p.get('summary') or ''}"
    for name in ("text", "message", "summary", "reason"):
        if isinstance(p.get(name), str):
            return f"{p.get('code', '')} {p[name]}".strip()
    return _compact(p)


# -- threads ----------------------------------------------------------------------------


DOT_SEGMENTS = (".", "..")
"""Legal thread ids a path cannot carry: a browser resolves ``/ui/threads/..`` (and its
percent-encoded ``%2E%2E``) to ``/ui/`` before sending it."""


def thread_link(thread_id: str) -> str:
    """The thread page; ids are 1-128 of [A-Za-z0-9._:-], nothing to encode, but "." and
    ".." go through the query (``/ui/thread?id=``), which no browser rewrites."""
    return f"/ui/thread?{urlencode({'id': thread_id})}" if thread_id in DOT_SEGMENTS else f"/ui/threads/{thread_id}"


def poll_link(thread_id: str) -> str:
    """What an open thread page polls (by the query, so every legal id)."""
    return f"/ui/thread/poll?{urlencode({'id': thread_id})}"


def _form_action(link: str) -> tuple[str, str]:
    """A GET form's action and the hidden fields that carry ``link``'s query (a browser
    replaces an action's query with the form's fields)."""
    path, _, query = link.partition("?")
    hidden = "".join(f'<input type="hidden" name="{e(k)}" value="{e(v)}">' for k, v in parse_qsl(query))
    return path, hidden


def thread_list(answer: dict[str, Any], project: str, status: str, q: str) -> str:
    rows = [t for t in answer["threads"] if not q or q.lower() in f"{t['thread_id']} {t.get('goal') or ''}".lower()]
    body = [
        f'<td><a href="{e(thread_link(t["thread_id"]))}">{e(t["thread_id"])}</a></td><td>{e(t["project"])}</td>'
        f'<td><span class="st st-{e(t["status"])}">{e(t["status"])}</span></td><td>{e(t["last_activity"])}</td>'
        f'<td class="n">{e(t["event_count"])}</td><td class="n">{e(t["open_calls"])}</td>'
        f'<td class="n">{e(t["failures"])}</td><td class="n">{e(t["pending_approvals"])}</td><td>{e(t.get("goal"))}</td>'
        for t in rows
    ]  # fmt: skip
    head = "".join(f"<th>{c}</th>" for c in ("thread", "project", "status", "last activity", "events",
                                              "open calls", "failures", "approvals", "goal"))  # fmt: skip
    statuses = "".join(f'<option{" selected" if s == status else ""}>{s}</option>'
                       for s in ("", "active", "failing", "waiting_approval", "idle"))  # fmt: skip
    form = (f'<form class="filters" method="get" action="/"><input name="q" placeholder="thread or goal" value="{e(q)}">'
            f'<input name="project" placeholder="project" value="{e(project)}"><select name="status">{statuses}</select>'
            '<button>filter</button></form>')  # fmt: skip
    warn = "".join(f'<p class="warn">{e(w)}</p>' for w in answer.get("warnings") or [])
    listing = (f'<table class="threads"><thead><tr>{head}</tr></thead><tbody>'
               + "".join(f"<tr>{r}</tr>" for r in body) + "</tbody></table>")  # fmt: skip
    return page("threads", f"<h1>Threads</h1>{form}{warn}{listing}<p class=meta>{len(rows)} threads</p>", "/")


def timeline_rows(events: list[dict[str, Any]], turn: str | None, window: str | None) -> str:
    """Rows of the timeline table, a header row where a turn or a window begins."""
    out = []
    for ev in events:
        if ev["window_id"] != window:
            window = ev["window_id"]
            out.append(f'<tr class="window"><td colspan="5">window {e(window)}</td></tr>')
        if ev["turn_id"] != turn:
            turn = ev["turn_id"]
            out.append(f'<tr class="turn"><td colspan="5">turn {e(turn or "(none)")}</td></tr>')
        agent = ev["agent_id"]
        kind = ev["kind"]
        text = _clip(event_text(kind, ev["payload"]))
        out.append(f'<tr class="ev" id="ev-{e(ev["event_id"])}" data-offset="{int(ev["offset"])}"><td class="ts">{e(ev["ts"][11:23])}</td>'
                   f'<td><span class="kind k-{e(kind)}">{e(kind)}</span></td>'
                   f'<td><span class="agent{" sub" if agent != "main" else ""}">{e(agent)}</span></td>'
                   f'<td class="txt">{e(text)}</td><td><a href="/events/{e(ev["event_id"])}" class="id">'
                   f'{e(ev["event_id"])}</a></td></tr>')  # fmt: skip
    return "".join(out)


def waterfall(calls: list[dict[str, Any]]) -> str:
    """One row a pair: where it starts, its latency as a bar, its status and flags; opening
    it shows the output and the latency."""
    if not calls:
        return '<p class="empty">no tool calls</p>'
    total = int(calls[0].get("total") or len(calls))
    note = f'<p class="meta">the newest {len(calls)} of {total} calls</p>' if total > len(calls) else ""
    starts = [c["call_ms"] if c["call_ms"] is not None else c["result_ms"] for c in calls]
    ends = [c["result_ms"] if c["result_ms"] is not None else s for c, s in zip(calls, starts)]
    known = [t for t in starts + ends if t is not None]
    t0, t1 = (min(known), max(known)) if known else (0, 1)
    span = max(t1 - t0, 1)
    rows = []
    for c, start in zip(calls, starts):
        orphan, synthetic = c["status"] == "orphan", bool(c["synthetic"])
        flags = [f for f, on in (("orphan", orphan), ("synthetic", synthetic), ("missing", c["status"] == "missing")) if on]
        x = 0.0 if start is None else (start - t0) / span * 300
        width = max(2.0, (c["latency_ms"] or 0) / span * 300)
        fill = "#d43b5a" if c["status"] in FAILED or orphan else "#3ba55c"
        dash = ' stroke="#d43b5a" stroke-dasharray="3 2" fill="none"' if synthetic or orphan else f' fill="{fill}"'
        when = "" if start is None else f"starts +{(start - t0) / 1000:g} s"
        bar = (f'<svg class="wbar" viewBox="0 0 304 10" width="304" height="10"><rect x="{x:.1f}" y="1" '
               f'width="{width if not (synthetic or orphan) else 8:.1f}" height="8"{dash}><title>{e(when)}</title>'
               '</rect></svg>')  # fmt: skip
        latency = "—" if c["latency_ms"] is None else f"{c['latency_ms']:g} ms"
        flag_html = "".join(f'<span class="flag f-{f}">{f}</span>' for f in flags)
        output = c["output"] or ""
        more = ""
        result_id = c["result_event_id"] or c["orphan_event_id"]
        if c["output_chars"] and c["output_chars"] > OUTPUT_CHARS:
            more = (f'<p>output truncated at {OUTPUT_CHARS} of {e(c["output_chars"])} characters: '
                    f'<a href="/events/{e(result_id)}">the whole output</a></p>')  # fmt: skip
        links = " ".join(f'<a href="#ev-{e(i)}">{label}</a>' for label, i in
                         (("call event", c["call_event_id"]), ("result event", result_id)) if i)  # fmt: skip
        name = c["orphan_event_id"] or c["call_id"]
        rows.append(
            f'<details class="call s-{e(c["status"])}" id="call-{e(name)}" data-status="{e(c["status"])}">'
            f'<summary><span class="tool">{e(c["tool_name"] or c["call_id"])}</span><span class="st st-{e(c["status"])}">'
            f'{e(c["status"])}</span>{flag_html}{bar}<span class="lat">{e(latency)}</span></summary>'
            f'<div class="out"><p>call <code>{e(name)}</code> · latency <b class="latency">{e(latency)}</b> · '
            f'{e(c["output_bytes"])} bytes · {links}</p>{more}'
            f'<pre class="output">{e(output) if output else "(no output)"}</pre></div></details>')  # fmt: skip
    return note + "".join(rows)


def _list(items: list[Any], render: Any) -> str:
    return "<ul>" + "".join(f"<li>{render(i)}</li>" for i in items) + "</ul>" if items else '<p class="empty">none</p>'


def state_panel(state: dict[str, Any]) -> str:
    goal = state.get("goal") or {}
    parts = [f'<h3>Goal</h3><p class="goal">{e(goal.get("text") or "(none)")}</p>',
             "<h3>Constraints</h3>" + _list(state.get("constraints", []), lambda c: e(c.get("text"))),
             "<h3>Plan</h3>" + _list(state.get("plan", []), lambda s: f'<span class="st st-{e(s.get("status"))}">'
                                      f'{e(s.get("status"))}</span> {e(s.get("step_id"))}: {e(s.get("text"))}'),
             "<h3>Tasks</h3>" + _list(state.get("tasks", []), lambda t: f'<span class="st st-{e(t.get("status"))}">'
                                       f'{e(t.get("status"))}</span> {e(t.get("task_id"))}: {e(t.get("text"))}'
                                       + (f' ({e(t["owner"])})' if t.get("owner") else "")),
             "<h3>Files</h3>" + _list(state.get("files", []), lambda f: f'{e(f.get("change"))} <code>{e(f.get("path"))}</code>'
                                       + ("" if f.get("confirmed") else " (unconfirmed)")),
             "<h3>Approvals</h3>" + _list(
                 [(a, "pending") for a in state.get("pending_approvals", [])]
                 + [(a, a.get("decision")) for a in state.get("decided_approvals", [])],
                 lambda p: f'<span class="st st-{e(p[1])}">{e(p[1])}</span> {e(p[0].get("approval_id"))}: '
                           f'{e(p[0].get("action"))}' + (f' by {e(p[0]["decided_by"])}' if p[0].get("decided_by") else "")),
             "<h3>Sub-agents</h3>" + _list(state.get("agents", []), _agent),
             "<h3>Open calls</h3>" + _list(state.get("pending_calls", []),
                                           lambda c: f'{e(c.get("tool_name"))} <code>{e(c.get("call_id"))}</code>'),
             "<h3>Recent failures</h3>" + _list(state.get("failures", []), lambda f: f'<span class="st st-{e(f.get("status"))}">'
                                                f'{e(f.get("status"))}</span> {e(f.get("tool_name") or f.get("kind"))}: '
                                                f'{e(_clip(f.get("message") or "", 160))}'),
             "<h3>Compaction</h3>" + _compaction(state)]  # fmt: skip
    return "".join(parts)


def _agent(a: dict[str, Any]) -> str:
    who = f'<a href="{e(thread_link(a["thread_id"]))}">{e(a.get("agent_id"))}</a>' if a.get("thread_id") else e(a.get("agent_id"))
    return f'{who} ({e(a.get("role"))}) <span class="st st-{e(a.get("status"))}">{e(a.get("status"))}</span> {e(a.get("summary"))}'


def _compaction(state: dict[str, Any]) -> str:
    if not state.get("summary"):
        return '<p class="empty">no compaction record yet</p>'
    covers, record = state.get("summary_covers_through"), state.get("summary_event_id")
    return (f'<p>covers through <a href="#ev-{e(covers)}">{e(covers)}</a>; record '
            f'<a href="/events/{e(record)}">{e(record)}</a></p><pre class="summary">{e(_compact(state["summary"]))}</pre>')


def context_panel(ctx: dict[str, Any] | None, error: str | None, budget: int, model: str, query: str, action: str) -> str:
    action, hidden = _form_action(action)
    form = (f'<form class="filters" method="get" action="{e(action)}#context">{hidden}<label>budget <input name="budget" '
            f'type="number" min="1" value="{budget}"></label><label>model <input name="model" value="{e(model)}" '
            f'placeholder="o200k_base"></label><label>query <input name="query" value="{e(query)}"></label>'
            '<button>preview</button></form>')  # fmt: skip
    if ctx is None:
        return form + f'<p class="warn">{e(error)}</p>'
    rows = []
    for s in ctx["sections"]:
        content = s.get("content")
        if content is None and s["name"] == "pinned":
            content = pinned_text(s)  # as the model reads it
        if content is None:
            ids = s.get("event_ids") or s.get("hits") or []
            content = f"{len(ids)} events: " + ", ".join(ids)
        rows.append(f'<tr class="section" data-section="{e(s["name"])}"><td>{e(s["name"])}</td>'
                    f'<td class="n tokens">{int(s["tokens"])}</td><td><details><summary>show</summary>'
                    f'<pre>{e(content)}</pre></details></td></tr>')  # fmt: skip
    meta = ctx["meta"]
    dropped = meta.get("dropped") or {}
    drop_rows = [(d["name"], d["tokens"], ", ".join(map(str, d.get("items", [])))) for d in dropped.get("sections", [])]
    return (form + f'<p class="meta">{int(meta["used_tokens"])} of {int(meta["budget"])} tokens ({e(meta["encoding"])}); '
            f'{e(dropped.get("tokens", 0))} tokens dropped; summary covers through '
            f'{e(meta.get("summary_covers_through") or "nothing yet")}</p>'
            + (f'<p class="warn">{e(meta["encoding_note"])}</p>' if meta.get("encoding_note") else "")
            + '<table class="context"><thead><tr><th>section</th><th>tokens</th><th>content</th></tr></thead>'
            f'<tbody>{"".join(rows)}</tbody><tfoot><tr><td>total</td><td class="n total">'
            f'{sum(int(s["tokens"]) for s in ctx["sections"])}</td><td></td></tr></tfoot></table>'
            "<h4>Dropped</h4>" + (table(["section", "tokens", "items"], drop_rows, "dropped") if drop_rows
                                  else '<p class="empty">nothing dropped</p>'))  # fmt: skip


def thread_page(thread_id: str, tl: Timeline, calls: list[dict[str, Any]], state: dict[str, Any], context: str,
                live: bool) -> str:  # fmt: skip
    """``live``: the newest page, which the script keeps up to date."""
    link = thread_link(thread_id)
    older = f'<p><a href="{href(link, before=tl.older)}">earlier events</a></p>' if tl.older is not None else ""
    newer = "" if live else f'<p><a href="{e(link)}">newest events</a></p>'
    last = tl.events[-1] if tl.events else None
    head = (f'<p class="meta">project {e(state.get("project"))} · window {e(state.get("window_id"))} · '
            f'{e(state.get("event_count"))} events · {len(state.get("pending_calls", []))} open calls · '
            f'{len(state.get("failures", []))} recent failures · last activity {e(state.get("newest_ts"))}</p>')  # fmt: skip
    body = (f'<h1>Thread <code>{e(thread_id)}</code></h1>{head}<div class="cols"><section class="main">'
            f'<h2>Timeline</h2>{older}<table class="timeline" id="timeline" data-poll="{e(poll_link(thread_id))}" '
            f'data-after="{int(last["offset"]) if last else -1}" data-turn="{e(last["turn_id"] if last else "")}" '
            f'data-window="{e(last["window_id"] if last else "")}" data-live="{"1" if live else "0"}">'
            '<thead><tr><th>time</th><th>kind</th><th>agent</th><th>what</th><th>event</th></tr></thead>'
            f'<tbody>{timeline_rows(tl.events, None, None)}</tbody></table>{newer}'
            f'<p class="meta" id="live">{"live: new events appear as they arrive" if live else ""}</p>'
            f'</section><aside><h2>Tool calls</h2><div id="calls">{waterfall(calls)}</div>'
            f'<h2>Working state</h2><div id="state">{state_panel(state)}</div>'
            f'<h2 id="context">Context preview</h2>{context}</aside></div>')  # fmt: skip
    return page(f"thread {thread_id}", body, "/", script=True)


# -- search, analytics, memory ------------------------------------------------------------


SEARCH_FIELDS = ("q", "thread", "kind", "tool", "window", "project", "since", "until", "after", "limit")


def search_page(params: dict[str, str], answer: dict[str, Any] | None, error: str | None) -> str:
    kinds = "".join(f'<option{" selected" if k == params.get("kind") else ""}>{e(k)}</option>' for k in ("", *KINDS))
    inputs = "".join(f'<select name="kind" title="kind">{kinds}</select>' if f == "kind" else
                     f'<input name="{f}" placeholder="{f}" value="{e(params.get(f, ""))}">' for f in SEARCH_FIELDS)  # fmt: skip
    form = f'<form class="filters" method="get" action="/ui/search">{inputs}<button>search</button></form>'
    out = ""
    if error:
        out = f'<p class="warn">{e(error)}</p>'
    elif answer is not None:
        rows = []
        for h in answer["hits"]:
            target = href(thread_link(h["thread_id"]), before=(h["offset"] + 1) if h.get("offset") is not None else None)
            rows.append(f'<tr class="hit"><td><span class="src src-{e(h["source"])}">{e(h["source"])}</span></td>'
                        f'<td><a href="{e(thread_link(h["thread_id"]))}">{e(h["thread_id"])}</a></td>'
                        f'<td><a class="hit-link" href="{target}#ev-{e(h["event_id"])}">{e(h["event_id"])}</a></td>'
                        f'<td>{e(kind_said(h))}</td><td>{e(h.get("tool_name"))}</td><td>{e(h["ts"])}</td>'
                        f'<td>{e(h.get("snippet"))}</td></tr>')  # fmt: skip
        head = "".join(f"<th>{c}</th>" for c in ("source", "thread", "event", "kind", "tool", "time", "snippet"))
        out = (f'<table class="hits"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
               f'<p class="meta">{len(rows)} hits</p>') + "".join(f'<p class="warn">{e(w)}</p>' for w in answer.get("warnings") or [])  # fmt: skip
    return page("search", f"<h1>Search</h1>{form}{out}", "/ui/search")


def chart_for(shape: str, columns: list[str], rows: list[tuple[Any, ...]]) -> Html:
    """``lines``: (x, series, y) rows; ``bars``: (label, value...) rows; ``xy``: the first two
    numeric columns, x against y."""
    if shape == "lines":
        series: dict[str, list[tuple[float, float]]] = {}
        for x, name, y in rows:
            series.setdefault(str(name), []).append((float(x), float(y)))
        return xy_chart(series, f"{columns[0]} (UTC)", columns[2], "lines", x_time=True)
    if shape == "bars":
        labels = [str(r[0]) for r in rows]
        return bar_chart(labels, {c: [number(r[i]) for r in rows] for i, c in enumerate(columns) if i})
    numeric = [i for i in range(len(columns)) if rows and all(number(r[i]) is not None for r in rows)]
    if len(numeric) < 2:
        return Html("")
    xi, yi = numeric[:2]
    return xy_chart({columns[yi]: [(float(r[xi]), float(r[yi])) for r in rows]}, columns[xi], columns[yi], "xy console")


def result_table(columns: list[str], rows: list[tuple[Any, ...]]) -> Html:
    return table(columns, ([_compact(v) if isinstance(v, (dict, list)) else v for v in r] for r in rows), "result")


CONSOLE_ROWS = 1000
"""Rows the console shows and charts: a query that returns 100,000 made a 24 MB page."""


def analytics_page(charts: list[tuple[str, str, str, Any]], sql: str, result: Any, error: str | None) -> str:
    """``charts``: (title, query, shape, QueryResult or error text)."""
    blocks = []
    for title, query, shape, answer in charts:
        if isinstance(answer, str):
            inner = f'<p class="warn">{e(answer)}</p>'
        else:
            # A time series' x is epoch seconds for the chart, a UTC time for people.
            listed = [(utc_text(r[0]), *r[1:]) for r in answer.rows] if shape == "lines" else answer.rows
            inner = (chart_for(shape, answer.columns, answer.rows)
                     + f"<details><summary>rows and query</summary><pre>{e(query)}</pre>"
                     + result_table(answer.columns, listed) + "</details>")  # fmt: skip
        blocks.append(f'<section class="card"><h3>{e(title)}</h3>{inner}</section>')
    console = (f'<form method="get" action="/ui/analytics#console" class="console"><textarea name="sql" rows="4">'
               f'{e(sql)}</textarea><button>run</button></form>')  # fmt: skip
    if error:
        console += f'<p class="warn">{e(error)}</p>'
    elif result is not None:
        shown = result.rows[:CONSOLE_ROWS]
        count = (f"{len(result.rows)} rows" if len(shown) == len(result.rows) else
                 f"the first {len(shown):,} of {len(result.rows):,} rows; <code>agentlog sql</code> or "
                 "<code>POST /sql</code> gives them all")  # fmt: skip
        console += (f'<div id="result">{chart_for("xy", result.columns, shown)}'
                    f'{result_table(result.columns, shown)}<p class="meta">{count}</p></div>')  # fmt: skip
    body = (f'<h1>Analytics</h1><div class="grid">{"".join(blocks)}</div>'
            '<h2 id="console">SQL console</h2><p class="meta">One read-only query over <code>events</code>, '
            '<code>tool_calls</code> and <code>rejected_events</code>, in the same sandbox as '
            '<code>agentlog sql</code>; two numeric columns are drawn as a chart.</p>' + console)  # fmt: skip
    return page("analytics", body, "/ui/analytics")


MEMORY_COLUMNS = ("project", "scope", "key", "value", "status", "evidence_type", "observed_at", "source_event_id",
                  "supporting", "contradicting", "revoked", "flags", "note")  # fmt: skip


def memory_page(view: dict[str, Any] | None, status: dict[str, Any] | None, project: str, error: str | None) -> str:
    form = (f'<form class="filters" method="get" action="/ui/memory"><input name="project" placeholder="project" '
            f'value="{e(project)}"><button>show</button></form>')  # fmt: skip
    if error or view is None:
        return page("memory", f'<h1>Memory</h1>{form}<p class="warn">{e(error)}</p>', "/ui/memory")
    facts = sorted(view.get("facts", []), key=lambda f: (f.get("project", ""), f.get("key", "")))
    groups = []
    for proj, items in groupby(facts, key=lambda f: f.get("project", "")):
        rows = []
        for f in items:
            cells = []
            for c in MEMORY_COLUMNS[1:]:
                v = f.get(c)
                if c in ("supporting", "contradicting", "revoked", "flags"):
                    v = ", ".join(map(str, v or []))
                if c == "status":
                    cells.append(f'<td><span class="st st-{e(v)}">{e(v)}</span></td>')
                elif c == "source_event_id" and v:
                    src = f.get("source_thread_id")
                    link = f"{thread_link(src)}#ev-{v}" if src else f"/events/{v}"
                    cells.append(f'<td><a href="{e(link)}">{e(v)}</a></td>')
                else:
                    cells.append(f"<td>{e(v)}</td>")
            rows.append(f'<tr class="fact s-{e(f.get("status"))}">{"".join(cells)}</tr>')
        head = "".join(f"<th>{c}</th>" for c in MEMORY_COLUMNS[1:])
        groups.append(f'<h2>Project {e(proj)}</h2><table class="facts"><thead><tr>{head}</tr></thead>'
                      f'<tbody>{"".join(rows)}</tbody></table>')  # fmt: skip
    listing = "".join(groups) or '<p class="empty">no published facts</p>'
    jobs = _memory_jobs(status) if status else ""
    body = (f'<h1>Memory</h1>{form}<p class="meta">published view version {e(view.get("version"))}; '
            f"{len(facts)} facts</p>{listing}{jobs}")
    return page("memory", body, "/ui/memory")


PHASE_COLUMNS = ["phase", "pending", "running", "failing", "runs", "failed", "fenced", "last ok", "last error"]


def _memory_jobs(status: dict[str, Any]) -> str:
    """Memory's jobs as people read them (``agentlog memory status`` says the same): one
    row per phase, then who holds the lease, the threads failing and the refusals."""
    phases = [(name, p.get("pending"), p.get("running"), p.get("failed"), p.get("runs"), p.get("failures"),
               p.get("fenced"), utc_text(p.get("last_ok")), p.get("last_error") or "")
              for name, p in (status.get("phases") or {}).items()]  # fmt: skip
    lease = status.get("lease") or {}
    held = lease.get("owner") and not lease.get("expired")
    lines = [
        f"{number(status.get('threads', 0))} threads: {len(status.get('not_extracted') or [])} with events not "
        f"extracted yet, {len(status.get('extracted_not_consolidated') or [])} extracted but not consolidated",
        f"lease: held by {lease['owner']} until {utc_text(lease.get('expires_at'))}" if held else "lease: free",
        *(f"failing {thread}: attempt {f.get('attempts')}: {f.get('error')}"
          for thread, f in sorted((status.get("failing") or {}).items())),
        f"refused statements: {status.get('refused', 0)}",
    ]  # fmt: skip
    notes = "".join(f"<li>{e(line)}</li>" for line in lines)
    return f'<h2>Jobs</h2>{table(PHASE_COLUMNS, phases, "status")}<ul class="meta">{notes}</ul>'


def problem_page(status: int, message: str) -> str:
    return page(f"{status}", f'<h1>{status}</h1><p class="warn">{e(message)}</p><p><a href="/">threads</a></p>')


__all__ = ["analytics_page", "context_panel", "event_text", "memory_page", "problem_page", "search_page",
           "state_panel", "thread_list", "thread_page", "timeline_rows", "waterfall"]  # fmt: skip
