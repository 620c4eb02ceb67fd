"""The study pages' tables, written from their runs' records so that a page cannot go stale:

    python -m tools.pages markov_curvature runs/markov_curvature   # after the page's run
    python -m tools.pages              # every page's tables again, from its stored data
    python -m tools.pages --check      # exit 1 where a page differs from its data

A page's generated tables sit between `<!-- table NAME: start -->` and `<!-- table NAME: end -->`.
A page's `extract` keeps the numbers its tables show in docs/studies/data/<page>.json (committed);
its `tables` writes them from that data alone (tools/study_pages.py, tools/<paper>_page.py).
"""

from __future__ import annotations

import pathlib
import sys

from tools import page_parts
from tools.study_pages import PAGES, stale, write


def _shown(name: str) -> str:
    """A page's path as a reader names it (docs/...)."""
    return str(PAGES[name].path(name).relative_to(page_parts.STUDIES.parent.parent))


def main(argv: list[str]) -> int:
    args = argv[1:]
    if args == ["--check"]:
        names = stale()
        for name in names:
            print(f"{_shown(name)}: its tables differ from docs/studies/data/{name}.json")
        return 1 if names else 0
    if len(args) not in (0, 2) or (args and args[0] not in PAGES):
        print(
            "usage: python -m tools.pages [PAGE WORKDIR | --check]; the pages: " + ", ".join(PAGES),
            file=sys.stderr,
        )
        return 2
    if args and not PAGES[args[0]].finished(pathlib.Path(args[1])):
        print(f"{args[1]} holds no finished run (no summary.json).", file=sys.stderr)
        return 2
    names = [args[0]] if args else list(PAGES)
    for name in names:
        try:
            write(name, pathlib.Path(args[1]) if args else None)
        except ValueError as error:
            print(f"{_shown(name)}: {error}", file=sys.stderr)
            return 1
        print(f"{_shown(name)}: tables written")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
