"""The site's pages as a reader gets them, without building or running anything: each stored
tutorial notebook holds the cells of its jupytext source, every image a page shows exists and is
small, and no page speaks of development history (an issue, a commit) or shows a path of a
machine. Every page under docs/ is a reader's page, docs/performance.md included: the history is
CHANGELOG.md's, outside docs/."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
TUTORIALS = sorted((DOCS / "tutorials").glob("*.py"))
MAX_IMAGE_KB = 300
MAX_NOTEBOOK_KB = 600
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)[^)]*\)|<img [^>]*src=[\"']([^\"']+)[\"']")


def pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def cells_of(source: Path) -> list[tuple[str, str]]:
    """(cell type, source) of each cell of a jupytext percent-format file, as jupytext reads it."""
    jupytext = pytest.importorskip("jupytext")  # the test and docs extras install it
    return [(c.cell_type, c.source.strip()) for c in jupytext.read(source).cells]


@pytest.mark.parametrize("source", TUTORIALS, ids=lambda p: p.stem)
def test_stored_notebook_is_its_source_executed(source):
    stored = source.with_suffix(".ipynb")
    assert stored.is_file(), f"{stored.name} is missing: python -m tools.tutorials {source.stem}"
    notebook = json.loads(stored.read_text())
    cells = [(c["cell_type"], "".join(c["source"]).strip()) for c in notebook["cells"]]
    assert cells == cells_of(source), (
        f"{stored.name} is not {source.name}: python -m tools.tutorials {source.stem}"
    )
    code = [c for c in notebook["cells"] if c["cell_type"] == "code"]
    assert all(c["execution_count"] for c in code), f"{stored.name} has cells never run"
    assert not [o for c in code for o in c["outputs"] if o["output_type"] == "error"]
    shown = [o for c in code for o in c["outputs"] if "image/png" in o.get("data", {})]
    assert shown, f"{stored.name} shows no figure"
    assert not [o for c in code for o in c["outputs"] if "PosixPath(" in json.dumps(o)]
    assert stored.stat().st_size < MAX_NOTEBOOK_KB * 1024


def test_every_image_a_page_shows_exists_and_is_small():
    seen = 0
    for page in pages():
        for match in IMAGE.finditer(page.read_text()):
            target = match.group(1) or match.group(2)
            if target.startswith(("http://", "https://", "data:")):
                continue
            path = (page.parent / target).resolve()
            where = f"{page.relative_to(ROOT)}: {target}"
            assert path.is_file(), (
                f"{where} does not exist (python -m experiments.report --docs-figures)"
            )
            assert path.stat().st_size < MAX_IMAGE_KB * 1024, f"{where} is over {MAX_IMAGE_KB} KB"
            seen += 1
    assert seen >= 20  # the paper pages show their figures


@pytest.mark.parametrize("needle", [r"\bissues?\b", r"/work/", r"/home/", r"/tmp/", r"/root/"])
def test_no_page_speaks_of_development_history_or_machine_paths(needle):
    files = [p for p in DOCS.rglob("*") if p.suffix in (".md", ".py", ".ipynb", ".js", ".css")]
    found = [
        f"{p.relative_to(ROOT)}:{n}: {line.strip()[:120]}"
        for p in files
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(needle, line, re.IGNORECASE)
    ]
    assert not found, "\n".join(found)


# A commit's abbreviated hash: 7-40 hex digits with a letter and a digit among them. Notebooks are
# left out: their cell ids and images are hex-like by nature.
COMMIT = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")


def test_no_page_names_a_commit():
    files = [p for p in DOCS.rglob("*") if p.suffix in (".md", ".py", ".js", ".css")]
    found = [
        f"{p.relative_to(ROOT)}:{n}: {line.strip()[:120]}"
        for p in files
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if COMMIT.search(line)
    ]
    assert not found, "\n".join(found)
