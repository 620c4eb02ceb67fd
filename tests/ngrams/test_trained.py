"""A tracked n-gram run read back from its records: the curvature it tracked against the dense
Hessian of its evaluation batch at the kept parameters, and the trained point of a run."""

import json

import numpy as np
import pytest

import landscape
from configs import ngrams
from landscape.engine import records
from landscape.ngrams import experiment, points
from tests.arrays import load_npz


def tracked_config():
    cfg = ngrams.get_config("fig3")
    cfg.task.update(num_states=3, seq_len=8)  # D = 308
    cfg.train.update(
        num_steps=64,
        log_every=16,
        test_sequences=64,
        dtype="float64",
        params_every=32,
        track_every=16,
        track_sequences=32,
        track_lanczos=40,
    )
    cfg.lines.num_sequences = 256
    cfg.analysis.update(flat_window=16, min_plateau=16)
    cfg.claims = ""
    return cfg


@pytest.fixture(scope="module")
def tracked_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("tracked")
    cfg = tracked_config()
    experiment.run(cfg, records.Workdir(workdir), progress=None)
    return cfg, workdir


@pytest.mark.slow
def test_tracked_curvature_is_the_dense_hessian_of_the_evaluation_batch(tracked_run):
    """40 Lanczos steps on D = 308: the tracked extremes are Ritz values, so they lie inside the
    dense Hessian's spectrum (interlacing) and match its extreme eigenvalues to Lanczos
    accuracy; the tracked gradient norm and loss are the evaluation batch's."""
    cfg, workdir = tracked_run
    result = records.load(workdir)
    np.testing.assert_array_equal(result.tracked_steps, [0, 16, 32, 48, 64])
    np.testing.assert_array_equal(result.params_steps, [0, 32, 64])
    x, y = experiment.test_set(cfg)
    objective = points.population_objective(experiment.model_of(cfg), cfg.train.floor)
    batch = (x[: cfg.train.track_sequences], y[: cfg.train.track_sequences])
    for j, step in enumerate(result.tracked_steps):
        if step % cfg.train.params_every:
            continue
        H = landscape.hessian_at(result.point(0, (objective, batch), step=int(step)))
        eigenvalues = np.linalg.eigvalsh(np.asarray(H.matrix))
        low, high = result.metrics["lambda_min"][0, j], result.metrics["lambda_max"][0, j]
        assert eigenvalues[0] - 1e-12 <= low < 0 < high <= eigenvalues[-1] + 1e-12
        np.testing.assert_allclose([low, high], eigenvalues[[0, -1]], atol=1e-5 * high)
        np.testing.assert_allclose(result.metrics["track_grad_norm"][0, j], H.gradient.norm)
        np.testing.assert_allclose(result.metrics["track_loss"][0, j], H.gradient.loss)


@pytest.mark.slow
def test_records_hold_the_tracked_metrics_kept_parameters_and_figure(tracked_run):
    _, workdir = tracked_run
    arrays = load_npz(workdir / "arrays.npz")
    assert arrays["metric_lambda_min"].shape == (1, 5) and arrays["params/A1"].shape == (
        1,
        3,
        2,
        8,
        8,
    )
    rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows if "lambda_max" in row] == [0, 16, 32, 48, 64]
    assert (workdir / "figures" / "curvature.png").stat().st_size > 5_000


@pytest.mark.slow
def test_trained_point_is_named_after_its_run_and_step(tracked_run):
    cfg, workdir = tracked_run
    point = landscape.ngrams.trained_point(workdir, run=0, step=32, num_sequences=256)
    assert point.name == "run 0 (optim.lr=0.01, seed 0), step 32"
    assert "prediction" not in point.meta and point.outputs is not None
    result = records.load(workdir)
    np.testing.assert_array_equal(point.params["Q2"], result.params_at(32, 0)["Q2"])
    x, y = points.population_set(3, 3, 8, cfg.task.alpha, 256)  # theta_star's set, seed 0
    expected = points.population_objective(point.meta["model"], cfg.train.floor)(
        point.params, (x, y)
    )
    assert point.loss() == pytest.approx(float(expected), rel=1e-14)
    assert landscape.ngrams.trained_point(workdir).name.endswith("step 64")
    with pytest.raises(ValueError, match=r"step = 16: this result kept the parameters at steps"):
        landscape.ngrams.trained_point(workdir, step=16)
