"""The report from its checked options: the plan, the configs run (or reused), the figures
rows and the pages written (docs/design/experiments.md, "The report"); or, with --docs_figures,
the site's figures copied from the records."""

from __future__ import annotations

import pathlib
import time
from collections.abc import Callable
from typing import Any

from experiments import stops
from experiments.report import catalog, docs, run, write
from landscape.engine import records


def docs_pages(runs: pathlib.Path, progress: Callable[[str], object] = print) -> int:
    """--docs-figures: the site's figures from the records, and the home page's table."""
    written = docs.docs_figures(runs, progress=progress)
    progress(f"{len(written)} figures in docs/figures/ (from {runs})")
    if not docs.update_index(run.ROOT / "README.md", docs.DOCS / "index.md"):
        progress(f"docs/index.md has no {docs.INDEX_START} ... {docs.INDEX_END} markers.")
    return 0 if written else 1


def report(
    argv: list[str],
    *,
    scale: str,
    quick: bool,
    only: tuple[str, ...],
    reuse: bool,
    out: pathlib.Path,
    runs: pathlib.Path,
    sets: list[str],
    list_only: bool,
    readme: bool,
    workers: int,
    started: float,
    progress: Callable[[str], object] = print,
) -> int:
    figures = catalog.figures(only)
    jobs = run.plan(figures, scale, quick, sets, runs)
    todo = run.unique(jobs)
    version = run.code_version()
    label = "quick" if quick else scale
    if list_only:
        for job in todo:
            state = (
                f"cannot run: {job.error}"
                if job.error
                else "reusable"
                if run.reusable(job, version)
                else "to run"
            )
            progress(f"{job.paper:9} {job.command}\n          -> {job.workdir} ({state})")
        return 0
    try:  # before anything runs: a file of the user's where the report writes is never replaced
        write.check_out(out)
    except records.WorkdirError as error:
        return stops.fail(str(error), stops.EXIT_USAGE)
    progress(
        f"report at {label} scale: {len(figures)} figures, {len(todo)} configs"
        + (
            f" ({sum(bool(j.error) for j in todo)} cannot run)"
            if any(j.error for j in todo)
            else ""
        )
        + f"; records in {runs / label}"
    )
    for job in todo:
        if job.error:
            progress(f"  not run: {job.spec}: {job.error}")
    status = run.run_all(
        todo, reuse, version, workers, progress, xla_flags=run.QUICK_XLA_FLAGS if quick else ""
    )

    table = write.rows(figures, jobs, scale, quick)
    context: dict[str, Any] = dict(
        scale=label,
        command="python -m experiments.report " + " ".join(argv[1:]),
        time=write.now(),
        seconds=time.perf_counter() - started,
        version=version,
        ran=sum(j.status in ("complete", "failed") for j in todo),
        reused=sum(j.status == "reused" for j in todo),
        run_seconds=sum(j.seconds or 0.0 for j in todo),
        backend=run.backend_of(todo),
        quick=quick,
    )
    try:
        paths = write.write(table, context, out)
    except records.WorkdirError as error:  # a file in the way that appeared meanwhile
        return stops.fail(f"{error} (The runs' records are kept: --reuse reuses them.)", 2)
    progress(write.summary_markdown(table, "", quick=quick).strip())
    if readme:
        if not write.update_readme(run.ROOT / "README.md", paths["summary"].read_text()):
            progress(
                f"README.md has no {write.README_START} ... {write.README_END} markers: "
                "left as it is."
            )
        docs.update_index(run.ROOT / "README.md", docs.DOCS / "index.md")
    progress(
        f"report: {paths['markdown']}, {paths['html']} ({run.format_minutes(context['seconds'])})"
    )
    if status:
        return status
    return 1 if any(j.status == "failed" for j in todo) else 0
