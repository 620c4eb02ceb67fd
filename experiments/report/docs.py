"""The site's copy of the report: each figure's chosen PNGs from the report's records into
docs/figures/<paper>/ (downscaled, 256 colours, at most MAX_KB each), and the summary table of
README.md on the home page, each row linked to its paper's page.

    python -m experiments.report --docs_figures     # after a report, or some of its configs

A figure comes from the CPU-scale records (<runs>/cpu/<config name>/figures/<stem>.png) or, where
those are missing, from the --quick records, and is then named <config name>.<stem>.quick.png, so
that a page showing it says so in its caption and a page still showing a replaced quick figure
fails tests/docs/test_docs.py.
"""

from __future__ import annotations

import fnmatch
import io
import pathlib
import re
from collections.abc import Callable

from experiments.report import catalog, run, write

DOCS = run.ROOT / "docs"
MAX_WIDTH = 1400  # pixels: twice the text column, sharp on a high-density screen
MAX_KB = 280
INDEX_START, INDEX_END = "<!-- summary table: start -->", "<!-- summary table: end -->"


def shrink(source: pathlib.Path, target: pathlib.Path) -> int:
    """`source` as a PNG of at most MAX_WIDTH pixels and 256 colours at `target`; its bytes."""
    from PIL import Image

    with Image.open(source) as opened:  # closed: a leaked file is a ResourceWarning
        image = opened.convert("RGB")
    for width in (MAX_WIDTH, 1100, 900, 700):
        if image.width > width:
            image = image.resize(
                (width, round(image.height * width / image.width)), Image.Resampling.LANCZOS
            )
        out = io.BytesIO()
        image.quantize(256).save(out, format="PNG", optimize=True)
        if out.tell() <= MAX_KB * 1024:
            break
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(out.getvalue())
    return out.tell()


def chosen(run_: catalog.Run, folder: pathlib.Path) -> list[pathlib.Path]:
    """The PNGs of `folder`/figures that the run's `docs` globs choose, in the globs' order."""
    pictures = sorted((folder / "figures").glob("*.png"))
    return [
        p
        for glob in run_.docs.split(",")
        if glob
        for p in pictures
        if fnmatch.fnmatch(p.stem, glob)
    ]


def docs_figures(
    runs_root: pathlib.Path, docs: pathlib.Path = DOCS, progress: Callable[[str], object] = print
) -> list[pathlib.Path]:
    """Copy every figure's chosen PNGs into docs/figures/<paper>/; returns the files written."""
    figures = catalog.figures()
    cpu = run.plan(figures, "cpu", False, [], runs_root)
    quick = run.plan(figures, "cpu", True, [], runs_root)
    written = []
    for figure in figures:
        for run_ in figure.runs_at("cpu"):
            if not run_.docs:
                continue
            for jobs, suffix in ((cpu, ""), (quick, ".quick")):
                job = jobs[run.job_key(run_, suffix == ".quick")]
                pictures = chosen(run_, job.workdir)
                if pictures:
                    break
            if not pictures:
                progress(f"  {figure.paper} {figure.label}: no records of {run_.spec}")
                continue
            for picture in pictures:
                name = f"{job.workdir.name}.{picture.stem}{suffix}.png"
                target = docs / "figures" / figure.paper / name
                for stale in target.parent.glob(f"{job.workdir.name}.{picture.stem}.*png"):
                    stale.unlink()  # the other scale's copy
                size = shrink(picture, target)
                written.append(target)
                progress(f"  {target.relative_to(docs.parent)} ({size // 1024} KB)")
    return written


def slug(heading: str) -> str:
    """A heading's anchor as MkDocs (Python-Markdown's toc) and GitHub make it: "Fig. 4" ->
    "fig-4", "Thm 3.1 (E1)" -> "thm-31-e1"."""
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", heading).strip().lower())


def headings(page: pathlib.Path) -> set[str]:
    """The anchors of a Markdown page's headings."""
    text = page.read_text() if page.is_file() else ""
    return {slug(h) for h in re.findall(r"^#{1,6} +(.+?) *$", text, flags=re.M)}


def linked_table(summary: str, docs: pathlib.Path = DOCS) -> str:
    """README's summary table with each row's paper linked to the paper's page, and its figure
    to the figure's section there (a figure without one, e.g. a diagram, to the page)."""
    anchors = {paper: headings(docs / "papers" / f"{paper}.md") for paper in catalog.PAPERS}

    def link(match: re.Match) -> str:
        paper, label = match["paper"], match["label"]
        page = f"papers/{paper}.md"
        target = f"{page}#{slug(label)}" if slug(label) in anchors[paper] else page
        return f"| [{paper}]({page}) | [{label}]({target}) |"

    papers = "|".join(catalog.PAPERS)
    return re.sub(rf"^\| (?P<paper>{papers}) \| (?P<label>[^|]+?) \|", link, summary, flags=re.M)


def update_index(readme: pathlib.Path, index: pathlib.Path, docs: pathlib.Path = DOCS) -> bool:
    """Put README's summary table, linked, between docs/index.md's markers; False without them."""
    text, page = readme.read_text(), index.read_text()
    start, end = text.find(write.README_START), text.find(write.README_END)
    at, until = page.find(INDEX_START), page.find(INDEX_END)
    if start < 0 or end < start or at < 0 or until < at:
        return False
    table = linked_table(text[start + len(write.README_START) : end].strip("\n"), docs)
    index.write_text(page[: at + len(INDEX_START)] + "\n" + table + "\n" + page[until:])
    return True
