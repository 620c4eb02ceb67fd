"""Every `notes/<file>.md §<section>` citation in the code resolves to docs/notes/<file>.md.

A citation is `notes/<file>.md` (optionally `docs/` in front) followed by a chain of sections such
as `§6.2`, `§2-§4.2`, `§6.1-6.5`, `§5.6/§7.2`, or `notes §x` / `Notes §x` without a file name, which
means the notes of the file's paper package (landscape/markov -> markov.md, ...) or, elsewhere, the
one notes file the module names. A section resolves when the notes file has a Markdown heading that
starts with `§<section>` (e.g. `### §6.2 Theorem 2`); a range `§a.x-a.y` needs every section in
between. A file cited without a section must exist.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[2]
NOTES_DIR = ROOT / "docs" / "notes"
SCANNED = ("landscape", "experiments", "tools", "configs", "tests")
PACKAGE_NOTES = {
    "markov": "markov",
    "ngrams": "ngrams",
    "recall": "assoc_recall",
    "scan_snap": "scan_snap",
}

_SECTION = r"\d+(?:\.\d+)*"
_START = re.compile(r"(?:docs/)?notes/(?P<file>[a-z_]+)\.md|\b[Nn]otes(?:'|’)?\s*(?=§)")
_ITEM = re.compile(
    r"[ \t\n,;(/]*(?:and\s+|or\s+)?§§?\s?(?P<first>" + _SECTION + r")"
    r"(?:\s*[-–]\s*§?(?P<last>" + _SECTION + r"))?"
)
_HEADING = re.compile(r"^#{1,6}\s+§(" + _SECTION + r")\b", re.MULTILINE)


class Citation(NamedTuple):
    where: str  # "path:line"
    notes: str | None  # notes file stem; None when the module does not say which
    section: str | None  # None: the file itself is cited


def default_notes(relative: Path, text: str) -> str | None:
    """The notes a bare `notes §x` means: the paper package's, else the one notes file named."""
    for part in relative.parts[:-1]:
        if part in PACKAGE_NOTES:
            return PACKAGE_NOTES[part]
    if relative.stem in PACKAGE_NOTES:
        return PACKAGE_NOTES[relative.stem]
    named = set(re.findall(r"notes/([a-z_]+)\.md", text))
    return named.pop() if len(named) == 1 else None


def expand(first: str, last: str | None) -> list[str]:
    """`6.1`-`6.5` -> 6.1 ... 6.5; `11`-`13` -> 11, 12, 13; otherwise the two ends."""
    if last is None:
        return [first]
    a, b = first.split("."), last.split(".")
    if len(a) == len(b) and a[:-1] == b[:-1] and int(a[-1]) <= int(b[-1]):
        return [".".join([*a[:-1], str(i)]) for i in range(int(a[-1]), int(b[-1]) + 1)]
    return [first, last]


def parse(text: str, relative: Path) -> list[Citation]:
    """Every citation in `text` (the contents of the file at `relative`, under the repository)."""
    default = default_notes(relative, text)
    found = []
    for start in _START.finditer(text):
        notes = start.group("file") or default
        position, sections = start.end(), 0
        while item := _ITEM.match(text, position):
            line = text.count("\n", 0, item.start("first")) + 1
            for section in expand(item.group("first"), item.group("last")):
                found.append(Citation(f"{relative}:{line}", notes, section))
            position, sections = item.end(), sections + 1
        if start.group("file") and sections == 0:
            line = text.count("\n", 0, start.start()) + 1
            found.append(Citation(f"{relative}:{line}", notes, None))
    return found


def headings(notes: str) -> set[str] | None:
    """Section numbers with a heading in docs/notes/<notes>.md, None when the file is missing."""
    path = NOTES_DIR / f"{notes}.md"
    return set(_HEADING.findall(path.read_text())) if path.is_file() else None


def broken(citations: list[Citation]) -> list[str]:
    """One line per citation that does not resolve, `path:line: notes/x.md §y (why)`."""
    cache: dict[str, set[str] | None] = {}
    lines = []
    for cite in citations:
        if cite.notes is None:
            continue  # a bare `notes §x` in a module that names no notes file: nothing to check
        name = f"notes/{cite.notes}.md" + (f" §{cite.section}" if cite.section else "")
        if cite.notes not in cache:
            cache[cite.notes] = headings(cite.notes)
        known = cache[cite.notes]
        if known is None:
            lines.append(f"{cite.where}: {name} (no such file)")
        elif cite.section is not None and cite.section not in known:
            lines.append(f"{cite.where}: {name} (no such section)")
    return lines


def all_citations() -> list[Citation]:
    citations = []
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            relative = path.relative_to(ROOT)
            if relative != Path(__file__).relative_to(ROOT):
                citations.extend(parse(path.read_text(), relative))
    return citations


def test_every_citation_resolves() -> None:
    citations = all_citations()
    assert len(citations) > 300  # the scan sees the code's citations (about 700 today)
    problems = broken(citations)
    assert not problems, "broken notes citations:\n" + "\n".join(problems)


def test_every_notes_file_has_numbered_headings() -> None:
    for path in sorted(NOTES_DIR.glob("*.md")):
        assert len(headings(path.stem) or ()) >= 6, f"{path.name}: too few `§N` headings"


def test_parser_reads_chains_ranges_and_bare_notes() -> None:
    text = 'x = 1  # see notes/markov.md §3, §6.1-6.3, §7 C3\n"""Notes §2.1/§4.8 (C13)."""\n'
    cites = parse(text, Path("landscape/recall/fake.py"))
    assert [(c.where, c.notes, c.section) for c in cites] == [
        ("landscape/recall/fake.py:1", "markov", "3"),
        ("landscape/recall/fake.py:1", "markov", "6.1"),
        ("landscape/recall/fake.py:1", "markov", "6.2"),
        ("landscape/recall/fake.py:1", "markov", "6.3"),
        ("landscape/recall/fake.py:1", "markov", "7"),
        ("landscape/recall/fake.py:2", "assoc_recall", "2.1"),
        ("landscape/recall/fake.py:2", "assoc_recall", "4.8"),
    ]
    assert expand("11", "13") == ["11", "12", "13"]
    assert expand("2", "4.2") == ["2", "4.2"]


def test_broken_citations_are_reported() -> None:
    text = "# notes/markov.md §99.1 and notes/markov.md §6.2\n# notes/no_such_paper.md\n"
    problems = broken(parse(text, Path("configs/fake.py")))
    assert problems == [
        "configs/fake.py:1: notes/markov.md §99.1 (no such section)",
        "configs/fake.py:2: notes/no_such_paper.md (no such file)",
    ]
