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
from landscape.probes import compiled, operator
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
    the next Lanczos vector (the direction a further step would add). Once the Krylov space is
    exhausted (an invariant subspace found), the rows after it are zero and the next vector too:
    the search then restarts from a random start, as after any run (a `lax.cond` here, choosing a
    fresh direction inside the loop, copied the basis every step: 20 s against 10 s for 40 steps
    at D = 10^6). Rows at or beyond `num_active` (the dimension of the complement) are zero.
    Jittable, num_iters static.
    """
    dim, dtype = hint.shape[0], hint.dtype
    dot = functools.partial(jnp.matmul, precision=jax.lax.Precision.HIGHEST)
    eps = jnp.finfo(dtype).eps
    start_key = jax.random.split(key)[0]

    def project(basis: jax.Array, w: jax.Array) -> jax.Array:
        for _ in range(2):  # twice: one pass loses orthogonality in rounding
            w = w - dot(fixed.T, dot(fixed, w))
            w = w - dot(basis.T, dot(basis, w))
        return w

    def unit(w: jax.Array, before: jax.Array) -> jax.Array:
        norm = jnp.linalg.norm(w)
        usable = norm > jnp.sqrt(eps) * before  # else w is rounding noise: the space is full
        return jnp.where(usable, w / jnp.where(usable, norm, 1), 0)

    def step(i: jax.Array, state: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        basis, products = state
        v = basis[i]
        av = matvec(v)
        w = project(basis, av)  # rows after i are still zero
        beta = jnp.linalg.norm(w)
        exhausted = beta <= 100 * eps * jnp.linalg.norm(av)
        next_v = jnp.where(exhausted | (i + 1 >= num_active), 0, w / jnp.where(exhausted, 1, beta))
        basis = basis.at[i + 1].set(next_v)
        return basis, products.at[i].set(av)

    raw = hint + mix * jax.random.normal(start_key, (dim,), dtype) / float(np.sqrt(dim))
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
    locked: jax.Array,
    retained: jax.Array,
    num_active: jax.Array,
    hint: jax.Array,
    mix: jax.Array,
    key: jax.Array,
    num_iters: int,
) -> KrylovRun:
    """`krylov_block` on the exact Hessian at params (linearised once) in the complement of the
    rows of `locked` and `retained` (k, D each, zero rows ignored): one program per model."""
    matvec = operator.hessian_operator(objective, params, inputs).matvec
    fixed = jnp.concatenate([locked, retained])
    return krylov_block(matvec, fixed, num_active, hint, mix, key, num_iters)


def _wanted_order(values: np.ndarray, which: str) -> np.ndarray:
    """Indices of `values`, most wanted first (stable)."""
    return np.argsort(-values if which == "largest" else values, kind="stable")


@dataclasses.dataclass
class _Search:
    """The Lanczos search state: locked pairs (most wanted first), retained Ritz pairs (R, H R),
    the next start (hint, mix) and the extreme Ritz values seen. The vectors stay on the device
    in fixed shapes, (k, D) with zero rows past the count, so each program compiles once per
    model; only values cross to the host."""

    values: np.ndarray
    vectors: jax.Array
    retained: jax.Array
    products: jax.Array
    hint: jax.Array
    num_retained: int = 0
    mix: float = 1.0
    clean: bool = True  # no lock changed since this phase's random start
    low: float = np.inf
    high: float = -np.inf

    @property
    def scale(self) -> float:
        """The largest |Ritz value| seen so far."""
        return max(abs(self.low), abs(self.high))


_DOT = functools.partial(jnp.matmul, precision=jax.lax.Precision.HIGHEST)


@jax.jit
def _projected(
    retained: jax.Array, retained_products: jax.Array, basis: jax.Array, products: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(V H V^T (k + m, k + m) symmetrised, whether every product is finite, which of the m new
    rows hold a vector) for the rows V = [retained; basis] with their products."""
    rows, hv = jnp.concatenate([retained, basis]), jnp.concatenate([retained_products, products])
    projected = _DOT(rows, hv.T)
    filled = jnp.any(basis != 0, axis=1)
    return 0.5 * (projected + projected.T), jnp.all(jnp.isfinite(products)), filled


