"""Lanczos in three vectors (landscape/core/three_term.py) against the full basis on dense
symmetric matrices: the same T before orthogonality is lost, the same quadrature moments after
it is (ghosts share their value's weight), Cullum-Willoughby's ghosts, an exhausted space, and
vectors stored in bfloat16 with the arithmetic in float32."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from landscape.core import lanczos, ritz, three_term


def _matrix(dim: int, seed: int = 0, spread: float = 1.0) -> np.ndarray:
    """A symmetric matrix with eigenvalues spread over [-1, 1] and a few outliers up to 3 *
    `spread` (outliers converge first, so a long run makes their ghosts)."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.normal(size=(dim, dim)))
    values = np.concatenate([np.linspace(-1, 1, dim - 3), spread * np.array([1.5, 2.2, 3.0])])
    return (q * values) @ q.T


def _both(a: np.ndarray, num_iters: int, seed: int = 1, **storage):
    start = jnp.asarray(np.random.default_rng(seed).normal(size=a.shape[0]))
    matvec = lambda v: jnp.asarray(a) @ v  # noqa: E731
    full = lanczos.extract(lanczos.run(matvec, start, num_iters, jax.random.key(0)))
    short = three_term.extract(three_term.run(matvec, start, num_iters, **storage))
    return full, short, np.asarray(start / jnp.linalg.norm(start))


def _moments(alphas, betas, powers=range(1, 9)) -> np.ndarray:
    nodes, weights = ritz.quadrature(np.asarray(alphas), np.asarray(betas))
    return np.array([np.sum(weights * nodes**p) for p in powers])


def test_before_orthogonality_is_lost_t_is_the_full_basis_t():
    full, short, _ = _both(_matrix(200), 12)
    np.testing.assert_allclose(short.alphas, full.alphas, atol=1e-12)
    np.testing.assert_allclose(short.betas, full.betas, atol=1e-12)
    assert short.basis is None


def test_after_it_is_lost_the_quadrature_keeps_the_moments():
    """80 steps at D = 300: the outliers converge early and come back as ghosts, so T's nodes
    differ from the full basis's, but the moments v^T A^p v the density reads do not."""
    a = _matrix(300, spread=2.0)
    full, short, v = _both(a, 80)
    exact = np.array([v @ np.linalg.matrix_power(a, p) @ v for p in range(1, 9)])
    np.testing.assert_allclose(_moments(full.alphas, full.betas), exact, rtol=1e-10)
    np.testing.assert_allclose(_moments(short.alphas, short.betas), exact, rtol=1e-8)
    nodes = np.linalg.eigvalsh(ritz.tridiagonal_matrix(np.asarray(short.alphas), short.betas))
    assert np.sum(np.abs(nodes - 6.0) < 1e-8) >= 2  # the top outlier's ghost: lost orthogonality


def test_cullum_willoughby_names_the_ghosts_and_their_weights_are_rounding():
    a = _matrix(300, spread=2.0)
    full, short, _ = _both(a, 80)
    alphas, betas = np.asarray(short.alphas), np.asarray(short.betas)
    ghosts = three_term.spurious(alphas, betas)
    nodes, weights = ritz.quadrature(alphas, betas)
    assert ghosts.any() and np.all(weights[ghosts] < 1e-8)
    kept = nodes[~ghosts & (weights > 1e-8)]
    top = np.sort(np.linalg.eigvalsh(a))[::-1][:3]
    np.testing.assert_allclose(np.sort(kept)[::-1][:3], top, atol=1e-10)
    full_ghosts = three_term.spurious(np.asarray(full.alphas), np.asarray(full.betas))
    assert not full_ghosts.any()  # a full basis makes none


def test_an_exhausted_space_stops_with_exact_weights():
    """A matrix of 3 distinct eigenvalues: the run ends at step 3, T's later rows decouple and
    the quadrature puts the start's weights on the 3 values."""
    rng = np.random.default_rng(2)
    q, _ = np.linalg.qr(rng.normal(size=(40, 40)))
    values = np.repeat([-1.0, 0.5, 2.0], [10, 20, 10])
    a = (q * values) @ q.T
    _, short, v = _both(a, 10)
    nodes, weights = ritz.quadrature(np.asarray(short.alphas), np.asarray(short.betas))
    assert np.all(np.asarray(short.betas)[2:] == 0)
    for value in (-1.0, 0.5, 2.0):
        block = np.abs(values - value) < 1e-12
        expected = np.sum((q[:, block].T @ v) ** 2)
        assert np.sum(weights[np.abs(nodes - value) < 1e-9]) == pytest.approx(expected, abs=1e-12)


def test_bfloat16_vectors_with_float32_arithmetic():
    """Vectors stored in bfloat16 (8 bits of mantissa), products and dots in float32: the
    density's first moments within a few bfloat16 roundings."""
    a = _matrix(300, spread=2.0).astype(np.float32)
    start = jnp.asarray(np.random.default_rng(1).normal(size=300), jnp.float32)
    run = three_term.run(lambda v: jnp.asarray(a) @ v, start, 30, storage=jnp.bfloat16)
    assert run.current.dtype == jnp.bfloat16 and run.alphas.dtype == jnp.float32
    found = three_term.extract(run)
    v = np.asarray(start, np.float64) / np.linalg.norm(np.asarray(start, np.float64))
    exact = np.array([v @ np.linalg.matrix_power(a.astype(np.float64), p) @ v for p in (1, 2, 3)])
    moments = _moments(found.alphas.astype(np.float64), found.betas.astype(np.float64), (1, 2, 3))
    scale = np.max(np.abs(np.linalg.eigvalsh(a)))
    assert np.all(np.abs(moments - exact) <= 5e-2 * scale ** np.arange(1, 4))


def test_a_pytree_run_is_the_flat_run_on_its_raveled_vectors():
    """The same recurrence on pytrees laid out as parameters (a matvec that takes and gives
    them, no flat copies): T as the flat run's, in float64 and with bfloat16 vectors."""
    from jax.flatten_util import ravel_pytree

    a = _matrix(60)
    rng = np.random.default_rng(3)
    tree = {"w": jnp.asarray(rng.normal(size=(7, 6))), "b": jnp.asarray(rng.normal(size=18))}
    flat, unravel = ravel_pytree(tree)
    matvec = lambda v: jnp.asarray(a) @ v  # noqa: E731
    on_tree = lambda t: unravel(matvec(ravel_pytree(t)[0]))  # noqa: E731
    for num_iters, storage in ((13, None), (12, jnp.bfloat16)):
        start = flat if storage is None else flat.astype(jnp.float32)
        dense = matvec if storage is None else lambda v: jnp.asarray(a, jnp.float32) @ v  # noqa: E731
        short = three_term.extract(three_term.run(dense, start, num_iters, storage))
        pytree = (
            unravel(start)
            if storage is None
            else jax.tree.map(lambda x: x.astype(jnp.float32), tree)
        )
        mapped = (
            on_tree
            if storage is None
            else lambda t: jax.tree.map(lambda x: x.astype(jnp.float32), on_tree(t))
        )  # noqa: E731
        found = three_term.run(mapped, pytree, num_iters, storage)
        assert jax.tree.structure(found.current) == jax.tree.structure(tree)
        got = three_term.extract(found)
        tol = 1e-12 if storage is None else 1e-5
        np.testing.assert_allclose(got.alphas, short.alphas, rtol=tol, atol=tol)
        np.testing.assert_allclose(got.betas, short.betas, rtol=tol, atol=tol)
