"""A tracked Markov run (theory model, N = 8: the population is exact) read back from its
records: its tracked curvature against the dense Hessian, and its trained point."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import landscape
from configs import markov
from landscape.engine import backend, records
from landscape.engine import config as config_lib
from landscape.engine import track as track_lib
from landscape.markov import experiment, points, task
from landscape.markov import model as model_lib


@pytest.fixture(scope="module")
def tracked_run(tmp_path_factory):
    cfg = markov.get_config("fig3")
    cfg.sweep, cfg.variants, cfg.claims, cfg.num_seeds = {}, [], "none", 1
    cfg.model.update(seq_len=8)  # D = 229
    cfg.train.update(
        num_steps=40,
        log_every=10,
        dtype="float64",
        eval_sequences=32,
        params_every=20,
        track_every=20,
        track_sequences=16,
        track_lanczos=40,
    )
    workdir = tmp_path_factory.mktemp("markov_tracked")
    experiment.run(cfg, records.Workdir(workdir), progress=None)
    return cfg, workdir


def test_tracked_curvature_is_the_dense_hessian_of_the_evaluation_batch(tracked_run):
    """40 Lanczos steps on D = 229: Ritz values inside the dense spectrum, the extremes to
    Lanczos accuracy, on the tracked loss (the first 16 evaluation sequences at the run's p, q)."""
    cfg, workdir = tracked_run
    result = records.load(workdir)
    np.testing.assert_array_equal(result.tracked_steps, [0, 20, 40])
    loss = experiment.tracking_loss(cfg)
    for j, step in enumerate(result.tracked_steps):
        H = landscape.hessian_at(result.point(0, loss, step=int(step)))
        eigenvalues = np.linalg.eigvalsh(np.asarray(H.matrix))
        low, high = result.metrics["lambda_min"][0, j], result.metrics["lambda_max"][0, j]
        assert eigenvalues[0] - 1e-12 <= low < 0 < high <= eigenvalues[-1] + 1e-12
        np.testing.assert_allclose([low, high], eigenvalues[[0, -1]], atol=1e-5 * high)
        np.testing.assert_allclose(result.metrics["track_grad_norm"][0, j], H.gradient.norm)


def test_trained_point_is_on_the_exact_population_of_its_chain(tracked_run):
    cfg, workdir = tracked_run
    point = landscape.markov.trained_point(workdir, run=0, step=20)
    assert point.name == "run 0 (chain.p=0.5, chain.q=0.8, optim.lr=0.001, seed 0), step 20"
    assert "prediction" not in point.meta and point.inputs[0].shape == (256, 8)  # all 2^8
    model = point.meta["model"]
    kernel = task.binary_kernel(0.5, 0.8)
    inputs = task.exact_population(2, 8, kernel, task.stationary(kernel))
    expected = points.population_objective(model)(records.load(workdir).params_at(20, 0), inputs)
    assert point.loss() == pytest.approx(float(expected), rel=1e-13)
    ggn = landscape.ggn_at(point)  # the Gauss-Newton split travels with the trained point
    assert np.all(np.isfinite(ggn.ggn)) and np.linalg.eigvalsh(ggn.ggn)[0] > -1e-12  # G is PSD


@pytest.mark.slow
def test_tracking_differentiates_through_the_hand_written_backward_passes():
    """At N = 128 the CPU formulation's tiled attention and the GPT-2 blocks' LayerNorm have
    hand-written backward passes (custom_vjp); the tracked curvature, a jvp of the gradient,
    goes through them and equals the plain formulation's to float64 rounding."""
    cfg = markov.get_config("fig3_gpt")
    cfg.sweep, cfg.variants = {}, []
    cfg.model.update(seq_len=128)
    cfg.train.update(dtype="float64", track_sequences=8)
    hp = {"chain.p": 0.5, "chain.q": 0.8, "optim.lr": 1e-3}
    measured = []
    for tuning in ("cpu", "plain"):
        with backend.tuning(tuning):
            tracked = track_lib.Track(loss=experiment.tracking_loss(cfg), every=1, num_lanczos=12)
            params = experiment.make_problem(cfg).init(jax.random.key(0), hp)
            measure = jax.jit(lambda p, t=tracked: track_lib.measure(t, p, hp, jnp.int32(0)))
            measured.append(measure(params))
    assert measured[0]["lambda_min"] < 0 < measured[0]["lambda_max"]
    for name, value in measured[0].items():
        np.testing.assert_allclose(value, measured[1][name], rtol=1e-12, err_msg=name)


def test_tracked_loss_computes_in_the_parameters_precision():
    """Under float16 autocast the tracked loss is the float32 model's: a Hessian in float16 is
    rounding (landscape/markov/experiment.py tracking_loss)."""
    cfg = markov.get_config("fig3_gpt")
    cfg.sweep, cfg.variants = {}, []
    cfg.model.update(seq_len=8, d=4, dtype="float16")
    cfg.train.update(track_every=10, track_sequences=16)
    params = model_lib.init_params(jax.random.key(0), model_lib.from_config(cfg))
    hp = {"chain.p": jnp.float32(0.5), "chain.q": jnp.float32(0.8)}
    tracked = experiment.tracking_loss(cfg)(params, hp)
    plain = experiment.tracking_loss(config_lib.with_fields(cfg, {"model.dtype": ""}))(params, hp)
    assert tracked.dtype == jnp.float32 and tracked == plain
