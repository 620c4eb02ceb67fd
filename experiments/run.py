"""Run your own experiment module through the CLIs' front end: config files and overrides,
validation, sweeps, records, interruptions and resume, as for the four papers.

    python -m experiments.run mystudy.experiment --config=mystudy/config.py [--config.a.b=v ...]
        [--workdir=DIR] [--overwrite | --resume] [the other flags of experiments/cli.py]
    python -m experiments.run mystudy.experiment --workdir=DIR --resume   # continue a run

The module (importable from the current folder) provides default_config(), validate(cfg),
needs_x64(cfg) and run(cfg, workdir, progress=print): the `Experiment` protocol of
landscape/engine/protocols.py, explained in docs/guide/own_task.md.
"""

from __future__ import annotations

import importlib
import os
import sys

from experiments import cli
from landscape.engine.protocols import check_experiment

USAGE = (
    "usage: python -m experiments.run MODULE --config=FILE [--config.a.b=value ...] "
    "[--workdir=DIR] [--resume]"
)


def main(argv: list[str]) -> int:
    """The command line `argv` (argv[0] the program, argv[1] the module) run in this process;
    returns the exit status."""
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(f"{USAGE}\n\n{__doc__.strip()}")
        return 0 if len(argv) >= 2 else cli.EXIT_USAGE
    name = argv[1]
    if name.startswith("-"):
        return _fail(f"{name}: name the experiment module first, e.g. mystudy.experiment.")
    if name.endswith(".py"):
        return _fail(
            f"{name}: give the module's import name (e.g. mystudy.experiment for "
            "mystudy/experiment.py), run from the folder it is imported from."
        )
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # `python -m` puts it there; in-process callers may not
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as error:
        return _fail(f"no module {name} ({error}): run from the folder it is imported from.")
    try:
        experiment = check_experiment(module)
    except TypeError as error:
        return _fail(str(error))
    return cli.main(experiment, [f"python -m experiments.run {name}", *argv[2:]])


def _fail(message: str) -> int:
    print(message, file=sys.stderr)
    return cli.EXIT_USAGE


if __name__ == "__main__":  # the Ctrl-C hook first, then this module's imports (jax) again
    from experiments import launch

    launch.main("experiments.run")
