"""``agentlog demo``: the sample session through the embedded pipeline, then what a user
wants to see: a thread's state, tool pairs with latencies, a search, SQL, a context."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from agentlog.streams.config import Settings
from agentlog.streams.cli.demo import sample_session
from agentlog.streams.cli.render import print_json
from agentlog.streams.embedded.dir_lock import DataDirLock
from agentlog.streams.embedded.service import EmbeddedService

PAIRS_SQL = (
    "SELECT thread_id, call_id, tool_name, status, synthetic, latency_ms, output_bytes "
    "FROM tool_calls FINAL ORDER BY thread_id, call_id, orphan_event_id"
)
ANALYST_SQL = (
    "SELECT kind, count() AS events, uniqExact(thread_id) AS threads FROM events "
    "GROUP BY kind ORDER BY events DESC, kind"
)


def run_demo(settings: Settings, as_json: bool = False) -> int:
    t0 = time.perf_counter()
    lines, info = sample_session()
    lock = DataDirLock(settings)
    lock.acquire(timeout=30)
    service = EmbeddedService(settings)
    try:
        report = service.publish(b"\n".join(lines))
        processed = service.catch_up()
        state = service.state("demo-login-bug")
        pairs = service.sql(PAIRS_SQL)
        search = service.search("KeyError session_ttl", limit=5)
        ryw = service.search("runbook", after="demo-docs.00008", limit=5)
        analyst = service.sql(ANALYST_SQL)
        counts = service.sql("SELECT count() AS events, uniqExact(event_id) AS distinct_ids FROM events")
        rejected = service.sql("SELECT reason FROM rejected_events ORDER BY offset")
        context = service.context("demo-login-bug", 1500, "session_ttl")
    finally:
        service.close()
        lock.release()
    elapsed = time.perf_counter() - t0
    result: dict[str, Any] = {
        "data_dir": str(settings.data_dir),
        "published": report.as_dict(),
        "processed": processed,
        "distinct_events": info["distinct_events"],
        "state": state,
        "tool_calls": [dict(zip(pairs.columns, r)) for r in pairs.rows],
        "search": search,
        "read_your_writes_search": ryw,
        "sql": {"query": ANALYST_SQL, "rows": [dict(zip(analyst.columns, r)) for r in analyst.rows]},
        "log_counts": dict(zip(counts.columns, counts.rows[0])),
        "rejected": [r[0] for r in rejected.rows],
        "context": {"meta": context["meta"], "sections": [s["name"] for s in context["sections"]]},
        "seconds": round(elapsed, 2),
    }
    if as_json:
        print_json(result)
        return 0
    _show(result)
    return 0


def _show(r: dict[str, Any]) -> None:
    con = Console()
    pub = r["published"]
    con.rule("[bold]agentlog demo: three agent threads through the embedded pipeline")
    con.print(f"published {pub['accepted'] + pub['rejected']} records: {pub['accepted']} accepted "
              f"(one duplicate among them), {pub['rejected']} rejected to the dead-letter table")  # fmt: skip
    for reason in r["rejected"]:
        con.print(f"  [red]rejected[/] {escape(reason[:160])}")
    con.print(f"log: {r['log_counts']['events']} rows for {r['log_counts']['distinct_ids']} distinct events "
              f"(duplicates collapse)\n")  # fmt: skip

    s = r["state"]
    con.rule(f"working state of {s['thread_id']}")
    con.print(f"[bold]goal[/]: {s['goal']['text']}")
    for c in s["constraints"]:
        con.print(f"[bold]constraint[/] (pinned): {c['text']}")
    t = Table("step", "status", "text")
    for step in s["plan"]:
        t.add_row(step["step_id"], step["status"], step.get("text") or "")
    con.print(t)
    con.print("files: " + ", ".join(f"{f['path']} ({f['change']})" for f in s["files"]))
    con.print("pending approvals: " + (", ".join(f"{a['approval_id']} {a['action']}" for a in s["pending_approvals"]) or "none"))
    con.print("agents: " + ", ".join(f"{a['agent_id']} {a['status']}" for a in s["agents"]))
    con.print("recent failures: " + "; ".join(f"{f.get('tool_name') or f['kind']} {f.get('status') or ''}" for f in s["failures"]))

    con.rule("paired tool calls (ClickHouse table tool_calls, read with FINAL)")
    t = Table("thread", "call", "tool", "status", "synthetic", "latency ms", "output bytes")
    for p in r["tool_calls"]:
        t.add_row(p["thread_id"], p["call_id"], p["tool_name"], p["status"], str(p["synthetic"]),
                  "" if p["latency_ms"] is None else f"{p['latency_ms']:.0f}", str(p["output_bytes"]))  # fmt: skip
    con.print(t)

    con.rule("search 'KeyError session_ttl' (hits say where they came from)")
    for h in r["search"]["hits"]:
        con.print(escape(f"{h['score']:6.2f} [{h['source']}] {h['event_id']} {h['kind']} {h['tool_name']}: {h['snippet'][:100]}"))

    con.rule("analyst SQL")
    con.print(r["sql"]["query"])
    t = Table(*r["sql"]["rows"][0].keys()) if r["sql"]["rows"] else Table()
    for row in r["sql"]["rows"]:
        t.add_row(*(str(v) for v in row.values()))
    con.print(t)

    meta = r["context"]["meta"]
    con.rule("context for demo-login-bug under 1,500 tokens")
    con.print(f"sections {r['context']['sections']}, {meta['used_tokens']}/{meta['budget']} tokens "
              f"({meta['encoding']}), dropped units: {len(meta['dropped']['units'])}")  # fmt: skip
    con.print(f"\n[green]done in {r['seconds']} s[/]; data kept in {r['data_dir']}. Try:\n"
              f"  AGENTLOG_DATA_DIR={r['data_dir']} agentlog state demo-refactor\n"
              f"  AGENTLOG_DATA_DIR={r['data_dir']} agentlog sql \"SELECT * FROM tool_calls FINAL\"")  # fmt: skip


__all__ = ["run_demo"]
