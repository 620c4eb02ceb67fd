"""Grids x seeds as one program; sharding the run axis over devices gives the same numbers."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from landscape.engine import sweeps, training

SWEEP = textwrap.dedent("""
    import dataclasses, sys, numpy as np, jax
    from configs import syn_small
    from landscape.scan_snap import experiment
    if sys.argv[2] != "None":                 # groups of runs within each device's runs
        make_problem = experiment.make_problem
        experiment.make_problem = lambda *a: dataclasses.replace(make_problem(*a),
                                                                 runs_per_group=int(sys.argv[2]))
    cfg = syn_small.get_config("fig4")
    cfg.num_seeds = 3                      # 2 ratios x 3 seeds = 6 runs: padded to 8 on 4 devices
    cfg.train.num_steps = 20
    lines = []
    _, _, result = experiment.train_group(cfg, {}, progress=lines.append)
    assert lines and all("| 6 runs |" in line for line in lines), lines   # never the padding
    assert result.losses.shape[0] == 6
    np.save(sys.argv[1], np.concatenate([result.losses, result.snapshots["distinct_entropy"]], 1))
    print(len(jax.devices()))
""")


def _on_devices(script, device_counts, tmp_path, *args) -> dict[int, np.ndarray]:
    """Runs `script OUT *args` once per count of forced CPU devices (XLA_FLAGS); the script saves
    an array to OUT and prints, last, the count of devices it used (checked)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    outputs = {}
    for devices in device_counts:
        env = dict(
            os.environ,
            PYTHONPATH=root,
            XLA_FLAGS=os.environ.get("XLA_FLAGS", "")  # conftest's -O0 kept
            + f" --xla_force_host_platform_device_count={devices}",
        )
        out = tmp_path / f"{devices}.npy"
        proc = subprocess.run(
            [sys.executable, "-c", script, str(out), *args],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        assert proc.stdout.strip().splitlines()[-1] == str(devices)
        outputs[devices] = np.load(out)
    return outputs


def test_grid_order_and_unflatten():
    grid = sweeps.Grid.make({"a": [1.0, 2.0], "b": [10.0, 20.0, 30.0]}, seeds=[0, 1])
    hp, seeds = grid.flat()
    assert grid.shape == (2, 3, 2) and grid.size == 12
    np.testing.assert_array_equal(hp["a"], [1] * 6 + [2] * 6)
    np.testing.assert_array_equal(hp["b"][:6], [10, 10, 20, 20, 30, 30])
    np.testing.assert_array_equal(seeds, [0, 1] * 6)
    cube = grid.unflatten(np.arange(12))
    assert cube[1, 2, 0] == 10  # a=2, b=30, seed 0


@pytest.mark.parametrize("runs_per_group", [None, pytest.param(1, marks=pytest.mark.slow)])
def test_sharded_sweep_gives_the_same_numbers(tmp_path, runs_per_group):
    """One CPU device vs four forced host devices (XLA_FLAGS) with padding: same losses, also
    with groups of runs (a loop over groups on each device)."""
    outputs = _on_devices(SWEEP, (1, 4), tmp_path, str(runs_per_group))
    assert outputs[1].shape == (6, 20 + 11)
    np.testing.assert_allclose(outputs[4], outputs[1], rtol=1e-5, atol=1e-7)


TRACKED = textwrap.dedent("""
    import sys, numpy as np, jax
    jax.config.update("jax_enable_x64", True)
    from landscape.engine import sweeps
    from tests import test_track as t
    grid = sweeps.Grid.make({"lr": [0.05, 0.02, 0.1]}, [0, 1])   # 6 runs: padded to 8 on 4
    result = sweeps.run(t.cosine_problem(), t.optim(), {"lr": 0.1}, grid, dtype=np.float64,
                        num_steps=16, log_every=2, params_every=8, track=t.track(every=4),
                        progress=None)
    names = ("lambda_min", "lambda_max", "track_grad_norm", "track_loss")
    kept = result.kept_params["w"].reshape(6, -1)
    np.save(sys.argv[1], np.concatenate([result.metrics[k] for k in names] + [kept], 1))
    print(len(jax.devices()))
""")


@pytest.mark.slow  # two processes compiling a tracked program: 93 s on 2 busy cores
def test_tracked_sweep_on_four_devices_gives_the_same_numbers(tmp_path):
    """Tracked curvature and kept parameters inside a shard_map over 4 forced host devices
    (each device's runs vmapped, padding included): the numbers of one device."""
    outputs = _on_devices(TRACKED, (1, 4), tmp_path)
    assert outputs[1].shape == (6, 4 * 5 + 3 * 6)
    np.testing.assert_allclose(outputs[4], outputs[1], rtol=1e-12)


SINGLE_RUN = textwrap.dedent("""
    import sys, numpy as np, jax
    from configs import markov
    from landscape.engine import training
    from landscape.markov import experiment
    experiment._SCORES_TO_SPLIT = 1           # split even this short run (N = 48)
    cfg = markov.get_config("fig3_gpt")
    cfg.sweep, cfg.variants, cfg.num_seeds = {}, [], 1
    cfg.model.update(d=8, seq_len=48)      # 2 attention tiles
    cfg.train.update(num_steps=30, log_every=10, targets=sys.argv[2])
    result = experiment.train_group(cfg, {}, progress=None)["result"]
    flat = np.concatenate([np.ravel(x) for x in jax.tree.leaves(result.final_params)])
    np.save(sys.argv[1], np.concatenate([result.losses[0], result.snapshots["test_loss"][0], flat]))
    print(len(training.batch_devices(experiment.make_problem(cfg), jax.devices())))
""")


@pytest.mark.slow
@pytest.mark.parametrize("targets", ["hard", "soft"])
def test_single_run_splits_its_batch_over_devices(tmp_path, targets):
    """One Markov run (batch 16) on one device vs split over two forced host devices (8
    sequences each, gradients averaged): the same losses and final weights, up to rounding."""
    outputs = _on_devices(SINGLE_RUN, (1, 2), tmp_path, targets)
    assert outputs[1][0] > outputs[1][29] + 0.01  # it trains
    np.testing.assert_allclose(outputs[2], outputs[1], rtol=1e-5, atol=1e-6)


def test_batch_devices_divide_the_batch():
    def problem(batch_size):
        return training.Problem(init=None, loss=None, learning_rates=None, batch_size=batch_size)

    assert training.batch_devices(problem(None), range(4)) == [0]
    assert training.batch_devices(problem(16), range(2)) == [0, 1]
    assert training.batch_devices(problem(6), range(4)) == [0, 1, 2]
    assert training.batch_devices(problem(7), range(2)) == [0]


def test_zipped_grid_pairs_the_axes():
    grid = sweeps.Grid.make({"p": [0.5, 0.2], "q": [0.8, 0.3]}, seeds=[0, 1, 2], zipped=True)
    hp, seeds = grid.flat()
    assert grid.shape == (2, 3) and grid.size == 6
    np.testing.assert_array_equal(hp["p"], [0.5] * 3 + [0.2] * 3)
    np.testing.assert_array_equal(hp["q"], [0.8] * 3 + [0.3] * 3)
    with pytest.raises(ValueError, match="equal lengths"):
        sweeps.Grid.make({"p": [0.5, 0.2], "q": [0.8]}, seeds=[0], zipped=True)
