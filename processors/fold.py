"""Compaction as a stream step (SPEC §5): the thread processor folds the oldest whole
units of a thread's raw window into the rolling handoff record once the window outgrows
its token budget, from where the last fold ended, so nothing is ever skipped.

Pure and deterministic: event content and order only (no clock, no I/O, token counts
estimated from lengths), so a replay or ``rebuild`` lands on the same summary.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import ValidationError

from agentlog.processors.redaction import redact
from agentlog.processors.truncation import clip_at_word
from agentlog.processors.work_index import WorkIndex
from agentlog.schemas.events import Envelope
from agentlog.schemas.handoff import HandoffRecord
from agentlog.schemas.snapshot import PairingState, RawWindow, WindowEntry
from agentlog.schemas.state import WorkingState

DEFAULT_WINDOW_TOKENS = 6000
MAX_ENTRIES = 300
"""A raw window of more events than this folds too (state-only events cost no tokens but
are still read): it stays under what context assembly reads (``WINDOW_RECORDS``)."""
HARD_ENTRIES = 380
"""Past this many events after the newest user message, the fold may take it too: under
what assembly reads (``WINDOW_RECORDS``, 400), so every raw event is read."""
OUTPUT_CHARS = 4000
"""A tool output counts at most this many characters: what assembly shows of one at most."""
MAX_OBSERVATIONS = 60
KEEP_FIRST = 10
"""When only user statements and failures are left to drop, the first ones stay: a
thread's opening turns carry its key facts (deploy target, first error)."""
MAX_HYPOTHESES = 30
MAX_IDS = 100
LINE_CHARS = 200
DIGEST_CHARS = 800
USER_CHARS = 400
DIGEST_MIDDLE_LINES = 6
_HINT_WORD = re.compile(
    r"error|fail|exception|traceback|fatal|denied|refused|timed? ?out|not found|panic|abort|warning"
    r"|exit (?:code|status)"
)
"""Words that mark a line as an error, matched in the text with its ASCII letters lowered
(``_ASCII_LOWER``: the same length, so a match's position is the text's). The same words
under ``(?i)`` cost ten times as much (about 180 us for a 600-character output, most of
an agent step that ends in a tool result): case-insensitive alternation is checked
letter by letter at every position, literal first letters are skipped to in C."""
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_HINT_CODE = re.compile(r"[A-Z](?<!\w[A-Z])(?:[A-Z0-9]*_[A-Z0-9_]+|[A-Z]{0,3}[0-9]{3,})\b")
"""An error code starting a word (``ERR_CACHE_MISS``, ``E1234``): the capital comes first,
the word boundary before it is looked back for, so the scan skips to capitals in C."""
_GUESS = re.compile(
    r"(?i)\b(?:maybe|probably|i think|i believe|i suspect|suspect(?:s|ed)?|might|could be|may be|hypothes[ie]s"
    r"|guess(?:ing)?|(?:un)?likely|perhaps|possibly|presumably|my theory|not sure)\b"
)
"""Words that mark a sentence as the model's guess rather than a report of what happened."""
_GUESS_HINT = re.compile(
    r"maybe|probabl|think|believe|suspect|might|could be|may be|hypothes|guess|likely|perhaps|possibl|presumabl"
    r"|theory|not sure"
)
"""A cheap first look, on the lower-cased text (``_GUESS``'s case-insensitive word
boundaries cost several times more): most assistant text holds none of these."""
_SENTENCE = re.compile(r"(?<=[.!?])\s+| / ")
_FINISHED = frozenset({"done", "ok", "success", "succeeded", "completed", "complete", "finished", "exited"})
"""``agent_exit`` statuses that say the sub-agent's job got done (no status counts too)."""
MAX_DONE = 60
SCAN_CHARS = 65536
"""How much of an output the digest scans for error lines (its last line is always kept)."""
_PROTECTED = frozenset({"user", "failure", "error"})


def _tokens(chars: int) -> int:
    return 4 + (chars + 3) // 4  # about 4 characters a token, plus the message's overhead


HintFinder = Callable[[str, str, int], "tuple[int, int] | None"]
"""(text, its ASCII-lowered copy, position) -> (start, end) of the next error hint, or None."""


