"""Trained points of the Scan and Snap runs: a run's parameters at a step
(`train.params_every`) as a `Point` on the long-sequence population loss (§3.5) of its task, as
`population_point` judges Y = Z = 0. docs/guide/tracking.md."""

from __future__ import annotations

import pathlib

from landscape.engine import experiment as engine_experiment
from landscape.engine import records
from landscape.point import Point
from landscape.scan_snap import experiment
from landscape.scan_snap import model as model_lib
from landscape.scan_snap import task as task_lib


def trained_point(
    workdir: str | pathlib.Path, run: int = 0, step: int | None = None, *, cell: int | None = None
) -> Point:
    """Run `run` of a finished Y/Z run (experiment = "train") at `step` (None: the end) as a
    Point on its task's population loss, with the Gauss-Newton split, in float64 when x64 is
    on. Named after the run and step; no theory's prediction. Steps other than the first and
    last need the run's train.params_every."""
    cfg = engine_experiment.trained_config(
        workdir,
        "scan_snap",
        experiment.TRACED,
        cell,
        experiment="train",
        runs="the Y/Z model's runs (experiment = 'train')",
    )
    task = experiment.make_task(cfg)
    model = experiment.model_of(cfg, task)
    result = records.load(workdir, cell)
    loss = (model_lib.population_objective(model), task_lib.Population.of(task, model.param_dtype))
    # the Gauss-Newton split, as population_point carries it
    split = (model_lib.population_outputs(model), model_lib.population_output_loss)
    meta = {"task": task, "model": model}
    return engine_experiment.trained_point(result, run, loss, step, model.param_dtype, meta, split)
