"""A run's config run in its workdir: the process's backend set up, the workdir opened (its lock
taken), the records started, the experiment run, and every way it can end in one sentence and an
exit status (experiments/stops.py)."""

from __future__ import annotations

import atexit
import logging
import pathlib
import shlex
import shutil
import tempfile
from typing import Any

import ml_collections

import experiments
from experiments import commands, host, options, processes, stops
from landscape.engine import config as config_lib
from landscape.engine import host as landscape_host
from landscape.engine import provenance as provenance_lib
from landscape.engine import records, training
from landscape.engine.protocols import Experiment

_fail = stops.fail  # one line on stderr, and the exit status


def run(
    experiment: Experiment,
    argv: list[str],
    cfg: ml_collections.ConfigDict,
    workdir_path: pathlib.Path,
    validated: float,
    cache: str | None,
) -> int:
    """The resolved config run in its workdir, with records, status and interruptions."""
    import jax

    primary = jax.process_index() == 0
    experiments.opened = True  # a Ctrl-C from here on is reported by the run (stops)
    if primary:
        try:  # takes the workdir's lock, held until the run ends (one writer per workdir)
            workdir = records.Workdir.open(
                workdir_path,
                overwrite=options.OVERWRITE.value,
                resume=options.RESUME.value,
                keep_others=options.KEEP_OTHERS.value,
                force=options.FORCE.value,
                checkpoint_seconds=options.CHECKPOINT_SECONDS.value,
                other_code=options.OTHER_CODE.value,
            )
        except records.WorkdirError as error:  # in use since it was checked, or damaged
            return _fail(str(error), stops.EXIT_USAGE)
    else:  # the same run, its records thrown away: process 0 writes records and checkpoints
        workdir = records.Workdir(
            tempfile.mkdtemp(prefix="landscape-process-"), options.CHECKPOINT_SECONDS.value
        )
        atexit.register(shutil.rmtree, workdir.path, ignore_errors=True)
        workdir.writes_checkpoints = False
        # --resume reads process 0's checkpoints; a fresh run reads none (with --overwrite,
        # process 0 may still be removing the old ones)
        if options.RESUME.value:
            workdir.read_checkpoints_of(workdir_path)
    workdir.provenance = provenance(
        argv,
        validation_seconds=validated,
        compilation_cache=cache,
        **({"other_code": True} if options.OTHER_CODE.value else {}),  # a resume under other code
    )
    spread = (
        f" over {jax.process_count()} processes (this is process {jax.process_index()})"
        if jax.process_count() > 1
        else ""
    )
    print(
        f"backend {workdir.provenance['backend']}: {workdir.provenance['device_count']} "
        f"device(s) ({', '.join(workdir.provenance['devices'])}){spread}; compilation "
        f"cache: {cache or 'off'}"
    )
    try:
        return _run_in(experiment, cfg, workdir, workdir_path)
    finally:
        workdir.close()  # the lock; the OS releases it too if the process is killed


def _run_in(experiment: Experiment, cfg: Any, workdir: records.Workdir, path: pathlib.Path) -> int:
    """`_run` once the workdir is open: its status, the experiment, how it ended."""
    import jax

    primary = jax.process_index() == 0
    resume_line = f"{commands.command(experiment)} --workdir={shlex.quote(str(path))} --resume"
    if host.FORMULATIONS.value:
        resume_line += f" --formulations={host.FORMULATIONS.value}"
    if jax.process_count() > 1:  # process 0's workdir, which every process resumes from
        resume_line += " (on every process, with its multi-process flags)"
    training.clear_stop()
    if primary and jax.process_count() > 1:  # a lost process: summary.json says so
        lost = "stopped: a process was lost"
        processes.on_end(
            lambda why: stops.write_status(workdir, lost, message=why, resume=resume_line)
        )
    with stops.on_signals() as signals:
        try:
            stops.start_records(workdir, cfg, resume_line)  # config.json first
            experiment.run(cfg, workdir, **({} if primary else {"progress": None}))
        except (KeyboardInterrupt, OSError, config_lib.ConfigError, records.WorkdirError) as error:
            return stops.ended(error, workdir, resume_line)
        except (training.Interrupted, training.NonFiniteLossError) as error:
            return stops.ended(error, workdir, resume_line)
        except Exception as error:  # a bug: keep the traceback for its report
            processes.failed(error, host.PROCESS_TIMEOUT.value)  # a lost process: ends here
            stops.write_status(workdir, "failed", message=f"{type(error).__name__}: {error}")
            if "RESOURCE_EXHAUSTED" in str(error):
                return _fail(
                    f"XLA ran out of memory ({str(error).splitlines()[0][:200]}); "
                    f"records so far are in {path}.",
                    stops.EXIT_FAILED,
                )
            raise
        if signals.at_once:  # a Ctrl-C that a library swallowed (e.g. in a gc callback)
            return _fail(
                f"Interrupted: the run had written its records when it could stop; they are "
                f"complete in {path}.",
                stops.EXIT_INTERRUPTED,
            )
    return 0


def start_backend(experiment: Experiment, cfg: ml_collections.ConfigDict) -> str | None:
    """Host devices, allocator, compilation cache (its folder is returned), float32 matmuls (the
    same `landscape.setup()` a script calls), then x64 and quiet logs. In-process use (tests)
    finds the backend up already and keeps it as it is."""
    settings = landscape_host.setup(
        host.HOST_DEVICES.value,
        host.COMPILATION_CACHE.value,
        before_backend=processes.start,  # also before the backends start
        progress=None,
    )
    if settings.cache_note:  # the run goes on without the cache: one line says why
        print(settings.cache_note)
    logging.getLogger("absl").setLevel(logging.WARNING)  # orbax's INFO lines
    if experiment.needs_x64(cfg):
        import jax

        jax.config.update("jax_enable_x64", True)
    return settings.compilation_cache


def provenance(argv: list[str], **extra: Any) -> dict[str, Any]:
    """What ran a config (records.provenance), the command being this CLI's."""
    command = " ".join(
        [
            "python -m experiments." + pathlib.Path(argv[0]).stem
            if argv[0].endswith(".py")
            else argv[0]
        ]
        + list(argv[1:])
    )
    return provenance_lib.provenance(command, **extra)