def digest(text: str, next_hint: HintFinder | None = None) -> str:
    """An output's first and last lines and the lines between that look like errors
    (found by ``next_hint``, ``_next_hint`` unless given)."""
    next_hint = next_hint or _next_hint
    body = text.strip()
    if not body:
        return ""
    if "\n" not in body:  # one line is its own first and last line: nothing to pick between
        return clip_at_word(clip_at_word(body, LINE_CHARS), DIGEST_CHARS)
    first, last = body.split("\n", 1)[0].strip(), body.rsplit("\n", 1)[-1].strip()
    picked, pos, scan, tries = [first], 0, body[:SCAN_CHARS], 4 * DIGEST_MIDDLE_LINES
    lowered = scan.lower() if scan.isascii() else scan.translate(_ASCII_LOWER)
    while len(picked) <= DIGEST_MIDDLE_LINES and tries and (hint := next_hint(scan, lowered, pos)):
        tries -= 1  # repeated lines cost a look each: bounded
        start = scan.rfind("\n", 0, hint[0]) + 1
        end = scan.find("\n", hint[1])
        end = len(scan) if end < 0 else end
        line, pos = scan[start:end].strip(), end + 1
        if line not in picked and line != last:
            picked.append(line)
    if last not in picked:
        picked.append(last)
    return clip_at_word(" | ".join(clip_at_word(ln, LINE_CHARS) for ln in picked), DIGEST_CHARS)


def _next_hint(scan: str, lowered: str, pos: int) -> tuple[int, int] | None:
    """(start, end) of the first error word or code of ``scan`` at or after ``pos``."""
    found = [m.span() for m in (_HINT_WORD.search(lowered, pos), _HINT_CODE.search(scan, pos)) if m is not None]
    return min(found) if found else None


def guesses(text: str) -> str:
    """The sentences of ``text`` phrased as a guess ("probably", "I think", "might"...),
    joined; empty when it states none. Only these become hypotheses."""
    if not _GUESS_HINT.search(text.lower()) or not _GUESS.search(text):
        return ""
    return " ".join(s for s in _SENTENCE.split(text) if _GUESS.search(s))


def entry_of(event: Envelope, tool_name: str | None) -> WindowEntry:
    """What the window keeps of one event; ``tool_name`` is its call's, if known."""
    p: Any = event.payload
    e = WindowEntry(event_id=event.event_id, kind=event.kind, unit=event.event_id, repo_commit=event.repo_commit)
    if event.kind == "message":
        e.role, e.tokens = p.role, _tokens(len(p.text))
        e.text = _one_line(p.text)
        if p.role == "assistant":  # only a guess of the model's reaches the record
            e.text = guesses(e.text)
    elif event.kind == "tool_call":
        e.unit, e.tool_name, e.tokens = p.call_id, p.tool_name, _tokens(len(p.tool_name) + _json_chars(p.arguments))
    elif event.kind == "tool_result":
        e.unit, e.status, e.exit_code = p.call_id, p.status, p.exit_code
        e.tool_name = p.tool_name or tool_name
        e.tokens, e.text = _tokens(min(len(p.output), OUTPUT_CHARS)), digest(p.output)
    elif event.kind == "error":
        e.status = None if p.code is None else str(p.code)
        e.text = digest(p.message)
    elif event.kind == "agent_exit":  # a sub-agent that finished: maybe a job done
        e.status, e.tool_name = p.status, p.child_agent_id
        e.text = clip_at_word(" / ".join(ln.strip() for ln in (p.summary or "").splitlines() if ln.strip()), USER_CHARS)
    elif event.kind == "fact":  # its evidence says whether it is the model's inference or a fact
        value = p.value if isinstance(p.value, str) else orjson.dumps(p.value).decode()
        e.text, e.status = clip_at_word(f"{p.key} = {value}", USER_CHARS), p.evidence_type
    if e.text:
        e.text = redact(e.text)  # the record lives in the state and every later context
    return e


def _one_line(text: str) -> str:
    """The text's non-blank lines joined by `` / ``, at most ``USER_CHARS``."""
    if "\n" not in text:  # most messages: no lines to join
        return clip_at_word(text.strip(), USER_CHARS)
    text = text[: 4 * USER_CHARS]  # what is cut anyway is not split into lines first
    return clip_at_word(" / ".join(ln.strip() for ln in text.splitlines() if ln.strip()), USER_CHARS)


