"""Adam's preconditioned sharpness tracked inside the compiled run (`Track(preconditioned=True)`):
against the dense top eigenvalue of D H D, D = diag(1 / sqrt(sqrt(v̂) + ε)) from Adam written out
step by step in numpy (docs/notes/edge_of_stability.md)."""

import jax.numpy as jnp
import numpy as np
import pytest

import landscape
from landscape.engine import training

DIM = 6
RNG = np.random.default_rng(11)
B = RNG.normal(size=(DIM, DIM))
B = (B + B.T) / 4  # indefinite: eigenvalues on both sides of 0
A = RNG.uniform(0.5, 2.0, DIM)
B1, B2, EPS, LR = 0.9, 0.99, 1e-8, 0.05


def cosine_loss(w):
    """L(w) = w^T B w / 2 + sum_i A_i cos w_i: H(w) = B - diag(A cos w), grad = B w - A sin w."""
    return 0.5 * w @ jnp.asarray(B) @ w + jnp.sum(jnp.asarray(A) * jnp.cos(w))


def adam_run(name="adam", num_steps=24, **track_kw):
    problem = training.Problem(
        init=lambda key, hp: {"w": 1.5 * jnp.ones(DIM, jnp.float64)},
        loss=lambda params, key, hp: (cosine_loss(params["w"]), {}),
        learning_rates=lambda hp: hp["lr"],
    )
    optim = training.default_optim_config()
    optim.update(name=name, b1=B1, b2=B2, eps=EPS)
    kw = dict(dict(every=8, num_lanczos=DIM, preconditioned=True), **track_kw)
    track = landscape.Track(loss=lambda params, hp: cosine_loss(params["w"]), **kw)
    return training.train(
        problem,
        optim,
        {"lr": [LR]},
        [0],
        num_steps=num_steps,
        log_every=2,
        params_every=8,
        track=track,
        progress=None,
    )


def numpy_adam(num_steps):
    """Adam (Kingma & Ba, Alg. 1) on L from w = 1.5: {t: (w_t, D_t)}, D_t = 1/sqrt(sqrt(v̂_t)+ε)."""
    w, m, v, out = np.full(DIM, 1.5), np.zeros(DIM), np.zeros(DIM), {}
    for t in range(1, num_steps + 1):
        g = B @ w - A * np.sin(w)
        m, v = B1 * m + (1 - B1) * g, B2 * v + (1 - B2) * g**2
        v_hat = v / (1 - B2**t)
        w = w - LR * (m / (1 - B1**t)) / (np.sqrt(v_hat) + EPS)
        out[t] = (w, 1 / np.sqrt(np.sqrt(v_hat) + EPS))
    return out


def test_preconditioned_sharpness_is_the_top_eigenvalue_of_d_h_d():
    """At steps 8, 16, 24 the tracked preconditioned λ_max / λ_min are the extreme eigenvalues
    of D H(w) D with D from Adam's state at that step (D Lanczos steps: exact); the plain
    λ_max is H's own; step 0, before any second moment, is NaN."""
    result = adam_run()
    reference = numpy_adam(24)
    np.testing.assert_array_equal(result.tracked_steps, [0, 8, 16, 24])
    assert np.isnan(result.metrics["preconditioned_lambda_max"][0, 0])
    assert np.isnan(result.metrics["preconditioned_lambda_min"][0, 0])
    for j, step in enumerate([8, 16, 24], start=1):
        w, d = reference[step]
        np.testing.assert_allclose(result.params_at(step, 0)["w"], w, rtol=1e-10)
        hess = B - np.diag(A * np.cos(w))
        pre = np.linalg.eigvalsh(d[:, None] * hess * d[None, :])
        np.testing.assert_allclose(
            result.metrics["preconditioned_lambda_max"][0, j], pre[-1], rtol=1e-9
        )
        np.testing.assert_allclose(
            result.metrics["preconditioned_lambda_min"][0, j], pre[0], rtol=1e-9
        )
        plain = np.linalg.eigvalsh(hess)
        np.testing.assert_allclose(result.metrics["lambda_max"][0, j], plain[-1], rtol=1e-9)
        assert abs(pre[-1] - plain[-1]) > 0.5  # the preconditioner changes the answer


def test_adamw_is_preconditioned_by_the_same_diagonal():
    """AdamW's decoupled decay (0 here) leaves Adam's state and its diagonal as Adam's."""
    adam, adamw = adam_run(), adam_run(name="adamw")
    np.testing.assert_array_equal(
        adam.metrics["preconditioned_lambda_max"], adamw.metrics["preconditioned_lambda_max"]
    )


def test_a_preconditioned_track_without_adam_is_one_sentence():
    with pytest.raises(ValueError, match="track.preconditioned needs optim.name 'adam' or"):
        adam_run(name="sgd")
    with pytest.raises(TypeError, match="preconditioned = 1: must be True or False"):
        landscape.Track(loss=lambda params: 0.0, every=2, preconditioned=1)
