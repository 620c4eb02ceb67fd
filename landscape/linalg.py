"""Linear algebra on symmetric operators given as matrix-vector products, shared by the probes
and the engine (which imports no probe): the Lanczos tridiagonalisation with full
reorthogonalisation, and the Hessian-vector product of a loss of flattened parameters."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

LinearMap = Callable[[jax.Array], jax.Array]
LanczosState = tuple[jax.Array, jax.Array, jax.Array]  # (basis V, alphas, betas)


def lanczos(
    matvec: Callable[[jax.Array], jax.Array],
    dim: int,
    num_iters: int,
    key: jax.Array,
    dtype: DTypeLike,
    project: Callable[[jax.Array], jax.Array] | None = None,
) -> tuple[jax.Array, jax.Array]:
    """`lanczos_from` a random start vector drawn from `key` (dim and num_iters static; `project`
    as there)."""
    if not 1 <= num_iters <= dim:
        raise ValueError(f"num_iters = {num_iters}: must be between 1 and dim = {dim}.")
    start_key, restart_key = jax.random.split(key)
    start = jax.random.normal(start_key, (dim,), dtype)
    start = start if project is None else project(start)
    return lanczos_from(matvec, start, num_iters, restart_key, project=project)


def lanczos_from(
    matvec: Callable[[jax.Array], jax.Array],
    start: jax.Array,
    num_iters: int,
    key: jax.Array,
    axis_name: str | None = None,
    project: Callable[[jax.Array], jax.Array] | None = None,
) -> tuple[jax.Array, jax.Array]:
    """`lanczos_basis` without the basis: (alphas (num_iters,), betas (num_iters - 1,))."""
    _, alphas, betas = lanczos_basis(matvec, start, num_iters, key, axis_name, project)
    return alphas, betas[:-1]


def lanczos_basis(
    matvec: Callable[[jax.Array], jax.Array],
    start: jax.Array,
    num_iters: int,
    key: jax.Array,
    axis_name: str | None = None,
    project: Callable[[jax.Array], jax.Array] | None = None,
) -> LanczosState:
    """Lanczos tridiagonalisation of a symmetric operator from `start` (any non-zero vector),
    with full reorthogonalisation.

    Returns the basis V (num_iters, D), T's diagonal `alphas` (num_iters,) and `betas`
    (num_iters,): T = V A V^T has off-diagonal betas[:-1], V's orthonormal rows span the Krylov
    space of `start` (the first row), and betas[-1] is the norm of the next Lanczos vector
    (|betas[-1] s_last| is a Ritz pair's residual, s its eigenvector of T).
    If the Krylov space is exhausted early, the next vector is a fresh random one (from `key`)
    orthogonal to V and that beta is 0, so T's eigenvalues stay eigenvalues of A and Gauss
    quadrature weights stay exact. Jittable and vmappable with `num_iters` static; keeps V in
    memory (num_iters * dim numbers). Under `vmap(..., axis_name=A)` give axis_name=A: the fresh
    direction is then computed only at a step where some lane needs one (a batched condition
    would compute it, a random draw and two passes, at every step of every lane). `project`
    maps a random draw into the operator's space (a flat layout's padding zeroed).
    """
    dim, dtype = start.shape[0], start.dtype

    def step(i: jax.Array, state: LanczosState) -> LanczosState:
        return lanczos_step(state, i, matvec(state[0][i]), key, axis_name, project)

    basis = jnp.zeros((num_iters, dim), dtype).at[0].set(start / jnp.linalg.norm(start))
    zeros = varying_like(jnp.zeros(num_iters, dtype), start)  # the carry varies as start does
    state = (varying_like(basis, start), zeros, zeros)
    return jax.lax.fori_loop(0, num_iters, step, state)


def lanczos_step(
    state: LanczosState,
    i: jax.Array,
    av: jax.Array,
    key: jax.Array,
    axis_name: str | None = None,
    project: Callable[[jax.Array], jax.Array] | None = None,
) -> LanczosState:
    """Step i of `lanczos_basis`, given A v of its basis row v = state[0][i]: alpha, beta and the
    next row (a fresh direction from fold_in(key, i) where the Krylov space is exhausted,
    mapped by `project`)."""
    basis, alphas, betas = state
    dim, dtype = basis.shape[1], basis.dtype
    dot = functools.partial(jnp.matmul, precision=jax.lax.Precision.HIGHEST)
    eps = jnp.finfo(dtype).eps

    def orthogonalise(basis: jax.Array, w: jax.Array) -> jax.Array:
        return w - dot(dot(basis, w), basis)  # rows after the current one are zero

    def fresh_direction(basis: jax.Array, i: jax.Array) -> jax.Array:
        w = jax.random.normal(jax.random.fold_in(key, i), (dim,), dtype)
        w = w if project is None else project(w)
        w = orthogonalise(basis, orthogonalise(basis, w))  # twice: a random w lies mostly in V
        return w / jnp.linalg.norm(w)

    v, previous = basis[i], basis[jnp.maximum(i - 1, 0)]
    alpha = dot(v, av)
    coupling = jnp.where(i > 0, betas[jnp.maximum(i - 1, 0)], 0)
    # the three-term recurrence, then one Gram-Schmidt pass against every earlier vector: what
    # is left for it to remove is rounding, so one pass keeps V orthonormal to rounding
    w = orthogonalise(basis, av - alpha * v - coupling * previous)
    beta = jnp.linalg.norm(w)
    # against the operator's scale seen so far, not |A v|: a v near A's null space has a
    # product of pure rounding, whose remainder is noise, not a direction of the space
    scale = jnp.maximum(jnp.linalg.norm(av), jnp.max(jnp.abs(alphas)))
    exhausted = beta <= 100 * eps * jnp.maximum(scale, jnp.max(betas))
    anywhere = exhausted if axis_name is None else jax.lax.pmax(exhausted, axis_name)
    next_v = jax.lax.cond(
        anywhere,
        lambda: jnp.where(exhausted, fresh_direction(basis, i), w / beta),
        lambda: w / beta,
    )
    basis = basis.at[i + 1].set(next_v, mode="drop")
    alphas = alphas.at[i].set(alpha)
    betas = betas.at[i].set(jnp.where(exhausted, 0, beta))
    return basis, alphas, betas


def varying_like(x: jax.Array, like: jax.Array) -> jax.Array:
    """x marked as varying over the manual mesh axes `like` varies over (inside a shard_map,
    whose loops and linearised functions want matching types; x itself everywhere else)."""

    def varying(a: jax.Array) -> frozenset:
        return getattr(getattr(jax.typeof(a), "manual_axis_type", None), "varying", frozenset())

    missing = tuple(sorted(varying(like) - varying(x)))
    return jax.lax.pcast(x, missing, to="varying") if missing else x


def linearized_gradient(
    loss: Callable[[jax.Array], jax.Array], flat: jax.Array
) -> tuple[jax.Array, jax.Array, Callable[[jax.Array], jax.Array]]:
    """(L(x), ∇L(x), v -> H v) at the flat parameters x: the gradient linearised once
    (forward-over-reverse, `jax.linearize`), so each Hessian-vector product after it is one
    tangent pass, with no second pass of the primal computation."""
    (value, grad), linear = jax.linearize(jax.value_and_grad(loss), flat)
    return value, grad, lambda v: linear(v)[1]


ROWS_MAPPED_FROM = 10_000  # on the CPU, products of vectors this long are made one at a time


def each_row(linear: LinearMap, dim: int) -> LinearMap:
    """V (K, dim) -> the rows' products: vmapped, or on the CPU from `ROWS_MAPPED_FROM` a loop
    inside the program (`lax.map`), where a vmapped block's products were 1.3-2x slower each
    (D = 1e5-1e6) and none faster from D = 1e3 (docs/design/cpu_formulations.md)."""
    if rows_mapped(dim):
        return lambda vectors: jax.lax.map(linear, vectors)
    return jax.vmap(linear)


def rows_mapped(dim: int) -> bool:
    """Whether `each_row` makes products of vectors of length `dim` one at a time."""
    return jax.default_backend() == "cpu" and dim >= ROWS_MAPPED_FROM


def batched_gradient(
    loss: Callable[[jax.Array, Any], jax.Array], flat: jax.Array, batches: Any
) -> tuple[
    jax.Array, jax.Array, Callable[[jax.Array], jax.Array], Callable[[jax.Array], jax.Array]
]:
    """(L(x), ∇L(x), v -> H v, V -> H V row by row) for L(x) the mean over the leading axis of
    `batches` of loss(x, batch): each accumulated batch by batch in a lax.scan, so memory holds
    one batch (a product linearises each batch in turn; a block of rows shares that)."""
    count = jax.tree_util.tree_leaves(batches)[0].shape[0]

    def grad_on(batch: Any) -> Callable[[jax.Array], jax.Array]:
        return jax.grad(lambda x: loss(x, batch))

    def mean_of(term: Callable[[Any], Any], zeros: Any) -> Any:
        def add(total: Any, batch: Any) -> tuple[Any, None]:
            return jax.tree.map(jnp.add, total, term(batch)), None

        total, _ = jax.lax.scan(add, zeros, batches)
        return jax.tree.map(lambda t: t / count, total)

    first = jax.tree.map(lambda leaf: leaf[0], batches)
    value_dtype = jax.eval_shape(loss, flat, first).dtype  # the loss's, not the params'
    value, grad = mean_of(
        lambda b: jax.value_and_grad(lambda x: loss(x, b))(flat),
        (jnp.zeros((), value_dtype), jnp.zeros_like(flat)),
    )

    def matvec(v: jax.Array) -> jax.Array:
        return mean_of(lambda b: jax.jvp(grad_on(b), (flat,), (v,))[1], jnp.zeros_like(v))

    def rows(vectors: jax.Array) -> jax.Array:
        def block(batch: Any) -> jax.Array:
            return each_row(jax.linearize(grad_on(batch), flat)[1], flat.size)(vectors)

        return mean_of(block, jnp.zeros_like(vectors))

    return value, grad, matvec, rows


ROTATION_CHUNKS = 8  # `rotate_rows` rewrites 1/8 of the columns at a time


def rotate_rows(
    rows: jax.Array,
    q: jax.Array,
    first: int = 0,
    keep: int | None = None,
    active: jax.Array | bool = True,
) -> jax.Array:
    """rows[first:] <- q^T rows[first:] (q (n, n), n = rows - first), in ROTATION_CHUNKS column
    blocks written in place: a restart or an orthonormalisation holds a block more than `rows`,
    not a second copy. Only the first `keep` new rows are computed (the rest set to zero: a
    restart keeps about half its basis), and with `active` False (traced) nothing is done at no
    cost: the loops run no block, where a conditional would copy the rows."""
    count, dim = rows.shape
    keep = count - first if keep is None else keep
    width = max(1, dim // ROTATION_CHUNKS)
    blocks = dim // width
    dot = functools.partial(jnp.matmul, precision=jax.lax.Precision.HIGHEST)
    kept = q[:, :keep].T

    def rotated(rows: jax.Array, start: jax.Array | int, size: int) -> jax.Array:
        part = jax.lax.dynamic_slice(rows, (first, start), (count - first, size))
        rows = jax.lax.dynamic_update_slice(rows, dot(kept, part), (first, start))
        zeros = jnp.zeros((count - first - keep, size), rows.dtype)
        return jax.lax.dynamic_update_slice(rows, zeros, (first + keep, start))

    rows = jax.lax.fori_loop(
        0, jnp.where(active, blocks, 0), lambda b, rows: rotated(rows, b * width, width), rows
    )
    if blocks * width < dim:  # the last columns, a static block of their own
        rest = dim - blocks * width
        rows = jax.lax.fori_loop(
            0, jnp.where(active, 1, 0), lambda _, rows: rotated(rows, blocks * width, rest), rows
        )
    return rows


def tridiagonal_eigh(alphas: jax.Array, betas: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(Ritz values ascending, their Gauss quadrature weights): the eigenvalues of the Lanczos
    matrix T (diagonal `alphas`, off-diagonal `betas`) and the squared first components of its
    eigenvectors, which sum to 1 (stochastic Lanczos quadrature's weights)."""
    matrix = jnp.diag(alphas) + jnp.diag(betas, 1) + jnp.diag(betas, -1)
    values, vectors = jnp.linalg.eigh(matrix)
    return values, vectors[0] ** 2
