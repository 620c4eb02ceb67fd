"""One Rayleigh-Ritz extraction: the eigenpairs of a Krylov method's small projected matrix,
their Gauss quadrature weights and residuals, and the Ritz vectors of chosen indices. numpy
arrays are handled on the host (nothing compiled), jax arrays in the caller's program.
notes/landscape_geometry.md §8 for the quadrature; docs/design/curvature.md for its uses."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from landscape.core.lanczos import Tridiagonal

Array = Any  # a numpy or a jax array: the functions compute in the namespace they are given


class Ritz(NamedTuple):
    """`values` (m,) ascending; `weights` (m,) the squared first components of their
    eigenvectors (Gauss weights, summing to 1); `residuals` (m,) ||A y - θ y|| = |b . s| of each
    Ritz pair, b the coupling of the next Krylov vector; `vectors` (rows, D) the Ritz vectors of
    the kept indices (None without a basis)."""

    values: Array
    weights: Array
    residuals: Array
    vectors: Array


def _namespace(x: Array) -> Any:
    return np if isinstance(x, np.ndarray) else jnp


def tridiagonal_matrix(alphas: Array, betas: Array) -> Array:
    """T (..., m, m) from its diagonal `alphas` (..., m) and off-diagonal `betas` (..., m - 1)
    (batched on the host; one T, (m, m), of jax arrays)."""
    if not isinstance(alphas, np.ndarray):
        return jnp.diag(alphas) + jnp.diag(betas, 1) + jnp.diag(betas, -1)
    m = alphas.shape[-1]
    rows = np.arange(m)
    matrix = np.zeros(alphas.shape + (m,), alphas.dtype)
    matrix[..., rows, rows] = alphas
    matrix[..., rows[:-1], rows[1:]] = betas
    matrix[..., rows[1:], rows[:-1]] = betas
    return matrix


def rayleigh_ritz(
    matrix: Array, coupling: Array, basis: Array | None = None, kept: tuple[int, ...] = ()
) -> Ritz:
    """The Ritz pairs of a symmetric projected `matrix` (m, m) = V A V^T, given the `coupling`
    (m,) of the residual A V^T - V^T matrix = r b^T (Lanczos: β e_m): residual_j = |b . s_j|;
    with a `basis` V (m, D), the vectors s_j^T V of the `kept` indices (negative: from the top)."""
    xp = _namespace(matrix)
    values, coefficients = xp.linalg.eigh(matrix)
    residuals = xp.abs(xp.sum(coupling[:, None] * coefficients, axis=0))
    vectors = None
    if basis is not None:
        chosen = coefficients[:, np.asarray(kept, int)].T  # (rows, m)
        vectors = (
            chosen @ basis
            if xp is np
            else jnp.matmul(chosen, basis, precision=jax.lax.Precision.HIGHEST)
        )
    return Ritz(values, coefficients[0] ** 2, residuals, vectors)


def ritz(run: Tridiagonal, kept: tuple[int, ...] = ()) -> Ritz:
    """The Ritz pairs of a Lanczos run (`lanczos.extract`): its T, residuals |β s_last|, the
    vectors of the `kept` indices of the ascending values."""
    xp = _namespace(run.alphas)
    m = run.alphas.shape[0]
    coupling = xp.zeros(m, run.alphas.dtype)
    coupling = coupling.at[-1].set(run.beta) if xp is jnp else _set_last(coupling, run.beta)
    matrix = tridiagonal_matrix(run.alphas, run.betas)
    return rayleigh_ritz(matrix, coupling, run.basis, kept)


def _set_last(x: np.ndarray, value: Array) -> np.ndarray:
    x[-1] = value
    return x


def quadrature(alphas: np.ndarray, betas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Gauss quadrature nodes and weights (..., m) of each tridiagonal T (diagonal `alphas`
    (..., m), off-diagonal `betas` (..., m - 1)) on the host, in their dtype; NaN rows where a
    T is not finite (eigh on NaN or inf gives garbage or an error)."""
    good = np.all(np.isfinite(alphas), axis=-1) & np.all(np.isfinite(betas), axis=-1)
    matrix = tridiagonal_matrix(
        np.where(good[..., None], alphas, 0).astype(alphas.dtype),
        np.where(good[..., None], betas, 0).astype(betas.dtype),
    )
    nodes, vectors = np.linalg.eigh(matrix)
    weights = vectors[..., 0, :] ** 2
    nodes[~good], weights[~good] = np.nan, np.nan
    return nodes, weights
