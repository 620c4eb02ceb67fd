"""A grid of swept numbers x seeds as one compiled program, laid over every visible device.

The grid is flattened into one run axis R = (product of axis lengths) x seeds, sharded over a 1-D
`jax.sharding.Mesh` of all devices (GPUs, TPU cores, hosts after `jax.distributed.initialize()`,
or forced CPU devices) and padded to a multiple of the device count. `run(..., workdir=<folder>)`
writes a complete record (config.json with provenance, metrics.jsonl, arrays.npz, summary.json).
See docs/guide/sweeps.md and docs/guide/own_task.md.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import pathlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from landscape import _checks
from landscape.core import batches as batches_lib
from landscape.engine import config as config_lib
from landscape.engine import provenance as provenance_lib
from landscape.engine import records, training
from landscape.engine.track import Track


@dataclasses.dataclass(frozen=True)
class Grid:
    """Named axes of swept values, times seeds; runs are ordered axis-major, seeds last.

    zipped=True pairs the axes instead of taking their product (all of one length: the points
    (p, q) = (0.5, 0.8), (0.2, 0.3) rather than four combinations); the grid then has one axis.
    """

    axes: dict[str, np.ndarray]
    seeds: np.ndarray
    zipped: bool = False

    @classmethod
    def make(
        cls,
        axes: Mapping[str, Any],
        seeds: Sequence[int] | np.ndarray,
        zipped: bool = False,
    ) -> Grid:
        """Axes {name: values}, nested ({"optim": {"lr": [...]}}) or dotted ({"optim.lr": [...]})
        alike (both name the axis "optim.lr"), times `seeds`: a list of seeds (`range(4)` for
        four runs per cell; a bare int is refused, as it reads both ways)."""
        if not isinstance(axes, (Mapping, ml_collections.ConfigDict)):
            raise _checks.ArgumentTypeError(
                f"axes = {axes!r}: must be a dict {{name: values}}, e.g. {{'lr': [0.1, 0.3]}}, "
                f"not {_checks.type_name(axes)}."
            )
        flat = {k: _axis(k, v) for k, v in config_lib.flatten(axes).items()}
        if zipped and len({len(v) for v in flat.values()}) > 1:
            raise ValueError(
                "zipped sweep axes must have equal lengths; got "
                + ", ".join(f"{k}: {len(v)}" for k, v in flat.items())
                + "."
            )
        return cls(flat, _seeds(seeds), bool(zipped))

    @property
    def shape(self) -> tuple[int, ...]:
        if self.zipped:
            return (len(next(iter(self.axes.values()))) if self.axes else 1, len(self.seeds))
        return tuple(len(v) for v in self.axes.values()) + (len(self.seeds),)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    def flat(self) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """(hparams {name: (R,)}, seeds (R,)) for every cell and seed."""
        cells = (
            list(zip(*self.axes.values(), strict=True))  # equal lengths: make() checks
            if self.zipped
            else list(itertools.product(*self.axes.values()))
        ) or [()]
        hparams = {
            k: np.repeat([c[i] for c in cells], len(self.seeds)) for i, k in enumerate(self.axes)
        }
        return hparams, np.tile(self.seeds, len(cells))

    def unflatten(self, x: np.ndarray) -> np.ndarray:
        """(R, ...) -> (*axes, seeds, ...)."""
        x = np.asarray(x)
        return x.reshape(self.shape + x.shape[1:])


def _axis(name: str, values: Any) -> np.ndarray:
    """A sweep axis as a non-empty float64 vector of finite numbers."""
    _checks.check_real(f"sweep axis {name!r}", values, scalar=False)
    flat = np.asarray(values, np.float64).reshape(-1)
    if not flat.size:
        raise ValueError(f"sweep axis {name!r} is empty: give it at least one value.")
    return flat


def _seeds(seeds: Any) -> np.ndarray:
    """The seeds as a non-empty int64 vector; an int is refused (one seed or that many?)."""
    if isinstance(seeds, (int, np.integer)) and not isinstance(seeds, bool):
        raise _checks.ArgumentTypeError(
            f"seeds = {seeds!r}: must be a list of seeds, not an int: give range({seeds}) "
            f"for {seeds} seeds, or [{seeds}] for the one seed {seeds}."
        )
    array = np.asarray(seeds).reshape(-1)
    if not array.size:
        raise ValueError("seeds is empty: give at least one seed (e.g. range(4) or [0]).")
    if array.dtype == bool or not np.issubdtype(array.dtype, np.integer):
        raise _checks.ArgumentTypeError(
            f"seeds = {seeds!r}: must be a list of integers (e.g. range(4)), not "
            f"{_checks.type_name(seeds)} of dtype {array.dtype}."
        )
    array = array.astype(np.int64)
    if array.min() < 0 or array.max() >= 2**32:
        raise ValueError(f"seeds = {seeds!r}: must be integers in [0, 2^32).")
    return array


def run_axis_sharding(devices: Sequence[jax.Device] | None = None) -> NamedSharding:
    """Shards the leading (run) axis of every array over a 1-D mesh of `devices` (default: all)."""
    mesh = Mesh(np.asarray(devices if devices is not None else jax.devices()), ("runs",))
    return NamedSharding(mesh, PartitionSpec("runs"))


def _checked_hparams(
    problem: training.Problem,
    optim: ml_collections.ConfigDict | Mapping[str, Any],
    base_hparams: Mapping[str, Any],
    grid: Grid,
    progress: Any,
) -> tuple[ml_collections.ConfigDict, dict[str, Any]]:
    """The optimizer completed with its defaults and the flat traced hyperparameters, each
    checked against the problem and the grid's axes (one sentence per mistake)."""
    optim = full_optim(optim)
    flat = config_lib.flatten(base_hparams)
    check_optim_fields(optim, flat, progress)
    unknown = set(grid.axes) - set(flat)
    if unknown:
        raise ValueError(
            f"sweep axes {sorted(unknown)} are not hyperparameters of this problem "
            f"(known: {sorted(flat)})."
        )
    check_learning_rates(problem, flat)
    return optim, flat


