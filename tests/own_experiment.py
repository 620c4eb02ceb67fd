"""A user's own experiment module, as docs/guide/own_task.md describes it: least squares on
Gaussian inputs, seeds x learning rates through the engine. tests/engine/test_own_task.py runs it
through `python -m experiments.run tests.own_experiment` (in-process)."""

import jax
import jax.numpy as jnp
import ml_collections

from landscape.engine import config as config_lib
from landscape.engine import records, sweeps, training


def default_config() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.name = "least_squares"
    c.seed = 0
    c.num_seeds = 2
    c.dim = 4
    c.optim = training.default_optim_config()
    c.optim.lr = 0.1  # traced: the hyperparameter "optim.lr"
    c.train = dict(num_steps=20, log_every=5, batch_size=8)
    c.sweep = ml_collections.ConfigDict()  # e.g. {"optim": {"lr": [0.05, 0.1]}}
    return c


def validate(cfg: ml_collections.ConfigDict) -> None:
    config_lib.check_known_fields(cfg, default_config(), free=("sweep",))
    config_lib.require_number(cfg, "optim.lr", low=0, low_open=True)
    config_lib.require_number(cfg, "dim", low=1, integer=True)


def needs_x64(cfg: ml_collections.ConfigDict) -> bool:
    return False


def problem(cfg: ml_collections.ConfigDict) -> training.Problem:
    target = jnp.arange(1.0, cfg.dim + 1)

    def loss(w: jax.Array, key: jax.Array, hp: training.HParams) -> tuple[jax.Array, dict]:
        x = jax.random.normal(key, (cfg.train.batch_size, cfg.dim))
        return 0.5 * jnp.mean((x @ (w - target)) ** 2), {}

    return training.Problem(
        init=lambda key, hp: jax.random.normal(key, (cfg.dim,)),
        loss=loss,
        learning_rates=lambda hp: hp["optim.lr"],
        log_grad_norm=True,
    )


def run(cfg: ml_collections.ConfigDict, workdir: records.Workdir, progress=print) -> dict:
    validate(cfg)
    seeds = range(cfg.seed, cfg.seed + cfg.num_seeds)
    sweeps.run(
        problem(cfg),
        cfg.optim,
        {"optim.lr": cfg.optim.lr},
        sweeps.Grid.make(cfg.sweep, seeds),
        workdir=workdir,
        config=cfg,
        progress=progress,
        **sweeps.train_options(cfg),
    )
    return workdir.read_summary()
