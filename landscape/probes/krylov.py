"""Thick-restarted Lanczos with deflation on exact Hessian-vector products: the search behind
`eigenpairs` above `dense_below` (its results and certificates: eigen.py; the method, its stopping
rule and tolerances: docs/design/curvature.md).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from landscape.point import Point
from landscape.probes import compiled
from landscape.typing import PyTree

LONG_SECONDS = 10.0  # a search prints a line per run once it has taken this long


KrylovRun = tuple[jax.Array, jax.Array, jax.Array]  # (basis V, products H V, next vector)


def krylov_block(
    matvec: Callable[[jax.Array], jax.Array],
    fixed: jax.Array,
    num_active: jax.Array,
    hint: jax.Array,
    mix: jax.Array,
    key: jax.Array,
    num_iters: int,
) -> KrylovRun:
    """Lanczos with full reorthogonalisation in the complement of the rows of `fixed` (the locked
    and retained vectors, orthonormal; zero rows are ignored).

    The start vector is hint + mix * N(0, I/D), projected off `fixed` and normalised. Returns the
    orthonormal basis V (num_iters, D), the products H V (row by row, each from one exact HVP) and
    the next Lanczos vector (the direction a further step would add). An exhausted Krylov space
    continues from a fresh random direction; rows at or beyond `num_active` (the dimension of the
    complement) are zero. Jittable, num_iters static.
    """
    dim, dtype = hint.shape[0], hint.dtype
    dot = functools.partial(jnp.matmul, precision=jax.lax.Precision.HIGHEST)
    eps = jnp.finfo(dtype).eps
    start_key, restart_key = jax.random.split(key)

    def project(basis: jax.Array, w: jax.Array) -> jax.Array:
        for _ in range(2):  # twice: one pass loses orthogonality in rounding
            w = w - dot(fixed.T, dot(fixed, w))
            w = w - dot(basis.T, dot(basis, w))
        return w

    def unit(w: jax.Array, before: jax.Array) -> jax.Array:
        norm = jnp.linalg.norm(w)
        usable = norm > jnp.sqrt(eps) * before  # else w is rounding noise: the space is full
        return jnp.where(usable, w / jnp.where(usable, norm, 1), 0)

    def fresh(basis: jax.Array, i: jax.Array, w: jax.Array) -> jax.Array:
        w = jax.random.normal(jax.random.fold_in(restart_key, i), (dim,), dtype)
        return unit(project(basis, w), jnp.linalg.norm(w))

    def step(i: jax.Array, state: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        basis, products = state
        v = basis[i]
        av = matvec(v)
        w = project(basis, av)  # rows after i are still zero
        beta = jnp.linalg.norm(w)
        exhausted = beta <= 100 * eps * jnp.linalg.norm(av)
        next_v = jax.lax.cond(exhausted, fresh, lambda _, __, w: w / beta, basis, i, w)
        basis = basis.at[i + 1].set(jnp.where(i + 1 >= num_active, 0, next_v))
        return basis, products.at[i].set(av)

    raw = hint + mix * jax.random.normal(start_key, (dim,), dtype) / np.sqrt(dim)
    start = unit(project(jnp.zeros((1, dim), dtype), raw), jnp.linalg.norm(raw))
    basis = jnp.zeros((num_iters + 1, dim), dtype).at[0].set(start)
    products = jnp.zeros((num_iters, dim), dtype)
    basis, products = jax.lax.fori_loop(0, num_iters, step, (basis, products))
    return basis[:num_iters], products, basis[num_iters]


@functools.partial(jax.jit, static_argnames=("objective", "num_iters"))
def krylov_run(
    objective: compiled.Objective,
    params: PyTree,
    inputs: PyTree,
    fixed: jax.Array,
    num_active: jax.Array,
    hint: jax.Array,
    mix: jax.Array,
    key: jax.Array,
    num_iters: int,
) -> KrylovRun:
    """`krylov_block` on the exact Hessian at params (compiled.flat_hvp), one program per model."""
    matvec = compiled.flat_hvp(objective, params, inputs)
    return krylov_block(matvec, fixed, num_active, hint, mix, key, num_iters)


def _wanted_order(values: np.ndarray, which: str) -> np.ndarray:
    """Indices of `values`, most wanted first (stable)."""
    return np.argsort(-values if which == "largest" else values, kind="stable")


@dataclasses.dataclass
class _Search:
    """The Lanczos search state: locked pairs (most wanted first), retained Ritz pairs (R, H R),
    the next start (hint, mix) and the extreme Ritz values seen."""

    values: np.ndarray
    vectors: np.ndarray
    retained: np.ndarray
    products: np.ndarray
    hint: np.ndarray
    mix: float = 1.0
    clean: bool = True  # no lock changed since this phase's random start
    low: float = np.inf
    high: float = -np.inf

    @property
    def scale(self) -> float:
        """The largest |Ritz value| seen so far."""
        return max(abs(self.low), abs(self.high))


def _rayleigh_ritz(
    basis: np.ndarray, products: np.ndarray, which: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(θ, Y, H Y, ||H y - θ y||) of the orthonormal rows `basis` with `products` = H basis,
    most wanted first; residuals exact up to rounding (H applied to each basis vector)."""
    projected = basis @ products.T
    theta, s = np.linalg.eigh(0.5 * (projected + projected.T))
    order = _wanted_order(theta, which)
    theta, s = theta[order], s[:, order]
    ritz, ritz_products = s.T @ basis, s.T @ products
    return theta, ritz, ritz_products, np.linalg.norm(ritz_products - theta[:, None] * ritz, axis=1)


