"""Krylov-Schur: restarted Lanczos with locking on exact Hessian-vector products, in memory that
`ncv` bounds. The search behind `eigenpairs` above `dense_below` (its results: eigen.py; the
method, its cost and tolerances: docs/design/curvature.md, "Certified extreme eigenpairs").

Legend: D parameters, k wanted pairs, n = ncv - k rows of the basis (the active Krylov vectors
and the next Lanczos vector). The search holds `ncv` vectors of D (the k locked eigenvectors and
the basis) and a few for one step's work, whatever its length.

One compiled program per (model, k, which, ncv) advances the search by one Lanczos run; the host
calls it until the search is done, printing a line per run once it takes long. Inside a run every
product goes through one call site: each iteration multiplies one vector and then, by the
search's mode, extends the basis (EXTEND), checks a candidate Ritz pair with an exact residual
(CHECK), or fills an unconverged search's last slots (FILL). The decisions work on small arrays
only; the basis and the locked vectors change by row writes and an in-place rotation outside
every conditional, since XLA copies a buffer that a conditional passes through.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from landscape import linalg
from landscape.point import Point
from landscape.probes import compiled, operator
from landscape.typing import PyTree

EXTEND, CHECK, FILL, DONE = 0, 1, 2, 3

_DOT = functools.partial(jnp.matmul, precision=jax.lax.Precision.HIGHEST)
MatVec = Callable[[jax.Array], jax.Array]


class State(NamedTuple):
    """The search's small arrays (legend in the module docstring).

    proj (n, n): the operator projected on the basis rows, the kept Ritz values' diagonal
    bordered by their arrowhead, then the tridiagonal; `size` rows hold Krylov vectors, row
    `size` the next Lanczos vector, `start` the row the run began at. values, residuals (k,):
    the locked pairs (`num_locked` of them), each residual ||H y - θ y|| of a fresh product. theta,
    estimates (n,), coeffs (n, n): the last Rayleigh-Ritz pairs, most wanted first, their
    coefficients in the basis as columns and their Lanczos estimates |β s_last|. cursor, stop:
    the pairs CHECK and FILL go through. q (n, n), hint (n,), rotate, fresh: a restart asked
    for (the basis becomes qᵀ basis; a fresh phase starts from hint's combination of the rows).
    """

    proj: jax.Array
    size: jax.Array
    start: jax.Array
    values: jax.Array
    residuals: jax.Array
    num_locked: jax.Array
    theta: jax.Array
    coeffs: jax.Array
    estimates: jax.Array
    cursor: jax.Array
    stop: jax.Array
    mode: jax.Array
    low: jax.Array
    high: jax.Array
    clean: jax.Array
    converged: jax.Array
    finite: jax.Array
    runs: jax.Array
    products: jax.Array
    q: jax.Array
    hint: jax.Array
    rotate: jax.Array
    fresh: jax.Array
    key: jax.Array


class Search(NamedTuple):
    """basis (n, D), locked (k, D) (rows past `state.num_locked` zero), the point's loss and flat
    gradient (D,) from the operator's linearisation, and the small `state`."""

    basis: jax.Array
    locked: jax.Array
    loss: jax.Array
    gradient: jax.Array
    state: State


class Writes(NamedTuple):
    """What a step writes into the big arrays: `vector` into basis row `row`, `y` into locked
    row `slot` (an index past the end writes nothing)."""

    row: jax.Array
    vector: jax.Array
    slot: jax.Array
    y: jax.Array


class Rules(NamedTuple):
    """What a search asks: the relative residual `rtol` (of the largest |Ritz value| seen) at
    which a pair is accepted, the most runs, and D (every direction locked ends a search)."""

    rtol: jax.Array
    max_runs: jax.Array
    dim: jax.Array


def _int(x: object) -> jax.Array:
    return jnp.asarray(x, jnp.int32)


def basis_rows(ncv: int, k: int, dim: int) -> int:
    """n: the basis rows of a search holding ncv vectors with k locked, at most D + 1."""
    return min(ncv - k, dim + 1)


def initial(key: jax.Array, dim: int, dtype: np.dtype, k: int, rows: int) -> Search:
    """A search before its first run, made on the host and placed on the device (nothing is
    compiled; the zeros are calloc'd pages, which cost no memory until the device copy): `run`
    draws the start vector from `key`."""
    zeros, square, integer = np.zeros(rows, dtype), np.zeros((rows, rows), dtype), np.int32(0)
    state = dict(
        proj=square, size=integer, start=integer, values=np.zeros(k, dtype),
        residuals=np.zeros(k, dtype), num_locked=integer, theta=zeros, coeffs=square,
        estimates=zeros, cursor=integer, stop=integer, mode=np.int32(EXTEND),
        low=np.asarray(np.inf, dtype), high=np.asarray(-np.inf, dtype), clean=np.bool_(True),
        converged=np.bool_(False), finite=np.bool_(True), runs=integer, products=integer,
        q=square, hint=zeros, rotate=np.bool_(False), fresh=np.bool_(False),
    )  # fmt: skip
    big = dict(
        basis=np.zeros((rows, dim), dtype), locked=np.zeros((k, dim), dtype),
        loss=np.asarray(0, dtype), gradient=np.zeros(dim, dtype),
    )  # fmt: skip
    placed = State(**jax.device_put(state), key=_own_copy(key))
    return Search(**jax.device_put(big), state=placed)


def _own_copy(key: jax.Array) -> jax.Array:
    """A copy of `key` that the search may donate (the caller's key stays usable), through the
    host: nothing compiled."""
    typed = jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)
    data = jax.device_put(np.asarray(jax.random.key_data(key) if typed else key))
    return jax.random.wrap_key_data(data, impl=jax.random.key_impl(key)) if typed else data


