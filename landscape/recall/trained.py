"""Trained points of the recall task's SGD runs: a run's parameters at a step
(`train.params_every`) as a `Point` on the loss the runs are evaluated by (flow.evaluation_loss:
the closed-form DP population loss, notes/assoc_recall.md §3, where one exists).
docs/guide/tracking.md."""

from __future__ import annotations

import pathlib

import jax

from landscape.engine import experiment as engine_experiment
from landscape.engine import records
from landscape.point import Point
from landscape.recall import experiment, flow
from landscape.recall import model as model_lib


def trained_point(
    workdir: str | pathlib.Path,
    run: int = 0,
    step: int | None = None,
    *,
    cell: int | None = None,
    eval_size: int = 512,
) -> Point:
    """Run `run` of a finished SGD run (experiment = "sgd") at `step` (None: the end) as a Point
    on flow.evaluation_loss (the snapshots' eval_loss; `eval_size` token sequences where no
    closed form exists). Named after the run and step; no theory's prediction. Steps other than
    the first and last need the run's train.params_every."""
    cfg = engine_experiment.trained_config(
        workdir,
        "recall",
        experiment.SGD_TRACED,
        cell,
        experiment="sgd",
        runs="the SGD runs' (experiment = 'sgd'); a gradient-flow run keeps its parameters in "
        "arrays.npz",
        x64=False,
    )
    model = model_lib.from_config(cfg)
    result = records.load(workdir, cell)
    loss = flow.evaluation_loss(model, eval_size)
    dtype = model.param_dtype if jax.config.read("jax_enable_x64") else None
    return engine_experiment.trained_point(result, run, loss, step, dtype, {"model": model})
