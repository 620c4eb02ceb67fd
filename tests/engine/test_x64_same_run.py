"""Precision never changes the data: each paper's float32 run draws the same first batch and
computes the same first losses, bit for bit, with x64 on (as in the tests and after
`landscape.setup(x64=True)`) and off (as the CLI runs a float32 config). Samplers draw in fixed
dtypes (int32, float32 unless a caller asks for another), never in the dtype x64 would pick;
docs/guide/precision.md.
"""

import jax
import numpy as np
import pytest

from configs import markov, ngrams, recall, syn_small
from landscape.engine import step as step_lib
from landscape.markov import experiment as markov_experiment
from landscape.markov import task as markov_task
from landscape.ngrams import experiment as ngrams_experiment
from landscape.ngrams import task as ngrams_task
from landscape.recall import experiment as recall_experiment
from landscape.recall import task as recall_task
from landscape.scan_snap import experiment as scan_snap_experiment

STEPS = 4


def _data_key(seed):
    """The key a run's first batch is drawn from: train_step splits the run's data key."""
    return jax.random.split(step_lib.run_keys(seed)[1])[1]


def _with_x64_on_and_off(run):
    """run() -> {name: array}, with x64 off, then on (the tests' default)."""
    with jax.enable_x64(False):
        off = run()
    on = run()
    assert jax.config.read("jax_enable_x64")
    return on, off


def _assert_same(on, off):
    assert on.keys() == off.keys()
    for name in on:
        np.testing.assert_array_equal(on[name], off[name], err_msg=name)
        assert np.asarray(on[name]).dtype == np.asarray(off[name]).dtype, name


@pytest.mark.slow
def test_markov_fig1_same_batch_and_losses():
    def run():
        cfg = markov.get_config("fig1")
        cfg.train.update(num_steps=STEPS, log_every=2)
        cfg.num_seeds = 1
        result = markov_experiment.train_group(cfg, {}, progress=None)["result"]
        kernel = markov_task.binary_kernel(np.float32(cfg.chain.p), np.float32(cfg.chain.q))
        x = markov_task.sample(_data_key(cfg.seed), kernel, None, 4, cfg.model.seq_len + 1)
        return {"batch": np.asarray(x), "losses": result.losses}

    _assert_same(*_with_x64_on_and_off(run))


@pytest.mark.slow
def test_ngrams_fig3_same_batch_and_losses():
    def run():
        cfg = ngrams.get_config("fig3")
        cfg.train.update(num_steps=STEPS, log_every=2, test_sequences=64)
        result = ngrams_experiment.train_group(cfg, {}, progress=None)["result"]
        t = cfg.task
        x, target, tasks = ngrams_task.sample(
            _data_key(cfg.seed), t.num_states, t.order_n, t.seq_len, t.alpha, 8, t.init
        )
        return {"x": x, "target": target, "tasks": tasks, "losses": result.losses}

    on, off = _with_x64_on_and_off(run)
    _assert_same(on, off)
    assert on["target"].dtype == np.float32  # a fixed dtype, not the one x64 picks


def test_scan_snap_syn_small_same_batch_and_losses():
    def run():
        cfg = syn_small.get_config()
        cfg.train.update(num_steps=STEPS, log_every=2)
        cfg.num_seeds = 1
        task, _, result = scan_snap_experiment.train_group(cfg, {}, progress=None)
        batch = task.sample(_data_key(cfg.seed), 8)
        return {**{f"batch_{i}": b for i, b in enumerate(batch)}, "losses": result.losses}

    _assert_same(*_with_x64_on_and_off(run))


def test_recall_float32_sgd_same_batch_and_losses():
    def run():
        cfg = recall.get_config("fig1")
        cfg.train.update(num_steps=STEPS, log_every=2, dtype="float32")
        result = recall_experiment.run_sgd(cfg, {}, None, progress=None)["result"]
        key, k, responses = _data_key(cfg.seed), cfg.task.k, cfg.task.num_responses
        tokens, target = recall_task.sample_tokens(key, k, responses, 8, True)
        collisions = recall_task.sample_collisions(key, k, responses, 8)
        params = jax.tree.leaves(result.params("initial", 0))
        arrays = {"tokens": tokens, "target": target, "collisions": collisions}
        return arrays | {"losses": result.losses} | {f"init_{i}": p for i, p in enumerate(params)}

    _assert_same(*_with_x64_on_and_off(run))