@functools.partial(jax.jit, static_argnames=("objective", "which"), donate_argnames=("search",))
def advance(
    objective: compiled.Objective,
    params: PyTree,
    inputs: PyTree,
    search: Search,
    rules: Rules,
    which: str,
) -> Search:
    """One Lanczos run of the search on the exact Hessian at params (linearised once), its
    Rayleigh-Ritz, the checks of its candidates and the restart: one program per model."""
    op = operator.hessian_operator(objective, params, inputs)
    search = search._replace(loss=op.value.astype(op.flat.dtype), gradient=op.gradient)
    return run(op.matvec, search, rules, which)


def run(matvec: MatVec, search: Search, rules: Rules, which: str) -> Search:
    """`advance` on any symmetric operator: products until the next run would begin (after this
    run's checks) or the search is done, then the restart the run asked for, outside the loop
    (a rotation inside it would make XLA copy the basis at every product)."""
    runs, s = search.state.runs, search.state
    draw, key = jax.random.split(s.key)
    vector = jax.random.normal(draw, search.basis.shape[1:], search.basis.dtype)
    first = jnp.where(s.products == 0, vector / jnp.linalg.norm(vector), search.basis[0])
    search = search._replace(basis=search.basis.at[0].set(first), state=s._replace(key=key))

    def going(search: Search) -> jax.Array:
        s = search.state
        next_run = (s.runs != runs) & (s.mode == EXTEND) & (s.size == s.start)
        return (s.mode != DONE) & ~next_run

    def body(search: Search) -> Search:
        return _step(matvec, search, rules, which)

    search = jax.lax.while_loop(going, body, search)
    basis, state = _restart(search.basis, search.locked, search.state)
    return search._replace(basis=basis, state=state)


def _step(matvec: MatVec, search: Search, rules: Rules, which: str) -> Search:
    """One product, the mode's step on the small arrays and its row writes. A restart it asks
    for ends the call's loop (the next run begins), and `run` applies it after the loop."""
    basis, locked, s = search.basis, search.locked, search.state
    v = jax.lax.cond(
        s.mode == EXTEND, lambda: basis[s.size], lambda: _DOT(s.coeffs[:, s.cursor], basis)
    )
    av = matvec(v)
    s = s._replace(products=s.products + 1, finite=s.finite & jnp.all(jnp.isfinite(av)))
    branches = [_extend, _check, _fill]
    branches = [functools.partial(b, rules=rules, which=which) for b in branches]
    s, writes = jax.lax.switch(jnp.minimum(s.mode, FILL), branches, basis, locked, s, v, av)
    basis = basis.at[writes.row].set(writes.vector, mode="drop")
    locked = locked.at[writes.slot].set(writes.y, mode="drop")
    s = s._replace(mode=jnp.where(s.finite, s.mode, DONE))
    return search._replace(basis=basis, locked=locked, state=s)


