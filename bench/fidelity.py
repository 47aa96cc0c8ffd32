"""Context fidelity (``agentlog bench --only fidelity``): what the assembled ``messages``
of a context actually hold, on long generated sessions (``agentlog.bench.sessions``).

Each session is published through an embedded service; then, for each of its questions
(about a key fact or an error code its fold has long taken out of the raw window), the user
asks it as the newest message and the context is requested at each budget, with no query:
recall must find the answer by itself. Only the messages' text is measured, never the state.
After each session's last question every budget is requested again, in another order and
after a request with a query: a read that changed a later one shows as a difference.
"""

from __future__ import annotations

import random
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from agentlog.bench.sessions import Corpus, Question, Session, corpus, event_bytes
from agentlog.processors.context import MEMORY_HEADER
from agentlog.streams.config import Settings
from agentlog.streams.embedded.service import EmbeddedService

BUDGETS = (1_500, 4_000, 8_000)
EXTRA_BUDGETS = (2_500, 16_000)
"""Asked too, in between, to see that no request changes another."""
CHUNK = 20_000


def text_of(messages: list[dict[str, Any]]) -> str:
    """Everything a model reads: every message's content and its tool calls."""
    parts = []
    for m in messages:
        parts.append(m.get("content") or "")
        for call in m.get("tool_calls", ()):
            parts.append(f"{call['function']['name']} {call['function']['arguments']}")
    return "\n".join(parts)


@dataclass
class Tally:
    """One budget's counts over every measured context."""

    contexts: int = 0
    constraints: list[int] = field(default_factory=lambda: [0, 0])  # [kept, total]
    decisions: list[int] = field(default_factory=lambda: [0, 0])
    facts: list[int] = field(default_factory=lambda: [0, 0])
    errors: list[int] = field(default_factory=lambda: [0, 0])
    files: list[int] = field(default_factory=lambda: [0, 0])
    orphan_leaks: int = 0
    cross_thread: int = 0
    cross_project: int = 0
    order_violations: int = 0
    missed: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        rate = lambda kt: round(kt[0] / kt[1], 4) if kt[1] else None  # noqa: E731
        return {"contexts": self.contexts,
                "constraint_retention": rate(self.constraints), "constraints": self.constraints[1],
                "key_fact_retention": rate(self.facts), "key_fact_questions": self.facts[1],
                "error_code_retention": rate(self.errors), "error_code_questions": self.errors[1],
                "decision_retention": rate(self.decisions), "decisions": self.decisions[1],
                "modified_file_retention": rate(self.files), "modified_files": self.files[1],
                "orphan_leakage": self.orphan_leaks, "cross_thread_false_recall": self.cross_thread,
                "cross_project_false_recall": self.cross_project, "order_violations": self.order_violations,
                "missed": self.missed[:20], "violations": self.violations[:20]}  # fmt: skip


def _count(pair: list[int], kept: bool) -> None:
    pair[0] += kept
    pair[1] += 1


def decision_shown(text: str, marker: str, decision: str) -> bool:
    """The action is there, under a heading (or on a line) that says how it was decided."""
    lines = text.split("\n")
    word = "denied" if decision == "denied" else "granted"
    for i, line in enumerate(lines):
        if marker not in line:
            continue
        if decision in line.lower() or word in line.lower():
            return True
        heading = next((h for h in reversed(lines[:i]) if h.rstrip().endswith(":")), "")
        if word in heading.lower():
            return True
    return False


@dataclass
class Positions:
    """Where each conversation item of a thread sits in its event order."""

    texts: dict[str, list[int]] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    results: dict[str, int] = field(default_factory=dict)

    def add(self, event: dict[str, Any], position: int) -> None:
        p = event["payload"]
        if event["kind"] == "message":
            self.texts.setdefault(p["text"], []).append(position)
        elif event["kind"] == "tool_call":
            self.calls.setdefault(p["call_id"], position)
        elif event["kind"] == "tool_result":
            self.results.setdefault(p["call_id"], position)


