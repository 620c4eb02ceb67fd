"""Gradient flow and SGD on the recall model against the theory (notes §4; C5, C6, C8, C14, C16)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from landscape.engine import training
from landscape.recall import flow, theory
from landscape.recall import model as model_lib

MODEL = model_lib.RecallModel(k=4, num_responses=4)


def test_C6_theorem31_ode_equals_autodiff_on_M1():
    """On M_1 (w^1 = alpha (e_1 - 1/k), other heads 0) the corrected Thm 3.1(c) ODE equals
    -grad L: d alpha/dt = -(dL/dw_1 - dL/dw_2), d beta/dt = -dL/dbeta_1 (no factor 2 in Xi)."""
    k = MODEL.k
    for alpha, beta in [(0.3, 0.7), (-0.2, 0.05), (2.0, 3.0)]:
        params = model_lib.init_params(
            MODEL,
            jnp.zeros(k).at[0].set(beta),
            jnp.zeros((k, k)).at[0].set(alpha * (jnp.eye(k)[0] - 1 / k)),
        )
        g = jax.grad(model_lib.population_loss)(params, MODEL)
        d_alpha, d_beta = theory.first_jump_ode(alpha, beta, k, MODEL.num_responses)
        np.testing.assert_allclose(-(g["w"][0, 0] - g["w"][0, 1]), d_alpha, rtol=1e-12)
        np.testing.assert_allclose(-g["beta"][0], d_beta, rtol=1e-12)


def test_C5_C8_first_jump_conservation_and_time():
    """I_1 with eps = 0.05: f(alpha) - beta^2/4 drifts <= 1e-9; eps*T_mid = 156.3 (notes §4.4),
    i.e. 0.952 of the eps -> 0 value 164.17 (notes C8 band [0.94, 0.97])."""
    eps = 0.05
    params0 = jax.tree.map(lambda x: x[None], flow.init_first_jump(MODEL, eps))
    ts = jnp.linspace(0.0, 250.0 / eps, 6001)[None]
    params, loss, ok = flow.population_flow(MODEL, params0, ts)
    assert ok.all()
    alpha = flow.focus_logit(params["w"])[0, :, 0]
    conserved = theory.conserved_quantity(alpha, params["beta"][0, :, 0], MODEL.k)
    assert np.abs(conserved - conserved[0]).max() <= 1e-9
    wrong_sign = (
        theory.f_conserved(alpha, MODEL.k)
        - 2 * (MODEL.k - 1) / MODEL.k * (np.exp(-alpha) + alpha - 1)
        - params["beta"][0, :, 0] ** 2 / 4
    )
    assert np.ptp(wrong_sign) > 0.1  # the main text's sign is not conserved
    L = theory.plateau_levels(4, 4)
    eps_T = eps * flow.jump_times(np.asarray(ts), loss, L[:2])[0, 0]
    assert eps_T == pytest.approx(156.3, abs=0.1)
    assert 0.94 < eps_T / (eps * theory.jump_time(4, 4, eps)) < 0.97


def test_C14_head_death():
    """alpha_0 = -0.05, beta_0 = 0.01: the head dies, beta -> 0, alpha -> the root of the exact
    conservation law (notes §4.7 measured -0.0493; small-amplitude formula -0.0495)."""
    k = MODEL.k
    w0 = jnp.zeros((k, k)).at[0].set(-0.05 * (jnp.eye(k)[0] - 1 / k))
    params0 = jax.tree.map(
        lambda x: x[None], model_lib.init_params(MODEL, jnp.zeros(k).at[0].set(0.01), w0)
    )
    params, _, ok = flow.population_flow(MODEL, params0, jnp.linspace(0.0, 2e6, 201)[None])
    assert ok.all()
    dies, final_alpha = theory.head_death(-0.05, 0.01, k, exact=True)
    assert dies
    assert abs(params["beta"][0, -1, 0]) < 1e-3
    assert flow.focus_logit(params["w"])[0, -1, 0] == pytest.approx(final_alpha, rel=2e-3)


def test_gradient_descent_tracks_gradient_flow():
    """Full-batch GD (the engine, sampler 'population') with a small step follows the flow at
    t = lr * steps (notes C16: GD matches to ~1%)."""
    lr, steps = 0.5, 2000

    def init(key, hp):
        return flow.init_shape(MODEL, hp["init.eps"], [1.0, 0.5, 0.25, 0.1])

    problem = flow.sgd_problem(MODEL, batch_size=1, sampler="population", init_fn=init)
    optim = training.default_optim_config()
    result = training.train(
        problem,
        optim,
        {"optim.lr": [lr], "init.eps": [0.1]},
        [0],
        num_steps=steps,
        log_every=10,
        progress=None,
    )
    L = theory.plateau_levels(4, 4)
    gd_t = flow.jump_times(result.snapshot_steps[None] * lr, result.snapshots["eval_loss"], L)
    params0 = jax.tree.map(lambda x: x[None], init(None, {"init.eps": 0.1}))
    ts = jnp.linspace(0.0, lr * steps, 4001)[None]
    _, loss, _ = flow.population_flow(MODEL, params0, ts)
    gf_t = flow.jump_times(np.asarray(ts), loss, L)
    np.testing.assert_allclose(gd_t, gf_t, rtol=0.01)


def test_readouts():
    t = np.arange(5.0)[None]
    np.testing.assert_allclose(
        flow.crossing_times(t, np.array([[1.0, 0.8, 0.4, 0.2, 0.0]]), [0.6, 0.1, -1.0]),
        [[1.5, 3.5, np.nan]],
    )
    beta = np.zeros((1, 5, 3))
    beta[0, 2:, 2] = 2.0
    beta[0, 4:, 0] = 2.0
    assert flow.activation_order(t, beta, 1.0) == [[2, 0]]
    w = np.array([[[2.0, 0.0, 1.0]]])
    np.testing.assert_allclose(flow.focus_logit(w), [[1.5]])