# ------------------------------------------------------------------------- EXTEND: one step


def _extend(
    basis: jax.Array, locked: jax.Array, s: State, v: jax.Array, av: jax.Array, rules: Rules,
    which: str,
) -> tuple[State, Writes]:  # fmt: skip
    """A Lanczos step from row `size`: the known coupling (the arrowhead on a run's first step,
    the tridiagonal after) subtracted, then one classical Gram-Schmidt pass against the basis
    and the locked rows, a second only when the first removed most of the vector (Daniel-
    Gragg-Kaufman-Stewart). The run ends once the pairs it still needs have converged."""
    i, rows = s.size, basis.shape[0]
    alpha = _DOT(v, av)
    column = s.proj[:, i].at[i].set(alpha)
    w = jax.lax.cond(
        i == s.start,
        lambda: av - _DOT(column, basis),
        lambda: av - alpha * v - column[jnp.maximum(i - 1, 0)] * basis[jnp.maximum(i - 1, 0)],
    )
    once = _orthogonalised(basis, locked, w)
    w = jax.lax.cond(
        jnp.linalg.norm(once) < 0.5 * jnp.linalg.norm(w),
        lambda: _orthogonalised(basis, locked, once),
        lambda: once,
    )
    beta, eps = jnp.linalg.norm(w), jnp.finfo(w.dtype).eps
    scale = jnp.maximum(jnp.max(jnp.abs(s.proj)), jnp.maximum(jnp.linalg.norm(av), jnp.abs(alpha)))
    exhausted = beta <= 100 * eps * scale
    following = jax.lax.cond(
        exhausted,
        lambda: _fresh_direction(basis, locked, jax.random.fold_in(s.key, s.products)),
        lambda: w / jnp.where(exhausted, 1, beta),
    )
    beta = jnp.where(exhausted, 0, beta)
    proj = s.proj.at[i, i].set(alpha)
    proj = proj.at[i + 1, i].set(beta, mode="drop").at[i, i + 1].set(beta, mode="drop")
    s = s._replace(proj=proj, size=i + 1)
    theta, coeffs, estimates = rayleigh_ritz(s.proj, s.size, beta, which)
    tol = _tolerance(s, theta, estimates, rules)
    need = jnp.where(s.num_locked < s.values.size, s.values.size - s.num_locked, 1)
    done = jnp.all(jnp.where(jnp.arange(theta.size) < need, estimates, 0) <= tol)
    full = (s.size + 1 >= rows) | (s.size + s.num_locked >= basis.shape[1]) | ~jnp.any(following)
    ended = s._replace(theta=theta, coeffs=coeffs, estimates=estimates)
    s = jax.lax.cond(done | full | ~s.finite, lambda: _after_run(ended, rules, which), lambda: s)
    return s, Writes(i + 1, following, _int(locked.shape[0]), v)


def _orthogonalised(basis: jax.Array, locked: jax.Array, w: jax.Array) -> jax.Array:
    """w less its components along the basis rows and the locked rows (zero rows ignored)."""
    w = w - _DOT(_DOT(basis, w), basis)
    return w - _DOT(_DOT(locked, w), locked)


def _fresh_direction(basis: jax.Array, locked: jax.Array, key: jax.Array) -> jax.Array:
    """A random unit vector orthogonal to the basis and the locked rows (twice: a random vector
    lies mostly in a large basis); zero when they span everything."""
    raw = jax.random.normal(key, basis.shape[1:], basis.dtype)
    w = _orthogonalised(basis, locked, _orthogonalised(basis, locked, raw))
    norm = jnp.linalg.norm(w)
    usable = norm > jnp.sqrt(jnp.finfo(w.dtype).eps) * jnp.linalg.norm(raw)
    return jnp.where(usable, w / jnp.where(usable, norm, 1), 0)


