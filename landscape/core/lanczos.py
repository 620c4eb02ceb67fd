"""One Lanczos tridiagonalisation with full reorthogonalisation, written as a value (matfree's
shape): `init` a state from a start vector, `step` it with the product of its `current` row,
`extract` the tridiagonal T and the basis. The same step runs inside a `fori_loop` (`run`) or
in a host loop over a stream. docs/design/curvature.md, "Certified extreme eigenpairs"."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

from landscape.core import orthonormal

Project = Callable[[jax.Array], jax.Array] | None
STORAGES = ("bfloat16",)  # the narrower dtypes a basis may be stored in (`run(storage=)`)


class Lanczos(NamedTuple):
    """A run in progress: `basis` (m, D) with rows 0..taken set (the rest zero), T's diagonal
    `alphas` (m,) and couplings `betas` (m,) of the steps taken, and `taken`, their number (the
    row whose product the next `step` takes)."""

    basis: jax.Array
    alphas: jax.Array
    betas: jax.Array
    taken: jax.Array


class Tridiagonal(NamedTuple):
    """A finished run: T = V A V^T has diagonal `alphas` (m,) and off-diagonal `betas` (m - 1,);
    `beta` is the norm of the next Lanczos vector (|beta s_last| is a Ritz pair's residual, s its
    eigenvector of T); `basis` V (m, D) has orthonormal rows spanning the Krylov space."""

    alphas: jax.Array
    betas: jax.Array
    beta: jax.Array
    basis: jax.Array


def init(start: jax.Array, num_iters: int, storage: DTypeLike | None = None) -> Lanczos:
    """The state before the first step: row 0 is start / |start| (any non-zero vector), the
    basis in `storage` (default: start's dtype; T in start's); inside a shard_map the carry
    varies over the axes `start` varies over."""
    dim, dtype = start.shape[0], start.dtype
    unit = (start / jnp.linalg.norm(start)).astype(storage or dtype)
    basis = jnp.zeros((num_iters, dim), storage or dtype).at[0].set(unit)
    zeros = varying_like(jnp.zeros(num_iters, dtype), start)
    return Lanczos(varying_like(basis, start), zeros, zeros, jnp.zeros((), jnp.int32))


def current(state: Lanczos) -> jax.Array:
    """The row whose product `step` takes next (the last row once the run is complete)."""
    return state.basis[jnp.minimum(state.taken, state.basis.shape[0] - 1)]


def step(
    state: Lanczos,
    product: jax.Array,
    key: jax.Array,
    axis_name: str | None = None,
    project: Project = None,
) -> Lanczos:
    """One step given A v for v = `current(state)`: alpha, beta and the next row (a fresh
    direction from fold_in(key, taken) where the Krylov space is exhausted, mapped by `project`;
    under vmap with `axis_name`, drawn only at a step where some lane needs one). A basis
    stored in a narrower dtype is read in the product's: only the stored rows are rounded."""
    basis, alphas, betas, i = state
    eps = jnp.finfo(product.dtype).eps
    v, previous = (basis[j].astype(product.dtype) for j in (i, jnp.maximum(i - 1, 0)))
    if basis.dtype != product.dtype:  # stored narrower: read back at unit norm
        (v, previous), product = unit_read((v, previous), product)
    alpha = jnp.matmul(v, product, precision=jax.lax.Precision.HIGHEST)
    coupling = jnp.where(i > 0, betas[jnp.maximum(i - 1, 0)], 0)
    # the three-term recurrence, then one Gram-Schmidt pass against every earlier vector: what
    # is left for it to remove is rounding, so one pass keeps V orthonormal to rounding
    w = orthonormal.orthogonalised(basis, product - alpha * v - coupling * previous)
    beta = jnp.linalg.norm(w)
    # against the operator's scale seen so far, not |A v|: a v near A's null space has a
    # product of pure rounding, whose remainder is noise, not a direction of the space
    scale = jnp.maximum(jnp.linalg.norm(product), jnp.max(jnp.abs(alphas)))
    exhausted = beta <= 100 * eps * jnp.maximum(scale, jnp.max(betas))
    anywhere = exhausted if axis_name is None else jax.lax.pmax(exhausted, axis_name)
    next_v = jax.lax.cond(
        anywhere,
        lambda: jnp.where(exhausted, _fresh(basis, jax.random.fold_in(key, i), project), w / beta),
        lambda: w / beta,
    )
    return Lanczos(
        basis.at[i + 1].set(next_v.astype(basis.dtype), mode="drop"),
        alphas.at[i].set(alpha),
        betas.at[i].set(jnp.where(exhausted, 0, beta)),
        i + 1,
    )