def _json_chars(args: dict[str, Any] | str) -> int:
    """About the length of the arguments as JSON: a string value counts by its length,
    without serialising it (a file's content, a patch: the large arguments)."""
    if isinstance(args, str):
        return len(args)
    n = 2
    for key, value in args.items():
        n += len(key) + 4 + (len(value) + 2 if type(value) is str else len(orjson.dumps(value)))
    return n


def track(window: RawWindow, entry: WindowEntry) -> None:
    window.entries.append(entry)
    window.tokens += entry.tokens


def drop_through(window: RawWindow, event_id: str) -> None:
    """A published ``compaction`` covers through ``event_id``: the window starts after it."""
    ids = [e.event_id for e in window.entries]
    if event_id in ids:
        cut = ids.index(event_id) + 1
        window.tokens -= sum(e.tokens for e in window.entries[:cut])
        del window.entries[:cut]


def is_stale(window: RawWindow, state: WorkingState, covers_through: str) -> bool:
    """Whether a published ``compaction`` covers less than the summary already does: its
    cover is neither the summary's nor in the raw window, so the fold went past it (an LLM
    record computed while the stream moved on). Applying it would lose what the fold
    took in since; the thread keeps its summary instead (a replay decides the same)."""
    if state.summary is None or covers_through == state.summary_covers_through:
        return False
    return all(e.event_id != covers_through for e in window.entries)


def splits_open_call(window: RawWindow, state: WorkingState, covers_through: str) -> bool:
    """Whether a published ``compaction``'s cover falls after a call still open (its result
    not come): folding there would take the call away from the result that comes later,
    which no context could then show. The fold never cuts there either; the record is
    not applied (a replay decides the same)."""
    for e in window.entries:
        if e.kind == "tool_call" and e.unit in state.pending_calls:
            return any(later.event_id == covers_through for later in window.entries)
        if e.event_id == covers_through:
            return False
    return False


@dataclass(slots=True)
class Memo:
    """What the last fold built, for the next one (a cache only: the result is the same
    without it).

    ``summary`` is the record the last fold set, in the canonical form of a dumped
    ``HandoffRecord``: while ``state.summary`` is that very dict, the next fold starts from
    it instead of validating it again. ``work`` indexes the thread's plan and tasks; built
    from the state at the first fold, then kept up to date by its owner
    (``WorkIndex.applied`` after each event)."""

    summary: dict[str, Any] | None = None
    work: WorkIndex | None = None


def fold_if_needed(window: RawWindow, state: WorkingState, pairing: PairingState, budget: int,
                   memo: Memo | None = None) -> int:  # fmt: skip
    """Fold the window's oldest whole units into ``state.summary`` when the window is
    over ``budget`` tokens (or ``MAX_ENTRIES`` events), down to half of both; returns how
    many events were folded. Never folds an open call, a result still waiting for its
    call, or the newest user message and what follows it."""
    if budget <= 0 or (window.tokens <= budget and len(window.entries) <= MAX_ENTRIES):
        return 0
    if window.tokens < window.retry_tokens and len(window.entries) < window.retry_entries:
        return 0  # the last try was blocked (open work, the newest turn): wait for growth
    cut = _cut(window.entries, window.tokens, state, pairing, budget)
    # Measured in the window itself, so a replay throttles exactly as the live run did.
    window.retry_tokens = window.tokens - sum(e.tokens for e in window.entries[:cut]) + budget // 4
    window.retry_entries = len(window.entries) - cut + MAX_ENTRIES // 8
    if cut == 0:
        return 0
    folded = window.entries[:cut]
    del window.entries[:cut]
    window.tokens -= sum(e.tokens for e in folded)
    cached = memo.summary if memo is not None and memo.summary is state.summary and state.summary else None
    if memo is None:
        work = WorkIndex.of(state)
    elif memo.work is None:
        work = memo.work = WorkIndex.of(state)
    else:
        work = memo.work
    state.summary = _record(state, pairing, folded, work, cached or _previous(state))
    if memo is not None:
        memo.summary = state.summary
    state.summary_covers_through = folded[-1].event_id
    state.summary_event_id = None
    return cut


