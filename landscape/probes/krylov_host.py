"""The host's side of the Krylov-Schur search (`krylov.py` the device's): the decisions between
calls of `krylov.advance`, on arrays of ncv numbers in numpy (`Host`), and `search`, the loop
that calls it, prints a line per run once the search takes long, and returns what it found.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from landscape import trees
from landscape.core import layout as layout_lib
from landscape.point import Point
from landscape.probes import stream
from landscape.probes.krylov import CHECK, DONE, EXTEND, FILL, RITZ, Layout, Outcome, Plan, advance
from landscape.typing import PyTree


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
    q: np.ndarray | None = dataclasses.field(init=False)  # the restart the next run applies
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
        rotate = mode == EXTEND and self.q is not None
        q = self.q if self.q is not None and rotate else np.eye(rows)
        column = np.concatenate([np.zeros(k), self.proj[:, min(self.size, rows - 1)]])
        coeffs = np.concatenate([np.zeros((k, k)), coeffs])  # the locked rows come first
        need = self.k - len(self.values) if len(self.values) < self.k else 1
        return Plan._make([  # numpy arrays: a jitted call takes them as they are
            np.int32(mode), q.astype(dtype), np.bool_(rotate),
            np.bool_(mode == EXTEND and self.fresh),
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
        """After the checks: every direction locked, or the one pair asked for (done: a further
        copy of it would not change the answer, so no fresh phase looks for one), the last run
        (fill the free slots with the best remaining Ritz pairs, uncertified), or a restart past
        the `accepted` prefix of the Ritz pairs."""
        free = self.k - len(self.values)
        if len(self.values) >= self.dim or (self.k == 1 and not free):
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
) -> Found:
    """Krylov-Schur (module docstring) on one point, at most `max_runs` runs, holding `ncv`
    vectors of D; NaN pairs when a product was not finite (the search ends at it). One
    program: `advance` (over a streamed dataset, `stream.searcher`'s two, a pass over the data
    a product)."""
    objective, inputs = point.shared
    call: Callable[..., Any] = advance
    spread = layout_lib.spread(point.params, point.batches)
    if getattr(inputs, "is_stream", False):  # its vectors ravel_pytree's, on any model
        call, spread = stream.searcher(point, progress), None
    dim, dtype = point.num_params, np.dtype(jax.tree.leaves(point.params)[0].dtype)
    host = Host(k, min(ncv - k, dim + 1), dim, which, rtol, max_runs)
    padded = dim if spread is None else spread.padded
    where = None if spread is None else spread.sharding(1)
    vectors = jax.device_put(np.zeros((k + host.rows, padded), dtype), where)
    began = time.perf_counter()
    while host.mode != DONE:
        plan, runs = host.plan(dtype), host.runs
        vectors, outcome = call(objective, point.params, inputs, vectors, plan, key, which, spread)
        outcome = outcome._replace(  # the decisions' numbers, alike in every process
            **{f: trees.host(x) for f, x in outcome._asdict().items() if f != "gradient"}
        )
        if host.mode == EXTEND:  # the restart is applied: the next one is the host's to ask
            host.fresh, host.q = False, None
        host.receive(outcome, plan)
        seconds = time.perf_counter() - began
        if progress and host.runs > runs and seconds > LONG_SECONDS:
            progress(
                f"eigenpairs: Lanczos run {host.runs} of at most {max_runs} | "
                f"{len(host.values)} of {k} accepted | {host.products} products | {seconds:.1f} s"
            )
    if not host.finite:  # NaN pairs, with the runs and products made
        nan = np.full(k, np.nan, dtype)
        return Found(
            nan, np.full((k, dim), np.nan, dtype), nan, np.nan, np.nan, False, host.runs,
            host.products, np.nan, np.full(dim, np.nan, dtype),
        )  # fmt: skip
    values = np.asarray(host.values)
    order = np.argsort(-values if which == "largest" else values, kind="stable")
    found, gradient = _in_ravel_order(vectors, outcome.gradient, k, spread)
    return Found(
        values[order].astype(dtype), found[order],
        np.asarray(host.residuals)[order].astype(dtype), host.low, host.high, host.converged,
        host.runs, host.products, float(outcome.loss), gradient,
    )  # fmt: skip


def _in_ravel_order(
    vectors: jax.Array, gradient: jax.Array, k: int, layout: Layout | None
) -> tuple[np.ndarray, np.ndarray]:
    """The locked rows (k, D) and the gradient (D,) on the host in `ravel_pytree`'s order: as
    they are on one device; over a mesh unflattened on the devices first (`_unflattened`)."""
    if layout is None:
        return np.asarray(vectors)[:k], np.asarray(gradient)
    stacked = _unflattened(vectors, gradient, k, layout)
    rows = [trees.host(leaf).reshape(k + 1, -1) for leaf in jax.tree.leaves(stacked)]
    flat = np.concatenate(rows, axis=1)
    return flat[:k], flat[k]


@functools.partial(jax.jit, static_argnames=("k", "layout"))
def _unflattened(vectors: jax.Array, gradient: jax.Array, k: int, layout: Layout) -> PyTree:
    """The locked rows and the gradient as pytrees stacked on a leading axis (k + 1, ...)."""
    rows = jnp.concatenate([vectors[:k], gradient[None]])
    return jax.vmap(layout.from_flat)(rows)