def rayleigh_ritz(
    proj: jax.Array, size: jax.Array, beta: jax.Array, which: str
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(Ritz values, their coefficient columns, estimates |β s_last|), most wanted first, of the
    projected matrix's leading `size` rows; the absent rows sort last, with infinite estimates."""
    holds = jnp.arange(proj.shape[0]) < size
    projected = jnp.where(holds[:, None] & holds[None, :], proj, 0)
    far = jnp.sum(jnp.abs(projected)) + 1.0  # beyond every eigenvalue
    projected += jnp.diag(jnp.where(holds, 0.0, -far if which == "largest" else far))
    theta, vectors = jnp.linalg.eigh(projected)
    order = jnp.argsort(-theta if which == "largest" else theta)
    theta, vectors = theta[order], vectors[:, order]
    real = jnp.sum(jnp.where(holds[:, None], vectors**2, 0), axis=0) > 0.5
    estimates = jnp.abs(beta * vectors[jnp.maximum(size - 1, 0)])
    return theta, jnp.where(holds[:, None], vectors, 0), jnp.where(real, estimates, jnp.inf)


def _tolerance(s: State, theta: jax.Array, estimates: jax.Array, rules: Rules) -> jax.Array:
    """rtol times the largest |Ritz value| seen (this run's included)."""
    seen = jnp.max(jnp.where(jnp.isfinite(estimates), jnp.abs(theta), 0))
    return rules.rtol * jnp.maximum(_scale(s), seen)


def _scale(s: State) -> jax.Array:
    return jnp.where(jnp.isfinite(s.low), jnp.maximum(jnp.abs(s.low), jnp.abs(s.high)), 0)


# --------------------------------------------------------------- the end of a run: decisions


def _more_wanted(a: jax.Array, b: jax.Array, which: str) -> jax.Array:
    return a > b if which == "largest" else a < b


def _after_run(s: State, rules: Rules, which: str) -> State:
    """After a run's Rayleigh-Ritz: done, in a phase begun after the last lock, when no Ritz
    value (moved by its estimate toward the wanted end) is more wanted than the least wanted
    locked one by more than the tolerance; else check the candidates the estimates accept."""
    real = jnp.isfinite(s.estimates)
    s = s._replace(
        low=jnp.minimum(s.low, jnp.min(jnp.where(real, s.theta, jnp.inf))),
        high=jnp.maximum(s.high, jnp.max(jnp.where(real, s.theta, -jnp.inf))),
        runs=s.runs + 1,
    )
    margin, k = rules.rtol * _scale(s), s.values.size
    toward = s.estimates[0] if which == "largest" else -s.estimates[0]
    slots = jnp.arange(k) < s.num_locked
    if which == "largest":
        beyond = jnp.min(jnp.where(slots, s.values, jnp.inf)) + margin
    else:
        beyond = jnp.max(jnp.where(slots, s.values, -jnp.inf)) - margin
    settled = (s.num_locked == k) & s.clean & ~_more_wanted(s.theta[0] + toward, beyond, which)
    accepted = (s.estimates <= margin) & real
    candidates = jnp.where(jnp.all(accepted), accepted.size, jnp.argmin(accepted))
    checking = s._replace(mode=_int(CHECK), cursor=_int(0), stop=_int(jnp.minimum(candidates, k)))
    return jax.lax.cond(
        settled | ~s.finite,
        lambda: s._replace(mode=_int(DONE), converged=s.finite),
        lambda: jax.lax.cond(
            candidates > 0, lambda: checking, lambda: _decide(s, _int(0), rules, which)
        ),
    )


def _check(
    basis: jax.Array, locked: jax.Array, s: State, y: jax.Array, hy: jax.Array, rules: Rules,
    which: str,
) -> tuple[State, Writes]:  # fmt: skip
    """CHECK: Ritz pair `cursor`'s exact residual; accepted (merged into the locked set, the k
    most wanted kept) when within the tolerance. The first refused one ends the checks."""
    k, theta = s.values.size, s.theta[s.cursor]
    residual = jnp.linalg.norm(hy - theta * y)
    ok = residual <= rules.rtol * _scale(s)
    slots = jnp.arange(k) < s.num_locked
    rank = jnp.where(slots, s.values, -jnp.inf if which == "largest" else jnp.inf)
    least = jnp.argmin(rank) if which == "largest" else jnp.argmax(rank)
    slot = jnp.where(s.num_locked < k, s.num_locked, least)
    kept = ok & ((s.num_locked < k) | _more_wanted(theta, s.values[least], which))
    s = s._replace(
        values=jnp.where(kept, s.values.at[slot].set(theta), s.values),
        residuals=jnp.where(kept, s.residuals.at[slot].set(residual), s.residuals),
        num_locked=jnp.where(kept, jnp.minimum(s.num_locked + 1, k), s.num_locked),
        clean=s.clean & ~kept, cursor=s.cursor + 1,
    )  # fmt: skip
    accepted = jnp.where(ok, s.cursor, s.cursor - 1)
    s = jax.lax.cond(
        ~ok | (s.cursor >= s.stop), lambda: _decide(s, accepted, rules, which), lambda: s
    )
    return s, Writes(_int(basis.shape[0]), y, jnp.where(kept, slot, k).astype(jnp.int32), y)


def _decide(s: State, accepted: jax.Array, rules: Rules, which: str) -> State:
    """After the checks: every parameter direction locked (done), the last run of an
    unconverged search (fill the free slots with the best remaining Ritz pairs), or a restart
    past the `accepted` prefix of the Ritz pairs."""
    k = s.values.size
    everything = s.num_locked >= rules.dim  # k = D: every direction locked
    last = s.runs >= rules.max_runs
    fill = s._replace(mode=_int(FILL), cursor=accepted, stop=accepted + k - s.num_locked)
    stop = s._replace(mode=_int(DONE))
    return jax.lax.cond(
        everything,
        lambda: s._replace(mode=_int(DONE), converged=jnp.asarray(True)),
        lambda: jax.lax.cond(
            last,
            lambda: jax.lax.cond(s.num_locked < k, lambda: fill, lambda: stop),
            lambda: _plan_restart(s, accepted),
        ),
    )


def _fill(
    basis: jax.Array, locked: jax.Array, s: State, y: jax.Array, hy: jax.Array, rules: Rules,
    which: str,
) -> tuple[State, Writes]:  # fmt: skip
    """FILL: an unconverged search's free slot gets the next Ritz pair, with its exact residual
    (uncertified: `converged` stays False)."""
    theta, slot = s.theta[s.cursor], s.num_locked
    s = s._replace(
        values=s.values.at[slot].set(theta),
        residuals=s.residuals.at[slot].set(jnp.linalg.norm(hy - theta * y)),
        num_locked=s.num_locked + 1, cursor=s.cursor + 1,
    )  # fmt: skip
    left = jnp.isfinite(s.estimates[jnp.minimum(s.cursor, s.theta.size - 1)])
    over = (s.cursor >= s.stop) | (s.cursor >= s.theta.size) | ~left
    s = s._replace(mode=_int(jnp.where(over, DONE, FILL)))
    return s, Writes(_int(basis.shape[0]), y, slot, y)


# ------------------------------------------------------------------------------- restarts


def _plan_restart(s: State, accepted: jax.Array) -> State:
    """A fresh phase (a random start seeded with the best unconverged Ritz vectors) once k pairs
    are locked and one changed since the phase began: a further copy of a locked eigenvalue lies
    outside the current Krylov space. Otherwise a thick restart: keep about half the basis, the
    best unconverged Ritz pairs, and continue from the next Lanczos vector."""
    k, rows = s.values.size, s.proj.shape[0]
    fresh = (s.num_locked == k) & ~s.clean
    columns = accepted + jnp.arange(rows)
    real = jnp.isfinite(s.estimates[jnp.minimum(columns, rows - 1)]) & (columns < rows)
    seeds = jnp.where(
        (real & (jnp.arange(rows) < k))[None, :], s.coeffs[:, jnp.minimum(columns, rows - 1)], 0
    )
    kept = _int(jnp.clip(jnp.minimum((rows - 1) // 2, jnp.sum(real)), 0, s.size))
    use = jnp.arange(rows) < kept
    q = jnp.where(use[None, :], s.coeffs[:, jnp.minimum(columns, rows - 1)], 0)
    q = q.at[:, jnp.minimum(kept, rows - 1)].set(jax.nn.one_hot(s.size, rows, dtype=q.dtype))
    beta = s.proj[jnp.minimum(s.size, rows - 1), s.size - 1]
    arrow = jnp.where(use, beta * q[s.size - 1], 0)
    theta = jnp.where(use, s.theta[jnp.minimum(columns, rows - 1)], 0)
    proj = jnp.diag(theta).at[kept].set(arrow, mode="drop").at[:, kept].set(arrow, mode="drop")
    thick = s._replace(q=q, proj=proj, size=kept, start=kept)
    new = s._replace(
        q=jnp.zeros_like(q), hint=jnp.sum(seeds, axis=1), proj=jnp.zeros_like(proj),
        size=_int(0), start=_int(0), clean=jnp.asarray(True),
    )  # fmt: skip
    s = jax.lax.cond(fresh, lambda: new, lambda: thick)
    return s._replace(mode=_int(EXTEND), rotate=jnp.asarray(True), fresh=fresh)


def _restart(basis: jax.Array, locked: jax.Array, s: State) -> tuple[jax.Array, State]:
    """The restart `_plan_restart` asked for: the basis rotated in place to qᵀ basis (q the
    identity when none was asked for); a fresh phase's q puts the hint's combination of the
    old rows in row 0, which becomes its start vector."""
    fresh = s.rotate & s.fresh
    q = jnp.where(s.rotate, s.q, jnp.eye(s.q.shape[0], dtype=s.q.dtype))
    q = jnp.where(fresh, jnp.zeros_like(q).at[:, 0].set(s.hint), q)
    basis = linalg.rotate_rows(basis, q)
    key = jax.random.fold_in(s.key, s.runs)
    first = jax.lax.cond(fresh, lambda: _phase_start(basis[0], locked, key), lambda: basis[0])
    basis = basis.at[0].set(first)
    return basis, s._replace(rotate=jnp.asarray(False), fresh=jnp.asarray(False))


def _phase_start(hint: jax.Array, locked: jax.Array, key: jax.Array) -> jax.Array:
    """hint plus N(0, I/D), orthogonal to the locked rows (twice), of unit norm."""
    dim = hint.size
    raw = hint + jax.random.normal(key, (dim,), hint.dtype) / float(np.sqrt(dim))
    raw = raw - _DOT(_DOT(locked, raw), locked)
    vector = raw - _DOT(_DOT(locked, raw), locked)
    norm = jnp.linalg.norm(vector)
    return jnp.where(norm > 0, vector / jnp.where(norm > 0, norm, 1), 0)


# ------------------------------------------------------------------------------- the host


LONG_SECONDS = 10.0  # a search prints a line per run once it has taken this long


class Found(NamedTuple):
    """What a search found: the k pairs, most wanted first, each with its exact residual
    (certified when `converged`), the extreme Ritz values seen, the runs and products, and the
    point's loss and flat gradient."""

    values: np.ndarray
    vectors: np.ndarray
    residuals: np.ndarray
    low: float
    high: float
    converged: bool
    runs: int
    num_hvps: int
    loss: float
    gradient: np.ndarray


def search(
    point: Point,
    k: int,
    which: str,
    ncv: int,
    key: jax.Array,
    rtol: float,
    max_runs: int,
    progress: Callable[[str], None] | None = None,
) -> Found | None:
    """Krylov-Schur (module docstring) on one point, at most `max_runs` runs, holding `ncv`
    vectors of D; None when a product was not finite. One program: `advance`."""
    objective, inputs = point.shared
    dim, dtype = point.num_params, np.dtype(jax.tree.leaves(point.params)[0].dtype)
    found = initial(key, dim, dtype, k, basis_rows(ncv, k, dim))
    rules = Rules(*jax.device_put((np.asarray(rtol, dtype), np.int32(max_runs), np.int32(dim))))
    began = time.perf_counter()
    while True:
        found = advance(objective, point.params, inputs, found, rules, which)
        s, seconds = found.state, time.perf_counter() - began
        if progress and seconds > LONG_SECONDS:
            progress(
                f"eigenpairs: Lanczos run {int(s.runs)} of at most {max_runs} | "
                f"{int(s.num_locked)} of {k} accepted | {int(s.products)} products | "
                f"{seconds:.1f} s"
            )
        if int(s.mode) == DONE:
            break
    if not bool(s.finite):
        return None
    count, values = int(s.num_locked), np.asarray(s.values)
    order = np.argsort(-values[:count] if which == "largest" else values[:count], kind="stable")
    return Found(
        values[order], np.asarray(found.locked)[order], np.asarray(s.residuals)[order],
        float(s.low), float(s.high), bool(s.converged), int(s.runs), int(s.products),
        float(found.loss), np.asarray(found.gradient),
    )  # fmt: skip
