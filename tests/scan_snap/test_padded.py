"""landscape/scan_snap/padded.py: one program for the task sizes of a grid (the plain
formulation) gives what one program per size gives, to float32 rounding."""

import json

import jax
import numpy as np
import pytest

from configs import syn_medium
from landscape.engine import backend, records
from landscape.scan_snap import experiment, padded
from landscape.scan_snap import model as model_lib


def _grid():
    """Fig. 6's grid at two K (2 and 6: M = 33 and 79), 2 x 2 learning rates x 2 seeds, 10 SGD
    steps with momentum from the uniform init, snapshots every 5 steps with the attention."""
    cfg = syn_medium.get_config("quick")
    cfg.num_seeds = 2
    cfg.sweep.optim.update(lr_z=[0.5, 3.0], lr_y_over_lr_z=[1.0, 10.0])
    cfg.train.update(num_steps=10, log_every=5)
    cfg.eval.update(snapshot_attention=True, plot_steps=[0, -1])
    return cfg


def test_the_plain_formulation_pads_fig6_and_only_where_it_can():
    cfg = syn_medium.get_config()
    cells = experiment.structural_cells(cfg)
    assert [c["data.num_last"] for c in cells] == [1, 3, 5, 10]
    assert not padded.applies(cfg, cells)  # the CPU: one program per K
    with backend.tuning("plain"):
        assert padded.applies(cfg, cells)
        # L changes the sampler's shapes: no padding
        assert not padded.applies(cfg, [{"data.seq_len": 64}, {"data.seq_len": 128}])
        assert not padded.applies(cfg, cells[:1])


def test_pad_tasks_keeps_each_task():
    cfg = _grid()
    cells = experiment.structural_cells(cfg)
    tasks = [experiment.make_task(experiment.config_lib.with_fields(cfg, c)) for c in cells]
    arrays = padded.pad_tasks(tasks, cells).arrays
    assert arrays.class_probs.shape == (2, 6, 79) and arrays.support.shape == (2, 6, 20)
    small = tasks[0]
    np.testing.assert_array_equal(arrays.class_probs[0, :2, :33], small.class_probs)
    assert not arrays.class_probs[0, :, 33:].any() and arrays.token_mask[0].sum() == 33
    np.testing.assert_array_equal(arrays.is_distinct[0, :2, :33], small.is_distinct)
    np.testing.assert_allclose(arrays.class_weight[0], [0.5, 0.5, 0, 0, 0, 0])
    # the padded init is the unpadded draw, zeros around it
    key = jax.random.key(4)
    grid = padded.pad_tasks(tasks, cells)
    params = padded.init_params(cfg, grid, key, np.int32(0))
    reference = model_lib.init_params(key, 33, "uniform")
    for name in ("Y", "Z"):
        full = np.asarray(params[name])
        np.testing.assert_array_equal(full[:33, :33], reference[name])
        assert not full[33:].any() and not full[:, 33:].any()


@pytest.mark.slow
def test_padded_and_unpadded_give_the_same_numbers(tmp_path):
    cfg = _grid()
    cells = experiment.structural_cells(cfg)
    per_size = experiment.train_cells(cfg, cells, progress=None)
    with backend.tuning("plain"):
        workdir = records.Workdir(tmp_path)
        one = experiment.train_cells(cfg, cells, workdir, progress=None)
    assert len(one) == 2
    for (task, grid, a), (task_b, grid_b, b) in zip(per_size, one, strict=True):
        assert task_b.num_tokens == task.num_tokens and grid_b.shape == grid.shape == (2, 2, 2)
        np.testing.assert_array_equal(b.seeds, a.seeds)
        assert b.hparams.keys() == a.hparams.keys()
        for k in a.hparams:
            np.testing.assert_array_equal(b.hparams[k], a.hparams[k])
        for which in ("initial", "final"):
            for name in ("Y", "Z"):
                x, y = a.params(which)[name], b.params(which)[name]
                assert y.shape == x.shape == (8, task.num_tokens, task.num_tokens)
                if which == "initial":  # the same draws
                    np.testing.assert_array_equal(y, x)
                else:  # |Y| up to ~40 after 10 steps: float32 rounding is a few 1e-6
                    np.testing.assert_allclose(y, x, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(b.losses, a.losses, rtol=1e-5, atol=1e-6)
        assert b.snapshots.keys() == a.snapshots.keys()
        for name in a.snapshots:
            assert b.snapshots[name].shape == a.snapshots[name].shape
            np.testing.assert_allclose(b.snapshots[name], a.snapshots[name], rtol=1e-5, atol=1e-6)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert {row["data.num_last"] for row in rows} == {1.0, 3.0}  # each row names its K