def run(
    problem: training.Problem,
    optim: ml_collections.ConfigDict | Mapping[str, Any],
    base_hparams: Mapping[str, Any],
    grid: Grid,
    *,
    devices: Sequence[jax.Device] | None = None,
    dtype: Any = np.float32,
    workdir: str | os.PathLike | records.Workdir | None = None,
    config: Any = None,
    resume: bool = False,
    overwrite: bool = False,
    keep_others: bool = False,
    other_code: bool = False,
    **train_kwargs: Any,
) -> training.RunResult:
    """Train every cell of `grid` (and every seed) as one program, sharded over `devices`.

    `base_hparams` gives every traced number ({"lr": 0.1} or nested, {"optim": {"lr": 0.1}});
    the grid's axes override some of them per cell. The result has R = grid.size runs in grid
    order (use `grid.unflatten`), with each run's initial and final parameters.

    Learning rates, the one way: a traced hyperparameter, read by `problem.learning_rates`
    (`learning_rates=lambda hp: hp["lr"]`, base_hparams={"lr": 0.1}, an axis "lr" to sweep it).
    `optim` holds the optimizer without its learning rate (training.default_optim_config(); a
    dict of some of its fields is completed with the defaults). An optim field of another name
    (e.g. optim.lr) is refused unless it is also the traced hyperparameter "optim.<field>" (the
    paper packages' configs do so): it would be ignored.

    workdir: a folder: a complete record of the sweep (`record`), continued from its checkpoint
    with `resume`, or replaced with `overwrite` (which removes only the files earlier runs wrote,
    and refuses a folder holding others unless `keep_others`; `other_code`: resume a record that
    other code wrote, which it then records); a `records.Workdir` with `config`
    given: the same record into it (an experiment module run by the CLI); a `records.Workdir` alone:
    metrics.jsonl and checkpoints only (a paper experiment writes the rest itself).
    `config`: the user's config (ConfigDict or dict) for config.json. A single run of a problem
    with a `batch_size` splits its batch over the devices instead (`training.batch_devices`).
    `dtype`: the parameters' floating dtype (`problem.init`'s floating leaves are cast to it) and
    the traced hyperparameters'; float64 needs x64 (`landscape.setup(x64=True)`).
    """
    problem, dtype = _checked_run(problem, grid, dtype, train_kwargs)
    progress = train_kwargs.get("progress", print)
    optim, base_hparams = _checked_hparams(problem, optim, base_hparams, grid, progress)
    target, complete = _open_workdir(
        workdir,
        config,
        resume=resume,
        overwrite=overwrite,
        keep_others=keep_others,
        other_code=other_code,
    )
    try:
        description = describe_run(optim, base_hparams, grid, dtype, train_kwargs)
        owned = complete and not isinstance(workdir, records.Workdir)  # else the CLI keeps status
        if target is not None and complete:
            target.write_config(config if config is not None else description)
        if target is not None and owned:
            target.write_status("running", started=(target.provenance or {}).get("time"))
        try:
            result = _train(
                problem, optim, base_hparams, grid, devices, dtype, target, train_kwargs
            )
        except Exception as error:  # stopped, or a failure in the user's problem
            if target is not None and owned:  # never left at "running"
                status, fields = _stopped_status(error)
                target.write_status(status, **fields)
            raise
        if target is not None and complete:
            record(target, result, description, progress)
        return result
    finally:
        if target is not None and target is not workdir:  # opened here: its lock goes now
            target.close()


