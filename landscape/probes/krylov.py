"""Krylov-Schur: restarted Lanczos with locking on exact Hessian-vector products, in memory that
`ncv` bounds: the search behind `eigenpairs` above `dense_below` (eigen.py makes its results;
docs/design/curvature.md has the method, its cost and its tolerances).

Legend: D parameters, k wanted pairs, n = ncv - k basis rows (the Krylov vectors and the next
Lanczos vector). One compiled program per model, `advance`, does a call's vector work on one
linearisation (a restart, then a Lanczos run or the candidates' exact residuals); the decisions
between calls, on arrays of n numbers, are numpy's on the host (`Host`): one synchronisation a
run.
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

from landscape import linalg
from landscape.point import Point
from landscape.probes import compiled, operator
from landscape.typing import PyTree

EXTEND, RITZ = 0, 1  # what `advance` multiplies
CHECK, FILL, DONE = 3, 4, 5  # the host's further modes (CHECK and FILL call RITZ)

_DOT = functools.partial(jnp.matmul, precision=jax.lax.Precision.HIGHEST)


class Plan(NamedTuple):
    """What one call of `advance` is asked (legend in the module docstring). The basis first
    becomes qᵀ basis (n, n; the identity for none), its first row a fresh start seeded by it when
    `fresh`; then up to `steps` products in `mode`: EXTEND Lanczos steps from basis row `start`
    (`column` (ncv,) the first step's coupling known before it, the kept Ritz vectors'
    arrowhead), RITZ the Ritz vectors coeffs[:, i] · vectors (coeffs (ncv, k), zero on the
    locked rows) with their residuals against theta[i], each accepted at residual <= `tol`
    (until one is not) and written into locked row slots[i] (k: nowhere). `products` numbers
    the products before this call (the seed of a fresh direction where the Krylov space is
    exhausted). A run ends early once the `need` most wanted Ritz pairs of `proj` (n, n: the
    projected matrix, grown by its steps) have Lanczos estimates within rtol · max(scale, their
    values)."""

    mode: jax.Array
    q: jax.Array
    fresh: jax.Array
    start: jax.Array
    steps: jax.Array
    column: jax.Array
    coeffs: jax.Array
    theta: jax.Array
    slots: jax.Array
    tol: jax.Array
    products: jax.Array
    proj: jax.Array
    need: jax.Array
    scale: jax.Array
    rtol: jax.Array


class Outcome(NamedTuple):
    """What a call gives back: the products it made, the Rayleigh-Ritz of the run's last step
    (theta (n,) ascending, its eigenvectors (n, n) and their Lanczos estimates, the absent rows'
    values beyond the wanted end: the early stop decided on these, so the host does too), each
    Lanczos step's alpha, beta and whether it left a next vector (n,), each Ritz pair's residual
    and acceptance (c,), and the point's loss and flat gradient (D,), which the linearisation
    gives for free."""

    taken: jax.Array
    theta: jax.Array
    vectors: jax.Array
    estimates: jax.Array
    alpha: jax.Array
    beta: jax.Array
    more: jax.Array
    residual: jax.Array
    accepted: jax.Array
    loss: jax.Array
    gradient: jax.Array


@functools.partial(jax.jit, static_argnames=("objective", "which"), donate_argnames=("vectors",))
def advance(
    objective: compiled.Objective,
    params: PyTree,
    inputs: PyTree,
    vectors: jax.Array,
    plan: Plan,
    key: jax.Array,
    which: str,
) -> tuple[jax.Array, Outcome]:
    """`plan` on the exact Hessian at params, linearised once for every product of the call.
    `vectors` (ncv, D) holds the k locked rows, then the basis's n rows: one buffer, changed in
    place (a rotation, then row writes), which no conditional passes through (XLA would copy
    it)."""
    op = operator.hessian_operator(objective, params, inputs)
    k = plan.slots.size
    vectors = _restarted(vectors, k, plan, key)
    rows, dtype = vectors.shape[0] - k, vectors.dtype
    outcome = Outcome(
        jnp.asarray(0, jnp.int32), jnp.zeros(rows, dtype), jnp.zeros((rows, rows), dtype),
        jnp.zeros(rows, dtype), jnp.zeros(rows, dtype), jnp.zeros(rows, dtype),
        jnp.zeros(rows, bool), jnp.zeros(k, dtype), jnp.zeros(k, bool),
        op.value.astype(dtype), op.gradient,
    )  # fmt: skip

    def going(carry: tuple) -> jax.Array:
        return (carry[1].taken < plan.steps) & ~carry[3]

    def body(carry: tuple) -> tuple:
        return _one_product(op, plan, key, which, carry)

    init = (vectors, outcome, jnp.asarray(False), jnp.asarray(False), plan.proj)
    vectors, outcome, *_ = jax.lax.while_loop(going, body, init)
    return vectors, outcome


def _restarted(vectors: jax.Array, k: int, plan: Plan, key: jax.Array) -> jax.Array:
    """The basis rows rotated in place to qᵀ basis (the locked rows kept); for a fresh phase the
    first basis row (q's seed) plus N(0, I/D), orthogonal to the locked rows and of unit norm
    (the first call's start: the noise alone)."""
    total, dim = vectors.shape
    q = jnp.eye(total, dtype=vectors.dtype).at[k:, k:].set(plan.q)
    vectors = linalg.rotate_rows(vectors, q)

    def start(seed: jax.Array) -> jax.Array:
        raw = seed + jax.random.normal(key, (dim,), vectors.dtype) / float(np.sqrt(dim))
        return _unit_remainder(vectors, raw, jnp.arange(total) < k)

    return vectors.at[k].set(jax.lax.cond(plan.fresh, start, lambda seed: seed, vectors[k]))


def _one_product(
    op: operator.Operator, plan: Plan, key: jax.Array, which: str, carry: tuple
) -> tuple:
    """The call's next product, through one call site whatever the mode, and its vector work;
    a run's projected matrix grown by the step, and whether the run has converged."""
    vectors, outcome, failed, _, proj = carry
    k, i = plan.slots.size, outcome.taken
    rows = vectors.shape[0] - k
    at = jnp.minimum(i, k - 1)
    row = plan.start + i  # of the basis: vectors[k + row]
    extending = plan.mode == EXTEND
    v = jax.lax.cond(
        extending,
        lambda: vectors[k + jnp.minimum(row, rows - 1)],
        lambda: _DOT(plan.coeffs[:, at], vectors),
    )
    hv = op.matvec(v)
    zero = jnp.zeros((), v.dtype)
    coupling = (i == 0, plan.column, outcome.beta[jnp.maximum(i - 1, 0)])
    fresh_key = jax.random.fold_in(key, plan.products + i)
    alpha, beta, following = jax.lax.cond(
        extending,
        lambda: _lanczos_step(vectors, k, row, coupling, v, hv, fresh_key),
        lambda: (zero, zero, v),
    )
    residual = jnp.linalg.norm(hv - plan.theta[at] * v)
    finite = jnp.all(jnp.isfinite(hv))
    ok = (plan.mode == RITZ) & ~failed & (residual <= plan.tol) & finite
    kept = ok & (plan.slots[at] < k)  # accepted and among the k most wanted
    write = jnp.where(extending, k + row + 1, jnp.where(kept, plan.slots[at], vectors.shape[0]))
    vectors = vectors.at[write].set(following, mode="drop")  # following is v for a Ritz pair
    outcome = outcome._replace(
        taken=i + 1,
        alpha=outcome.alpha.at[i].set(alpha, mode="drop"),
        beta=outcome.beta.at[i].set(jnp.where(finite, beta, jnp.nan), mode="drop"),
        more=outcome.more.at[i].set(jnp.any(following != 0), mode="drop"),
        residual=outcome.residual.at[i].set(jnp.where(finite, residual, jnp.nan), mode="drop"),
        accepted=outcome.accepted.at[i].set(ok, mode="drop"),
    )
    proj = proj.at[row, row].set(alpha, mode="drop")
    proj = proj.at[row + 1, row].set(beta, mode="drop").at[row, row + 1].set(beta, mode="drop")
    done, ritz = _converged(proj, row + 1, beta, plan, which)
    outcome = _where(
        extending, outcome._replace(theta=ritz[0], vectors=ritz[1], estimates=ritz[2]), outcome
    )
    converged = extending & finite & done
    return vectors, outcome, failed | ((plan.mode == RITZ) & ~ok), converged, proj


def _where(pred: jax.Array, a: Outcome, b: Outcome) -> Outcome:
    return Outcome(*(jnp.where(pred, x, y) for x, y in zip(a, b, strict=True)))


def _converged(
    proj: jax.Array, size: jax.Array, beta: jax.Array, plan: Plan, which: str
) -> tuple[jax.Array, tuple[jax.Array, jax.Array, jax.Array]]:
    """Whether the `need` most wanted Ritz pairs of proj's leading `size` rows have Lanczos
    estimates |β s_last| within rtol · max(scale, |Ritz values|) (the run may end), and that
    Rayleigh-Ritz: (values ascending, eigenvectors, estimates)."""
    rows = proj.shape[0]
    holds = jnp.arange(rows) < size
    projected = jnp.where(holds[:, None] & holds[None, :], proj, 0)
    far = jnp.sum(jnp.abs(projected)) + 1.0  # absent rows: beyond the wanted end
    projected += jnp.diag(jnp.where(holds, 0.0, -far if which == "largest" else far))
    theta, vectors = jnp.linalg.eigh(projected)  # ascending
    estimates = jnp.abs(beta * vectors[jnp.maximum(size - 1, 0)])
    order = jnp.arange(rows)
    wanted = order >= rows - plan.need if which == "largest" else order < plan.need
    seen = jnp.max(jnp.where(jnp.abs(theta) < far / 2, jnp.abs(theta), 0))  # real ones
    tol = plan.rtol * jnp.maximum(plan.scale, seen)
    done = (size >= plan.need) & jnp.all(jnp.where(wanted, estimates, 0) <= tol)
    return done, (theta, vectors, estimates)


def _lanczos_step(
    vectors: jax.Array,
    k: int,
    row: jax.Array,
    coupling: tuple[jax.Array, jax.Array, jax.Array],
    v: jax.Array,
    av: jax.Array,
    key: jax.Array,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(alpha, beta, the next Lanczos vector) of a step from basis row `row`: the coupling known
    before it subtracted (`coupling` = (first, column, previous beta): on a run's first step the
    kept Ritz vectors' arrowhead `column`, after it the tridiagonal), then one classical
    Gram-Schmidt pass against every row (locked and basis), a second only when the first
    removed most of the vector (Daniel-Gragg-Kaufman-Stewart); a random direction orthogonal to
    them when the Krylov space is exhausted (beta 0), zero when nothing is left."""
    first, column, previous = coupling
    alpha = _DOT(v, av)
    below = k + jnp.maximum(row - 1, 0)
    known = jax.lax.cond(
        first,
        lambda: _DOT(column, vectors),
        lambda: jnp.where(row > 0, previous, 0) * vectors[below],
    )
    w = av - alpha * v - known
    once = _orthogonalised(vectors, w)
    w = jax.lax.cond(
        jnp.linalg.norm(once) < 0.5 * jnp.linalg.norm(w),
        lambda: _orthogonalised(vectors, once),
        lambda: once,
    )
    beta, eps = jnp.linalg.norm(w), jnp.finfo(w.dtype).eps
    seen = jnp.maximum(jnp.max(jnp.abs(column)), jnp.abs(previous))
    scale = jnp.maximum(jnp.maximum(seen, jnp.linalg.norm(av)), jnp.abs(alpha))
    exhausted = beta <= 100 * eps * scale
    following = jax.lax.cond(
        exhausted,
        lambda: _unit_remainder(vectors, jax.random.normal(key, v.shape, v.dtype)),
        lambda: w / jnp.where(exhausted, 1, beta),
    )
    return alpha, jnp.where(exhausted, 0, beta), following


def _orthogonalised(rows: jax.Array, w: jax.Array, only: jax.Array | None = None) -> jax.Array:
    """w less its components along the rows (orthonormal; zero rows ignored), or along those
    that `only` marks (a mask, where a slice would copy the rows)."""
    coefficients = _DOT(rows, w)
    if only is not None:
        coefficients = jnp.where(only, coefficients, 0)
    return w - _DOT(coefficients, rows)


def _unit_remainder(rows: jax.Array, raw: jax.Array, only: jax.Array | None = None) -> jax.Array:
    """The unit part of `raw` orthogonal to the rows (or those `only` marks; two passes: a
    random vector lies mostly in a large basis); zero when they span everything."""
    w = _orthogonalised(rows, _orthogonalised(rows, raw, only), only)
    norm = jnp.linalg.norm(w)
    usable = norm > jnp.sqrt(jnp.finfo(w.dtype).eps) * jnp.linalg.norm(raw)
    return jnp.where(usable, w / jnp.where(usable, norm, 1), 0)


# ------------------------------------------------------------------------------- the host


def rayleigh_ritz(
    proj: np.ndarray, size: int, beta: float, which: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(Ritz values, their coefficient columns (n, size), estimates |β s_last|), most wanted
    first, of the projected matrix's leading `size` rows, in float64."""
    theta, vectors = np.linalg.eigh(proj[:size, :size].astype(np.float64))
    order = np.argsort(-theta if which == "largest" else theta, kind="stable")
    coeffs = np.zeros((proj.shape[0], size))
    coeffs[:size] = vectors[:, order]
    return theta[order], coeffs, np.abs(beta * coeffs[size - 1])


def _wanted_first(
    outcome: Outcome, size: int, which: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A run's last Rayleigh-Ritz from the device (ascending, the absent rows beyond the wanted
    end), most wanted first and cut to the `size` rows that hold vectors."""
    theta = np.asarray(outcome.theta, np.float64)
    order = np.argsort(-theta if which == "largest" else theta, kind="stable")[:size]
    vectors, estimates = np.asarray(outcome.vectors, np.float64), np.asarray(outcome.estimates)
    coeffs = vectors[:, order]
    coeffs[size:] = 0.0
    return theta[order], coeffs, estimates[order].astype(np.float64)


@dataclasses.dataclass
class Host:
    """The search's decisions on the host, in numpy: the projected matrix `proj` (n, n; the kept
    Ritz values' diagonal bordered by their arrowhead, then the tridiagonal) of the `size` rows
    that hold Krylov vectors, the locked pairs' values and exact residuals, the last
    Rayleigh-Ritz (theta, coeffs, estimates, most wanted first), the mode and the candidates it
    goes through (cursor, stop), and the restart the next call applies (q, fresh)."""

    k: int
    rows: int
    dim: int
    which: str
    rtol: float
    max_runs: int
    proj: np.ndarray = dataclasses.field(init=False)
    size: int = 0
    values: list[float] = dataclasses.field(default_factory=list)
    residuals: list[float] = dataclasses.field(default_factory=list)
    theta: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    coeffs: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros((0, 0)))
    estimates: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    mode: int = EXTEND
    cursor: int = 0
    stop: int = 0
    low: float = np.inf
    high: float = -np.inf
    clean: bool = True
    converged: bool = False
    finite: bool = True
    runs: int = 0
    products: int = 0
    q: np.ndarray = dataclasses.field(init=False)
    fresh: bool = True  # the first call draws the start vector

    def __post_init__(self) -> None:
        self.proj = np.zeros((self.rows, self.rows))
        self.q = np.zeros((self.rows, self.rows))

    @property
    def scale(self) -> float:
        """The largest |Ritz value| seen (0 before the first run ends)."""
        return max(abs(self.low), abs(self.high)) if np.isfinite(self.low) else 0.0

    def _more_wanted(self, a: float, b: float) -> bool:
        return a > b if self.which == "largest" else a < b

    # ----------------------------------------------------------------- the plan of a call

    def plan(self, dtype: np.dtype) -> Plan:
        """The next call's plan: a run (EXTEND), the candidates' checks (CHECK) or an
        unconverged search's fill (FILL) as RITZ."""
        rows, k = self.rows, self.k
        coeffs, theta, slots = np.zeros((rows, k)), np.zeros(k), np.full(k, k, np.int32)
        mode, steps, tol = EXTEND, self.rows - 1 - self.size, 0.0
        steps = min(steps, self.dim - len(self.values) - self.size)
        if self.mode in (CHECK, FILL):
            chosen = np.arange(self.cursor, self.stop)
            coeffs[:, : chosen.size] = self.coeffs[:, chosen]
            theta[: chosen.size] = self.theta[chosen]
            slots[: chosen.size] = self._slots(chosen)
            mode, steps = RITZ, chosen.size
            tol = np.inf if self.mode == FILL else self.rtol * self.scale
        q = self.q if mode == EXTEND else np.eye(rows)
        column = np.concatenate([np.zeros(k), self.proj[:, min(self.size, rows - 1)]])
        coeffs = np.concatenate([np.zeros((k, k)), coeffs])  # the locked rows come first
        need = self.k - len(self.values) if len(self.values) < self.k else 1
        return Plan._make([  # numpy arrays: a jitted call takes them as they are
            np.int32(mode), q.astype(dtype), np.bool_(mode == EXTEND and self.fresh),
            np.int32(self.size), np.int32(max(steps, 0)), column.astype(dtype),
            coeffs.astype(dtype), theta.astype(dtype), slots, np.asarray(tol, dtype),
            np.int32(self.products), self.proj.astype(dtype), np.int32(need),
            np.asarray(self.scale, dtype), np.asarray(self.rtol, dtype),
        ])  # fmt: skip

    def _slots(self, chosen: np.ndarray) -> np.ndarray:
        """The locked row each of the `chosen` Ritz pairs takes if it and those before it are
        accepted: a free row, else the least wanted pair's when it is more wanted, else none."""
        values, slots = list(self.values), []
        for j in chosen:
            theta = float(self.theta[j])
            if len(values) < self.k:
                slots.append(len(values))
                values.append(theta)
                continue
            least = int(np.argmin(values) if self.which == "largest" else np.argmax(values))
            kept = self._more_wanted(theta, values[least])
            slots.append(least if kept else self.k)
            values[least] = theta if kept else values[least]
        return np.asarray(slots, np.int32)

    # ----------------------------------------------------------------- what a call gave

    def receive(self, outcome: Outcome, plan: Plan) -> None:
        """The call's outcome: a run's end, the checks or the fill; a non-finite product ends the
        search."""
        steps = int(outcome.taken)
        self.products += steps
        numbers = np.concatenate([np.asarray(outcome.alpha), np.asarray(outcome.beta),
                                  np.asarray(outcome.residual)])  # fmt: skip
        if not np.all(np.isfinite(numbers)):
            self.mode, self.finite = DONE, False
        elif self.mode == EXTEND:
            self._ran(outcome, steps)
        elif self.mode == CHECK:
            self._checked(outcome, plan)
        else:
            self._filled(outcome, steps)

    def _ran(self, outcome: Outcome, steps: int) -> None:
        """A run's steps into the projected matrix (up to the first that left no next vector),
        its Rayleigh-Ritz, then `_after_run`."""
        alpha, beta = np.asarray(outcome.alpha, np.float64), np.asarray(outcome.beta, np.float64)
        more = np.asarray(outcome.more)
        taken = int(np.argmin(more[:steps])) + 1 if not more[:steps].all() else steps
        for j in range(taken):
            r = self.size + j
            self.proj[r, r] = alpha[j]
            if r + 1 < self.rows:
                self.proj[r + 1, r] = self.proj[r, r + 1] = beta[j]
        self.size += taken
        if taken:  # the device's Rayleigh-Ritz, on which its early stop decided
            self.theta, self.coeffs, self.estimates = _wanted_first(outcome, self.size, self.which)
        else:
            self.theta, self.coeffs, self.estimates = rayleigh_ritz(
                self.proj, self.size, 0.0, self.which
            )
        self._after_run()

    def _after_run(self) -> None:
        """After a run: done, in a phase begun after the last lock, when its most wanted Ritz
        value has converged (estimate within the tolerance) and, moved by its estimate toward
        the wanted end, is no more wanted than the least wanted locked one by more than the
        tolerance; else check the candidates the estimates accept."""
        self.low = min(self.low, float(self.theta.min()))
        self.high = max(self.high, float(self.theta.max()))
        self.runs += 1
        margin = self.rtol * self.scale
        if len(self.values) == self.k and self.clean and self.estimates[0] <= margin:
            toward = self.estimates[0] if self.which == "largest" else -self.estimates[0]
            worst = min(self.values) if self.which == "largest" else max(self.values)
            beyond = worst + margin if self.which == "largest" else worst - margin
            if not self._more_wanted(self.theta[0] + toward, beyond):
                self.mode, self.converged = DONE, True
                return
        accepted = self.estimates <= margin
        candidates = min(int(np.argmin(accepted)) if not accepted.all() else accepted.size, self.k)
        if candidates:
            self.mode, self.cursor, self.stop = CHECK, 0, candidates
        else:
            self._decide(0)

    def _checked(self, outcome: Outcome, plan: Plan) -> None:
        """The candidates' exact residuals: the accepted prefix (the device stopped at the first
        refused one) merged into the locked pairs at their slots, then `_decide`."""
        accepted = np.asarray(outcome.accepted)[: int(outcome.taken)]
        count = int(np.argmin(accepted)) if not accepted.all() else accepted.size
        slots, residuals = np.asarray(plan.slots), np.asarray(outcome.residual, np.float64)
        for j in range(count):
            slot, theta = int(slots[j]), float(self.theta[self.cursor + j])
            if slot >= self.k:  # accepted, but less wanted than every locked pair
                continue
            if slot == len(self.values):
                self.values.append(theta)
                self.residuals.append(float(residuals[j]))
            else:
                self.values[slot], self.residuals[slot] = theta, float(residuals[j])
            self.clean = self.clean and slot >= self.k
        self._decide(self.cursor + count)

    def _filled(self, outcome: Outcome, steps: int) -> None:
        """An unconverged search's free slots take the best remaining Ritz pairs, uncertified,
        each with its exact residual."""
        residuals = np.asarray(outcome.residual, np.float64)
        for j in range(steps):
            self.values.append(float(self.theta[self.cursor + j]))
            self.residuals.append(float(residuals[j]))
        self.mode = DONE

    def _decide(self, accepted: int) -> None:
        """After the checks: every direction locked (done), the last run (fill the free slots
        with the best remaining Ritz pairs, uncertified), or a restart past the `accepted`
        prefix of the Ritz pairs."""
        free = self.k - len(self.values)
        if len(self.values) >= self.dim:
            self.mode, self.converged = DONE, True
        elif self.runs >= self.max_runs and free and accepted < self.theta.size:
            self.mode, self.cursor = FILL, accepted
            self.stop = min(accepted + free, self.theta.size)
        elif self.runs >= self.max_runs:
            self.mode = DONE
        else:
            self._plan_restart(accepted)

    def _plan_restart(self, accepted: int) -> None:
        """A fresh phase (a random start seeded with the best unconverged Ritz vectors) once k
        pairs are locked and one changed since the phase began, or when the space is exhausted:
        a further copy of a locked eigenvalue lies outside the current Krylov space. Otherwise a
        thick restart: keep about half the basis, the best unconverged Ritz pairs, and continue
        from the next Lanczos vector (row `size`), bordered by their arrowhead β s_last."""
        rest = self.coeffs[:, accepted:]
        beta = self.proj[self.size, self.size - 1] if self.size < self.rows else 0.0
        self.q = np.zeros((self.rows, self.rows))
        complete = len(self.values) == self.k and not self.clean
        self.mode, self.fresh = EXTEND, complete or beta == 0.0
        if self.fresh:
            self.q[:, 0] = rest[:, : self.k].sum(axis=1)  # the seed, in row 0
            self.proj[:], self.size, self.clean = 0.0, 0, True
            return
        kept = min((self.rows - 1) // 2, rest.shape[1])
        self.q[:, :kept], self.q[self.size, kept] = rest[:, :kept], 1.0
        arrow = beta * rest[self.size - 1, :kept]
        self.proj[:] = 0.0
        self.proj[np.arange(kept), np.arange(kept)] = self.theta[accepted : accepted + kept]
        self.proj[kept, :kept] = self.proj[:kept, kept] = arrow
        self.size = kept


LONG_SECONDS = 10.0  # a search prints a line per run once it has taken this long


class Found(NamedTuple):
    """What a search found: the k pairs, most wanted first, each with its exact residual
    (certified when `converged`), the extreme Ritz values seen, the runs and products, the
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
    host = Host(k, min(ncv - k, dim + 1), dim, which, rtol, max_runs)
    vectors = jax.device_put(np.zeros((k + host.rows, dim), dtype))
    began = time.perf_counter()
    while host.mode != DONE:
        plan, runs = host.plan(dtype), host.runs
        vectors, outcome = advance(objective, point.params, inputs, vectors, plan, key, which)
        host.fresh = host.fresh and host.mode != EXTEND
        host.receive(outcome, plan)
        seconds = time.perf_counter() - began
        if progress and host.runs > runs and seconds > LONG_SECONDS:
            progress(
                f"eigenpairs: Lanczos run {host.runs} of at most {max_runs} | "
                f"{len(host.values)} of {k} accepted | {host.products} products | {seconds:.1f} s"
            )
    if not host.finite:
        return None
    values = np.asarray(host.values)
    order = np.argsort(-values if which == "largest" else values, kind="stable")
    return Found(
        values[order].astype(dtype), np.asarray(vectors)[:k][order],
        np.asarray(host.residuals)[order].astype(dtype), host.low, host.high, host.converged,
        host.runs, host.products, float(outcome.loss), np.asarray(outcome.gradient),
    )  # fmt: skip
