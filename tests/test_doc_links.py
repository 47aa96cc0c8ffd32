"""Issue 13, item 5: the README and docs/ link only inside the repository.

The rule: outside code, no text names a place beyond the repository (a markdown link,
an autolink or a bare address with a scheme such as `https://`, or `www.`); every link
is a relative path to a file that exists inside the repository, and an anchor names a
heading of its page. Addresses written as code (`http://localhost:8787`, or in a fenced
block) are examples, not links: no renderer follows them, so they are allowed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])

_FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.M | re.S)
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
_OUTSIDE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://|\bwww\.|\bmailto:", re.I)
_INLINE_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)
_HTML = re.compile(r"\b(?:href|src)\s*=\s*[\"']([^\"']*)[\"']", re.I)


def _prose(text: str) -> str:
    """The text a renderer could turn into links: code blocks and code spans removed."""
    return _CODE_SPAN.sub("", _FENCE.sub("", text))


def _anchors(text: str) -> set[str]:
    """Heading anchors as GitHub makes them: lower case, punctuation dropped, spaces to '-'."""
    headings = re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", _FENCE.sub("", text), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


def link_problems(page: Path, text: str) -> list[str]:
    """Why the links of ``page`` (whose content is ``text``) are not all inside the repository."""
    prose = _prose(text)
    problems = [f"leaves the repository: {m.group(0)}..." for m in _OUTSIDE.finditer(prose)]
    targets = [*_INLINE_LINK.findall(prose), *_REFERENCE.findall(prose), *_HTML.findall(prose)]
    for target in targets:
        if _OUTSIDE.match(target):
            continue  # reported above
        path, _, anchor = target.partition("#")
        if path.startswith("/"):
            problems.append(f"absolute path (relative paths only): {target}")
            continue
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.is_relative_to(ROOT):
            problems.append(f"points outside the repository: {target}")
        elif not resolved.exists():
            problems.append(f"no such file: {target}")
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved.read_text("utf-8")):
            problems.append(f"no such heading: {target}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_readme_and_every_doc_link_only_to_files_inside_the_repository(page: Path) -> None:
    assert link_problems(page, page.read_text(encoding="utf-8")) == []


def test_the_readme_links_the_event_format_from_its_events_section() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("### Events in brief"):]
    section = section[: section.index("\n#", 1)]
    assert "](docs/events.md)" in section


def test_the_link_rule_refuses_outside_links_and_missing_files_and_allows_code() -> None:
    page = ROOT / "docs" / "page.md"
    refused = {
        "[spec](https://example.org/spec)": "leaves the repository",
        "see https://example.org or www.example.org": "leaves the repository",
        "<https://example.org>": "leaves the repository",
        "[contract](../../shared/SPEC.md)": "outside the repository",
        "[gone](no-such-file.md)": "no such file",
        "[root](/README.md)": "absolute path",
        "[events](events.md#no-such-heading)": "no such heading",
        "[x]: https://example.org": "leaves the repository",
        '<a href="../../x.md">x</a>': "outside the repository",
    }
    for text, why in refused.items():
        problems = link_problems(page, text)
        assert problems and all(why in p for p in problems[:1]), (text, problems)
    allowed = [
        "run `curl http://localhost:8787/healthz`",
        "```sh\ncurl https://example.org\n```",
        "[events](events.md#the-envelope), [readme](../README.md), [top](#the-envelope)",
    ]
    assert link_problems(ROOT / "docs" / "events.md", "\n".join(allowed)) == []


def test_the_docs_index_links_every_page_in_docs() -> None:
    index = ROOT / "docs" / "README.md"
    linked = {target.partition("#")[0] for target in _INLINE_LINK.findall(_prose(index.read_text("utf-8")))}
    pages = {p.name for p in (ROOT / "docs").glob("*.md") if p != index}
    assert sorted(pages - linked) == []