def check_learning_rates(problem: training.Problem, base_hparams: Mapping[str, Any]) -> None:
    """One sentence when `problem.learning_rates` reads a hyperparameter that `base_hparams`
    (and so every axis of the grid) does not give: it ended in a KeyError while tracing."""
    hparams = {k: jnp.asarray(v) for k, v in base_hparams.items()}
    try:
        problem.learning_rates(hparams)
    except KeyError as error:
        raise ValueError(
            f"problem.learning_rates reads the hyperparameter {error.args[0]!r}, which "
            f"base_hparams does not give (it gives {sorted(base_hparams)}): name the learning "
            "rate there, and a sweep axis after it to sweep it."
        ) from None
    except Exception:  # noqa: BLE001 -- anything else is the step's to report, with its trace
        return


def _stopped_status(error: Exception) -> tuple[str, dict[str, Any]]:
    """summary.json's status (and its fields) for a sweep that `error` ended."""
    if isinstance(error, training.NonFiniteLossError):
        return "stopped at a non-finite loss", {"step": error.step, "message": str(error)}
    if isinstance(error, training.Interrupted):
        return "interrupted", {"step": error.step, "resume": "run again with resume=True"}
    return "failed", {"message": f"{type(error).__name__}: {error}"}


def _checked_run(
    problem: training.Problem, grid: Grid, dtype: Any, train_kwargs: Mapping[str, Any]
) -> tuple[training.Problem, np.dtype]:
    """`run`'s arguments checked before anything is written or compiled; the problem with its
    init's floating parameters in `dtype`."""
    if not isinstance(problem, training.Problem):
        raise _checks.ArgumentTypeError(
            f"problem = {problem!r}: must be a training.Problem, not {_checks.type_name(problem)}."
        )
    if not isinstance(grid, Grid):
        raise _checks.ArgumentTypeError(
            f"grid = {grid!r}: must be a sweeps.Grid, e.g. sweeps.Grid.make({{'lr': [0.1]}}, "
            f"seeds=range(4)), not {_checks.type_name(grid)}."
        )
    missing = [k for k in ("num_steps", "log_every") if k not in train_kwargs]
    if missing:
        raise TypeError(f"sweeps.run needs {' and '.join(missing)} (keyword arguments).")
    options = ("num_steps", "log_every", "chunk_steps", "on_nonfinite", "metrics_at", "ema_decay")
    training.check_run_options(**{k: train_kwargs[k] for k in options if k in train_kwargs})
    dtype = _checks.floating_dtype("dtype", dtype, "the parameters' and hyperparameters' dtype")
    if dtype.itemsize > 4 and not jax.config.read("jax_enable_x64"):
        raise ValueError(
            f"dtype = {dtype.name} needs 64-bit arrays, which JAX has off: call "
            "landscape.setup(x64=True) (or jax.config.update('jax_enable_x64', True)) first."
        )
    return dataclasses.replace(problem, init=_init_in(problem.init, dtype)), dtype


def _init_in(init: Callable[..., Any], dtype: np.dtype) -> Callable[..., Any]:
    """`init` with its floating parameters cast to `dtype` (a no-op where they are already)."""

    def cast_init(key: jax.Array, hparams: Any) -> Any:
        return jax.tree.map(
            lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x,
            init(key, hparams),
        )

    return cast_init


