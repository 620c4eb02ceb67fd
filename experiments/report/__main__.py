"""Reproduce every figure of the four papers and write a report:

    python -m experiments.report                       # every CPU-sized config (~80 min, 2 cores)
    python -m experiments.report --quick               # every config at its smallest size (~4 min)
    python -m experiments.report --scale=paper --only=markov,ngrams --reuse
    python -m experiments.report --list                # the plan: configs, commands, reusable?
    python -m experiments.report --docs_figures        # the site's figures from the records

Outputs, `--reuse` and exit statuses: docs/design/experiments.md.
"""

from __future__ import annotations

import pathlib
import sys
import time
from collections.abc import Callable
from typing import Any

from absl import flags

from experiments import cli
from experiments.report import catalog, docs, run, write
from landscape.engine import records

_SCALE = flags.DEFINE_enum(
    "scale",
    "cpu",
    ["cpu", "paper"],
    "Which configs: the CPU-sized ones or the paper-scale ones (hours on a CPU).",
)
_QUICK = flags.DEFINE_bool(
    "quick",
    False,
    "Every cpu config at its smallest size: checks that "
    "every claim is evaluated and every figure drawn, not the claims.",
)
_ONLY = flags.DEFINE_list(
    "only", [], f"Papers to include (default all): {', '.join(catalog.PAPERS)}."
)
_REUSE = flags.DEFINE_bool(
    "reuse",
    False,
    "Reuse complete records of the same config, code and JAX version instead of running again.",
)
_OUT = flags.DEFINE_string("out", "report", "Folder of REPORT.md, index.html, SUMMARY.md.")
_RUNS = flags.DEFINE_string(
    "runs",
    "runs/report",
    "Folder of the configs' records (<runs>/<scale or quick>/<config name>/).",
)
_SET = flags.DEFINE_multi_string(
    "set",
    [],
    "FIELD=VALUE for every config that has the field, "
    "e.g. --set=text.path=/data/wikitext-2 (repeatable).",
)
_JOBS = flags.DEFINE_integer(
    "jobs",
    None,
    "Configs run at once, each in its own process "
    "(default: 2 with --quick, whose small programs are mostly "
    "single-threaded tracing; else 1).",
    lower_bound=1,
)
_LIST = flags.DEFINE_bool("list", False, "Print the plan and exit.")
_README = flags.DEFINE_bool(
    "readme",
    False,
    "Also put the summary table into README.md (between its report markers) and, linked, "
    "into docs/index.md.",
)
_DOCS_FIGURES = flags.DEFINE_bool(
    "docs_figures",
    False,
    "Run nothing: copy each figure's chosen PNGs from the records (--runs; CPU scale, else "
    "--quick) into docs/figures/<paper>/, and README's summary table into docs/index.md.",
)


def main(argv: list[str], progress: Callable[[str], object] = print) -> int:
    started = time.perf_counter()
    try:
        cli._parse_flags(argv)
        options: dict[str, Any] = dict(
            scale=_SCALE.value,
            quick=_QUICK.value,
            only=tuple(_ONLY.value),
            reuse=_REUSE.value,
            out=pathlib.Path(_OUT.value),
            runs=pathlib.Path(_RUNS.value),
            sets=list(_SET.value),
            list_only=_LIST.value,
            readme=_README.value,
            workers=_JOBS.value or (2 if _QUICK.value else 1),
        )
        unknown = set(options["only"]) - set(catalog.PAPERS)
        if unknown:
            raise cli.UsageError(
                f"--only={','.join(sorted(unknown))}: the papers are {', '.join(catalog.PAPERS)}."
            )
        if options["readme"] and options["quick"]:
            raise cli.UsageError("--readme takes a full report's table, not --quick's.")
        for flag in ("out", "runs"):  # a folder of its own: not a file, /, $HOME, a source tree
            try:
                records.check_place(options[flag], f"--{flag}")
            except records.WorkdirError as error:
                raise cli.UsageError(str(error)) from None
        for item in options["sets"]:
            if "=" not in item:
                raise cli.UsageError(
                    f"--set={item}: give FIELD=VALUE, e.g. --set=text.path=/data/wikitext-2."
                )
    except cli.UsageError as error:
        return cli._fail(str(error), cli.EXIT_USAGE)
    if _DOCS_FIGURES.value:
        return docs_pages(options["runs"], progress)
    return report(argv, started=started, progress=progress, **options)


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
        return cli._fail(str(error), cli.EXIT_USAGE)
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
        return cli._fail(f"{error} (The runs' records are kept: --reuse reuses them.)", 2)
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


if __name__ == "__main__":  # a Ctrl-C before the first run starts: one line (experiments/launch.py)
    from experiments import launch

    launch.install()
    sys.exit(main(sys.argv))