@jax.jit
def _rotated(
    rotation: jax.Array,
    theta: jax.Array,
    retained: jax.Array,
    retained_products: jax.Array,
    basis: jax.Array,
    products: jax.Array,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(Ritz vectors, their products, residuals ||H y - θ y||) for the rotation's columns (zero
    columns give zero rows)."""
    rows, hv = jnp.concatenate([retained, basis]), jnp.concatenate([retained_products, products])
    ritz, ritz_products = _DOT(rotation.T, rows), _DOT(rotation.T, hv)
    return ritz, ritz_products, jnp.linalg.norm(ritz_products - theta[:, None] * ritz, axis=1)


@jax.jit
def _select(first: jax.Array, second: jax.Array, rows: jax.Array, count: jax.Array) -> jax.Array:
    """Rows `rows` of [first; second], rows from `count` on set to zero (a fixed shape)."""
    chosen = jnp.concatenate([first, second])[rows]
    return jnp.where(jnp.arange(rows.size)[:, None] < count, chosen, 0)


class _Ritz(NamedTuple):
    """Ritz pairs, most wanted first: values (n,) on the host; vectors and products
    (k + m, D) on the device, rows past n zero; residuals (n,)."""

    theta: np.ndarray
    vectors: jax.Array
    products: jax.Array
    residuals: np.ndarray


def _rayleigh_ritz(state: _Search, run: KrylovRun, which: str, k: int) -> _Ritz:
    """The Ritz pairs of the retained rows and the run's new basis (residuals exact up to
    rounding: H was applied to each basis vector). The small eigenproblem runs in numpy, on
    the rows that hold vectors."""
    basis, products, _ = run
    projected, _, filled = _projected(state.retained, state.products, basis, products)
    valid = np.r_[0 : state.num_retained, k + np.flatnonzero(np.asarray(filled))]
    small = np.asarray(projected, np.float64)[np.ix_(valid, valid)]
    theta, s = np.linalg.eigh(small)
    order = _wanted_order(theta, which)
    theta, s = theta[order], s[:, order]
    size = projected.shape[0]
    rotation, padded = np.zeros((size, size)), np.zeros(size)
    rotation[valid, : valid.size], padded[: valid.size] = s, theta
    dtype = basis.dtype
    ritz, ritz_products, residuals = _rotated(
        jnp.asarray(rotation, dtype), jnp.asarray(padded, dtype), state.retained, state.products,
        basis, products,
    )  # fmt: skip
    return _Ritz(theta.astype(dtype), ritz, ritz_products, np.asarray(residuals)[: valid.size])


def _more_wanted(a: float, b: float, which: str, margin: float) -> bool:
    return a > b + margin if which == "largest" else a < b - margin


def _lock(state: _Search, ritz: _Ritz, first: int, count: int, k: int, which: str) -> bool:
    """Merge Ritz pairs first, ..., first + count - 1 into the locked set, keeping the k most
    wanted; whether one of them was kept."""
    locked = state.values.size
    values = np.concatenate([state.values, ritz.theta[first : first + count]])
    keep = _wanted_order(values, which)[:k]
    rows = np.where(keep < locked, keep, k + first + keep - locked)  # in [locked (k); Ritz]
    rows = np.pad(rows, (0, k - rows.size))
    state.vectors = _select(state.vectors, ritz.vectors, jnp.asarray(rows), jnp.asarray(keep.size))
    state.values = values[keep]
    return bool(np.any(keep >= locked))


def _next_start(state: _Search, ritz: _Ritz, count: int, k: int, changed: bool) -> None:
    """Set up the next run. A fresh phase (random start seeded with the best unconverged Ritz
    vectors, nothing retained) once k pairs are locked and one changed since the phase began: a
    further copy of a locked eigenvalue lies outside the current Krylov space. Otherwise a thick
    restart: keep the unconverged Ritz pairs and continue from the next Lanczos vector."""
    rows = jnp.asarray(k + count + np.arange(k))  # Ritz rows count, ..., count + k - 1
    kept = min(k, ritz.theta.size - count)
    rest = _select(state.vectors, ritz.vectors, rows, jnp.asarray(kept))
    state.clean = state.clean and not changed
    exhausted = not bool(jnp.any(state.hint))
    if (state.values.size == k and not state.clean) or exhausted:
        state.retained, state.products = jnp.zeros_like(rest), jnp.zeros_like(rest)
        state.hint, state.mix, state.clean, state.num_retained = rest.sum(axis=0), 1.0, True, 0
    else:
        state.retained, state.mix, state.num_retained = rest, 0.0, kept
        state.products = _select(state.vectors, ritz.products, rows, jnp.asarray(kept))


def _one_run(
    point: Point, state: _Search, k: int, num_iters: int, key: jax.Array, which: str
) -> _Ritz | None:
    """One Krylov block after the retained vectors and the Ritz pairs of the whole subspace, or
    None when a product was not finite. Sets the next hint."""
    objective, inputs = point.shared
    dim, dtype = state.hint.size, state.hint.dtype
    active = dim - state.values.size - state.num_retained
    run = krylov_run(
        objective, point.params, inputs, state.vectors, state.retained,
        jnp.asarray(max(active, 0)), state.hint, jnp.asarray(state.mix, dtype), key, num_iters,
    )  # fmt: skip
    state.hint = run[2]
    if not bool(_projected(state.retained, state.products, run[0], run[1])[1]):
        return None
    return _rayleigh_ritz(state, run, which, k)


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
    flat, start = ravel_pytree(point.params)[0], time.perf_counter()
    zeros = jnp.zeros((k, flat.size), flat.dtype)
    state = _Search(np.zeros(0, flat.dtype), zeros, zeros, zeros, jnp.zeros_like(flat))
    converged, done, count, last = False, 0, 0, None
    while done < runs and not converged:
        ritz = _one_run(point, state, k, num_iters, jax.random.fold_in(key, done), which)
        done += 1
        if ritz is None:
            return None
        if ritz.theta.size == 0:  # the start lay in the deflated space: a random one next
            state.hint, state.mix = jnp.zeros_like(state.hint), 1.0
            continue
        last, theta, residuals = ritz, ritz.theta, ritz.residuals
        state.low, state.high = min(state.low, theta.min()), max(state.high, theta.max())
        margin = tol * state.scale
        accepted = residuals <= margin
        count = int(np.argmin(accepted)) if not np.all(accepted) else accepted.size
        if state.values.size == k and state.clean:  # the phase began after the last lock
            bound = theta[0] + (residuals[0] if which == "largest" else -residuals[0])
            converged = not _more_wanted(bound, state.values[-1], which, margin)
        if not converged:
            changed = _lock(state, ritz, 0, count, k, which)
            _next_start(state, ritz, count, k, changed)
        converged = converged or state.values.size == flat.size
        seconds = time.perf_counter() - start
        if progress and seconds > LONG_SECONDS:
            progress(
                f"eigenpairs: Lanczos run {done} of at most {runs} | {state.values.size} of {k} "
                f"accepted | {seconds:.1f} s"
            )
    if state.values.size < k:  # fewer than k accepted: fill with the best Ritz pairs, uncertified
        if last is not None:
            _lock(state, last, count, k - state.values.size, k, which)
    vectors = np.asarray(state.vectors)[: state.values.size]
    return Found(state.values, vectors, state.low, state.high, converged, done)
