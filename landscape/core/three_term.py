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

from landscape import _checks, trees
from landscape.core.lanczos import Tridiagonal, unit_read, varying_like
from landscape.typing import PyTree

VECTORS = 3  # of D: the last two Lanczos vectors (kept) and the product (made by each step)
KEPT = 2  # of them beside the product: `previous` and `current`, as stored
# over a mesh, one vector more as the parameters lie that XLA keeps through the loop: on flat
# vectors `current` cut into the leaves, on pytrees the product's third vector (each product
# holds three, `blocks.product_bytes`, where the mesh's count has two) (foundation_scale.md)
AS_PARAMETERS = 1


class ThreeTerm(NamedTuple):
    """A run in progress: the last two Lanczos vectors `previous` and `current` (arrays (D,), or
    pytrees laid out as the parameters), stored in their own dtype (bfloat16 halves them; the
    arithmetic is the product's), T's diagonal `alphas` (m,) and couplings `betas` (m,) so far,
    and `taken`, the steps taken."""

    previous: PyTree
    current: PyTree
    alphas: jax.Array
    betas: jax.Array
    taken: jax.Array


def init(start: PyTree, num_iters: int, storage: DTypeLike | None = None) -> ThreeTerm:
    """The state before the first step: `current` = start / |start| in `storage` (default:
    start's dtype), no previous vector; `start` an array (D,) or a pytree of such leaves."""
    first = jax.tree.leaves(start)[0]
    storage = first.dtype if storage is None else storage
    norm = trees.tree_norm(start)
    unit = jax.tree.map(lambda x: varying_like((x / norm).astype(storage), x), start)
    zeros = varying_like(jnp.zeros(num_iters, first.dtype), first)
    taken = jnp.zeros((), jnp.int32)
    return ThreeTerm(jax.tree.map(jnp.zeros_like, unit), unit, zeros, zeros, taken)


def step(state: ThreeTerm, product: PyTree) -> ThreeTerm:
    """One step given A v for v = `state.current` (of its structure): alpha = v.Av, w = Av -
    alpha v - beta v_prev, the next vector w / |w|; where |w| falls to rounding the space is
    exhausted and the run stops: T's later rows are zero (they decouple with zero weight, so
    the quadrature stays exact), whatever the vectors past it hold."""
    previous, current, alphas, betas, i = state
    dtype = jax.tree.leaves(product)[0].dtype
    v, v_prev = trees.tree_astype(current, dtype), trees.tree_astype(previous, dtype)
    if jax.tree.leaves(current)[0].dtype != dtype:  # stored narrower: read back at unit norm
        (v, v_prev), product = _unit_read((v, v_prev), product)
    alpha = trees.tree_vdot(v, product)
    coupling = jnp.where(i > 0, betas[jnp.maximum(i - 1, 0)], 0)
    past = (i > 0) & (coupling == 0)  # an earlier step exhausted the space
    w = jax.tree.map(lambda p, x, y: p - alpha * x - coupling * y, product, v, v_prev)
    beta = trees.tree_norm(w)
    scale = jnp.maximum(trees.tree_norm(product), jnp.max(jnp.abs(alphas)))
    exhausted = past | (beta <= 100 * jnp.finfo(dtype).eps * scale)
    # the next vector does not wait on `exhausted` (a select on it kept a sixth vector of D in
    # XLA's count): past exhaustion the rows are zeroed, not the vectors
    divisor = jnp.where(beta > 0, beta, 1)
    next_v = jax.tree.map(lambda x, c: (x / divisor).astype(c.dtype), w, current)
    alphas = alphas.at[i].set(jnp.where(past, 0, alpha))
    betas = betas.at[i].set(jnp.where(exhausted, 0, beta))
    return ThreeTerm(current, next_v, alphas, betas, i + 1)


def _unit_read(
    rows: tuple[PyTree, PyTree], product: PyTree
) -> tuple[tuple[PyTree, PyTree], PyTree]:
    """`lanczos.unit_read` on arrays or pytrees: (v, v_prev) at unit norm, A v scaled as v."""
    if not isinstance(product, jax.Array) or not isinstance(rows[0], jax.Array):
        v, previous = rows
        norm, norm_prev = trees.tree_norm(v), trees.tree_norm(previous)
        scale, scale_prev = jnp.where(norm > 0, norm, 1), jnp.where(norm_prev > 0, norm_prev, 1)
        divided = lambda t, by: jax.tree.map(lambda x: x / by, t)  # noqa: E731
        return (divided(v, scale), divided(previous, scale_prev)), divided(product, scale)
    return unit_read(rows, product)


def extract(state: ThreeTerm) -> Tridiagonal:
    """The run's T and the next vector's norm (no basis: `basis` is None)."""
    return Tridiagonal(state.alphas, state.betas[:-1], state.betas[-1], None)  # type: ignore[arg-type]  # no basis in three vectors


def run(
    matvec: Callable[[PyTree], PyTree],
    start: PyTree,
    num_iters: int,
    storage: DTypeLike | None = None,
    steps: jax.Array | int | None = None,
) -> ThreeTerm:
    """`steps` steps (default `num_iters`, the rows of T kept; traced, at most num_iters, the
    rows past it zero) from `start` (an array (D,) or a pytree: `matvec` takes and gives its
    structure) in a fori_loop of two steps each, an odd last one after it, holding three
    vectors of D. Two steps bring each vector back to the slot of the loop's state it came
    from (the newest written where the oldest was), so XLA keeps the slots in place; a step
    each shifts `current` into `previous`, a copy of D each step (docs/design/curvature.md,
    "Densities in three vectors")."""

    def advanced(state: ThreeTerm) -> ThreeTerm:
        return step(
            state, matvec(jax.tree.map(lambda x, s: x.astype(s.dtype), state.current, start))
        )

    def pair(_: jax.Array, state: ThreeTerm) -> ThreeTerm:
        return advanced(advanced(state))

    count = num_iters if steps is None else steps
    state = jax.lax.fori_loop(0, count // 2, pair, init(start, num_iters, storage))
    if isinstance(count, int):
        return advanced(state) if count % 2 else state
    return jax.lax.cond(count % 2 == 1, advanced, lambda state: state, state)


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
    dim: int,
    itemsize: int,
    basis: str,
    num_iters: int,
    storage: str | None = None,
    pytrees: bool = False,
) -> float:
    """Bytes of D-vectors one probe's run keeps beside its product (`blocks.product_bytes`,
    which counts v and A v), each of `storage`'s itemsize (None: `itemsize`): num_iters (a
    full basis); in three vectors, `previous` and `current` (KEPT), or on `pytrees` (products
    that take the vectors as the parameters lie) `previous` alone where `current` is itself
    the product's v (stored no narrower): what XLA holds, docs/guide/foundation_scale.md."""
    size = np.dtype(storage).itemsize if storage else itemsize
    if basis != "three":
        return float(num_iters * dim * size)
    kept = KEPT - 1 if pytrees and size >= itemsize else KEPT
    return float(kept * dim * size)