def _more_wanted(a: float, b: float, which: str, margin: float) -> bool:
    return a > b + margin if which == "largest" else a < b - margin


def _lock(
    state: _Search, theta: np.ndarray, ritz: np.ndarray, count: int, k: int, which: str
) -> bool:
    """Merge the first `count` Ritz pairs into the locked set, keeping the k most wanted;
    whether one of them was kept."""
    values = np.concatenate([state.values, theta[:count]])
    vectors = np.concatenate([state.vectors, ritz[:count]])
    keep = _wanted_order(values, which)[:k]
    state.values, state.vectors = values[keep], vectors[keep]
    return bool(np.any(keep >= values.size - count))


def _next_start(
    state: _Search, ritz: np.ndarray, products: np.ndarray, count: int, k: int, changed: bool
) -> None:
    """Set up the next run. A fresh phase (random start seeded with the best unconverged Ritz
    vectors, nothing retained) once k pairs are locked and one changed since the phase began: a
    further copy of a locked eigenvalue lies outside the current Krylov space. Otherwise a thick
    restart: keep the unconverged Ritz pairs and continue from the next Lanczos vector."""
    rest = slice(count, count + k)
    state.clean = state.clean and not changed
    exhausted = not np.any(state.hint)
    if (state.values.size == k and not state.clean) or exhausted:
        seed = ritz[rest].sum(axis=0)
        state.retained, state.products = ritz[:0], products[:0]
        state.hint, state.mix, state.clean = seed, 1.0, True
    else:
        state.retained, state.products, state.mix = ritz[rest], products[rest], 0.0


def _one_run(
    point: Point, state: _Search, k: int, num_iters: int, key: jax.Array
) -> tuple[np.ndarray, np.ndarray] | None:
    """One Krylov block after the retained vectors: (basis, products) of the whole subspace
    (retained rows first), or None when a product was not finite. Sets the next hint."""
    objective, inputs = point.shared
    dim, dtype = state.hint.size, state.hint.dtype
    fixed = np.zeros((2 * k, dim), dtype)
    fixed[: state.values.size] = state.vectors
    fixed[k : k + len(state.retained)] = state.retained
    active = dim - state.values.size - len(state.retained)
    basis, products = state.retained, state.products
    if active > 0:
        run = krylov_run(
            objective, point.params, inputs, jnp.asarray(fixed), jnp.asarray(active),
            jnp.asarray(state.hint), jnp.asarray(state.mix, dtype), key, num_iters,
        )  # fmt: skip
        v, hv, state.hint = (np.asarray(x) for x in run)
        r = min(num_iters, active)
        basis, products = np.concatenate([basis, v[:r]]), np.concatenate([products, hv[:r]])
    if not np.all(np.isfinite(products)):
        return None
    return basis, products


class Found(NamedTuple):
    """What a search found: the k pairs (most wanted first; certified when `converged`), the
    extreme Ritz values seen, and the number of runs."""

    values: np.ndarray
    vectors: np.ndarray
    low: float
    high: float
    converged: bool
    runs: int


def search(
    point: Point,
    k: int,
    which: str,
    num_iters: int,
    key: jax.Array,
    tol: float,
    runs: int,
    progress: Callable[[str], None] | None = None,
) -> Found | None:
    """Thick-restarted, deflated Lanczos (module docstring) on one point, at most `runs` runs of
    `num_iters` steps; None when a product was not finite. A progress line per run once the
    search has taken LONG_SECONDS."""
    flat, start = np.asarray(ravel_pytree(point.params)[0]), time.perf_counter()
    empty = np.zeros((0, flat.size), flat.dtype)
    state = _Search(np.zeros(0, flat.dtype), empty, empty, empty, np.zeros_like(flat))
    converged, done = False, 0
    while done < runs and not converged:
        subspace = _one_run(point, state, k, num_iters, jax.random.fold_in(key, done))
        done += 1
        if subspace is None:
            return None
        theta, ritz, products, residuals = _rayleigh_ritz(*subspace, which)
        state.low, state.high = min(state.low, theta.min()), max(state.high, theta.max())
        margin = tol * state.scale
        accepted = residuals <= margin
        count = int(np.argmin(accepted)) if not np.all(accepted) else accepted.size
        if state.values.size == k and state.clean:  # the phase began after the last lock
            bound = theta[0] + (residuals[0] if which == "largest" else -residuals[0])
            converged = not _more_wanted(bound, state.values[-1], which, margin)
        if not converged:
            changed = _lock(state, theta, ritz, count, k, which)
            _next_start(state, ritz, products, count, k, changed)
        converged = converged or state.values.size == flat.size
        seconds = time.perf_counter() - start
        if progress and seconds > LONG_SECONDS:
            progress(
                f"eigenpairs: Lanczos run {done} of at most {runs} | {state.values.size} of {k} "
                f"accepted | {seconds:.1f} s"
            )
    if state.values.size < k:  # fewer than k accepted: fill with the best Ritz pairs, uncertified
        _lock(state, theta[count:], ritz[count:], k - state.values.size, k, which)
    return Found(state.values, state.vectors, state.low, state.high, converged, done)
