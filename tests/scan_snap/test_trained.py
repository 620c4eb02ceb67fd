"""A tracked Y/Z run: curvature tracked on the exact population loss equals the dense
Hessian's spectrum at the kept parameters, and the trained point is the population point."""

import numpy as np
import pytest

import landscape
from configs import syn_small
from landscape.engine import records
from landscape.scan_snap import experiment


@pytest.mark.slow
def test_tracked_population_curvature_and_the_trained_point(tmp_path):
    cfg = syn_small.get_config("fig4_right")
    cfg.data.update(num_common=2, num_distinct_per_next=2)  # M = 10 tokens: D = 200
    cfg.train.update(num_steps=20, log_every=2, dtype="float64", params_every=10, track_every=10)
    cfg.train.track_lanczos = 200  # Lanczos on all of D: exact extremes
    cfg.claims = "none"
    experiment.run(cfg, records.Workdir(tmp_path), progress=None)
    result = records.load(tmp_path)
    np.testing.assert_array_equal(result.tracked_steps, [0, 10, 20])
    for j, step in enumerate(result.tracked_steps):
        point = landscape.scan_snap.trained_point(tmp_path, run=0, step=int(step))
        assert point.name == f"run 0 (optim.lr_z=1, optim.lr_y_over_lr_z=10, seed 2), step {step}"
        H = landscape.hessian_at(point)
        eigenvalues = np.linalg.eigvalsh(np.asarray(H.matrix))
        np.testing.assert_allclose(
            [result.metrics["lambda_min"][0, j], result.metrics["lambda_max"][0, j]],
            eigenvalues[[0, -1]],
            rtol=1e-9,
            atol=1e-12,
        )
        assert result.metrics["track_loss"][0, j] == pytest.approx(point.loss(), rel=1e-12)
    # Y = Z = 0 (init zeros): the population loss is ln M (model.population_point)
    assert result.metrics["track_loss"][0, 0] == pytest.approx(np.log(10), rel=1e-12)
