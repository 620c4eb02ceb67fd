"""The core's Lanczos (init, step, extract) and Ritz extraction on small dense symmetric
matrices, against numpy's eigh: the same step in a fori_loop and in a host loop."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from landscape.core import lanczos, ritz


def _matrix(dim: int = 12, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(dim, dim))
    return (x + x.T) / 2


def test_a_full_run_has_the_matrix_eigenvalues_and_an_orthonormal_basis():
    a = _matrix()
    start = jnp.asarray(np.random.default_rng(1).normal(size=12))
    run = lanczos.run(lambda v: jnp.asarray(a) @ v, start, 12, jax.random.key(0))
    found = lanczos.extract(run)
    basis = np.asarray(found.basis)
    np.testing.assert_allclose(basis @ basis.T, np.eye(12), atol=1e-12)
    t = np.diag(found.alphas) + np.diag(found.betas, 1) + np.diag(found.betas, -1)
    np.testing.assert_allclose(basis @ a @ basis.T, t, atol=1e-12)
    values = ritz.ritz(found).values
    np.testing.assert_allclose(values, np.linalg.eigvalsh(a), atol=1e-12)
    assert int(run.taken) == 12
    assert abs(float(found.beta)) < 1e-12  # the Krylov space is all of R^12


def test_the_host_loop_of_init_and_step_equals_the_fori_loop():
    a, key = _matrix(), jax.random.key(3)
    start = jnp.asarray(np.random.default_rng(2).normal(size=12))
    state = lanczos.init(start, 5)
    for _ in range(5):
        state = lanczos.step(state, jnp.asarray(a) @ lanczos.current(state), key)
    looped = lanczos.run(lambda v: jnp.asarray(a) @ v, start, 5, key)
    for mine, theirs in zip(state, looped, strict=True):
        np.testing.assert_allclose(mine, theirs, atol=1e-14)


def test_ritz_residuals_are_the_norms_of_a_y_minus_theta_y():
    a = _matrix(20, seed=4)
    start = jnp.asarray(np.random.default_rng(5).normal(size=20))
    found = lanczos.extract(lanczos.run(lambda v: jnp.asarray(a) @ v, start, 6, jax.random.key(0)))
    pairs = ritz.ritz(found, kept=tuple(range(6)))
    vectors = np.asarray(pairs.vectors)
    direct = np.linalg.norm(vectors @ a - np.asarray(pairs.values)[:, None] * vectors, axis=1)
    np.testing.assert_allclose(pairs.residuals, direct, atol=1e-10)
    assert np.all(direct > 1e-6)  # six steps of 20: not converged, so the check says something
    np.testing.assert_allclose(np.sum(pairs.weights), 1.0, atol=1e-12)


def test_an_exhausted_space_restarts_orthogonally_and_keeps_exact_eigenvalues():
    """A matrix of rank 3 from a start in its range: the fourth step finds nothing new (beta 0)
    and goes on from a fresh direction, so T keeps the eigenvalues 1, 2, 3 and gains 0s."""
    q = np.linalg.qr(np.random.default_rng(6).normal(size=(10, 10)))[0]
    a = q[:, :3] @ np.diag([1.0, 2.0, 3.0]) @ q[:, :3].T
    start = jnp.asarray(q[:, :3].sum(axis=1))
    found = lanczos.extract(lanczos.run(lambda v: jnp.asarray(a) @ v, start, 6, jax.random.key(0)))
    assert abs(float(found.betas[2])) == 0.0
    basis = np.asarray(found.basis)
    np.testing.assert_allclose(basis @ basis.T, np.eye(6), atol=1e-12)
    np.testing.assert_allclose(ritz.ritz(found).values, [0, 0, 0, 1, 2, 3], atol=1e-12)


def test_the_host_quadrature_matches_jax_and_marks_non_finite_rows():
    alphas = np.array([[1.0, 2.0, 3.0], [np.nan, 1.0, 1.0]])
    betas = np.array([[0.5, 0.25], [0.1, 0.1]])
    nodes, weights = ritz.quadrature(alphas, betas)
    t = np.diag(alphas[0]) + np.diag(betas[0], 1) + np.diag(betas[0], -1)
    values, vectors = np.linalg.eigh(t)
    np.testing.assert_allclose(nodes[0], values, atol=1e-15)
    np.testing.assert_allclose(weights[0], vectors[0] ** 2, atol=1e-15)
    assert np.all(np.isnan(nodes[1])) and np.all(np.isnan(weights[1]))
    in_jax = ritz.rayleigh_ritz(jnp.asarray(t), jnp.zeros(3))
    np.testing.assert_allclose(in_jax.values, values, atol=1e-14)


@pytest.mark.parametrize("bad", [0, 13])
def test_lanczos_refuses_a_number_of_steps_outside_one_to_dim(bad):
    with pytest.raises(ValueError, match="between 1 and dim = 12"):
        lanczos.lanczos(lambda v: v, 12, bad, jax.random.key(0), jnp.float64)
