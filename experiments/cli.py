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

import atexit
import contextlib
import importlib.util
import json
import logging
import pathlib
import shlex
import shutil
import sys
import tempfile
import time
import traceback
import types
from typing import Any, cast

import ml_collections
from absl import flags

import experiments
from experiments import host, processes, stops
from experiments.overrides import apply_overrides as apply_overrides  # cli's names
from experiments.overrides import nested as nested
from landscape.engine import backend, distributed, records, training
from landscape.engine import config as config_lib
from landscape.engine import host as landscape_host
from landscape.engine import provenance as provenance_lib
from landscape.engine.protocols import Experiment

FLAGS = flags.FLAGS
_CONFIG = flags.DEFINE_string(
    "config", None, "configs/<file>.py[:variant], or a workdir's config.json to rerun it."
)
_WORKDIR = flags.DEFINE_string("workdir", None, "Output folder (default runs/<name>/<UTC time>/).")
_OVERWRITE = flags.DEFINE_bool(
    "overwrite", False, "Remove the files earlier runs wrote in the workdir first (and no other)."
)
_KEEP_OTHERS = flags.DEFINE_bool(
    "keep_others",
    False,
    "With --overwrite: keep files in the workdir that no run wrote, instead of refusing.",
)
_FORCE = flags.DEFINE_bool(
    "force",
    False,
    "With --overwrite, for a workdir whose manifest.json cannot be read: remove the files a run "
    "writes, recognised by their names, and keep the rest.",
)
_RESUME = flags.DEFINE_bool(
    "resume",
    False,
    "Continue the run recorded in --workdir from its "
    "latest checkpoint (--config may then be left out).",
)
_OTHER_CODE = flags.DEFINE_bool(
    "other_code",
    False,
    "With --resume: continue a run that other code wrote (the library's sources changed since); "
    "config.json's provenance and manifest.json record it.",
)
_CHECKPOINT_SECONDS = flags.DEFINE_float(
    "checkpoint_seconds",
    60.0,
    "Save the training state at least this often (at chunk "
    "boundaries; also when a program ends or is stopped).",
    lower_bound=0.0,
)

EXIT_USAGE, EXIT_FAILED, EXIT_INTERRUPTED = (
    stops.EXIT_USAGE,
    stops.EXIT_FAILED,
    stops.EXIT_INTERRUPTED,
)


class UsageError(ValueError):
    """A mistake in the command: one sentence, exit status 2."""


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
        overrides, rest = _split_overrides(argv[1:])
        if {"--help", "-h", "--helpshort", "--helpfull"} & set(rest):
            print(_help(experiment))
            return 0
        _parse_flags([argv[0]] + rest)
        if host.distributed_flags_error():
            raise UsageError(host.distributed_flags_error())
        cfg, workdir_path = _resolve(experiment, overrides)
    except (UsageError, config_lib.ConfigError, records.WorkdirError) as error:
        return _fail(str(error), EXIT_USAGE)
    validated = time.perf_counter() - started

    try:
        cache = _start_backend(experiment, cfg)
    except landscape_host.BackendUnavailable as error:
        return _fail(str(error), EXIT_USAGE)
    try:  # over several processes: every one runs this config, or none trains
        distributed.same_config(cfg.to_dict())
    except config_lib.ConfigError as error:
        return _fail(str(error), EXIT_USAGE)
    forced = host.FORMULATIONS.value
    with backend.tuning(forced) if forced else contextlib.nullcontext():
        return _run(experiment, argv, cfg, workdir_path, validated, cache)


def _run(
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
                overwrite=_OVERWRITE.value,
                resume=_RESUME.value,
                keep_others=_KEEP_OTHERS.value,
                force=_FORCE.value,
                checkpoint_seconds=_CHECKPOINT_SECONDS.value,
                other_code=_OTHER_CODE.value,
            )
        except records.WorkdirError as error:  # in use since it was checked, or damaged
            return _fail(str(error), EXIT_USAGE)
    else:  # the same run, its records thrown away: process 0 writes records and checkpoints
        workdir = records.Workdir(
            tempfile.mkdtemp(prefix="landscape-process-"), _CHECKPOINT_SECONDS.value
        )
        atexit.register(shutil.rmtree, workdir.path, ignore_errors=True)
        workdir.writes_checkpoints = False
        # --resume reads process 0's checkpoints; a fresh run reads none (with --overwrite,
        # process 0 may still be removing the old ones)
        if _RESUME.value:
            workdir.read_checkpoints_of(workdir_path)
    workdir.provenance = provenance(
        argv,
        validation_seconds=validated,
        compilation_cache=cache,
        **({"other_code": True} if _OTHER_CODE.value else {}),  # a resume under other code
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
    resume_line = f"{command(experiment)} --workdir={shlex.quote(str(path))} --resume"
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
                    EXIT_FAILED,
                )
            raise
        if signals.at_once:  # a Ctrl-C that a library swallowed (e.g. in a gc callback)
            return _fail(
                f"Interrupted: the run had written its records when it could stop; they are "
                f"complete in {path}.",
                EXIT_INTERRUPTED,
            )
    return 0