def _train(
    problem: training.Problem,
    optim: ml_collections.ConfigDict,
    base_hparams: dict[str, Any],
    grid: Grid,
    devices: Sequence[jax.Device] | None,
    dtype: Any,
    workdir: records.Workdir | None,
    train_kwargs: dict[str, Any],
) -> training.RunResult:
    """`training.train` over the grid's runs: one run's batch split over the devices, or the
    runs sharded over them."""
    swept, seeds = grid.flat()
    hparams = {
        k: np.asarray(swept.get(k, np.full(len(seeds), v)), np.float64)
        for k, v in base_hparams.items()
    }  # traced in `dtype`, recorded as given
    train_kwargs = dict(train_kwargs, hparam_dtype=dtype, workdir=workdir)
    devices = list(jax.devices() if devices is None else devices)
    if grid.size == 1:  # one run: its batch over the devices, where the problem allows it
        split = training.batch_devices(problem, devices)
        return training.train(
            problem,
            optim,
            hparams,
            seeds,
            batch_over=split if len(split) > 1 else None,
            **train_kwargs,
        )
    # no device holds only padding; several processes (jax.distributed) all take part
    sharding = run_axis_sharding(devices if jax.process_count() > 1 else devices[: grid.size])
    return training.train(
        problem,
        optim,
        hparams,
        seeds,
        sharding=sharding if sharding.mesh.size > 1 else None,
        **train_kwargs,
    )


def full_optim(optim: ml_collections.ConfigDict | Mapping[str, Any]) -> ml_collections.ConfigDict:
    """`optim` completed with `training.default_optim_config()`'s fields (a copy; a complete
    ConfigDict is returned as it is)."""
    defaults = training.default_optim_config()
    if isinstance(optim, ml_collections.ConfigDict) and set(defaults) <= set(optim):
        return optim
    given = optim.to_dict() if isinstance(optim, ml_collections.ConfigDict) else dict(optim)
    merged = ml_collections.ConfigDict(dict(defaults.to_dict(), **given))
    training.validate_optim(ml_collections.ConfigDict({"optim": merged}))
    return merged


# which standard optim fields each optimizer and schedule reads
_READS = {
    "momentum": lambda o: o.name == "sgd",
    "nesterov": lambda o: o.name == "sgd",
    "b1": lambda o: o.name != "sgd",
    "b2": lambda o: o.name != "sgd",
    "eps": lambda o: o.name != "sgd",
    "warmup_steps": lambda o: o.schedule != "constant",
    "initial_lr_fraction": lambda o: o.schedule != "constant",
    "final_lr_fraction": lambda o: o.schedule != "constant",
}


def check_optim_fields(
    optim: ml_collections.ConfigDict,
    hparams: Mapping[str, Any],
    progress: Callable[[str], object] | None = print,
) -> None:
    """Refuse an optim field that nothing reads: one outside the optimizer's own fields that is
    not the traced hyperparameter "optim.<field>" (e.g. optim.lr while the learning rate is the
    hyperparameter "lr"). A standard field the chosen optimizer or schedule does not read, set
    away from its default (momentum for Adam), gets a note (a shipped config does so)."""
    defaults = training.default_optim_config()
    for field in sorted(set(optim) - set(defaults)):
        if f"optim.{field}" not in hparams:
            traced = ", ".join(repr(k) for k in hparams) or "none"
            raise config_lib.ConfigError(
                f"optim.{field} = {optim[field]!r} would be ignored: learning rates (and any "
                "other swept number) are traced hyperparameters, read by "
                f"problem.learning_rates from base_hparams (here {traced}); set it there "
                f"(e.g. base_hparams={{'lr': {optim[field]!r}}}, learning_rates=lambda hp: "
                f"hp['lr']) and remove optim.{field}."
            )
    unread = [f for f, reads in _READS.items() if optim[f] != defaults[f] and not reads(optim)]
    if unread and progress:
        progress(
            f"note: optim.{', optim.'.join(unread)} not read by optim.name={optim.name!r}, "
            f"optim.schedule={optim.schedule!r}."
        )


def _open_workdir(
    workdir: str | os.PathLike | records.Workdir | None,
    config: Any,
    *,
    resume: bool,
    overwrite: bool,
    keep_others: bool = False,
    other_code: bool = False,
) -> tuple[records.Workdir | None, bool]:
    """(the Workdir to train into, whether `run` writes the complete record)."""
    if workdir is None:
        if config is not None or resume or overwrite:
            raise ValueError("config, resume and overwrite describe a record: give a workdir.")
        return None, False
    if isinstance(workdir, records.Workdir):
        if resume or overwrite:
            raise ValueError(
                "resume and overwrite apply to a workdir given as a folder; a records.Workdir "
                "is opened by its owner (records.Workdir.open)."
            )
        if config is not None and workdir.provenance is None:
            workdir.provenance = provenance_lib.provenance()
        return workdir, config is not None
    try:
        opened = records.Workdir.open(
            pathlib.Path(workdir),
            overwrite=overwrite,
            resume=resume,
            keep_others=keep_others,
            other_code=other_code,
        )
    except records.WorkdirError as error:  # the CLI's words, as this function's arguments
        message = str(error).replace("--workdir=", "workdir=").replace("--resume", "resume=True")
        message = message.replace("--keep_others", "keep_others=True")
        message = message.replace("--other_code", "other_code=True")
        raise records.WorkdirError(message.replace("--overwrite", "overwrite=True")) from None
    opened.provenance = provenance_lib.provenance()
    if other_code:  # a resume under other code: its provenance says so
        opened.provenance["other_code"] = True
    return opened, True


