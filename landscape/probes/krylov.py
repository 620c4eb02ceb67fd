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


_DOT = functools.partial(jnp.matmul, precision=jax.lax.Precision.HIGHEST)


class SearchStop(NamedTuple):
    """Where a run starts and when it stops: the start hint + mix * noise, the complement's
    dimension, the relative residual rtol against max(scale, |Ritz values|), and how many of the
    most wanted Ritz pairs must reach it."""

    hint: jax.Array
    mix: jax.Array
    num_active: jax.Array
    rtol: jax.Array
    scale: jax.Array
    need: jax.Array


class KrylovRun(NamedTuple):
    """One Lanczos run (legend: m = num_iters, k the rows of locked and of retained, D params).

    basis (m + 1, D): rows 0, ..., steps - 1 the new orthonormal vectors, row `steps` the next
    Lanczos vector (the direction a further step adds; zero once the space is exhausted), zero
    after. alpha (m,) v_i . H v_i; beta (m,) the norm coupling v_i to v_{i+1}; cross (m, k)
    retained . H v_i (the arrowhead of a thick restart); steps (); finite () every product finite.
    """

    basis: jax.Array
    alpha: jax.Array
    beta: jax.Array
    cross: jax.Array
    steps: jax.Array
    finite: jax.Array


def projected_matrix(
    theta_r: jax.Array, alpha: jax.Array, beta: jax.Array, cross: jax.Array
) -> jax.Array:
    """The Hessian projected on [retained; basis] ((k + m) square): diag(theta_r) for the
    retained Ritz vectors, their arrowhead `cross` with the new vectors, and the tridiagonal of
    alpha and beta (the full reorthogonalisation leaves the rest at rounding level). Rows of
    absent vectors (zero theta_r, alpha, cross) are zero, but beta couples the last row to the
    next vector's: the caller keeps the rows that hold vectors."""
    tridiagonal = jnp.diag(alpha) + jnp.diag(beta[:-1], 1) + jnp.diag(beta[:-1], -1)
    return jnp.block([[jnp.diag(theta_r), cross.T], [cross, tridiagonal]])


def _ritz_estimates(
    run: KrylovRun, theta_r: jax.Array, num_retained: jax.Array, which: str
) -> tuple[jax.Array, jax.Array]:
    """(Ritz values, residual estimates |beta_last s_last|), most wanted first, over the rows that
    hold vectors (the rest after them, with infinite residuals). Jittable."""
    k, m = theta_r.size, run.alpha.size
    holds = jnp.concatenate([jnp.arange(k) < num_retained, jnp.arange(m) < run.steps])
    projected = projected_matrix(theta_r, run.alpha, run.beta, run.cross)
    projected = jnp.where(holds[:, None] & holds[None, :], projected, 0)
    far = jnp.sum(jnp.abs(projected)) + 1.0  # beyond every eigenvalue: absent rows sort last
    projected += jnp.diag(jnp.where(holds, 0.0, -far if which == "largest" else far))
    theta, vectors = jnp.linalg.eigh(projected)
    last = vectors[k + jnp.maximum(run.steps, 1) - 1]
    residuals = jnp.abs(run.beta[jnp.maximum(run.steps, 1) - 1] * last)
    real = jnp.sum(jnp.where(holds[:, None], vectors**2, 0), axis=0) > 0.5  # not a far one
    residuals = jnp.where(real, residuals, jnp.inf)
    order = jnp.argsort(-theta if which == "largest" else theta)
    return theta[order], residuals[order]


