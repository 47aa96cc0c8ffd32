"""How the ``agentlog`` command shows an answer: JSON, tables, one block of text per
command, warnings on stderr (stdout stays the answer) and progress bars."""

from __future__ import annotations

import csv
import io
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, redirect_stdout
from typing import Any

import orjson
from rich.progress import Progress

from agentlog.schemas.events import utc_text
from agentlog.schemas.search import kind_said
from agentlog.sinks.base import QueryResult


_BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_UNSAFE = {c: f"\\u{c:04x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if chr(c) not in "\n\t"}
_UNSAFE.update({ord(c): f"\\u{ord(c):04x}" for c in _BIDI})


def counted(n: int, noun: str) -> str:
    """"1 row", "2 rows": a count and its noun, plural but for one."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def terminal_safe(text: str) -> str:
    """``text`` with what a terminal would obey rather than show written out: control
    characters (an escape sequence that clears the screen or retitles the window, a
    carriage return that writes over the line) and direction overrides (that reorder what
    a reader sees) become ``\\u001b``, ``\\u202e``: JSON's own escapes, so a provider
    payload printed as JSON stays valid JSON. Lines and tabs stay. ``--json`` output is
    the answer as it is, for programs."""
    return text.translate(_UNSAFE)


def print_json(value: Any) -> None:
    sys.stdout.write(orjson.dumps(value, default=str, option=orjson.OPT_INDENT_2).decode() + "\n")


def show(result: Any, as_json: bool, as_text: Callable[[Any], None]) -> None:
    """The answer on stdout: JSON for machines, else ``as_text``'s lines for people."""
    if as_json:
        print_json(result)
        return
    shown = io.StringIO()
    with redirect_stdout(shown):
        as_text(result)
    sys.stdout.write(terminal_safe(shown.getvalue()))


def warn(warnings: list[str]) -> None:
    """What the answer's reader should know (a failing store, a query that searched for
    nothing), on stderr: stdout stays the answer."""
    for warning in warnings:
        print(terminal_safe(f"agentlog: warning: {warning}"), file=sys.stderr)


@contextmanager
def progress(label: str) -> Iterator[Callable[[int, int], None]]:
    """A progress bar on stderr when it is a terminal (silent otherwise); yields its
    ``update(done, total)``. The bar appears at the first update, so work that turns out
    to be nothing (a data directory with nothing to heal) shows none."""
    if not sys.stderr.isatty():
        yield lambda _d, _t: None
        return
    with ExitStack() as stack:
        shown: list[tuple[Progress, Any]] = []

        def update(done: int, total: int) -> None:
            if not shown:
                bar = stack.enter_context(Progress(transient=True))
                shown.append((bar, bar.add_task(label, total=total or None)))
            bar, task = shown[0]
            bar.update(task, completed=done, total=total or None)

        yield update


def format_rows(result: QueryResult, fmt: str) -> str:
    if fmt == "json":
        return orjson.dumps([dict(zip(result.columns, r)) for r in result.rows], default=str,
                            option=orjson.OPT_INDENT_2).decode()  # fmt: skip
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf)
        writer.writerow(result.columns)
        writer.writerows(result.rows)
        return buf.getvalue().rstrip("\n")
    cells = [[terminal_safe(str(c)) for c in result.columns]] + [
        ["" if v is None else terminal_safe(str(v)).replace("\n", "\\n") for v in r] for r in result.rows]
    widths = [min(60, max(len(row[i]) for row in cells)) for i in range(len(result.columns))]
    lines = [" | ".join(v[:60].ljust(w) for v, w in zip(row, widths)) for row in cells]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines) + f"\n({counted(len(result.rows), 'row')})"


def print_publish(report: dict[str, Any]) -> None:
    print(f"accepted {report['accepted']}, rejected {report['rejected']}")
    for r in report["rejections"][:10]:
        print(f"  record {r['record']}: {r['reason']}", file=sys.stderr)


def print_state(state: dict[str, Any]) -> None:
    print(f"thread {state['thread_id']}  project {state['project']}  window {state['window_id']}  "
          f"events {state['event_count']}")  # fmt: skip
    print(f"goal: {(state['goal'] or {}).get('text', '-')}")
    for c in state["constraints"]:
        print(f"constraint: {c['text']}")
    for name in ("plan", "tasks"):
        for item in state[name]:
            ident = item.get("step_id") or item.get("task_id")
            print(f"{name[:-1] if name == 'tasks' else 'step'} {ident} [{item['status']}] {item.get('text') or ''}")
    for f in state["files"]:
        print(f"file {f['path']} {f['change']}{'' if f['confirmed'] else ' (unconfirmed)'}")
    for a in state["pending_approvals"]:
        print(f"pending approval {a['approval_id']}: {a['action']}")
    for a in state["agents"]:
        print(f"agent {a['agent_id']} {a['status']}")
    for c in state["pending_calls"]:
        print(f"pending call {c['call_id']} {c['tool_name']}")
    for fl in state["failures"][-5:]:
        print(f"failure {fl['event_id']} {fl.get('tool_name') or fl['kind']} {fl.get('status') or ''} {fl['message']}")


THREAD_COLUMNS = (("thread", "thread_id"), ("project", "project"), ("events", "event_count"),
                  ("last activity", "last_activity"), ("open calls", "open_calls"), ("failures", "failures"),
                  ("status", "status"))  # fmt: skip


