"""What every paper's experiment module shares: the validation chain (the whole run, then each
program, then the memory estimate), the memory baseline, a program's line of progress and the
training of one program (a structural cell: every traced value x seed as one sharded run).

A paper's `experiment.py` supplies its schema (`default_config`, the traced fields), its checks
(`validate_run`, `validate_cell`), its `memory_estimate`, its training problem and the loss its
curvature is tracked on; this module calls them in the same order for every paper.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import ml_collections
import numpy as np

from landscape.engine import config as config_lib
from landscape.engine import memory, sweeps, training, validation
from landscape.engine import track as track_lib
from landscape.typing import Progress, PyTree

BASELINE_BYTES = 6e8  # the interpreter, JAX and XLA's compiled programs, in every estimate


def validate(
    cfg: ml_collections.ConfigDict,
    reference: ml_collections.ConfigDict,
    traced: Sequence[str] | Callable[[Any], Sequence[str]],
    *,
    validate_run: Callable[[Any], None],
    validate_cell: Callable[[Any], None],
    memory_estimate: Callable[[ml_collections.ConfigDict], memory.MemoryEstimate],
    sweepable: Sequence[str] | None = None,
    unsweepable: Sequence[str] = validation.UNSWEEPABLE,
) -> None:
    """One clear ConfigError for the first field that is unknown, of the wrong kind, out of range
    or inconsistent with another, in any program of the sweep (`validate_run` on the whole run,
    then `validate_cell` on every program); then the memory estimate, by shape arithmetic,
    before anything compiles. Nothing is built."""
    validation.validate_cells(
        cfg,
        reference,
        traced,
        validate_cell,
        sweepable=sweepable,
        unsweepable=unsweepable,
        before=validate_run,
    )
    memory.check_memory(memory_estimate(cfg))


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
    """A paper's `validate(cfg)`: `validate` against a fresh `default_config()` with the
    paper's checks and memory estimate."""

    def validate_config(cfg: ml_collections.ConfigDict) -> None:
        """One clear ConfigError for the first mistake in any program of the sweep, the memory
        estimate included (engine/experiment.py's `validate`); nothing is built."""
        validate(
            cfg,
            default_config(),
            traced,
            validate_run=validate_run,
            validate_cell=validate_cell,
            memory_estimate=memory_estimate,
            sweepable=sweepable,
            unsweepable=unsweepable,
        )

    validate_config.__name__ = validate_config.__qualname__ = "validate"
    return validate_config


def program_line(fields: Mapping[str, Any]) -> str:
    """The line that announces a program (a structural cell) by its fields."""
    return "program " + ", ".join(f"{k}={v}" for k, v in fields.items())


def seed_grid(
    cfg: ml_collections.ConfigDict, traced: Sequence[str], zipped: bool = False
) -> sweeps.Grid:
    """The traced sweep's axes x the config's seeds (seed, ..., seed + num_seeds - 1)."""
    return sweeps.Grid.make(
        config_lib.traced_axes(cfg, traced),
        np.arange(cfg.seed, cfg.seed + cfg.num_seeds),
        zipped=zipped,
    )


def train_group(
    cell: ml_collections.ConfigDict,
    fields: Mapping[str, Any],
    traced: Sequence[str],
    problem: training.Problem,
    tracking_loss: Callable[[PyTree, Any], jax.Array],
    *,
    zipped: bool = False,
    workdir: Any = None,
    progress: Progress = print,
) -> tuple[sweeps.Grid, training.RunResult]:
    """Train one program: `problem` at the cell's config (`config.with_fields(cfg, fields)`),
    every traced value x seed as one sharded run (`sweeps.run_cell`), metrics tagged with
    `fields`, curvature tracked on `tracking_loss` where the cell's train group asks for it."""
    grid = seed_grid(cell, traced, zipped)
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