def _cut(entries: list[WindowEntry], tokens: int, state: WorkingState, pairing: PairingState, budget: int) -> int:
    """The longest stream prefix made of whole foldable units that brings the window to
    half its limits (or as close as the blocked units allow)."""
    last: dict[str, int] = {}
    for i, e in enumerate(entries):
        last[e.unit] = i
    latest = next((i for i, e in enumerate(entries) if e.event_id == state.latest_user_message_id), len(entries))
    if len(entries) - latest > HARD_ENTRIES:
        # A long autonomous run after the newest user message: the snapshot stays bounded.
        # Assembly still shows that message, read apart and placed before the window.
        latest = len(entries)
    target, cut, reach = budget // 2, 0, -1
    for i, e in enumerate(entries):
        if i >= latest or e.unit in state.pending_calls or e.unit in pairing.early:
            break
        if last[e.unit] >= latest:
            break  # the unit reaches past the newest user message
        tokens -= e.tokens
        reach = max(reach, last[e.unit])
        if reach <= i:  # the prefix holds only whole units
            cut = i + 1
            if tokens <= target and len(entries) - cut <= MAX_ENTRIES // 2:
                break
    return cut


Entry = dict[str, Any]
"""An entry of a record's list (``Sourced``) as dumped: text, source_event_id, count,
source_event_ids, kind, in that order (a summary's JSON is compared byte for byte)."""


def _previous(state: WorkingState) -> dict[str, Any] | None:
    """The state's record in canonical form (fresh dicts), or ``None`` to start a new one."""
    if not state.summary:
        return None
    try:
        return HandoffRecord.model_validate(state.summary).model_dump(mode="json")
    except ValidationError:  # a user's record of another shape: start a fresh one
        return None


class _Items:
    """A record's list, with its entries by text: an identical one is found at once.

    The entries are shared with the record they came from (the summary a user may be
    reading): an entry that changes is replaced by a changed copy, never edited. So a fold
    builds only the entries it adds or counts, and an unchanged one is the same object in
    the next summary."""

    __slots__ = ("items", "by_text", "mine")

    def __init__(self, items: list[Entry]) -> None:
        self.items = list(items)
        self.by_text: dict[str, int] = {}
        for i, item in enumerate(self.items):
            self.by_text.setdefault(item["text"], i)
        self.mine: set[int] = set()
        """The places of the entries built by this fold (changed in place from then on)."""

    def add(self, text: str, event_id: str, kind: str) -> None:
        """Append an entry, or count it on an identical one already there."""
        i = self.by_text.get(text)
        if i is None:
            self.by_text[text] = i = len(self.items)
            self.mine.add(i)
            self.items.append({"text": text, "source_event_id": event_id, "count": 1,
                               "source_event_ids": [event_id], "kind": kind})  # fmt: skip
            return
        item = self.items[i]
        if i not in self.mine:
            self.mine.add(i)
            item = self.items[i] = {**item, "source_event_ids": list(item["source_event_ids"])}
        item["count"] += 1
        if len(item["source_event_ids"]) < MAX_IDS:
            item["source_event_ids"].append(event_id)


def _observation(e: WindowEntry, tool_names: dict[str, str]) -> tuple[str, str] | None:
    if e.kind == "tool_result":
        name = e.tool_name or tool_names.get(e.unit) or "tool"
        text = f"{name} -> {e.status}"
        text += "" if e.exit_code is None else f" (exit {e.exit_code})"
        text += "" if e.repo_commit is None else f" at commit {e.repo_commit}"
        return text + (f": {e.text}" if e.text else ""), "tool" if e.status == "ok" else "failure"
    if e.kind == "message" and e.role == "user":
        return f"user said: {e.text}", "user"
    if e.kind == "error":
        return f"error {e.status or ''}: {e.text}".replace("error :", "error:"), "error"
    return None


def _trim(items: list[Entry]) -> list[Entry]:
    """At most ``MAX_OBSERVATIONS``: the oldest plain ones go first, then the oldest
    protected ones after the first ``KEEP_FIRST``."""
    excess = len(items) - MAX_OBSERVATIONS
    if excess <= 0:
        return items
    plain = [i for i, o in enumerate(items) if o["kind"] not in _PROTECTED][:excess]
    gone = set(plain)
    kept = [o for i, o in enumerate(items) if i not in gone]
    rest = excess - len(plain)
    return kept[:KEEP_FIRST] + kept[KEEP_FIRST + rest:] if rest else kept