# ----------------------------------------------------------------------------- the command line


def _split_overrides(args: list[str]) -> tuple[list[tuple[str, str]], list[str]]:
    """(--config.a.b=value pairs as ("a.b", "value"), the other arguments)."""
    overrides, rest, i = [], [], 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("--config."):
            name, eq, value = arg[len("--config.") :].partition("=")
            if not eq:
                if i + 1 >= len(args) or args[i + 1].startswith("--"):
                    raise UsageError(f"--config.{name} needs a value: --config.{name}=VALUE.")
                value, i = args[i + 1], i + 1
            if not name:
                raise UsageError(f"{arg}: name a field, e.g. --config.train.num_steps=200.")
            overrides.append((name, value))
        else:
            rest.append(arg)
        i += 1
    return overrides, rest


def _parse_flags(argv: list[str]) -> None:
    FLAGS.unparse_flags()
    try:
        extra = FLAGS(argv)
    except flags.Error as error:
        message = str(error).replace(" ?", "?")  # absl: "Did you mean: x ?"
        raise UsageError(message if message.endswith((".", "?")) else message + ".") from None
    if len(extra) > 1:
        raise UsageError(f"unexpected argument {extra[1]!r}: flags are --name=value.")


def _help(experiment: Experiment) -> str:
    paper = _paper(experiment)
    module = sys.modules.get(f"experiments.{paper}") if paper else experiment
    ours = [
        _CONFIG,
        _WORKDIR,
        _OVERWRITE,
        _KEEP_OTHERS,
        _FORCE,
        _RESUME,
        _OTHER_CODE,
        _CHECKPOINT_SECONDS,
        host.HOST_DEVICES,
        host.COMPILATION_CACHE,
        host.FORMULATIONS,
        host.COORDINATOR,
        host.NUM_PROCESSES,
        host.PROCESS_ID,
        host.DISTRIBUTED,
        host.PROCESS_TIMEOUT,
    ]
    lines = [(module.__doc__ or "").strip(), "", __doc__.strip(), "", "flags:"]
    lines += [f"  --{f.name}: {FLAGS[f.name].help}" for f in ours]
    return "\n".join(lines)


def _paper(experiment: Experiment) -> str | None:
    """The paper of `landscape.<paper>.experiment`; None for any other module (a user's)."""
    parts = experiment.__name__.split(".")
    is_paper = len(parts) == 3 and parts[0] == "landscape" and parts[2] == "experiment"
    return parts[1] if is_paper else None


def command(experiment: Experiment) -> str:
    """The command that runs `experiment`: a paper's own CLI, or experiments.run with the
    module's name."""
    paper = _paper(experiment)
    return (
        f"python -m experiments.{paper}"
        if paper
        else f"python -m experiments.run {experiment.__name__}"
    )


_fail = stops.fail  # one line on stderr, and the exit status


# ----------------------------------------------------------------------------- the config


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


