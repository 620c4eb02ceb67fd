"""Lanczos in three vectors of D: the three-term recurrence without reorthogonalisation, for
spectral densities at sizes where a basis of D-vectors does not fit (D ~ 10^10-10^11).

The rule for the loss of orthogonality: none is restored. Finite-precision Lanczos is exact
Lanczos on a nearby matrix whose eigenvalues cluster around A's (Greenbaum 1989), so its Gauss
quadrature of a smooth function stays accurate (Knizhnerman 1996): a converged Ritz value
comes back as copies ("ghosts") that share its weight, and a density reads only the sum.
`spurious` names the nodes that a Cullum-Willoughby test finds to be such copies.
docs/design/curvature.md, "Densities in three vectors".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import DTypeLike

from landscape import _checks
from landscape.core.lanczos import Tridiagonal, unit_read, varying_like

VECTORS = 3  # of D: the last two Lanczos vectors (kept) and the product (made by each step)


class ThreeTerm(NamedTuple):
    """A run in progress: the last two Lanczos vectors `previous` and `current` (D,), stored in
    their own dtype (bfloat16 halves them; the arithmetic is the product's), T's diagonal
    `alphas` (m,) and couplings `betas` (m,) so far, and `taken`, the steps taken."""

    previous: jax.Array
    current: jax.Array
    alphas: jax.Array
    betas: jax.Array
    taken: jax.Array


def init(start: jax.Array, num_iters: int, storage: DTypeLike | None = None) -> ThreeTerm:
    """The state before the first step: `current` = start / |start| in `storage` (default:
    start's dtype), no previous vector."""
    storage = start.dtype if storage is None else storage
    unit = (start / jnp.linalg.norm(start)).astype(storage)
    zeros = varying_like(jnp.zeros(num_iters, start.dtype), start)
    taken = jnp.zeros((), jnp.int32)
    return ThreeTerm(jnp.zeros_like(unit), varying_like(unit, start), zeros, zeros, taken)


def step(state: ThreeTerm, product: jax.Array) -> ThreeTerm:
    """One step given A v for v = `state.current`: alpha = v.Av, w = Av - alpha v - beta v_prev,
    the next vector w / |w|; where |w| falls to rounding the space is exhausted and the run
    stops (T's later rows decouple with zero weight: the quadrature stays exact)."""
    previous, current, alphas, betas, i = state
    dtype = product.dtype
    v, v_prev = current.astype(dtype), previous.astype(dtype)
    if current.dtype != dtype:  # stored narrower: read back at unit norm (`lanczos.unit_read`)
        (v, v_prev), product = unit_read((v, v_prev), product)
    alpha = jnp.vdot(v, product)
    coupling = jnp.where(i > 0, betas[jnp.maximum(i - 1, 0)], 0)
    w = product - alpha * v - coupling * v_prev
    beta = jnp.linalg.norm(w)
    scale = jnp.maximum(jnp.linalg.norm(product), jnp.max(jnp.abs(alphas)))
    exhausted = beta <= 100 * jnp.finfo(dtype).eps * scale  # then v stays 0: alpha, beta 0
    next_v = jnp.where(exhausted, 0, w / jnp.where(exhausted, 1, beta))
    return ThreeTerm(
        current,
        next_v.astype(current.dtype),
        alphas.at[i].set(alpha),
        betas.at[i].set(jnp.where(exhausted, 0, beta)),
        i + 1,
    )


def extract(state: ThreeTerm) -> Tridiagonal:
    """The run's T and the next vector's norm (no basis: `basis` is None)."""
    return Tridiagonal(state.alphas, state.betas[:-1], state.betas[-1], None)  # type: ignore[arg-type]  # no basis in three vectors


def run(
    matvec: Callable[[jax.Array], jax.Array],
    start: jax.Array,
    num_iters: int,
    storage: DTypeLike | None = None,
) -> ThreeTerm:
    """`num_iters` steps from `start` in a fori_loop, holding three vectors of D."""

    def body(_: jax.Array, state: ThreeTerm) -> ThreeTerm:
        return step(state, matvec(state.current.astype(start.dtype)))

    return jax.lax.fori_loop(0, num_iters, body, init(start, num_iters, storage))


def spurious(alphas: np.ndarray, betas: np.ndarray, tol: float | None = None) -> np.ndarray:
    """Cullum and Willoughby's test: a node of T (ascending, as `ritz.quadrature` gives them)
    that is also an eigenvalue of T with its first row and column deleted, and is not a repeated
    node of T, is a ghost of the recurrence (its Gauss weight is rounding). Host numpy, (m,)."""
    nodes = np.linalg.eigvalsh(_tridiagonal(alphas, betas))
    if alphas.shape[-1] < 2:
        return np.zeros(nodes.shape, bool)
    tol = tol if tol is not None else 1e3 * np.finfo(alphas.dtype).eps * np.max(np.abs(nodes))
    deleted = np.linalg.eigvalsh(_tridiagonal(alphas[1:], betas[1:]))
    near_deleted = np.min(np.abs(nodes[:, None] - deleted[None, :]), axis=1) <= tol
    gaps = np.abs(nodes[:, None] - nodes[None, :])
    np.fill_diagonal(gaps, np.inf)
    repeated = np.min(gaps, axis=1) <= tol
    return near_deleted & ~repeated


def _tridiagonal(alphas: np.ndarray, betas: np.ndarray) -> np.ndarray:
    return np.diag(alphas) + np.diag(betas, 1) + np.diag(betas, -1)


BASES = ("auto", "full", "three")


def check_basis(basis: str) -> None:
    """One sentence for a basis that is not one of BASES."""
    _checks.check_choice("basis", basis, BASES)


def vector_bytes(
    dim: int, itemsize: int, basis: str, num_iters: int, storage: str | None = None
) -> float:
    """Bytes of D-vectors one probe's run keeps beside its product: num_iters (a full basis)
    or three_term.VECTORS (three vectors), each of `storage`'s itemsize (None: `itemsize`)."""
    size = np.dtype(storage).itemsize if storage else itemsize
    return float((VECTORS if basis == "three" else num_iters) * dim * size)
