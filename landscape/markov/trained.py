"""Trained points of the Markov runs: a run's parameters at a step (`train.params_every`) as a
`Point` on the population loss of its own chain (exact enumeration for short sequences, else
Monte Carlo: points.population_inputs), as theta_pi and theta_star are judged. docs/guide/
tracking.md."""

from __future__ import annotations

import pathlib

import jax
import jax.numpy as jnp

from landscape.engine import experiment as engine_experiment
from landscape.engine import records
from landscape.markov import experiment, points
from landscape.markov import model as model_lib
from landscape.point import Point


def trained_point(
    workdir: str | pathlib.Path,
    run: int = 0,
    step: int | None = None,
    *,
    cell: int | None = None,
    population: str = "auto",
    num_sequences: int = 256,
    key: jax.Array | None = None,
) -> Point:
    """Run `run` of a finished Markov run at `step` (None: the end) as a Point on the population
    of the run's chain (its p, q): all sequences when S^N <= 2^16 (population "auto"), else
    `num_sequences` drawn from `key` (points.population_inputs), in float64 when x64 is on.
    Named after the run and step; no theory's prediction. Steps other than the first and last
    need the run's train.params_every."""
    cfg = engine_experiment.trained_config(workdir, "markov", experiment.TRACED, cell)
    model = model_lib.from_config(cfg)
    result = records.load(workdir, cell)
    index = result.run_index(run)
    kernel = experiment.kernel_of(
        cfg, {k: jnp.asarray(v[index]) for k, v in result.hparams.items()}
    )
    inputs = points.population_inputs(
        model,
        kernel,
        experiment.init_law(cfg, kernel),
        population=population,
        num_sequences=num_sequences,
        key=key,
    )
    loss = (points.population_objective(model), inputs)
    # the Gauss-Newton split, as theta_pi carries it
    split = (points.population_outputs(model), points.population_output_loss(model))
    meta = {"model": model, "kernel": kernel}
    return engine_experiment.trained_point(
        result, index, loss, step, model.param_dtype, meta, split
    )
