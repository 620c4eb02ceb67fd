"""Execute the tutorials and store them with their outputs, for the site to render unexecuted:

    python -m tools.tutorials                # every tutorial (5-10 min on 2 busy cores)
    python -m tools.tutorials sweep own_task # some of them

docs/tutorials/<name>.py (jupytext's percent format) is the source; each runs in a fresh
kernel from the repository root, and docs/tutorials/<name>.ipynb is written with its outputs,
PNG outputs recompressed (a palette of 256 colours) so that a notebook stays a few hundred KB.
An output that shows a path of this machine stops the command: tutorials print relative paths.
tests/docs/test_docs.py checks that each stored notebook's cells are the .py's.
"""

from __future__ import annotations

import sys

from tools.notebooks import ROOT, TUTORIALS, execute


def names() -> list[str]:
    """Every tutorial: the .py files of docs/tutorials/."""
    return sorted(p.stem for p in TUTORIALS.glob("*.py"))


def main(argv: list[str]) -> int:
    chosen = argv[1:] or names()
    unknown = sorted(set(chosen) - set(names()))
    if unknown:
        print(f"no tutorial {', '.join(unknown)}: the tutorials are {', '.join(names())}.")
        return 2
    for name in chosen:
        path, seconds = execute(name)
        size = path.stat().st_size / 1024
        print(f"{path.relative_to(ROOT)}: {seconds:.0f} s, {size:.0f} KB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
