"""`preconditioner=` on the matrix-free probes and the tracker: each answers for
M = P^{-1/2} H P^{-1/2}, checked against M formed densely from jax.hessian on a small tanh MLP
(eigenvalues to 1e-10 of the spectrum's scale, the trace exact with Hutch++ sketching all of D,
the diagonal exact on a quadratic whose M is diagonal); P = 1 gives the plain answers;
`adam_preconditioner` is sqrt(v̂) + ε of an optax.adam state formed by hand (Cohen et al., 2022,
docs/notes/edge_of_stability.md); every mistake is one sentence naming the argument."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.flatten_util import ravel_pytree

import landscape

RNG = np.random.default_rng(3)
X, Y = RNG.standard_normal((24, 3)), RNG.standard_normal(24)
PARAMS = {"w1": RNG.standard_normal((3, 4)) / 2, "b1": RNG.standard_normal(4) / 4,
          "w2": RNG.standard_normal(4) / 2}  # fmt: skip
P = jax.tree.map(lambda leaf: RNG.uniform(0.2, 3.0, np.shape(leaf)), PARAMS)
ONES = jax.tree.map(np.ones_like, PARAMS)


def mlp(params, inputs):
    x, y = inputs
    return jnp.mean((jnp.tanh(x @ params["w1"] + params["b1"]) @ params["w2"] - y) ** 2)


POINT = landscape.Point(PARAMS, objective=mlp, inputs=(X, Y), name="mlp")


def dense(params=PARAMS, diagonal=P, inputs=(X, Y)):
    """P^{-1/2} H P^{-1/2} from jax.hessian of the flat loss."""
    flat, unravel = ravel_pytree(params)
    hessian = np.asarray(jax.jit(jax.hessian(lambda f: mlp(unravel(f), inputs)))(flat))
    d = 1 / np.sqrt(np.asarray(ravel_pytree(diagonal)[0]))
    return d[:, None] * hessian * d[None, :]


M = dense()
EIGENVALUES = np.linalg.eigvalsh(M)
SCALE = np.max(np.abs(EIGENVALUES))
D = M.shape[0]


@pytest.mark.parametrize("dense_below", [3000, 0])
def test_eigenpairs_are_the_dense_congruences(dense_below):
    found = landscape.eigenpairs(
        POINT, k=3, which="largest", dense_below=dense_below, preconditioner=P, progress=None
    )
    np.testing.assert_allclose(found.values, EIGENVALUES[::-1][:3], rtol=0, atol=1e-10 * SCALE)
    for value, vector in zip(found.values, found.flat_vectors, strict=True):
        np.testing.assert_allclose(M @ vector, value * vector, atol=1e-9 * SCALE)
    assert found.point is POINT and found.gradient.point is POINT


def test_lanczos_reaches_the_dense_extremes():
    spectrum = landscape.lanczos_spectrum(POINT, num_iters=D, preconditioner=P, progress=None)
    assert abs(spectrum.lambda_max - EIGENVALUES[-1]) < 1e-10 * SCALE
    assert abs(spectrum.lambda_min - EIGENVALUES[0]) < 1e-10 * SCALE
    assert spectrum.point is POINT


def test_the_density_has_the_dense_eigenvalues_as_nodes():
    density = landscape.spectral_density(
        POINT, num_probes=2, num_iters=D, preconditioner=P, progress=None
    )
    for nodes in density.nodes:  # a full run's Ritz values are M's eigenvalues
        np.testing.assert_allclose(nodes, EIGENVALUES, rtol=0, atol=1e-10 * SCALE)


def test_the_trace_is_exact_when_hutchpp_sketches_all_of_d():
    found = landscape.trace(POINT, num_probes=3 * D, preconditioner=P, progress=None)
    assert abs(found.value - np.trace(M)) < 1e-10 * SCALE
    listed = landscape.trace([POINT, POINT], num_probes=3 * D, preconditioner=P, progress=None)
    assert [f.point for f in listed] == [POINT, POINT]
    np.testing.assert_allclose([f.value for f in listed], np.trace(M), atol=1e-10 * SCALE)


def test_the_diagonal_is_exact_where_the_congruence_is_diagonal():
    curvatures = {"a": np.array([2.0, -1.0, 0.5]), "b": np.array([3.0])}
    diagonal = {"a": np.array([0.5, 4.0, 2.0]), "b": np.array([0.25])}

    def quadratic(params, inputs):
        return 0.5 * sum(jnp.sum(inputs[k] * params[k] ** 2) for k in params)

    point = landscape.Point(
        {"a": np.ones(3), "b": np.ones(1)}, objective=quadratic, inputs=curvatures
    )
    found = landscape.diagonal(point, num_probes=4, preconditioner=diagonal)
    expected = np.concatenate([curvatures[k] / diagonal[k] for k in ("a", "b")])
    np.testing.assert_allclose(found.values, expected, rtol=1e-14)
    assert found.point is point


def test_products_are_the_dense_congruence():
    x0, matvec = landscape.hvp_flat(POINT, preconditioner=P)
    np.testing.assert_array_equal(x0, ravel_pytree(PARAMS)[0])
    columns = np.stack([np.asarray(matvec(e)) for e in np.eye(D)], axis=1)
    np.testing.assert_allclose(columns, M, rtol=0, atol=1e-12 * SCALE)
    v = jax.tree.map(lambda leaf: RNG.standard_normal(np.shape(leaf)), PARAMS)
    tree = landscape.hvp(POINT, preconditioner=P)(v)
    np.testing.assert_allclose(ravel_pytree(tree)[0], M @ ravel_pytree(v)[0], atol=1e-12 * SCALE)


def test_a_dataset_in_batches_takes_the_preconditioner():
    point = landscape.Point(PARAMS, objective=mlp, batches=landscape.batches((X, Y), 8))
    found = landscape.eigenpairs(
        point, k=2, which="largest", dense_below=0, preconditioner=P, progress=None
    )
    np.testing.assert_allclose(found.values, EIGENVALUES[::-1][:2], rtol=0, atol=1e-10 * SCALE)


CLOSE = dict(rtol=1e-12, atol=1e-12 * SCALE)


def test_an_identity_preconditioner_gives_the_plain_pairs_and_ritz_values():
    for probe, kwargs in [
        (landscape.eigenpairs, dict(k=2, which="largest", dense_below=0, progress=None)),
        (landscape.lanczos_spectrum, dict(num_iters=8, progress=None)),
    ]:
        plain, seen = probe(POINT, **kwargs), probe(POINT, preconditioner=ONES, **kwargs)
        values = "values" if hasattr(plain, "values") else "ritz_values"
        np.testing.assert_allclose(getattr(seen, values), getattr(plain, values), **CLOSE)
    x0, matvec = landscape.hvp_flat(POINT)
    v = RNG.standard_normal(D)
    np.testing.assert_allclose(landscape.hvp_flat(POINT, preconditioner=ONES)[1](v), matvec(v),
                               **CLOSE)  # fmt: skip


def test_an_identity_preconditioner_gives_the_plain_estimates():
    close = CLOSE
    for probe, attribute in [(landscape.trace, "value"), (landscape.diagonal, "values")]:
        plain, seen = probe(POINT, num_probes=8), probe(POINT, num_probes=8, preconditioner=ONES)
        np.testing.assert_allclose(getattr(seen, attribute), getattr(plain, attribute), **close)
    plain = landscape.spectral_density(POINT, num_probes=2, num_iters=6, progress=None)
    seen = landscape.spectral_density(
        POINT, num_probes=2, num_iters=6, progress=None, preconditioner=ONES
    )
    np.testing.assert_allclose(seen.nodes, plain.nodes, **close)


def _adam_steps(optimizer, steps=3):
    state, params = optimizer.init(PARAMS), PARAMS
    grads = []
    for _ in range(steps):
        grad = jax.grad(mlp)(params, (X, Y))
        grads.append(grad)
        updates, state = optimizer.update(grad, state, params)
        params = optax.apply_updates(params, updates)
    return state, params, grads


def test_adam_preconditioner_is_sqrt_vhat_plus_eps_by_hand():
    b2, eps = 0.99, 1e-3
    state, _, grads = _adam_steps(optax.adam(1e-2, b2=b2, eps=eps))
    nu = jax.tree.map(np.zeros_like, PARAMS)
    for grad in grads:
        nu = jax.tree.map(lambda n, g: b2 * n + (1 - b2) * np.asarray(g) ** 2, nu, grad)
    by_hand = jax.tree.map(lambda n: np.sqrt(n / (1 - b2**3)) + eps, nu)
    found = landscape.adam_preconditioner(state, eps=eps, b2=b2)
    for key in PARAMS:
        np.testing.assert_allclose(found[key], by_hand[key], rtol=1e-13)
    with_b1 = landscape.adam_preconditioner(state, eps=eps, b2=b2, b1=0.9)
    np.testing.assert_allclose(with_b1["w1"], by_hand["w1"] * (1 - 0.9**3), rtol=1e-13)
    chained, _, _ = _adam_steps(optax.chain(optax.clip(1e3), optax.adam(1e-2, b2=b2, eps=eps)))
    np.testing.assert_allclose(
        landscape.adam_preconditioner(chained, eps=eps, b2=b2)["w2"], by_hand["w2"], rtol=1e-13
    )


def test_an_adam_state_is_a_preconditioner_with_optax_defaults():
    state, _, _ = _adam_steps(optax.adam(1e-2))
    diagonal = landscape.adam_preconditioner(state)
    by_state = landscape.eigenpairs(POINT, k=1, which="largest", preconditioner=state)
    expected = np.linalg.eigvalsh(dense(diagonal=diagonal))[-1]
    assert abs(by_state.values[0] - expected) < 1e-10 * abs(expected)


def test_the_tracker_follows_the_dense_top_eigenvalue_along_adam():
    optimizer = optax.adam(5e-2, b2=0.9)
    state, params = optimizer.init(PARAMS), PARAMS
    tracker = landscape.tracker(mlp_loss, num_iters=D, k=1, noise=0.0)
    tracked = tracker.init(params, jax.random.key(0))
    for _ in range(3):
        updates, state = optimizer.update(jax.grad(mlp)(params, (X, Y)), state, params)
        params = optax.apply_updates(params, updates)
        diagonal = landscape.adam_preconditioner(state, b2=0.9)
        measured, tracked = tracker.update(tracked, params, X, Y, preconditioner=diagonal)
        expected = np.linalg.eigvalsh(dense(params, diagonal))
        assert abs(float(measured.lambda_max) - expected[-1]) < 1e-10 * np.max(np.abs(expected))
        assert abs(float(measured.lambda_min) - expected[0]) < 1e-10 * np.max(np.abs(expected))


def mlp_loss(params, x, y):
    return mlp(params, (x, y))


@pytest.mark.parametrize(
    "preconditioner, error, message",
    [
        ({"w1": np.ones((3, 4))}, ValueError, "preconditioner has tree structure"),
        ({**ONES, "b1": np.ones(5)}, ValueError, "preconditioner has leaves of shapes"),
        ({**ONES, "b1": np.array([1.0, 0.0, 1.0, 1.0])}, ValueError, "finite numbers > 0"),
        ({**ONES, "b1": np.array([1.0, np.nan, 1.0, 1.0])}, ValueError, "finite numbers > 0"),
    ],
)
def test_a_wrong_preconditioner_is_one_sentence(preconditioner, error, message):
    for caller, call in [
        (
            "lanczos_spectrum",
            lambda: landscape.lanczos_spectrum(POINT, preconditioner=preconditioner),
        ),
        ("eigenpairs", lambda: landscape.eigenpairs(POINT, preconditioner=preconditioner)),
        ("hvp", lambda: landscape.hvp(POINT, preconditioner=preconditioner)),
    ]:
        with pytest.raises(error, match=message) as raised:
            call()
        assert str(raised.value).startswith(caller + ": ")
        assert str(raised.value).count(". ") == 0
    tracker = landscape.tracker(mlp_loss, num_iters=4)
    with pytest.raises(error, match=message) as raised:
        tracker.update(tracker.init(PARAMS, jax.random.key(0)), PARAMS, X, Y,
                       preconditioner=preconditioner)  # fmt: skip
    assert str(raised.value).startswith("tracker.update: ")


def test_what_takes_no_preconditioner_says_so():
    with pytest.raises(ValueError, match="eigenpairs: preconditioner= preconditions the loss's"):
        landscape.eigenpairs(POINT, matrix="ggn", preconditioner=P)
    listed = [(X[i : i + 8], Y[i : i + 8]) for i in range(0, 24, 8)]
    streamed = landscape.Point(PARAMS, objective=mlp, batches=landscape.stream(listed, 2))
    with pytest.raises(ValueError, match="lanczos_spectrum: preconditioner= needs the data in"):
        landscape.lanczos_spectrum(streamed, preconditioner=P)
    with pytest.raises(TypeError, match="adam_preconditioner: opt_state is dict"):
        landscape.adam_preconditioner(PARAMS)
    with pytest.raises(ValueError, match="opt_state has taken no step"):
        landscape.adam_preconditioner(optax.adam(1e-2).init(PARAMS))