def krylov_block(
    matvec: Callable[[jax.Array], jax.Array],
    locked: jax.Array,
    retained: jax.Array,
    theta_r: jax.Array,
    num_retained: jax.Array,
    search: SearchStop,
    key: jax.Array,
    num_iters: int,
    which: str,
) -> KrylovRun:
    """Lanczos in the complement of the rows of `locked` and `retained` (orthonormal; zero rows
    ignored), from hint + mix * N(0, I/D), for at most num_iters steps: fewer once the `need` most
    wanted Ritz pairs of [retained; new vectors] have residual estimates <= rtol * scale, the
    Krylov space is exhausted, or the complement (`num_active` dimensions) is full.

    Each step: one exact product, the three-term recurrence (and the retained vectors' arrowhead)
    subtracted, then one classical Gram-Schmidt pass against every earlier vector and the fixed
    rows; a second pass only when the first removed most of the vector (Daniel-Gragg-Kaufman-
    Stewart), so orthogonality holds to rounding at one pass of memory traffic a step in the
    usual case. Jittable, num_iters and which static."""
    dim, dtype = search.hint.shape[0], search.hint.dtype
    eps = jnp.finfo(dtype).eps
    fixed = jnp.concatenate([locked, retained])

    def gram_schmidt(basis: jax.Array, w: jax.Array) -> jax.Array:
        w = w - _DOT(_DOT(basis, w), basis)  # rows after the current one are zero
        return w - _DOT(_DOT(fixed, w), fixed)

    def orthogonalised(basis: jax.Array, w: jax.Array) -> jax.Array:
        once = gram_schmidt(basis, w)
        again = jnp.linalg.norm(once) < 0.5 * jnp.linalg.norm(w)
        return jax.lax.cond(again, gram_schmidt, lambda _, x: x, basis, once)

    def step(state: tuple[jax.Array, KrylovRun, jax.Array]) -> tuple:
        i, run, _ = state
        v, previous = run.basis[i], run.basis[jnp.maximum(i - 1, 0)]
        av = matvec(v)
        alpha, arrow = _DOT(v, av), _DOT(retained, av)
        coupling = jnp.where(i > 0, run.beta[jnp.maximum(i - 1, 0)], 0)
        w = av - alpha * v - coupling * previous - _DOT(arrow, retained)
        w = orthogonalised(run.basis, w)
        beta = jnp.linalg.norm(w)
        seen = jnp.maximum(jnp.max(jnp.abs(run.alpha)), jnp.max(run.beta))  # scale, as in linalg
        scale = jnp.maximum(jnp.maximum(jnp.linalg.norm(av), seen), jnp.abs(alpha))
        full = (beta <= 100 * eps * scale) | (i + 1 >= search.num_active)
        run = run._replace(
            basis=run.basis.at[i + 1].set(jnp.where(full, 0, w / jnp.where(full, 1, beta))),
            alpha=run.alpha.at[i].set(alpha),
            beta=run.beta.at[i].set(jnp.where(full, 0, beta)),
            cross=run.cross.at[i].set(arrow),
            steps=i + 1,
            finite=run.finite & jnp.isfinite(alpha) & jnp.isfinite(beta),
        )
        theta, residuals = _ritz_estimates(run, theta_r, num_retained, which)
        seen = jnp.max(jnp.where(jnp.isfinite(residuals), jnp.abs(theta), 0))
        tol = search.rtol * jnp.maximum(search.scale, seen)
        done = jnp.all(jnp.where(jnp.arange(residuals.size) < search.need, residuals, 0) <= tol)
        return i + 1, run, full | done | ~run.finite

    raw = search.hint + search.mix * jax.random.normal(key, (dim,), dtype) / float(np.sqrt(dim))
    start = raw - _DOT(_DOT(fixed, raw), fixed)
    start = start - _DOT(_DOT(fixed, start), fixed)  # twice: one pass loses orthogonality
    norm = jnp.linalg.norm(start)
    usable = norm > jnp.sqrt(eps) * jnp.linalg.norm(raw)  # else the start lay in the fixed rows
    m, k = num_iters, retained.shape[0]
    run = KrylovRun(
        basis=jnp.zeros((m + 1, dim), dtype).at[0].set(jnp.where(usable, start / norm, 0)),
        alpha=jnp.zeros(m, dtype), beta=jnp.zeros(m, dtype), cross=jnp.zeros((m, k), dtype),
        steps=jnp.asarray(0), finite=jnp.asarray(True),
    )  # fmt: skip
    _, run, _ = jax.lax.while_loop(
        lambda state: (state[0] < m) & ~state[2], step, (jnp.asarray(0), run, ~usable)
    )
    return run


