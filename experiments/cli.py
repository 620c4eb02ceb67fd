"""What every experiment CLI shares: overrides, validation, workdirs, resume and provenance.

    python -m experiments.<paper> --config=configs/<file>.py[:variant] [--config.a.b=value ...]
        [--workdir=DIR] [--overwrite | --resume] [--checkpoint_seconds=S] [--host_devices=N]
        [--compilation_cache=DIR | --compilation_cache=''] [--formulations=cpu|plain]
        [--coordinator_address=HOST:PORT --num_processes=P --process_id=I | --distributed]
    python -m experiments.<paper> --config=runs/<name>/<time>/config.json   # rerun a record
    python -m experiments.<paper> --workdir=runs/<name>/<time> --resume      # continue a run

Overrides, sweep axes and exit statuses (2: a mistake, 130: interrupted): docs/design/experiments.md
"""

from __future__ import annotations

import contextlib
import sys
import time

from experiments import commands, host, options, processes, running, stops
from landscape.engine import backend, distributed, records
from landscape.engine import config as config_lib
from landscape.engine import host as landscape_host
from landscape.engine.overrides import UsageError, split_overrides
from landscape.engine.protocols import Experiment

EXIT_USAGE, EXIT_FAILED, EXIT_INTERRUPTED = (
    stops.EXIT_USAGE,
    stops.EXIT_FAILED,
    stops.EXIT_INTERRUPTED,
)


def run(experiment: Experiment) -> None:
    """The entry point of `python -m experiments.<paper>`."""
    sys.exit(main(experiment, sys.argv))


def main(experiment: Experiment, argv: list[str]) -> int:
    """Run the CLI on `argv` (argv[0] is the program) in this process; returns the exit status.
    What it prints may go nowhere (a closed pipe or descriptor, a full device): the run goes on
    (`stops.output`)."""
    with stops.output():
        return _main(experiment, argv)


def _main(experiment: Experiment, argv: list[str]) -> int:
    started = time.perf_counter()
    try:
        overrides, rest = split_overrides(argv[1:])
        if {"--help", "-h", "--helpshort", "--helpfull"} & set(rest):
            print(commands.help_text(experiment, __doc__))
            return 0
        options.parse([argv[0]] + rest)
        if processes.flags_error():
            raise UsageError(processes.flags_error())
        cfg, workdir_path = commands.resolve(experiment, overrides)
    except (config_lib.ConfigError, records.WorkdirError) as error:  # UsageError among them
        return stops.fail(str(error), EXIT_USAGE)
    validated = time.perf_counter() - started

    try:
        cache = running.start_backend(experiment, cfg)
    except landscape_host.BackendUnavailable as error:
        return stops.fail(str(error), EXIT_USAGE)
    try:  # over several processes: every one runs this config, or none trains
        distributed.same_config(cfg.to_dict())
    except config_lib.ConfigError as error:
        return stops.fail(str(error), EXIT_USAGE)
    forced = host.FORMULATIONS.value
    with backend.tuning(forced) if forced else contextlib.nullcontext():
        return running.run(experiment, argv, cfg, workdir_path, validated, cache)