def describe_run(
    optim: ml_collections.ConfigDict,
    base_hparams: Mapping[str, Any],
    grid: Grid,
    dtype: Any,
    train_kwargs: Mapping[str, Any],
) -> dict[str, Any]:
    """What `run` trained, as plain data: the optimizer, the hyperparameters, the grid and the
    run options (config.json without a user config, and summary.json's "run")."""
    options: dict[str, Any] = {
        k: v
        for k, v in train_kwargs.items()
        if isinstance(v, (int, float, str, bool, type(None))) and k != "progress"
    }
    track = train_kwargs.get("track")
    if track is not None:  # what it measures, without its loss (a function)
        options["track"] = {k: v for k, v in vars(track).items() if k not in ("loss", "batches")}
        if track.batches is not None:  # the evaluation set's batches, counted, not its arrays
            options["track"]["batches"] = batches_lib.count(track.batches)
    return dict(
        optim=optim.to_dict(),
        hparams=dict(base_hparams),
        sweep={k: v.tolist() for k, v in grid.axes.items()},
        seeds=grid.seeds.tolist(),
        zipped=grid.zipped,
        dtype=np.dtype(dtype).name,
        train=options,
    )


def record(
    workdir: records.Workdir,
    result: training.RunResult,
    description: Mapping[str, Any],
    progress: Callable[[str], object] | None = print,
) -> dict[str, Any]:
    """arrays.npz (`result.arrays(complete=True)`: losses, per-step metrics, snapshots, initial
    and final parameters) and summary.json (status, the run, devices, seconds, final losses)
    of a finished sweep; returns the summary."""
    workdir.save_arrays(**result.arrays(complete=True))
    last = result.losses[:, -1] if result.losses.shape[1] else np.zeros(result.num_runs)
    return workdir.finish(
        [],
        progress,
        run=dict(description),
        runs=result.num_runs,
        backend=result.backend,
        device_count=result.device_count,
        program_devices=result.program_devices,
        final_loss=last,
        first_nonfinite_step=result.first_nonfinite_step,
        seconds={"compile": result.compile_seconds, "run": result.run_seconds},
    )


def run_cell(
    problem: training.Problem,
    cell: ml_collections.ConfigDict,
    traced: Sequence[str],
    grid: Grid,
    *,
    fields: Mapping[str, Any],
    workdir: Any = None,
    progress: Callable[[str], None] | None = print,
    track: Track | None = None,
) -> training.RunResult:
    """`run` for one structural cell of an experiment config: the traced fields' values in `cell`
    are the base hyperparameters, and `cell.optim` / `cell.train` (dtype and `train_options`)
    set the run; metrics rows are tagged with the cell's `fields`; `track`: the curvature
    tracked along training (`track.track_of(cell, loss)`)."""
    base = {k: config_lib.get(cell, k) for k in traced}
    return run(
        problem,
        cell.optim,
        base,
        grid,
        dtype=np.dtype(cell.train.dtype),
        progress=progress,
        workdir=workdir,
        record_tags=dict(fields),
        track=track,
        **train_options(cell),
    )


def train_options(cfg: ml_collections.ConfigDict) -> dict[str, Any]:
    """`training.train`'s run options from a config's `train` group: num_steps, log_every,
    chunk_steps (0 or absent: about ten chunks), on_nonfinite, metrics_at, ema_decay and
    params_every (the last five optional, with train's defaults)."""
    t = cfg.train
    return dict(
        num_steps=t.num_steps,
        log_every=t.log_every,
        chunk_steps=t.get("chunk_steps", 0) or None,
        on_nonfinite=t.get("on_nonfinite", "stop"),
        metrics_at=t.get("metrics_at", "current"),
        ema_decay=t.get("ema_decay", 0.999),
        params_every=t.get("params_every", 0),
    )