@functools.partial(jax.jit, static_argnames=("objective", "num_iters", "which"))
def krylov_run(
    objective: compiled.Objective,
    params: PyTree,
    inputs: PyTree,
    locked: jax.Array,
    retained: jax.Array,
    theta_r: jax.Array,
    num_retained: jax.Array,
    search: SearchStop,
    key: jax.Array,
    num_iters: int,
    which: str,
) -> KrylovRun:
    """`krylov_block` on the exact Hessian at params (linearised once): one program per model."""
    matvec = operator.hessian_operator(objective, params, inputs).matvec
    return krylov_block(
        matvec, locked, retained, theta_r, num_retained, search, key, num_iters, which
    )


@jax.jit
def _rotate(rotation: jax.Array, retained: jax.Array, basis: jax.Array) -> jax.Array:
    """Ritz vectors (c, D) = rotation^T [retained; basis]."""
    k = retained.shape[0]
    return _DOT(rotation[:k].T, retained) + _DOT(rotation[k:].T, basis)


@jax.jit
def _residuals(products: jax.Array, theta: jax.Array, vectors: jax.Array) -> jax.Array:
    """||H y - theta y|| for each row y of `vectors` and its product."""
    return jnp.linalg.norm(products - theta[:, None] * vectors[: theta.size], axis=1)


def _wanted_order(values: np.ndarray, which: str) -> np.ndarray:
    """Indices of `values`, most wanted first (stable)."""
    return np.argsort(-values if which == "largest" else values, kind="stable")


@dataclasses.dataclass
class _Search:
    """The Lanczos search state: locked pairs (most wanted first), retained Ritz vectors and
    values, the next start (hint, mix) and the extreme Ritz values seen. The vectors stay on the
    device in fixed shapes, (k, D) with zero rows past the count, so each program compiles once
    per model; only values cross to the host."""

    values: np.ndarray
    vectors: jax.Array
    retained: jax.Array
    retained_values: np.ndarray
    hint: jax.Array
    num_retained: int = 0
    mix: float = 1.0
    clean: bool = True  # no lock changed since this phase's random start
    low: float = np.inf
    high: float = -np.inf
    num_hvps: int = 0

    @property
    def scale(self) -> float:
        """The largest |Ritz value| seen so far (0 before the first)."""
        return max(abs(self.low), abs(self.high), 0.0) if np.isfinite(self.low) else 0.0


@jax.jit
def _select(first: jax.Array, second: jax.Array, rows: jax.Array, count: jax.Array) -> jax.Array:
    """Rows `rows` of [first; second], rows from `count` on set to zero (a fixed shape)."""
    chosen = jnp.concatenate([first, second])[rows]
    return jnp.where(jnp.arange(rows.size)[:, None] < count, chosen, 0)


class _Ritz(NamedTuple):
    """Ritz pairs, most wanted first: values (n,) on the host; vectors (2k, D) on the device
    (the 2k most wanted, rows past n zero); exact residuals of the first min(k, n)."""

    theta: np.ndarray
    vectors: jax.Array
    residuals: np.ndarray
    low: float
    high: float