def print_threads(result: dict[str, Any]) -> None:
    rows = [tuple("-" if r[key] is None else r[key] for _name, key in THREAD_COLUMNS)
            for r in result["threads"]]  # fmt: skip
    print(format_rows(QueryResult([name for name, _key in THREAD_COLUMNS], rows), "table"))
    if result["total"] > len(rows):
        print(f"({result['total']} threads match; --limit shows more)")


def print_context(result: dict[str, Any]) -> None:
    meta = result["meta"]
    print(f"{meta['used_tokens']}/{meta['budget']} tokens ({meta['encoding']})")
    if meta.get("encoding_note"):
        print(f"agentlog: note: {meta['encoding_note']}", file=sys.stderr)
    for m in result["messages"]:
        lines = [m["content"]] if m.get("content") else []
        lines += [_call_line(call) for call in m.get("tool_calls") or []]
        print(f"--- {m['role']}{' ' + m['tool_call_id'] if m.get('tool_call_id') else ''}")
        print("\n".join(lines))


def _call_line(call: dict[str, Any]) -> str:
    """A tool call as a person reads it: ``call <id>: <tool> <arguments>`` (``--json`` and
    ``--format openai`` keep the request's own shape)."""
    function = call.get("function") or {}
    return f"call {call.get('id', '')}: {function.get('name', '')} {function.get('arguments', '')}"


def print_payload(result: dict[str, Any]) -> None:
    """A provider-format context as the request fields it fills, JSON ready to send."""
    fields = {k: result[k] for k in ("system", "messages") if k in result}
    print(orjson.dumps(fields, option=orjson.OPT_INDENT_2).decode())


def print_search(result: dict[str, Any]) -> None:
    for h in result["hits"]:
        print(f"{h['score']:7.3f} [{h['source']}] {h['event_id']} {h['thread_id']} {kind_said(h)} "
              f"{h['tool_name']} {h['ts']}\n        {h['snippet']}")  # fmt: skip
    if not result["hits"]:
        print("no hits")


def print_read(result: dict[str, Any]) -> None:
    print(f"# source: {result['source']}")
    print(orjson.dumps(result["event"], option=orjson.OPT_INDENT_2).decode())


def print_memory(action: str, result: Any) -> None:
    {"show": _print_view, "status": _print_memory_status, "extract": _print_extract,
     "consolidate": _print_consolidate, "revoke": _print_revoke}.get(action, print_json)(result)


def _print_extract(r: dict[str, Any]) -> None:
    print(f"extracted {counted(len(r['extracted_threads']), 'thread')}: {counted(r['candidates'], 'candidate')}, "
          f"{r['refused']} refused, {counted(r['llm_rejected'], 'LLM proposal')} rejected "
          f"({counted(r['workers'], 'worker')})")  # fmt: skip
    for thread, error in sorted(r["failed"].items()):
        print(f"  failed {thread}: {error} (retried with backoff by the next run)")


def _print_consolidate(r: dict[str, Any]) -> None:
    if r.get("published"):
        print(f"published memory view version {r['version']}: {counted(r['facts'], 'fact')}")
    else:
        stays = f" (view version {r['version']} stays)" if "version" in r else ""
        print(f"nothing published: {r.get('reason', 'no change')}{stays}")


def _print_revoke(r: dict[str, Any]) -> None:
    if r.get("already_revoked"):
        print(f"{r['revoked']} was already revoked ({r['revoke_event_id']})")
        return
    print(f"revoked {r['revoked']} ({r['revoke_event_id']})")
    if isinstance(r.get("view"), dict):
        _print_consolidate(r["view"])


def _print_memory_status(r: dict[str, Any]) -> None:
    print(f"memory view version {r['published_version']}; {counted(r['threads'], 'thread')}, {len(r['not_extracted'])} with "
          f"events not extracted yet, {len(r['extracted_not_consolidated'])} extracted but not consolidated")  # fmt: skip
    for phase, p in r["phases"].items():
        last = f", last error: {p['last_error']}" if p["last_error"] else ""
        print(f"{phase}: {p['pending']} pending, {p['running']} running, {p['failed']} failing; {p['runs']} runs, "
              f"{p['failures']} failed, {p['fenced']} fenced; last ok {utc_text(p['last_ok'])}{last}")  # fmt: skip
    lease = r["lease"]
    held = lease is not None and lease.get("owner") and not lease.get("expired")
    print(f"lease: held by {lease['owner']} until {utc_text(lease['expires_at'])}" if held else "lease: free")
    for thread, f in sorted(r["failing"].items()):
        print(f"failing {thread}: attempt {f['attempts']}: {f['error']}")
    print(f"refused statements: {r['refused']}; `--json` shows the recent ones and every field")


def _print_view(result: dict[str, Any]) -> None:
    print(f"memory view version {result['version']}")
    if not result["facts"]:  # an empty view is no error, but a newcomer needs the way to fill it
        print("no facts: `agentlog memory extract`, then `agentlog memory consolidate`, publishes them "
              "(`agentlog run` does it for idle threads)")
    for f in result["facts"]:
        flags = f" [{', '.join(f['flags'])}]" if f["flags"] else ""
        print(f"{f['project']}/{f['key']} = {f['value']!r} ({f['status']}, {f['evidence_type']}, "
              f"source {f['source_event_id']}){flags}{' — ' + f['note'] if f['note'] else ''}")  # fmt: skip


__all__ = [
    "THREAD_COLUMNS", "format_rows", "print_context", "print_json", "print_memory", "print_publish",
    "print_read", "print_search", "print_state", "print_threads", "progress", "show", "terminal_safe", "warn",
]  # fmt: skip
