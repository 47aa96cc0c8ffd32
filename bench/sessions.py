"""Generated agent sessions for the fidelity benchmark: seeded, deterministic, realistic
traffic (messages, tool pairs with long logs, plans, tasks, files, approvals, errors,
sub-agents, window switches) with planted items whose survival the benchmark measures.

Every planted value is unique in the whole corpus (it carries a random suffix), so its
appearance in a context can only come from the event that planted it. What other threads
and projects plant (facts on the same subjects, with other values) are decoys: one of them
in a context is false recall.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import orjson

START = datetime(2026, 10, 1, 8, 0, 0, tzinfo=timezone.utc)
COMPONENTS = ("billing", "checkout", "search", "auth", "inventory", "notifications", "gateway", "scheduler")
TOOLS = ("bash", "read_file", "grep", "pytest", "edit_file")
WORDS = ("amber", "basalt", "cobalt", "delta", "ember", "fjord", "garnet", "harbor", "indigo", "juniper",
         "kelp", "lumen", "marble", "nectar", "onyx", "prism", "quartz", "raven", "sierra", "tundra")  # fmt: skip


def _tag(rng: random.Random) -> str:
    return "".join(rng.choice("abcdefghjkmnpqrstuvwxyz23456789") for _ in range(4))


# A key fact: (subject, how a user states it, how a user asks for it later, a value maker).
FACTS: tuple[tuple[str, tuple[str, ...], tuple[str, ...], Any], ...] = (
    ("deploy target", ("For this rollout the deploy target is {v}, nothing else.",
                       "Heads up: deploy target is {v} this time."),
     ("which deploy target did I give you?", "remind me, what was the deploy target?"),
     lambda r: f"{r.choice(['eu-west', 'us-east', 'ap-south', 'sa-east'])}-{r.randrange(1, 9)}{_tag(r)}"),
    ("artifacts bucket", ("Upload build outputs to the artifacts bucket {v}.",
                          "The artifacts bucket is called {v}, use that one."),
     ("what was the name of the artifacts bucket I mentioned?", "which artifacts bucket should the build go to?"),
     lambda r: f"acme-{r.choice(WORDS)}-artifacts-{_tag(r)}"),
    ("release branch", ("Cut the fix from release branch {v}.", "Use {v} as the release branch."),
     ("which release branch did I say to use?", "what release branch was it again?"),
     lambda r: f"release/{r.randrange(20, 27)}.{r.randrange(1, 12)}-{_tag(r)}"),
    ("on-call", ("If anything breaks, page {v}, they are on-call this week.",
                 "{v} is on-call, ping them before risky steps."),
     ("who did I say is on-call?", "who is on-call again, the person I told you about?"),
     lambda r: f"{r.choice(['Priya', 'Tomas', 'Aiko', 'Lena', 'Omar', 'Grace'])} {r.choice(WORDS).title()}{_tag(r)}"),
    ("staging database host", ("The staging database host is {v}.", "Point the tests at staging database host {v}."),
     ("what staging database host did I give you?", "which staging database host should the tests use?"),
     lambda r: f"db-{r.choice(WORDS)}-{_tag(r)}.staging.internal"),
    ("feature flag", ("Gate the new path behind the feature flag {v}.", "Feature flag for this is {v}."),
     ("what feature flag did I ask you to gate it behind?", "which feature flag was it?"),
     lambda r: f"ff_{r.choice(WORDS)}_{r.choice(WORDS)}_{_tag(r)}"),
    ("ticket", ("This is tracked in ticket {v}.", "Reference ticket {v} in the commit message."),
     ("which ticket is this tracked in?", "what ticket number did I give you for the commit message?"),
     lambda r: f"OPS-{r.randrange(1000, 9999)}{_tag(r).upper()}"),
    ("API version", ("Pin the client to API version {v}.", "The partner API version we must target is {v}."),
     ("which API version did I tell you to pin the client to?", "what partner API version must we target?"),
     lambda r: f"v{r.randrange(2, 9)}.{r.randrange(0, 30)}-{_tag(r)}"),
)  # fmt: skip

# An error code: (step, the command that fails, how a user asks for it).
STEPS: tuple[tuple[str, str, str], ...] = (
    ("cache", "make cache-warm", "what error code did the cache step fail with?"),
    ("migration", "alembic upgrade head", "which error code did the migration fail with?"),
    ("docker build", "docker build -t app .", "what was the error code when the docker build failed?"),
    ("integration tests", "pytest tests/integration -x", "what error code did the integration tests fail with?"),
    ("certificate renewal", "certbot renew --dry-run", "which error code came out of the certificate renewal?"),
    ("schema check", "make schema-check", "what error code did the schema check report?"),
)  # fmt: skip

CONSTRAINTS = (
    "never push directly to {c} main, open a pull request", "do not touch the {c} database schema without asking",
    "keep the public {c} API backwards compatible", "no new dependencies in {c} without approval",
    "all {c} changes need a test that fails before the fix", "do not restart {c} production during business hours",
)  # fmt: skip
ACTIONS = ("restart the {c} production pods", "drop the {c} staging table", "force-push the {c} hotfix branch",
           "rotate the {c} signing key", "scale {c} workers to zero", "purge the {c} CDN cache")  # fmt: skip


@dataclass
class Question:
    kind: str  # "fact" or "error"
    text: str
    answer: str
    event_id: str  # the event that planted the answer


@dataclass
class Decision:
    marker: str  # the action text, unique
    decision: str  # approved / denied


@dataclass
class Session:
    thread_id: str
    project: str
    events: list[dict[str, Any]] = field(default_factory=list)
    """The main thread's events, then its sub-agents' threads'."""
    constraints: list[str] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)
    values: list[str] = field(default_factory=list)
    """Every fact and error value planted in this session's own threads."""
    questions: list[Question] = field(default_factory=list)
    foreign_children: list[str] = field(default_factory=list)
    """Values planted in a sub-agent thread of another project: recall must not cross into it."""