def _resolve(
    experiment: Experiment, overrides: list[tuple[str, str]]
) -> tuple[ml_collections.ConfigDict, pathlib.Path]:
    """The validated config and the workdir path, creating nothing."""
    resume, workdir = _RESUME.value, _WORKDIR.value
    stored = None
    if _OTHER_CODE.value and not resume:
        raise UsageError("--other_code goes with --resume (a fresh run is this code's alone).")
    records.check_checkpoint_seconds(_CHECKPOINT_SECONDS.value, "--checkpoint_seconds")
    if resume:
        if not workdir:
            raise UsageError("--resume needs --workdir: the folder of the run to continue.")
        records.check_path(workdir, overwrite=_OVERWRITE.value, resume=True, force=_FORCE.value)
        records.check_resumable(workdir)  # what it reads is intact (again once it is locked)
        records.check_code(pathlib.Path(workdir), _OTHER_CODE.value)  # and the code that wrote it
        stored = records.load_config_json(pathlib.Path(workdir) / "config.json")
        _check_program(experiment, pathlib.Path(workdir))
    if _CONFIG.value is not None:
        data = load_config(_CONFIG.value)
    elif stored is not None:
        data = json.loads(json.dumps(stored))  # a copy: a resume compares them after
    else:
        raise UsageError(
            f"--config is required{_config_example(experiment)} "
            "(or --workdir=DIR --resume to continue a recorded run)."
        )
    schema = config_lib.flatten(experiment.default_config())
    notes = apply_overrides(data, overrides, schema)
    cfg = ml_collections.ConfigDict(nested(data))  # sweep axes may be dotted: "optim.lr"
    experiment.validate(cfg)
    if stored is not None:
        records.require_same_config(stored, cfg.to_dict(), cast(str, workdir))
    name = cfg.get("name") or experiment.__name__.replace(".", "_")
    path = pathlib.Path(workdir) if workdir else records.new_path(name)
    # Every process checks (only process 0 writes): a process other than 0 that skipped it
    # would wait for a coordinator that already refused a used workdir. Nothing is written
    # before all processes have joined, so none of them sees process 0's new records here.
    records.check_path(
        path,
        overwrite=_OVERWRITE.value,
        resume=resume,
        keep_others=_KEEP_OTHERS.value,
        force=_FORCE.value,
    )
    for note in notes:
        print(note)
    return cfg, path


def _check_program(experiment: Experiment, workdir: pathlib.Path) -> None:
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


def load_config(spec: str) -> dict[str, Any]:
    """A config as a plain dict from `configs/<file>.py[:variant]` or a workdir's config.json."""
    path, _, variant = spec.partition(":")
    file = pathlib.Path(path)
    if file.suffix not in (".py", ".json"):
        raise UsageError(
            f"--config={spec}: a config is a .py file (configs/<file>.py[:variant]) "
            "or a workdir's config.json."
        )
    if not file.is_file():
        raise UsageError(f"--config={spec}: no config file {path}.")
    if file.suffix == ".json":
        if variant:
            raise UsageError(f"--config={spec}: a config.json has no variants.")
        try:
            return records.load_config_json(file)
        except (ValueError, OSError) as error:
            raise UsageError(f"--config={spec}: cannot read it as a config ({error}).") from None
    module = _import_file(file)
    get_config = getattr(module, "get_config", None)
    if not callable(get_config):
        raise UsageError(f"{path} has no get_config() function.")
    try:
        cfg = get_config(variant) if variant else get_config()
    except TypeError as error:
        if variant and "positional argument" in str(error):
            raise UsageError(f"--config={spec}: {path} has no variants.") from None
        raise UsageError(_where(error, file)) from None
    except Exception as error:
        raise UsageError(_where(error, file, spec)) from None
    return cfg.to_dict() if hasattr(cfg, "to_dict") else dict(cfg)


def _import_file(file: pathlib.Path) -> types.ModuleType:
    name = f"_config_{abs(hash(str(file.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, file)
    assert spec is not None and spec.loader is not None  # a .py file always has both
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as error:
        raise UsageError(f"{file}:{error.lineno}: SyntaxError: {error.msg}.") from None
    except Exception as error:
        raise UsageError(_where(error, file)) from None
    return module


def _where(error: Exception, file: pathlib.Path, spec: str | None = None) -> str:
    """`<file>:<line>: <Error>: <message>` at the innermost frame inside `file`."""
    line = None
    for frame in traceback.extract_tb(error.__traceback__):
        if pathlib.Path(frame.filename).resolve() == file.resolve():
            line = frame.lineno
    if isinstance(error, ValueError) and spec and ":" in spec:  # e.g. an unknown variant
        return f"--config={spec}: {error}"
    where = f"{file}:{line}" if line else str(file)
    return f"{where}: {type(error).__name__}: {error}"


# ----------------------------------------------------------------------------- the process


def _start_backend(experiment: Experiment, cfg: ml_collections.ConfigDict) -> str | None:
    """Host devices, allocator, compilation cache (its folder is returned), float32 matmuls (the
    same `landscape.setup()` a script calls), then x64 and quiet logs. In-process use (tests)
    finds the backend up already and keeps it as it is."""
    settings = landscape_host.setup(
        host.HOST_DEVICES.value,
        host.COMPILATION_CACHE.value,
        before_backend=host.start_distributed,  # also before the backends start
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


_git = provenance_lib.git_commit  # the report reads it
