"""Memory estimates (shape arithmetic, before compiling) and the chunked n-gram snapshot."""

import importlib
import time

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from landscape.engine import config as config_lib
from landscape.engine import memory
from landscape.markov import experiment as markov
from landscape.ngrams import estimators
from landscape.ngrams import experiment as ngrams
from landscape.ngrams import model as ngram_model
from landscape.recall import experiment as recall
from landscape.scan_snap import experiment as scan_snap

LIMIT = 4e9  # every shipped config runs in at most 4 GB resident memory
CONFIGS = {  # config file -> (package, variants)
    "ngrams": (ngrams, None),
    "markov": (markov, None),
    "recall": (recall, None),
    "syn_small": (scan_snap, ("fig4", "fig4_left", "fig4_right", "fig5_adam")),
    "syn_medium": (scan_snap, ("paper", "quick")),
    "scan_snap_theory": (scan_snap, (None,)),
}


def shipped():
    for name, (package, variants) in CONFIGS.items():
        module = importlib.import_module(f"configs.{name}")
        for variant in variants or module.VARIANTS:
            yield (
                name,
                variant,
                package,
                (module.get_config(variant) if variant else module.get_config()),
            )


@pytest.mark.parametrize(
    "name, variant, package, cfg", [pytest.param(*c, id=f"{c[0]}:{c[1]}") for c in shipped()]
)
def test_shipped_configs_fit_in_4gb(name, variant, package, cfg):
    start = time.perf_counter()
    estimate = package.memory_estimate(cfg)
    assert time.perf_counter() - start < 0.05  # shape arithmetic: ~1 ms (loaded CI: slack)
    assert 0 < estimate.bytes <= LIMIT, (estimate.bytes, estimate.what)
    assert estimate.what and config_lib.get(cfg, estimate.field) is not None
    package.validate(cfg)  # the check at the end of validate passes


def _absurd(name, variant, fields):
    module = importlib.import_module(f"configs.{name}")
    return config_lib.with_fields(module.get_config(variant), fields)


@pytest.mark.parametrize(
    "package, cfg, field",
    [
        (ngrams, _absurd("ngrams", "smoke", {"task.seq_len": 10_000_000}), "task.seq_len"),
        (ngrams, _absurd("ngrams", "fig4", {"task.seq_len": 100_000}), "task.seq_len"),
        (
            ngrams,
            _absurd("ngrams", "smoke", {"train.test_sequences": 10**10}),
            "train.test_sequences",
        ),
        (ngrams, _absurd("ngrams", "smoke", {"train.batch_size": 10**9}), "train.batch_size"),
        (markov, _absurd("markov", "fig3", {"model.seq_len": 10**6}), "model.seq_len"),
        (markov, _absurd("markov", "fig3", {"train.batch_size": 10**9}), "train.batch_size"),
        (scan_snap, _absurd("syn_small", "fig4", {"train.batch_size": 10**9}), "train.batch_size"),
        (recall, _absurd("recall", "fig1", {"train.batch_size": 10**12}), "train.batch_size"),
        (recall, _absurd("recall", "first_jump", {"flow.num_saves": 10**10}), "flow.num_saves"),
    ],
    ids=lambda x: x if isinstance(x, str) else "",
)
def test_absurd_sizes_are_refused_before_allocating(package, cfg, field):
    start = time.perf_counter()
    with pytest.raises(config_lib.ConfigError, match="needs about") as error:
        package.validate(cfg)
    assert f"lower config.{field}." in str(error.value)
    assert time.perf_counter() - start < 1.0  # no compiling, no allocation


def test_check_memory_against_a_given_budget():
    estimate = memory.MemoryEstimate(3e9, "the test set", "train.test_sequences")
    memory.check_memory(estimate, available=4e9)
    memory.check_memory(None, available=1.0)
    with pytest.raises(config_lib.ConfigError) as error:
        memory.check_memory(estimate, available=2e9)
    message = str(error.value)
    assert "needs about 3 GB" in message and "(the test set)" in message
    assert "2 GB of memory is available" in message
    assert message.endswith("lower config.train.test_sequences.")


def test_chunked_ngram_snapshot_matches_the_whole_test_set():
    """The snapshot's loss and two-half gradient over chunks (the last one padded) = the
    one-batch formula. Random sequences and targets: no sampler to compile."""
    module = importlib.import_module("configs.ngrams")
    cfg = config_lib.with_fields(module.get_config("smoke"), {"task.seq_len": 12})
    model, floor = ngrams.model_of(cfg), cfg.train.floor
    params = ngrams.model_lib.init_params(jax.random.key(3), model)
    key_x, key_y = jax.random.split(jax.random.key(4))
    x = jax.random.randint(key_x, (50, 12), 0, cfg.task.num_states)
    y = jax.nn.softmax(jax.random.normal(key_y, (50, cfg.task.num_states)))

    def half_loss(p, x, y):
        return jnp.mean(estimators.cross_entropy(ngram_model.probs(p, x, model), y, floor))

    @jax.jit
    def both(params):
        whole = [
            jax.value_and_grad(half_loss)(params, x[s], y[s]) for s in (slice(0, 25), slice(25, 50))
        ]
        chunked = [
            ngrams._mean_loss_and_grad(params, model, floor, *ngrams._chunked(x[s], y[s], 7))
            for s in (slice(0, 25), slice(25, 50))
        ]  # 4 chunks, 3 padded rows
        return whole, chunked

    def loss_and_norm(halves):
        (loss_a, g_a), (loss_b, g_b) = halves
        dot = sum(
            jnp.vdot(a, b) for a, b in zip(jax.tree.leaves(g_a), jax.tree.leaves(g_b), strict=True)
        )
        return (loss_a + loss_b) / 2, jnp.sign(dot) * jnp.sqrt(jnp.abs(dot))

    whole, chunked = both(params)
    np.testing.assert_allclose(loss_and_norm(chunked), loss_and_norm(whole), rtol=1e-4)
    chex.assert_trees_all_close(chunked[0][1], whole[0][1], rtol=1e-4, atol=1e-7)
