"""`python -m experiments.report` (experiments/report/__main__.py) in this process: its flags
read and checked (one sentence, exit status 2, for a mistake), then the report made."""

from __future__ import annotations

import pathlib
import time
from collections.abc import Callable
from typing import Any

from experiments import options as run_options
from experiments import stops
from experiments.report import catalog, make, options
from landscape.engine import records
from landscape.engine.overrides import UsageError


def main(argv: list[str], progress: Callable[[str], object] = print) -> int:
    """The report's command line `argv` (argv[0] the program); returns the exit status."""
    started = time.perf_counter()
    try:
        run_options.parse(argv)
        chosen: dict[str, Any] = dict(
            scale=options.SCALE.value,
            quick=options.QUICK.value,
            only=tuple(options.ONLY.value),
            reuse=options.REUSE.value,
            out=pathlib.Path(options.OUT.value),
            runs=pathlib.Path(options.RUNS.value),
            sets=list(options.SET.value),
            list_only=options.LIST.value,
            readme=options.README.value,
            workers=options.JOBS.value or (2 if options.QUICK.value else 1),
        )
        _check(chosen)
    except UsageError as error:
        return stops.fail(str(error), stops.EXIT_USAGE)
    if options.DOCS_FIGURES.value:
        return make.docs_pages(chosen["runs"], progress)
    return make.report(argv, started=started, progress=progress, **chosen)


def _check(chosen: dict[str, Any]) -> None:
    """One sentence (UsageError) for options that cannot go together or places of the user's."""
    unknown = set(chosen["only"]) - set(catalog.PAPERS)
    if unknown:
        raise UsageError(
            f"--only={','.join(sorted(unknown))}: the papers are {', '.join(catalog.PAPERS)}."
        )
    if chosen["readme"] and chosen["quick"]:
        raise UsageError("--readme takes a full report's table, not --quick's.")
    for flag in ("out", "runs"):  # a folder of its own: not a file, /, $HOME, a source tree
        try:
            records.check_place(chosen[flag], f"--{flag}")
        except records.WorkdirError as error:
            raise UsageError(str(error)) from None
    for item in chosen["sets"]:
        if "=" not in item:
            raise UsageError(
                f"--set={item}: give FIELD=VALUE, e.g. --set=text.path=/data/wikitext-2."
            )
