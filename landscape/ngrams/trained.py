"""Trained points of the n-gram runs: a run's parameters at a step (`train.params_every`) as a
`Point` on the Monte-Carlo population the constructions are judged on (points.population_set,
notes/ngrams.md §2.1), so θ_*^k and a trained run compare on one set. docs/guide/tracking.md."""

from __future__ import annotations

import pathlib

from landscape.engine import experiment as engine_experiment
from landscape.engine import records
from landscape.ngrams import points, schema
from landscape.point import Point


def trained_point(
    workdir: str | pathlib.Path,
    run: int = 0,
    step: int | None = None,
    *,
    cell: int | None = None,
    num_sequences: int = 8192,
    seed: int = 0,
) -> Point:
    """Run `run` of a finished n-gram run at `step` (None: the end) as a Point on the population
    population_set(task, num_sequences, seed) (theta_star's default set), in float64 when x64 is
    on. Named after the run and step ("run 0 (optim.lr=0.01, seed 0), step 3072"); no theory's
    prediction. Steps other than the first and last need the run's train.params_every."""
    cfg = engine_experiment.trained_config(workdir, "ngrams", schema.TRACED, cell)
    t = cfg.task
    x_BT, target_BS = points.population_set(
        t.num_states, t.order_n, t.seq_len, t.alpha, num_sequences, seed, t.init
    )
    model, floor = schema.model_of(cfg), float(cfg.train.floor)
    result = records.load(workdir, cell)
    meta = dict(
        population="mean",  # the loss is the mean over sequences: probes may slice it
        model=model,
        x_BT=x_BT,
        target_BS=target_BS,
        floor=floor,
        task=t.to_dict(),
    )
    loss = (points.population_objective(model, floor), (x_BT, target_BS))
    # the Gauss-Newton split, as the constructions carry it
    split = (points.population_outputs(model), points.population_output_loss(floor))
    return engine_experiment.trained_point(result, run, loss, step, model.param_dtype, meta, split)