def unit_read(
    rows: tuple[jax.Array, jax.Array], product: jax.Array
) -> tuple[tuple[jax.Array, jax.Array], jax.Array]:
    """(v, v_prev) read back from a narrower storage at unit norm, and A v scaled alike: the
    rounding moves a stored vector's norm by up to u (all alike for a Rademacher probe, whose
    entries share one magnitude, so T's moments would move by (1 + δ)² otherwise)."""
    v, previous = rows
    norm = jnp.linalg.norm(v)
    norm_prev = jnp.linalg.norm(previous)
    scale = jnp.where(norm > 0, norm, 1)
    return (v / scale, previous / jnp.where(norm_prev > 0, norm_prev, 1)), product / scale


def _fresh(basis: jax.Array, key: jax.Array, project: Project) -> jax.Array:
    """A random unit vector orthogonal to the basis rows (twice: a random draw lies mostly in
    their span), mapped into the operator's space by `project`."""
    like = jnp.zeros(basis.shape[1:], jnp.promote_types(basis.dtype, jnp.float32))
    w = orthonormal.hashed_normal(key, like)  # fused: jax.random.normal held 2 vectors of D
    w = w if project is None else project(w)
    w = orthonormal.orthogonalised(basis, orthonormal.orthogonalised(basis, w))
    return w / jnp.linalg.norm(w)


def extract(state: Lanczos) -> Tridiagonal:
    """The run's T, the next vector's norm and its basis."""
    return Tridiagonal(state.alphas, state.betas[:-1], state.betas[-1], state.basis)


def run(
    matvec: Callable[[jax.Array], jax.Array],
    start: jax.Array,
    num_iters: int,
    key: jax.Array,
    axis_name: str | None = None,
    project: Project = None,
    storage: DTypeLike | None = None,
    steps: jax.Array | int | None = None,
) -> Lanczos:
    """`steps` steps (default `num_iters`; traced, at most `num_iters`) from `start` in a
    fori_loop: T's eigenvalues stay eigenvalues of A and Gauss weights stay exact past an
    exhausted space (beta 0, a fresh direction). Jittable and vmappable with `num_iters`, the
    rows kept, static; keeps V in memory (num_iters x D numbers of `storage`, default start's
    dtype; rows past `steps` stay zero, and so do their alphas and betas)."""

    def body(_: jax.Array, state: Lanczos) -> Lanczos:
        product = matvec(current(state).astype(start.dtype))
        return step(state, product, key, axis_name, project)

    count = num_iters if steps is None else steps
    return jax.lax.fori_loop(0, count, body, init(start, num_iters, storage))


def lanczos(
    matvec: Callable[[jax.Array], jax.Array],
    dim: int,
    num_iters: int,
    key: jax.Array,
    dtype: DTypeLike,
    project: Project = None,
) -> tuple[jax.Array, jax.Array]:
    """(alphas (num_iters,), betas (num_iters - 1,)) of `run` from a random start vector drawn
    from `key` (dim and num_iters static; `project` maps the draw into the operator's space)."""
    if not 1 <= num_iters <= dim:
        raise ValueError(f"num_iters = {num_iters}: must be between 1 and dim = {dim}.")
    start_key, restart_key = jax.random.split(key)
    start = jax.random.normal(start_key, (dim,), dtype)
    start = start if project is None else project(start)
    found = extract(run(matvec, start, num_iters, restart_key, project=project))
    return found.alphas, found.betas


def varying_like(x: jax.Array, like: jax.Array) -> jax.Array:
    """x marked as varying over the manual mesh axes `like` varies over (inside a shard_map,
    whose loops and linearised functions want matching types; x itself everywhere else)."""

    def varying(a: jax.Array) -> frozenset:
        return getattr(getattr(jax.typeof(a), "manual_axis_type", None), "varying", frozenset())

    missing = tuple(sorted(varying(like) - varying(x)))
    return jax.lax.pcast(x, missing, to="varying") if missing else x
