"""A tracked recall SGD run: curvature tracked on the closed-form population loss equals the
dense Hessian's spectrum at the kept parameters; the trained point is judged by that loss."""

import numpy as np
import pytest

import landscape
from configs import recall
from landscape.engine import records
from landscape.recall import experiment, flow
from landscape.recall import model as model_lib


@pytest.mark.slow
def test_tracked_population_curvature_and_the_trained_point(tmp_path):
    cfg = recall.get_config("fig1")
    cfg.num_seeds, cfg.claims = 2, "none"
    cfg.train.update(num_steps=40, log_every=10, params_every=20, track_every=20)
    cfg.train.track_lanczos = 64  # capped at D (w and beta of 4 heads): exact extremes
    experiment.run(cfg, records.Workdir(tmp_path), progress=None)
    result = records.load(tmp_path)
    model = model_lib.from_config(cfg)
    assert flow.has_closed_form(model)
    for run in (0, 1):
        for j, step in enumerate(result.tracked_steps):
            point = landscape.recall.trained_point(tmp_path, run=run, step=int(step))
            assert point.name.endswith(f"seed {run}), step {step}")
            assert point.loss() == pytest.approx(result.metrics["track_loss"][run, j], rel=1e-12)
            H = landscape.hessian_at(point)
            eigenvalues = np.linalg.eigvalsh(np.asarray(H.matrix))
            low, high = result.metrics["lambda_min"][run, j], result.metrics["lambda_max"][run, j]
            np.testing.assert_allclose([low, high], eigenvalues[[0, -1]], rtol=1e-9, atol=1e-12)
            assert point.num_params <= 64