def conversation(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation messages: everything but system context and the memory data block."""
    return [m for m in messages if m["role"] != "system" and not (m["role"] == "user" and
            str(m.get("content") or "").startswith(MEMORY_HEADER))]  # fmt: skip


def order_violations(messages: list[dict[str, Any]], positions: Positions, question: str) -> list[str]:
    """Out of event-time order, the newest user message not last, a call without its
    result or a result without its call."""
    conv = conversation(messages)
    found: list[str] = []
    last = -1
    for i, m in enumerate(conv):
        if m.get("tool_calls"):
            ids = [c["id"] for c in m["tool_calls"]]
            follow = [x.get("tool_call_id") for x in conv[i + 1 : i + 1 + len(ids)]]
            if sorted(ids) != sorted(f for f in follow if f):
                found.append(f"call {ids} without its result right after it")
            candidates = [positions.calls.get(c, -1) for c in ids]
        elif m["role"] == "tool":
            if not i or m["tool_call_id"] not in [c["id"] for x in conv[max(0, i - 8) : i]
                                                  for c in x.get("tool_calls", ())]:  # fmt: skip
                found.append(f"result {m['tool_call_id']} without its call")
            candidates = [positions.results.get(m["tool_call_id"], positions.calls.get(m["tool_call_id"], -1))]
        else:
            candidates = positions.texts.get(m.get("content") or "", [-1])
        later = [c for c in candidates if c >= last]
        if not later or min(later) < 0:
            found.append(f"message {i} ({m['role']}) out of event-time order")
        else:
            last = min(later)
    if not conv or conv[-1]["role"] != "user" or conv[-1].get("content") != question:
        found.append("the newest user message is not last")
    return found


@dataclass
class Bench:
    service: EmbeddedService
    corpus: Corpus
    tallies: dict[int, Tally] = field(default_factory=lambda: {b: Tally() for b in BUDGETS})
    read_changes: int = 0
    reads_compared: int = 0
    not_folded: int = 0
    questions: int = 0

    def measure(self, s: Session, q: Question, budget: int, ctx: dict[str, Any], positions: Positions) -> None:
        t = self.tallies[budget]
        text = text_of(ctx["messages"])
        t.contexts += 1
        for c in s.constraints:
            _count(t.constraints, c in text)
        for d in s.decisions:
            _count(t.decisions, decision_shown(text, d.marker, d.decision))
        for f in dict.fromkeys(s.files):
            _count(t.files, f in text)
        kept = q.answer in text
        _count(t.facts if q.kind == "fact" else t.errors, kept)
        if not kept:
            t.missed.append(f"{s.thread_id} {q.kind} {q.answer!r} ({q.event_id})")
        t.orphan_leaks += sum(o in text for o in s.orphans)
        own = set(s.values)
        t.cross_thread += sum(v in text for v in self.corpus.decoys[s.project] if v not in own)
        t.cross_project += sum(v in text for p, vs in self.corpus.decoys.items() if p != s.project for v in vs)
        found = order_violations(ctx["messages"], positions, q.text)
        t.order_violations += len(found)
        t.violations += [f"{s.thread_id}@{budget}: {v}" for v in found]

    def ask(self, s: Session, q: Question, n: int, positions: Positions, rng: random.Random, last: bool) -> None:
        """Publish the question, measure its contexts; after a session's ``last`` question,
        request them all again in another order (and one with a query) and compare."""
        at = self._last_time(s) + timedelta(minutes=5 * n)
        events = []
        if n > 1:  # the agent answered the previous question and did a little work
            events.append(event_bytes(s.thread_id, s.project, 2 * n - 2, "message",
                                      {"role": "assistant", "text": "Here is what I found earlier."}, at))  # fmt: skip
        events.append(event_bytes(s.thread_id, s.project, 2 * n - 1, "message", {"role": "user", "text": q.text},
                                  at + timedelta(seconds=30)))  # fmt: skip
        for k, raw in enumerate(events):  # after every generated event, in publishing order
            positions.add(orjson.loads(raw), 10**7 + 2 * n + k)
        self.service.publish(b"\n".join(events))
        self.service.catch_up()
        state = self.service.state(s.thread_id)
        self.questions += 1
        if not _folded(q.event_id, state):
            self.not_folded += 1
            return
        first = {b: orjson.dumps(self.service.context(s.thread_id, b)) for b in (*BUDGETS, *(EXTRA_BUDGETS * last))}
        for b in BUDGETS:
            self.measure(s, q, b, orjson.loads(first[b]), positions)
        if not last:
            return
        again = list(first)
        rng.shuffle(again)
        self.service.context(s.thread_id, 4_000, query=q.answer)  # an explicit query in between
        for b in again:
            self.reads_compared += 1
            self.read_changes += orjson.dumps(self.service.context(s.thread_id, b)) != first[b]

    def _last_time(self, s: Session) -> datetime:
        return max(datetime.fromisoformat(e["ts"].replace("Z", "+00:00")) for e in s.events) + timedelta(hours=1)


def _seq(event_id: str) -> int:
    return int(event_id.rsplit(".", 1)[1])


def _folded(answer_id: str, state: dict[str, Any]) -> bool:
    """Setup check, not a measurement: the answer is out of the raw window (folded into the
    summary, or before the current window's start)."""
    marks = [m for m in (state.get("summary_covers_through"), state.get("window_started_by")) if m]
    return any(_seq(answer_id) <= _seq(m) for m in marks if m.rsplit(".", 1)[1].isdigit())


def positions_of(s: Session) -> Positions:
    p = Positions()
    for i, e in enumerate(x for x in s.events if x["thread_id"] == s.thread_id):
        p.add(e, i)
    return p


def run_fidelity(n_sessions: int = 20, min_events: int = 300, max_events: int = 3_000, seed: int = 14,
                 on_progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:  # fmt: skip
    """Generate, publish, ask, measure; the figures per budget."""
    data = corpus(n_sessions, min_events, max_events, seed)
    update = on_progress or (lambda _d, _t: None)
    total = len(data.events) + sum(len(s.questions) for s in data.sessions) * 200
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="agentlog-fidelity-") as tmp:
        service = EmbeddedService(Settings(data_dir=Path(tmp)))
        try:
            for i in range(0, len(data.events), CHUNK):
                service.publish(b"\n".join(data.events[i : i + CHUNK]))
                update(min(i + CHUNK, len(data.events)) // 2, total)
            service.catch_up(lambda d, t: update(len(data.events) // 2 + d * len(data.events) // max(2 * t, 1), total))
            bench = Bench(service, data)
            done = len(data.events)
            for s in data.sessions:
                positions = positions_of(s)
                for n, q in enumerate(s.questions, 1):
                    bench.ask(s, q, n, positions, rng, last=n == len(s.questions))
                    done += 200
                    update(done, total)
        finally:
            service.close()
    return {
        "sessions": len(data.sessions),
        "events": len(data.events),
        "main_thread_events": [sum(e["thread_id"] == s.thread_id for e in s.events) for s in data.sessions],
        "questions": bench.questions, "questions_not_folded": bench.not_folded,
        "reads_compared": bench.reads_compared, "changes_caused_by_reads": bench.read_changes,
        "budgets": {str(b): t.summary() for b, t in bench.tallies.items()},
    }  # fmt: skip


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def print_report(r: dict[str, Any]) -> None:
    sizes = r["main_thread_events"]
    print(f"fidelity: {r['sessions']} sessions ({min(sizes):,}..{max(sizes):,} events in the main thread, "
          f"{r['events']:,} events with sub-agent and decoy threads), {r['questions']} questions about folded-away "
          f"facts and error codes ({r['questions_not_folded']} not folded: skipped), no explicit query", flush=True)  # fmt: skip
    for b, t in r["budgets"].items():
        print(f"  budget {int(b):>5,}: constraints {_pct(t['constraint_retention'])} ({t['constraints']}), "
              f"key facts {_pct(t['key_fact_retention'])} ({t['key_fact_questions']}), error codes "
              f"{_pct(t['error_code_retention'])} ({t['error_code_questions']}), decisions "
              f"{_pct(t['decision_retention'])} ({t['decisions']}), modified files {_pct(t['modified_file_retention'])} | "
              f"orphan leakage {t['orphan_leakage']}, false recall cross-thread {t['cross_thread_false_recall']} "
              f"cross-project {t['cross_project_false_recall']}, order violations {t['order_violations']}", flush=True)  # fmt: skip
    print(f"  context requests changed by earlier ones: {r['changes_caused_by_reads']} of {r['reads_compared']} "
          f"compared byte for byte", flush=True)  # fmt: skip


def run(as_json: bool = False) -> int:
    from agentlog.streams.cli.render import print_json, progress  # noqa: PLC0415

    with progress("fidelity") as update:
        result = run_fidelity(on_progress=update)
    if as_json:
        print_json(result)
    else:
        print_report(result)
    return 0


__all__ = ["BUDGETS", "decision_shown", "order_violations", "print_report", "run", "run_fidelity", "text_of"]