class Writer:
    """One thread's events, with increasing event time and per-turn ids."""

    def __init__(self, thread_id: str, project: str, start: datetime, out: list[dict[str, Any]]) -> None:
        self.thread_id, self.project, self.now, self.n, self.turn, self.out = thread_id, project, start, 0, 0, out

    def emit(self, kind: str, payload: dict[str, Any], seconds: float = 3.0) -> str:
        self.now += timedelta(seconds=seconds)
        self.n += 1
        event_id = f"{self.thread_id}.{self.n:05d}"
        self.out.append({"event_id": event_id, "thread_id": self.thread_id, "kind": kind,
                         "ts": self.now.isoformat().replace("+00:00", "Z"), "project": self.project,
                         "turn_id": f"{self.thread_id}.t{self.turn}", "payload": payload})  # fmt: skip
        return event_id

    def end_turn(self) -> None:
        self.emit("turn_end", {}, 1.0)
        self.turn += 1


def long_log(rng: random.Random, command: str, lines: int, error_line: str | None = None) -> str:
    """A build/test log of ``lines`` lines; ``error_line`` buried at a random place in it."""
    out = [f"$ {command}", f"starting {command.split()[0]} (pid {rng.randrange(1000, 60000)})"]
    for i in range(lines):
        out.append(rng.choice([
            f"[{i:04d}] compiling module {rng.choice(COMPONENTS)}/{rng.choice(WORDS)}.py",
            f"[{i:04d}] fetched layer sha256:{rng.getrandbits(64):016x} ({rng.randrange(1, 900)} kB)",
            f"[{i:04d}] test_{rng.choice(WORDS)}_{rng.choice(WORDS)} PASSED",
            f"[{i:04d}] warming {rng.choice(COMPONENTS)} shard {rng.randrange(64)}",
            f"[{i:04d}] INFO request id={rng.getrandbits(32):08x} took {rng.randrange(1, 500)} ms",
        ]))  # fmt: skip
    if error_line is not None:
        out.insert(rng.randrange(len(out) // 3, len(out)), error_line)
    out.append("done" if error_line is None else f"{command.split()[0]} exited with status 1")
    return "\n".join(out)


class Generator:
    """Builds one session's main thread turn by turn, planting items at chosen positions."""

    def __init__(self, rng: random.Random, session: Session, length: int, start: datetime) -> None:
        self.rng, self.s, self.length = rng, session, length
        self.w = Writer(session.thread_id, session.project, start, session.events)
        self.component = rng.choice(COMPONENTS)
        self.calls = 0
        self.plan: list[dict[str, str]] = []
        # Each subject and step at most once: a question has one right answer.
        self.facts = rng.sample(FACTS, len(FACTS))
        self.steps = rng.sample(STEPS, len(STEPS))

    def main_count(self) -> int:
        return self.w.n

    # -- ordinary traffic ------------------------------------------------------------
    def tool_pair(self, tool: str | None = None, command: str | None = None, output: str | None = None,
                  status: str = "ok", exit_code: int | None = None) -> tuple[str, str]:  # fmt: skip
        rng = self.rng
        tool = tool or rng.choice(TOOLS)
        self.calls += 1
        call_id = f"call_{self.calls:05d}"
        if command is None:
            path = f"src/{self.component}/{rng.choice(WORDS)}.py"
            args: dict[str, Any] = {"bash": {"cmd": f"ls src/{self.component}"}, "read_file": {"path": path},
                                    "grep": {"pattern": rng.choice(WORDS), "path": f"src/{self.component}"},
                                    "pytest": {"args": f"tests/{self.component} -q"},
                                    "edit_file": {"path": path, "diff": "@@ -1,3 +1,4 @@"}}[tool]  # fmt: skip
        else:
            args = {"cmd": command}
        if output is None:
            if rng.random() < 0.12:
                output = long_log(rng, str(args.get("cmd") or args.get("args") or tool), rng.randrange(80, 400))
            else:
                output = " ".join(rng.choice(WORDS) for _ in range(rng.randrange(3, 60)))
        call = self.w.emit("tool_call", {"call_id": call_id, "tool_name": tool, "arguments": args})
        if rng.random() < 0.05:
            self.w.emit("tool_progress", {"call_id": call_id, "text": "still running"})
        result = {"call_id": call_id, "output": output, "status": status}
        if exit_code is not None:
            result["exit_code"] = exit_code
        res = self.w.emit("tool_result", result, rng.uniform(1, 20))
        if tool == "edit_file" and command is None:
            path = str(args["path"])
            self.w.emit("file_change", {"path": path, "change": "modified"})
            self.s.files.append(path)
        return call, res

    def chatter(self) -> None:
        """One ordinary turn: a user request, the agent's reasoning, a few tool pairs."""
        rng, c = self.rng, self.component
        if rng.random() < 0.5:
            self.w.emit("message", {"role": "user", "text": rng.choice([
                f"Can you look at the failing {c} tests?", f"ok, now check the {rng.choice(WORDS)} module",
                "go ahead", f"what does the {c} handler do with retries?", "looks good, continue",
                f"please also run the linter on {c}",
            ])})  # fmt: skip
        self.w.emit("message", {"role": "assistant", "text": rng.choice([
            f"Let me inspect the {c} code first.", f"I think the {rng.choice(WORDS)} helper is the culprit.",
            "Running the tests to see where we stand.", f"The {c} retry loop looks suspicious; checking.",
            "That passed. Moving on to the next step.",
        ])})  # fmt: skip
        if rng.random() < 0.15:
            self.near_miss()
        for _ in range(rng.randrange(1, 4)):
            self.tool_pair()
        r = rng.random()
        if r < 0.08:
            self.plan_update()
        elif r < 0.12:
            self.w.emit("task", {"task_id": f"task-{rng.randrange(6)}", "text": f"{c} follow-up",
                                 "status": rng.choice(["pending", "running", "done"])})  # fmt: skip
        elif r < 0.15:
            self.w.emit("error", {"message": f"transient network error talking to {rng.choice(WORDS)} mirror",
                                  "code": rng.choice(["ECONNRESET", "ETIMEDOUT"])})  # fmt: skip
        elif r < 0.17:
            self.w.emit("approval_request", {"approval_id": f"pend-{self.w.n}", "action": f"rerun {c} canary"})
        self.w.end_turn()

    def near_miss(self) -> None:
        """Talk about a fact's subject or a step's failure without the planted value: what a
        search for the question also finds."""
        rng = self.rng
        subject = rng.choice(FACTS)[0]
        step, command, _ = rng.choice(STEPS)
        if rng.random() < 0.5:
            self.w.emit("message", {"role": "assistant", "text": rng.choice([
                f"I'll double-check the {subject} before the next step.", f"The {subject} is not in the config file.",
                f"Looking for where the {subject} is read.", f"The {step} step error earlier was a flake, retrying.",
            ])})  # fmt: skip
        else:
            self.tool_pair("bash", command, rng.choice([
                f"{step}: 2 warnings, 0 errors", f"{step} failed: retry 1 of 3 ... ok",
                long_log(rng, command, rng.randrange(20, 120), f"WARN {step} slow: {rng.randrange(2, 9)}s"),
            ]))  # fmt: skip

    def plan_update(self) -> None:
        rng = self.rng
        if not self.plan or rng.random() < 0.3:
            self.plan.append({"step_id": f"s{len(self.plan) + 1}", "text": f"{rng.choice(WORDS)} {self.component}",
                              "status": "pending"})  # fmt: skip
        step = rng.choice(self.plan)
        step["status"] = {"pending": "running", "running": "done"}.get(step["status"], step["status"])
        self.w.emit("plan", {"steps": [dict(s) for s in self.plan]})

    # -- planted items ------------------------------------------------------------------
    def plant_fact(self, ask: bool) -> None:
        subject, states, asks, make = self.facts.pop()
        value = make(self.rng)
        eid = self.w.emit("message", {"role": "user", "text": self.rng.choice(states).format(v=value)})
        self.w.emit("message", {"role": "assistant", "text": f"Noted the {subject}."})
        self.s.values.append(value)
        if ask:
            self.s.questions.append(Question("fact", self.rng.choice(asks), value, eid))

    def plant_error(self, ask: bool) -> None:
        rng = self.rng
        step, command, question = self.steps.pop()
        code = f"ERR_{step.upper().replace(' ', '_')}_{rng.choice(WORDS).upper()}_{_tag(rng).upper()}"
        if rng.random() < 0.5:
            line = f"ERROR {step} failed: {code} ({rng.choice(WORDS)} unavailable)"
            _, eid = self.tool_pair("bash", command, long_log(rng, command, rng.randrange(60, 500), line),
                                    status="error", exit_code=1)  # fmt: skip
        else:
            self.tool_pair("bash", command, f"{step} aborted", status="error", exit_code=2)
            eid = self.w.emit("error", {"message": f"{step} failed: {rng.choice(WORDS)} lock not acquired", "code": code})
        self.s.values.append(code)
        if ask:
            self.s.questions.append(Question("error", question, code, eid))

    def plant_constraint(self) -> None:
        text = self.rng.choice(CONSTRAINTS).format(c=self.component) + f" (rule {_tag(self.rng)})"
        self.w.emit("constraint", {"constraint_id": f"k{len(self.s.constraints)}", "text": text})
        self.s.constraints.append(text)

    def plant_decision(self) -> None:
        action = self.rng.choice(ACTIONS).format(c=self.component) + f" ({_tag(self.rng)})"
        approval_id = f"appr-{len(self.s.decisions)}"
        decision = self.rng.choice(["approved", "denied"])
        self.w.emit("approval_request", {"approval_id": approval_id, "action": action})
        self.tool_pair()
        self.w.emit("approval_decision", {"approval_id": approval_id, "decision": decision, "by": "user"})
        self.s.decisions.append(Decision(action, decision))

    def plant_orphan(self) -> None:
        marker = f"ORPHAN-{_tag(self.rng).upper()}{_tag(self.rng).upper()}"
        # Worded like the questions, so a search for them would find it.
        self.w.emit("tool_result", {"call_id": f"ghost_{marker}", "status": "error", "output":
                                    f"nobody asked for this: deploy target error code {marker}"})  # fmt: skip
        self.s.orphans.append(marker)

    def spawn(self, child_thread: str, child_project: str, values: list[str]) -> None:
        """A sub-agent with its own thread (``child_project`` may differ: then its values
        are foreign to this session)."""
        agent = f"sub-{child_thread.rsplit('-', 1)[-1]}"
        self.w.emit("agent_spawn", {"child_agent_id": agent, "role": "researcher", "child_thread_id": child_thread})
        child = Writer(child_thread, child_project, self.w.now, self.s.events)
        child.emit("goal", {"text": f"investigate {self.component} flakiness"})
        for _ in range(self.rng.randrange(10, 30)):
            child.emit("message", {"role": "assistant", "text": f"checked {self.rng.choice(WORDS)} logs"})
        for v in values:
            child.emit("message", {"role": "user", "text": f"the deploy target is {v} and the error code is {v}"})
        self.w.emit("agent_exit", {"child_agent_id": agent, "status": "done",
                                   "summary": f"{self.component} flakiness comes from a shared fixture"})  # fmt: skip


def session(index: int, length: int, project: str, rng: random.Random) -> Session:
    """One session of about ``length`` main-thread events with its planted items."""
    s = Session(f"fid-{index:02d}", project)
    g = Generator(rng, s, length, START + timedelta(days=index))
    g.w.emit("goal", {"text": f"Fix the flaky {g.component} pipeline and ship the fix"})
    # What to plant, at which share of the thread. Asked facts and errors sit in its first
    # half (the first tenth for one of each): the fold has long taken them when asked.
    plan: list[tuple[float, str]] = [(rng.uniform(0.0, 0.1), "fact?"), (rng.uniform(0.0, 0.1), "error?"),
                                     (rng.uniform(0.1, 0.5), "fact?"), (rng.uniform(0.1, 0.5), "error?")]  # fmt: skip
    plan += [(rng.uniform(0.0, 0.9), "fact") for _ in range(rng.randrange(1, 4))]
    plan += [(rng.uniform(0.0, 0.9), "error") for _ in range(rng.randrange(1, 3))]
    plan += [(rng.uniform(0.0, 0.9), "constraint") for _ in range(rng.randrange(2, 6))]
    plan += [(rng.uniform(0.0, 0.9), "decision") for _ in range(rng.randrange(2, 5))]
    plan += [(rng.uniform(0.0, 0.95), "orphan") for _ in range(rng.randrange(1, 4))]
    plan += [(rng.uniform(0.2, 0.8), "spawn")]
    if index % 3 == 0:
        plan += [(rng.uniform(0.3, 0.7), "switch")]
    if index % 5 == 2:  # a sub-agent thread that lives in another project
        plan += [(rng.uniform(0.2, 0.8), "foreign")]
    plan.sort()
    for share, what in plan:
        while g.main_count() < share * length:
            g.chatter()
        if what.startswith("fact"):
            g.plant_fact(what.endswith("?"))
        elif what.startswith("error"):
            g.plant_error(what.endswith("?"))
        elif what == "constraint":
            g.plant_constraint()
        elif what == "decision":
            g.plant_decision()
        elif what == "orphan":
            g.plant_orphan()
        elif what == "spawn":
            g.spawn(f"{s.thread_id}-child", project, [])
        elif what == "foreign":
            values = [f"FOREIGN-{_tag(rng).upper()}", f"eu-west-9{_tag(rng)}"]
            s.foreign_children += values
            g.spawn(f"{s.thread_id}-xchild", f"{project}-vendor", values)
        elif what == "switch":
            g.w.emit("window_switch", {"new_window_id": f"w{g.w.n}", "reason": "context full"})
    while g.main_count() < length:
        g.chatter()
    return s


def decoy_thread(thread_id: str, project: str, rng: random.Random, start: datetime,
                 out: list[dict[str, Any]]) -> list[str]:  # fmt: skip
    """Another task (same project or not) stating every fact subject and failing every
    step, with its own values: decoys for every session's questions."""
    w = Writer(thread_id, project, start, out)
    w.emit("goal", {"text": "Fix the flaky pipeline and ship the fix"})
    values = []
    for subject, states, _, make in FACTS:
        v = make(rng)
        values.append(v)
        w.emit("message", {"role": "user", "text": rng.choice(states).format(v=v)})
        w.emit("message", {"role": "assistant", "text": f"Noted the {subject}."})
    for step, command, _ in STEPS:
        code = f"ERR_{step.upper().replace(' ', '_')}_{rng.choice(WORDS).upper()}_{_tag(rng).upper()}"
        values.append(code)
        w.emit("tool_call", {"call_id": f"d{w.n}", "tool_name": "bash", "arguments": {"cmd": command}})
        w.emit("tool_result", {"call_id": f"d{w.n - 1}", "status": "error", "exit_code": 1,
                               "output": f"ERROR {step} failed: {code}"})  # fmt: skip
        w.emit("error", {"message": f"{step} failed", "code": code})
    w.end_turn()
    return values


@dataclass
class Corpus:
    sessions: list[Session]
    decoys: dict[str, list[str]]
    """Decoy values by project (the decoy threads' and every session's own)."""
    events: list[bytes]


def corpus(n_sessions: int = 20, min_events: int = 300, max_events: int = 3000, seed: int = 14,
           projects: int = 4) -> Corpus:  # fmt: skip
    """``n_sessions`` sessions of ``min_events``..``max_events`` main-thread events over
    ``projects`` projects (the first one the shortest, the last the longest), plus one
    decoy thread per project."""
    rng = random.Random(seed)
    sessions: list[Session] = []
    decoys: dict[str, list[str]] = {}
    events: list[dict[str, Any]] = []
    for p in range(projects):
        project = f"team-{p}"
        decoys[project] = decoy_thread(f"decoy-{p}", project, rng, START - timedelta(days=30), events)
        decoys.setdefault(f"{project}-vendor", [])
    for i in range(n_sessions):
        length = min_events + (max_events - min_events) * i // max(1, n_sessions - 1)
        s = session(i, length, f"team-{i % projects}", rng)
        sessions.append(s)
        events += s.events
        decoys[s.project] = decoys[s.project] + s.values
        decoys[f"{s.project}-vendor"] += s.foreign_children
    return Corpus(sessions, decoys, [orjson.dumps(e) for e in events])


def event_bytes(thread_id: str, project: str, n: int, kind: str, payload: dict[str, Any], at: datetime) -> bytes:
    """One more event for a thread (the benchmark's questions), ``n`` its sequence number."""
    return orjson.dumps({"event_id": f"{thread_id}.q{n:03d}", "thread_id": thread_id, "kind": kind,
                         "ts": at.isoformat().replace("+00:00", "Z"), "project": project, "payload": payload})  # fmt: skip


__all__ = ["Corpus", "Decision", "Question", "Session", "corpus", "event_bytes", "long_log"]
