"""What every paper's experiment module shares: the validation chain (the whole run, then each
program, then the memory estimate), the run (the study `experiment` names, else the training
runs), the memory baseline, a program's line of progress and the training of one program (a
structural cell: every traced value x seed as one sharded run).

A paper's `experiment.py` supplies its schema (`default_config`, the traced fields), its checks
(`validate_run`, `validate_cell`), its `memory_estimate`, its training problem and the loss its
curvature is tracked on; this module calls them in the same order for every paper.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import ml_collections
import numpy as np

from landscape.engine import config as config_lib
from landscape.engine import memory, records, sweeps, training, validation
from landscape.engine import track as track_lib
from landscape.point import Point
from landscape.typing import Progress, PyTree

BASELINE_BYTES = 6e8  # the interpreter, JAX and XLA's compiled programs, in every estimate


def validator(
    default_config: Callable[[], ml_collections.ConfigDict],
    traced: Sequence[str] | Callable[[Any], Sequence[str]],
    validate_run: Callable[[Any], None],
    validate_cell: Callable[[Any], None],
    memory_estimate: Callable[[ml_collections.ConfigDict], memory.MemoryEstimate],
    *,
    sweepable: Sequence[str] | None = None,
    unsweepable: Sequence[str] = validation.UNSWEEPABLE,
) -> Callable[[ml_collections.ConfigDict], None]:
    """A paper's `validate(cfg)`, from its schema (`default_config`, the traced fields), its
    checks of the whole run and of one program, and its memory estimate."""

    def validate_config(cfg: ml_collections.ConfigDict) -> None:
        """One clear ConfigError for the first field that is unknown, of the wrong kind, out of
        range or inconsistent with another, in any program of the sweep (the whole run's fields,
        then every program's); then the memory estimate, by shape arithmetic, before anything
        compiles. Nothing is built."""
        validation.validate_cells(
            cfg,
            default_config(),
            traced,
            validate_cell,
            sweepable=sweepable,
            unsweepable=unsweepable,
            before=validate_run,
        )
        memory.check_memory(memory_estimate(cfg))

    validate_config.__name__ = validate_config.__qualname__ = "validate"
    return validate_config


Study = Callable[[ml_collections.ConfigDict, records.Workdir, Progress], dict[str, Any]]


def runner(
    validate: Callable[[ml_collections.ConfigDict], None], train: Study, **studies: Study
) -> Callable[..., dict[str, Any]]:
    """A paper's `run(cfg, workdir, progress=print)`: validate `cfg`, write it to the workdir,
    then run the study that cfg.experiment names in `studies` (`train`, the paper's training
    runs, for any other experiment)."""

    def run(
        cfg: ml_collections.ConfigDict, workdir: records.Workdir, progress: Progress = print
    ) -> dict[str, Any]:
        """Run the experiment of `cfg`, write its records, figures and summary; return the
        summary."""
        validate(cfg)
        workdir.write_config(cfg)
        return studies.get(cfg.experiment, train)(cfg, workdir, progress)

    return run


def program_line(fields: Mapping[str, Any]) -> str:
    """The line that announces a program (a structural cell) by its fields."""
    return "program " + ", ".join(f"{k}={v}" for k, v in fields.items())


def cell_prefix(index: int, count: int) -> str:
    """The prefix of program `index`'s arrays in arrays.npz: "cell<index>_" when a run has
    `count` > 1 programs, else none."""
    return f"cell{index}_" if count > 1 else ""


def seconds_of(results: Sequence[training.RunResult]) -> dict[str, float]:
    """The summary's seconds of a run's programs: compile and run, each summed."""
    return {
        "compile": sum(r.compile_seconds for r in results),
        "run": sum(r.run_seconds for r in results),
    }


def seed_grid(cfg: ml_collections.ConfigDict, traced: Sequence[str]) -> sweeps.Grid:
    """The traced sweep's axes (paired where `sweep_zip` says so) x the config's seeds (seed, ...,
    seed + num_seeds - 1)."""
    return sweeps.Grid.make(
        config_lib.traced_axes(cfg, traced),
        np.arange(cfg.seed, cfg.seed + cfg.num_seeds),
        zipped=bool(cfg.get("sweep_zip", False)),
    )


def train_cell(
    cell: ml_collections.ConfigDict,
    fields: Mapping[str, Any],
    traced: Sequence[str],
    problem: training.Problem,
    tracking_loss: Callable[[PyTree, Any], jax.Array],
    *,
    workdir: Any = None,
    progress: Progress = print,
) -> tuple[sweeps.Grid, training.RunResult]:
    """Train one program: `problem` at the cell's config (`config.with_fields(cfg, fields)`),
    every traced value x seed as one sharded run (`sweeps.run_cell`), metrics tagged with
    `fields`, curvature tracked on `tracking_loss` where the cell's train group asks for it."""
    grid = seed_grid(cell, traced)
    result = sweeps.run_cell(
        problem,
        cell,
        traced,
        grid,
        fields=fields,
        workdir=workdir,
        progress=progress,
        track=track_lib.track_of(cell, tracking_loss),
    )
    return grid, result


def train_group(
    cfg: ml_collections.ConfigDict,
    fields: dict[str, Any],
    workdir: Any = None,
    progress: Progress = print,
    *,
    traced: Sequence[str],
    make_problem: Callable[[ml_collections.ConfigDict], training.Problem],
    tracking_loss: Callable[[ml_collections.ConfigDict], Callable[[PyTree, Any], jax.Array]],
    prepare: Callable[[ml_collections.ConfigDict], None] | None = None,
) -> dict[str, Any]:
    """`train_cell` of the program `fields` of `cfg` (its cell, after `prepare(cell)` where
    given): {fields, cfg: the cell, grid, result}. A paper binds its own with functools.partial."""
    cell = config_lib.with_fields(cfg, fields)
    if prepare is not None:
        prepare(cell)
    grid, result = train_cell(
        cell,
        fields,
        traced,
        make_problem(cell),
        tracking_loss(cell),
        workdir=workdir,
        progress=progress,
    )
    return dict(fields=fields, cfg=cell, grid=grid, result=result)


def trained_config(
    workdir: Any,
    paper: str,
    traced: Sequence[str],
    cell: int | None,
    *,
    experiment: str | None = None,
    runs: str = "",
    x64: bool = True,
) -> ml_collections.ConfigDict:
    """The config of program `cell` of a finished run of `paper` in `workdir`, for its trained
    points: refused in one sentence unless the run's experiment is `experiment` (where given;
    `runs` says which runs have trained points); train.dtype float64 when x64 is on and `x64`
    (the point's model computes in its parameters' dtype)."""
    config = records.paper_config(workdir, paper)
    if experiment is not None and config.get("experiment") != experiment:
        raise ValueError(
            f"{workdir} holds a {config.get('experiment')!r} run: trained points are {runs}."
        )
    cfg = config_lib.program_config(config, traced, cell)
    if x64 and jax.config.read("jax_enable_x64"):
        cfg.train.dtype = "float64"
    return cfg


def trained_point(
    result: training.RunResult,
    run: Any,
    loss: Any,
    step: int | None,
    dtype: Any,
    meta: Mapping[str, Any],
    split: tuple[Any, Any] | None = None,
) -> Point:
    """Run `run` of `result` at `step` (None: the end) as a Point on `loss` (RunResult.point)
    with `meta`, and `split` = (outputs, output_loss), its Gauss-Newton split, where given."""
    point = result.point(run, loss, dtype=dtype, step=result.num_steps if step is None else step)
    point = point.renamed(point.name, meta=meta)
    if split is None:
        return point
    return dataclasses.replace(point, outputs=split[0], output_loss=split[1])
