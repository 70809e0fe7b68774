"""The docs stay scannable and their links stay whole: table rows of at most two 120-character
lines, and every relative link in README.md and docs/ reaching a file (and its anchor)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_ROW = 2 * 120
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])

_FENCE = re.compile(r"^\s*(```|~~~)")
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
_HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")


def _prose(path: Path) -> list[tuple[int, str]]:
    """The file's lines outside fenced code blocks, numbered from 1."""
    lines, fenced = [], False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append((number, line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: link text kept, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for _, line in _prose(path):
        found.update(_HTML_ANCHOR.findall(line))
        heading = _HEADING.match(line)
        if heading:
            base = slug(heading.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def _links(path: Path) -> list[tuple[int, str]]:
    return [(number, target) for number, line in _prose(path)
            for target in _LINK.findall(re.sub(r"`[^`]*`", "", line))]


def long_rows(path: Path) -> list[str]:
    return [f"{path.name}:{number} ({len(line)} chars)" for number, line in _prose(path)
            if line.lstrip().startswith("|") and len(line) > MAX_ROW]


def broken_links(path: Path) -> list[str]:
    broken = []
    for number, target in _links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ...
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            broken.append(f"{path.name}:{number} {target} (no such file)")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{path.name}:{number} {target} (no such anchor)")
    return broken


def test_the_docs_are_found():
    names = {p.relative_to(ROOT).as_posix() for p in DOCS}
    assert {"README.md", "docs/benchmarks.md", "docs/operations.md"} <= names


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_table_rows_fit_two_lines(path):
    assert not long_rows(path), f"table rows over {MAX_ROW} characters: {long_rows(path)}"


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(path):
    assert not broken_links(path), f"broken links: {broken_links(path)}"


def test_the_checks_catch_what_they_check(tmp_path):
    (tmp_path / "note.md").write_text("# A note\n## Setting (2026-11-25)\n<a id=\"kept\"></a>\n")
    page = tmp_path / "page.md"
    page.write_text(
        "| a | " + "x" * MAX_ROW + " |\n"
        "[ok](note.md#setting-2026-11-25) [ok](note.md#kept) [ok](https://example.org/x.md#y)\n"
        "[gone](missing.md) [no anchor](note.md#settings) `[in code](missing.md)`\n"
        "```\n| " + "y" * MAX_ROW + " | [fenced](missing.md)\n```\n")
    assert len(long_rows(page)) == 1
    assert [b.split(" ")[1] for b in broken_links(page)] == ["missing.md", "note.md#settings"]


def test_slug_follows_github():
    assert slug("Today's figures: the system (Qwen, 2026-11-25)") == "todays-figures-the-system-qwen-2026-11-25"
    assert slug("Robustness bench") == "robustness-bench"
    assert slug("SE@1 & `Wiki@10`") == "se1--wiki10"


def test_the_readme_is_a_front_door():
    """ARCHITECTURE.md: the README is the front door (<= 150 lines); tables of earlier defaults live in benchmarks."""
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines"
    assert lines[3].startswith("./setup.sh && .venv/bin/eor ask") and lines[4].startswith("./setup.sh --tests")