def _record(state: WorkingState, pairing: PairingState, folded: list[WindowEntry], work: WorkIndex,
            previous: dict[str, Any] | None) -> dict[str, Any]:  # fmt: skip
    """The new record, as ``HandoffRecord(...).model_dump(mode="json")`` gives it (every
    value is already a plain ``str``, ``int`` or list of them: nothing to validate); its
    unchanged entries are ``previous``'s own objects."""
    observations = _Items(previous["observations"] if previous else [])
    hypotheses = _Items(previous["hypotheses"] if previous else [])
    done = _Items(previous["done"] if previous else [])
    was_pending = set(previous["pending_jobs"]) if previous else set()
    tool_names = {e.unit: e.tool_name for e in folded if e.kind == "tool_call" and e.tool_name}
    for e in folded:
        if e.kind == "tool_result" and e.event_id in pairing.orphans:
            continue  # an orphan is never shown to a model, least of all as a fact
        if e.kind == "message" and e.role == "assistant":
            # The model's own words are no fact: only what it phrased as a guess is kept,
            # as a hypothesis; the rest is in the log (and searchable).
            if guess := guesses(e.text):  # already only the guesses, unless an older snapshot's
                hypotheses.add(guess, e.event_id, "guess")
            continue
        if e.kind == "fact":
            # Marked as the model's inference: a hypothesis (an older snapshot's entry has
            # a text for those alone, and no evidence); observed or confirmed: a fact.
            if e.text and e.status in (None, "model_inferred"):
                hypotheses.add(e.text, e.event_id, "inferred")
            elif e.text:
                observations.add(f"fact {e.text} ({e.status.replace('_', ' ')})", e.event_id, "fact")
            continue
        if e.kind == "agent_exit":
            if e.status is None or e.status.lower() in _FINISHED:
                done.add(f"agent {e.tool_name} finished" + (f": {e.text}" if e.text else ""), e.event_id, "agent")
            continue
        found = _observation(e, tool_names)
        if found is not None:
            observations.add(found[0], e.event_id, found[1])
            name = e.tool_name or tool_names.get(e.unit) or "tool"
            if e.kind == "tool_result" and e.status == "ok" and f"call {e.unit} ({name})" in was_pending:
                done.add(f"call {e.unit} ({name}) finished ok", e.event_id, "call")
    _finished_work(state, work, {e.event_id for e in folded if e.kind in ("plan", "task")}, done)
    unknowns = list(previous["unknowns"]) if previous else []
    for f in state.failures:
        note = f"result of {f.tool_name or 'tool'} call {f.call_id} unknown (no result)"
        if f.status == "missing" and note not in unknowns:
            unknowns.append(note)
    step = work.next_step(state)
    pending = [f"call {c.call_id} ({c.tool_name})" for c in state.pending_calls.values()]
    pending += [f"task {t.task_id}: {t.text or ''}".strip() for t in work.tasks.open_items(state.tasks)]
    pending += [f"approval {a.approval_id}: {a.action}" for a in state.approvals.values()
                if a.decision is None and a.action is not None]  # fmt: skip
    return {  # HandoffRecord's fields, in its order
        "goal": None if state.goal is None else state.goal.text,
        "constraints": [c.text for c in state.constraints.values()],
        "observations": _trim(observations.items),
        "hypotheses": hypotheses.items[-MAX_HYPOTHESES:],
        "done": done.items[-MAX_DONE:],
        "pending_jobs": pending,
        "next_action": None if step is None else (step.text or step.step_id),
        "unknowns": unknowns[-MAX_OBSERVATIONS:],
        "modified_files": [f.path for f in state.files.values() if f.confirmed],
    }


def _finished_work(state: WorkingState, work: WorkIndex, folded_ids: set[str], done: _Items) -> None:
    """Plan steps and tasks whose ``done`` came with a folded event (a terminal status is
    final, so each is added once: when the event that finished it is folded). Looked up in
    the index: a long thread's plan holds thousands of steps and a fold finds a few."""
    if not folded_ids:
        return
    for s in work.plan.changed_by(state.plan, folded_ids):
        if s.status == "done":
            done.add(f"step {s.step_id}" + (f": {s.text}" if s.text else ""), s.event_id, "step")
    for t in work.tasks.changed_by(state.tasks, folded_ids):
        if t.status == "done":
            done.add(f"task {t.task_id}" + (f": {t.text}" if t.text else ""), t.event_id, "task")


__all__ = ["DEFAULT_WINDOW_TOKENS", "MAX_ENTRIES", "Memo", "digest", "drop_through", "entry_of", "fold_if_needed", "guesses", "is_stale", "track"]