def _rayleigh_ritz(point: Point, state: _Search, run: KrylovRun, which: str, k: int) -> _Ritz:
    """The Ritz pairs of the retained vectors and the run's new ones: the small eigenproblem in
    numpy (float64) on the rows that hold vectors, the 2k most wanted vectors on the device."""
    steps = int(run.steps)
    theta_r = jnp.asarray(state.retained_values, run.alpha.dtype)  # placed, not rounded:
    projected = np.asarray(projected_matrix(theta_r, run.alpha, run.beta, run.cross), np.float64)
    valid = np.r_[0 : state.num_retained, k + np.arange(steps)]
    theta, s = np.linalg.eigh(projected[np.ix_(valid, valid)])
    low, high = (float(theta[0]), float(theta[-1])) if theta.size else (np.inf, -np.inf)
    order = _wanted_order(theta, which)[: 2 * k]
    theta, s = theta[order], s[:, order]
    rotation = np.zeros((k + run.basis.shape[0], 2 * k))  # rows [retained (k); basis (m + 1)]
    rotation[valid, : theta.size], padded = s, np.pad(theta, (0, 2 * k - theta.size))
    objective, inputs = point.shared
    dtype = run.basis.dtype
    vectors = _rotate(jnp.asarray(rotation, dtype), state.retained, run.basis)
    products = operator.products(objective, point.params, inputs, vectors[:k])  # exact residuals
    residuals = _residuals(products, jnp.asarray(padded[:k], dtype), vectors)
    state.num_hvps += k
    residuals = np.asarray(residuals)[: min(k, theta.size)]
    return _Ritz(theta.astype(dtype), vectors, residuals, low, high)


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
    if (state.values.size == k and not state.clean) or not bool(jnp.any(state.hint)):
        state.retained, state.retained_values = jnp.zeros_like(rest), np.zeros(k)
        state.hint, state.mix, state.clean, state.num_retained = rest.sum(axis=0), 1.0, True, 0
    else:
        state.retained, state.mix, state.num_retained = rest, 0.0, kept
        state.retained_values = np.pad(ritz.theta[count : count + kept], (0, k - kept))


@jax.jit
def _next_vector(basis: jax.Array, steps: jax.Array) -> jax.Array:
    return basis[steps]


def _one_run(
    point: Point, state: _Search, k: int, num_iters: int, key: jax.Array, which: str, tol: float
) -> _Ritz | None:
    """One Lanczos run after the retained vectors and the Ritz pairs of the whole subspace (None
    when a product was not finite). Sets the next hint; the run's basis is freed on return."""
    objective, inputs = point.shared
    dim, dtype = state.hint.size, state.hint.dtype
    active = dim - state.values.size - state.num_retained
    need = k - state.values.size if state.values.size < k else 1
    stop = SearchStop(
        state.hint, jnp.asarray(state.mix, dtype), jnp.asarray(max(active, 0)),
        jnp.asarray(tol, dtype), jnp.asarray(state.scale, dtype), jnp.asarray(need),
    )  # fmt: skip
    run = krylov_run(
        objective, point.params, inputs, state.vectors, state.retained,
        jnp.asarray(state.retained_values, dtype), jnp.asarray(state.num_retained), stop, key,
        num_iters, which,
    )  # fmt: skip
    state.num_hvps += int(run.steps)
    state.hint = _next_vector(run.basis, run.steps)
    return _rayleigh_ritz(point, state, run, which, k) if bool(run.finite) else None


class Found(NamedTuple):
    """What a search found: the k pairs (most wanted first; certified when `converged`), the
    extreme Ritz values seen, and the number of runs and of products."""

    values: np.ndarray
    vectors: np.ndarray
    low: float
    high: float
    converged: bool
    runs: int
    num_hvps: int


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
    at most `num_iters` steps; None when a product was not finite. A progress line per run once
    the search has taken LONG_SECONDS."""
    flat, start = ravel_pytree(point.params)[0], time.perf_counter()
    zeros = jnp.zeros((k, flat.size), flat.dtype)
    state = _Search(np.zeros(0, flat.dtype), zeros, zeros, np.zeros(k), jnp.zeros_like(flat))
    converged, done, count, last = False, 0, 0, None
    while done < runs and not converged:
        ritz = _one_run(point, state, k, num_iters, jax.random.fold_in(key, done), which, tol)
        done += 1
        if ritz is None:
            return None
        if ritz.theta.size == 0:  # the start lay in the deflated space: a random one next
            state.hint, state.mix = jnp.zeros_like(state.hint), 1.0
            continue
        last, theta, residuals = ritz, ritz.theta, ritz.residuals
        state.low, state.high = min(state.low, ritz.low), max(state.high, ritz.high)
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
                f"accepted | {state.num_hvps} products | {seconds:.1f} s"
            )
    if state.values.size < k:  # fewer than k accepted: fill with the best Ritz pairs, uncertified
        if last is not None:
            _lock(state, last, count, k - state.values.size, k, which)
    vectors = np.asarray(state.vectors)[: state.values.size]
    return Found(state.values, vectors, state.low, state.high, converged, done, state.num_hvps)
