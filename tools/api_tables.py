"""The API reference's summary tables, readable on GitHub where the `:::` lines render nothing:

    python -m tools.api_tables           # write each docs/api page's table again
    python -m tools.api_tables --check   # exit 1 where a page's table is stale

Each table lists the page's `:::` objects with the first sentence of their docstrings, between
`<!-- api-summary: start -->` and `<!-- api-summary: end -->` below the page's title and note;
tests/docs/test_api_tables.py fails while one differs from the docstrings."""

from __future__ import annotations

import pathlib
import re
import sys

from tools.docstrings import first_sentence, resolve

ROOT = pathlib.Path(__file__).resolve().parent.parent
API = ROOT / "docs" / "api"
START, END = "<!-- api-summary: start -->", "<!-- api-summary: end -->"
OBJECT = re.compile(r"^::: (\S+)$", re.MULTILINE)


def table(page: pathlib.Path) -> str:
    """The summary table of a page's `:::` objects."""
    rows = ["| name | what it is |", "|---|---|"]
    for dotted in OBJECT.findall(page.read_text()):
        rows.append(f"| `{dotted}` | {first_sentence(resolve(dotted))} |")
    return "\n".join([START, *rows, END])


def written(page: pathlib.Path) -> str:
    """The page with its table written: replaced between the markers, or put after the note."""
    text, new = page.read_text(), table(page)
    if START in text:
        before, rest = text.split(START, 1)
        return before + new + rest.split(END, 1)[1]
    note = re.search(r"^> .*?\n\n", text, re.MULTILINE | re.DOTALL)
    at = note.end() if note else text.index("\n\n") + 2
    return text[:at] + new + "\n\n" + text[at:]


def pages() -> list[pathlib.Path]:
    return sorted(p for p in API.glob("*.md") if OBJECT.search(p.read_text()))


def main(argv: list[str]) -> int:
    """Write the tables (or with --check, name the stale pages and exit 1)."""
    stale = [p for p in pages() if written(p) != p.read_text()]
    if "--check" in argv:
        for page in stale:
            print(f"{page.relative_to(ROOT)}: stale; python -m tools.api_tables")
        return int(bool(stale))
    for page in stale:
        page.write_text(written(page))
        print(f"wrote {page.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
