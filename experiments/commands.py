"""What a run's command line names: the experiment's own command, its config and workdir
resolved and checked (creating nothing: records.check_path is the workdir policy), and its help."""

from __future__ import annotations

import contextlib
import json
import pathlib
import shlex
import sys
from typing import Any, cast

import ml_collections
from absl import flags

from experiments import host, options
from landscape.engine import records
from landscape.engine.overrides import UsageError, configured, load_config
from landscape.engine.protocols import Experiment


def help_text(experiment: Experiment, usage: str) -> str:
    """--help: the program's docstring, the `usage` of every run's command line, the flags."""
    paper = paper_of(experiment)
    module = sys.modules.get(f"experiments.{paper}") if paper else experiment
    ours: list[flags.FlagHolder[Any]] = [
        options.CONFIG,
        options.WORKDIR,
        options.OVERWRITE,
        options.KEEP_OTHERS,
        options.FORCE,
        options.RESUME,
        options.OTHER_CODE,
        options.CHECKPOINT_SECONDS,
        host.HOST_DEVICES,
        host.COMPILATION_CACHE,
        host.FORMULATIONS,
        host.COORDINATOR,
        host.NUM_PROCESSES,
        host.PROCESS_ID,
        host.DISTRIBUTED,
        host.PROCESS_TIMEOUT,
    ]
    lines = [(module.__doc__ or "").strip(), "", usage.strip(), "", "flags:"]
    lines += [f"  --{f.name}: {flags.FLAGS[f.name].help}" for f in ours]
    return "\n".join(lines)


def paper_of(experiment: Experiment) -> str | None:
    """The paper of `landscape.<paper>.experiment`; None for any other module (a user's)."""
    parts = experiment.__name__.split(".")
    is_paper = len(parts) == 3 and parts[0] == "landscape" and parts[2] == "experiment"
    return parts[1] if is_paper else None


def command(experiment: Experiment) -> str:
    """The command that runs `experiment`: a paper's own CLI, or experiments.run with the
    module's name."""
    paper = paper_of(experiment)
    return (
        f"python -m experiments.{paper}"
        if paper
        else f"python -m experiments.run {experiment.__name__}"
    )


_PAPER_CONFIGS = {
    "scan_snap": "configs/syn_small.py",
    "markov": "configs/markov.py",
    "ngrams": "configs/ngrams.py",
    "recall": "configs/recall.py",
}


def _config_example(experiment: Experiment) -> str:
    """The end of "--config is required" for `experiment`: a paper's config file, or, for a
    user's module `mystudy.experiment`, a file `mystudy/config.py` with a get_config()."""
    parts = experiment.__name__.split(".")
    if parts[0] == "landscape" and len(parts) > 1 and parts[1] in _PAPER_CONFIGS:
        return f", e.g. --config={_PAPER_CONFIGS[parts[1]]}"
    example = "/".join([*parts[:-1], "config.py"])
    return f": a Python file whose get_config() returns the config, e.g. --config={example}"


def resolve(
    experiment: Experiment, overrides: list[tuple[str, str]]
) -> tuple[ml_collections.ConfigDict, pathlib.Path]:
    """The validated config and the workdir path, creating nothing."""
    resume, workdir, other_code = (
        options.RESUME.value,
        options.WORKDIR.value,
        options.OTHER_CODE.value,
    )
    overwrite, force = options.OVERWRITE.value, options.FORCE.value
    stored = None
    if other_code and not resume:
        raise UsageError("--other_code goes with --resume (a fresh run is this code's alone).")
    records.check_checkpoint_seconds(options.CHECKPOINT_SECONDS.value, "--checkpoint_seconds")
    if resume:
        if not workdir:
            raise UsageError("--resume needs --workdir: the folder of the run to continue.")
        records.check_path(workdir, overwrite=overwrite, resume=True, force=force)
        records.check_resumable(workdir)  # what it reads is intact (again once it is locked)
        records.check_code(pathlib.Path(workdir), other_code)  # and the code that wrote it
        stored = records.load_config_json(pathlib.Path(workdir) / "config.json")
        check_program(experiment, pathlib.Path(workdir))
    if options.CONFIG.value is not None:
        data = load_config(options.CONFIG.value)
    elif stored is not None:
        data = json.loads(json.dumps(stored))  # a copy: a resume compares them after
    else:
        raise UsageError(
            f"--config is required{_config_example(experiment)} "
            "(or --workdir=DIR --resume to continue a recorded run)."
        )
    cfg, notes = configured(experiment, data, overrides)
    if stored is not None:
        records.require_same_config(stored, cfg.to_dict(), cast(str, workdir))
    name = cfg.get("name") or experiment.__name__.replace(".", "_")
    path = pathlib.Path(workdir) if workdir else records.new_path(name)
    # Every process checks (only process 0 writes): a process other than 0 that skipped it
    # would wait for a coordinator that already refused a used workdir. Nothing is written
    # before all processes have joined, so none of them sees process 0's new records here.
    records.check_path(
        path,
        overwrite=overwrite,
        resume=resume,
        keep_others=options.KEEP_OTHERS.value,
        force=force,
    )
    for note in notes:
        print(note)
    return cfg, path


def check_program(experiment: Experiment, workdir: pathlib.Path) -> None:
    """--resume with the CLI that ran the workdir's run (its config.json's provenance, or the
    paper its config belongs to): another one is refused in one sentence naming it."""
    ran = ""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        ran = str(json.loads((workdir / "config.json").read_text())["provenance"]["command"])
    words = ran.split()
    theirs = " ".join(words[: 4 if words[2:3] == ["experiments.run"] else 3])
    if not theirs.startswith("python -m experiments."):
        paper = records.paper_of(records.load_config_json(workdir / "config.json"))
        theirs = f"python -m experiments.{paper}" if paper else ""
    ours = command(experiment)
    if theirs and theirs != ours:
        raise UsageError(
            f"--resume: {workdir} holds a run of {theirs}, not of {ours}: continue it with "
            f"{theirs} --workdir={shlex.quote(str(workdir))} --resume."
        )
