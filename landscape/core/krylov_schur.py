"""Krylov-Schur: restarted Lanczos with locking on a symmetric operator, in memory that `ncv`
bounds (the search behind `eigenpairs`; docs/design/curvature.md has the method, its cost and
its tolerances).

Legend: D the operator's size, k wanted pairs, n = ncv - k basis rows (the Krylov vectors and
the next Lanczos vector). The search alternates the host's decisions, here in numpy on arrays of
n numbers, with calls that do the vector work on the device (`krylov_schur_device`), one
synchronisation a call: a `State` in a `Mode`, and two pure functions, `plan` (what the next
call is asked: a `Plan`) and `receive` (the state after the call gave its `Outcome`); `drive`
loops them over any call.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import numpy as np


class Mode(enum.IntEnum):
    """What the search does next: a Lanczos run (EXTEND); the candidates' exact residuals
    (CHECK), or an unconverged search's free slots filled with its best Ritz pairs (FILL), both
    products of Ritz vectors; nothing (DONE)."""

    EXTEND = 0
    CHECK = 1
    FILL = 2
    DONE = 3


class Plan(NamedTuple):
    """What one call is asked (legend in the module docstring), every array ncv long (k is
    `locked`, a number: a new k is the same program). The vectors first become qᵀ vectors
    (ncv, ncv: the identity on the k locked rows, the basis rotated) when `rotate`, the first
    basis row a fresh start seeded by it when `fresh`; then up to `steps` products in `mode`:
    EXTEND Lanczos steps from basis row `start` (`column` the first step's coupling known
    before it, the kept Ritz vectors' arrowhead), CHECK or FILL the Ritz vectors
    coeffs[:, i] · vectors (zero on the locked rows) with their residuals against theta[i],
    each accepted at residual <= `tol` (until one is not) and written into locked row slots[i]
    (k or more: nowhere). `products` numbers the products before this call (the seed of a fresh
    direction where the Krylov space is exhausted). A run ends early once the `need` most
    wanted Ritz pairs of `proj` (the projected matrix of the basis rows, grown by its steps)
    have Lanczos estimates within rtol · max(scale, their values)."""

    locked: jax.Array
    mode: jax.Array
    q: jax.Array
    rotate: jax.Array
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
    """What a call gives back, ncv long like its plan (`receive` cuts it to n and k): the
    products it made, the Rayleigh-Ritz of the run's last step (theta ascending, its
    eigenvectors and their Lanczos estimates, the absent rows' values beyond the wanted end:
    the early stop decided on these, so the host does too), each Lanczos step's alpha, beta and
    whether it left a next vector, each Ritz pair's residual and acceptance, and the operator's
    value and gradient at its point (D,; a Hessian's linearisation gives them for free)."""

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


class Settings(NamedTuple):
    """What a search is asked: k pairs at the `which` end ("largest" or "smallest") of an
    operator of size `dim`, in `rows` basis rows, to the relative tolerance `rtol`, in at most
    `max_runs` Lanczos runs."""

    k: int
    rows: int
    dim: int
    which: str
    rtol: float
    max_runs: int


class State(NamedTuple):
    """The search between two calls: its `mode` and the Ritz pairs cursor..stop it checks or
    fills; the projected matrix `proj` (n, n: the kept Ritz values' diagonal bordered by their
    arrowhead, then the tridiagonal) of the `size` basis rows that hold Krylov vectors; the
    locked pairs' values and exact residuals (their vectors in the locked rows, in this order);
    the last Rayleigh-Ritz (theta, coeffs (n, size), estimates; most wanted first); the extreme
    Ritz values seen (low, high); whether the locked pairs are unchanged since the phase
    began; whether the search converged and every product was finite; the runs and products so
    far; the restart the next call applies (`rotation` q, None for none, and `fresh`); whether
    the search is in its multiplicity check (the fresh phases begun with k pairs locked, which
    look for a missed copy of a locked value) and the products of that check (in `products`
    too); the products outside that check that were candidates' exact residuals (CHECK and
    FILL: one for each certified pair and one for each refused candidate)."""

    mode: Mode
    cursor: int
    stop: int
    proj: np.ndarray
    size: int
    values: tuple[float, ...]
    residuals: tuple[float, ...]
    theta: np.ndarray
    coeffs: np.ndarray
    estimates: np.ndarray
    low: float
    high: float
    unchanged: bool
    converged: bool
    finite: bool
    runs: int
    products: int
    rotation: np.ndarray | None
    fresh: bool
    checking: bool = False
    check_products: int = 0
    residual_products: int = 0


def init(settings: Settings) -> State:
    """A search before its first call: a run from a random start."""
    square = np.zeros((settings.rows, settings.rows))
    return State(
        mode=Mode.EXTEND, cursor=0, stop=0, proj=square, size=0, values=(), residuals=(),
        theta=np.zeros(0), coeffs=np.zeros((0, 0)), estimates=np.zeros(0), low=np.inf,
        high=-np.inf, unchanged=True, converged=False, finite=True, runs=0, products=0,
        rotation=square.copy(), fresh=True,
    )  # fmt: skip


def scale(state: State) -> float:
    """The largest |Ritz value| seen (0 before the first run ends)."""
    return max(abs(state.low), abs(state.high)) if np.isfinite(state.low) else 0.0


def drive(
    settings: Settings,
    call: Callable[[Plan], Outcome],
    dtype: np.dtype,
    after: Callable[[State], None] | None = None,
) -> tuple[State, Outcome]:
    """The search to its end: `plan`, `call` (the plan's products and vector work, its outcome
    in numpy), `receive`, until DONE; `after` sees the state after each run. The state and the
    last outcome (its value and gradient the point's)."""
    state = init(settings)
    while True:
        asked = plan(settings, state, dtype)
        outcome = call(asked)
        runs, state = state.runs, receive(settings, state, asked, outcome)
        if after and state.runs > runs:
            after(state)
        if state.mode == Mode.DONE:
            return state, outcome


def ordered(settings: Settings, state: State) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The locked pairs most wanted first: (values, residuals, their locked rows)."""
    values = np.asarray(state.values)
    order = np.argsort(-values if settings.which == "largest" else values, kind="stable")
    return values[order], np.asarray(state.residuals)[order], order


def plan(settings: Settings, state: State, dtype: np.dtype) -> Plan:
    """The next call's plan (numpy arrays of `dtype`: a jitted call takes them as they are): a
    run (EXTEND) of the steps the basis has room for, or the Ritz pairs cursor..stop (CHECK at
    rtol · scale, up to the first that could not be kept: `_useful`; FILL accepting any)."""
    rows, k = settings.rows, settings.k
    coeffs, theta, slots = np.zeros((rows, k)), np.zeros(k), np.full(k, k, np.int32)
    steps, tol = rows - 1 - state.size, 0.0
    steps = min(steps, settings.dim - len(state.values) - state.size)
    if state.mode in (Mode.CHECK, Mode.FILL):
        chosen = np.arange(state.cursor, state.stop)
        if state.mode == Mode.CHECK:  # not the candidates no more wanted than every locked pair
            chosen = chosen[: _useful(settings, state, chosen)]
        coeffs[:, : chosen.size] = state.coeffs[:, chosen]
        theta[: chosen.size] = state.theta[chosen]
        slots[: chosen.size] = _slots(settings, state, chosen)
        steps = chosen.size
        tol = np.inf if state.mode == Mode.FILL else settings.rtol * scale(state)
    extending = state.mode == Mode.EXTEND
    rotate = extending and state.rotation is not None
    total = rows + k  # the locked rows come first
    q = np.eye(total)
    q[k:, k:] = state.rotation if state.rotation is not None and rotate else np.eye(rows)
    column = np.concatenate([np.zeros(k), state.proj[:, min(state.size, rows - 1)]])
    need = k - len(state.values) if len(state.values) < k else 1
    return Plan._make([  # numpy arrays: a jitted call takes them as they are
        np.int32(k), np.int32(state.mode), q.astype(dtype), np.bool_(rotate),
        np.bool_(extending and state.fresh), np.int32(state.size), np.int32(max(steps, 0)),
        column.astype(dtype), _square(coeffs, total, k).astype(dtype),
        _padded(theta, total).astype(dtype), _padded(slots, total, k).astype(np.int32),
        np.asarray(tol, dtype), np.int32(state.products),
        _square(state.proj, total).astype(dtype), np.int32(need),
        np.asarray(scale(state), dtype), np.asarray(settings.rtol, dtype),
    ])  # fmt: skip


def _padded(x: np.ndarray, total: int, fill: float = 0.0) -> np.ndarray:
    """x (m,) padded to (total,) with `fill`."""
    return np.concatenate([x, np.full(total - x.size, fill, x.dtype)])


def _square(x: np.ndarray, total: int, below: int = 0) -> np.ndarray:
    """x (m, n) in a (total, total) zero matrix, from row `below`."""
    out = np.zeros((total, total))
    out[below : below + x.shape[0], : x.shape[1]] = x
    return out


def _cut(outcome: Outcome, rows: int, k: int) -> Outcome:
    """A call's outcome (ncv long) cut to the n basis rows' and the k pairs' entries."""
    sizes = {
        "vectors": rows,
        "alpha": rows,
        "beta": rows,
        "more": rows,
        "residual": k,
        "accepted": k,
    }
    cut: dict[str, Any] = {f: np.asarray(getattr(outcome, f))[:n] for f, n in sizes.items()}
    return outcome._replace(**cut)


def _more_wanted(which: str, a: float, b: float) -> bool:
    return a > b if which == "largest" else a < b


def _slots(settings: Settings, state: State, chosen: np.ndarray) -> np.ndarray:
    """The locked row each of the `chosen` Ritz pairs takes if it and those before it are
    accepted: a free row, else the least wanted pair's when it is more wanted, else none (k)."""
    k, which = settings.k, settings.which
    values, slots = list(state.values), []
    for j in chosen:
        theta = float(state.theta[j])
        if len(values) < k:
            slots.append(len(values))
            values.append(theta)
            continue
        least = int(np.argmin(values) if which == "largest" else np.argmax(values))
        kept = _more_wanted(which, theta, values[least])
        slots.append(least if kept else k)
        values[least] = theta if kept else values[least]
    return np.asarray(slots, np.int32)


def receive(settings: Settings, state: State, plan: Plan, outcome: Outcome) -> State:
    """The state after a call of `plan` gave `outcome` (numpy): a run's end, the checks or the
    fill; a product that was not finite ends the search."""
    if state.mode == Mode.EXTEND:  # the restart is applied: the next is ours to ask
        state = state._replace(rotation=None, fresh=False)
    outcome = _cut(outcome, settings.rows, settings.k)
    steps = int(outcome.taken)
    state = state._replace(
        products=state.products + steps,
        check_products=state.check_products + (steps if state.checking else 0),
        residual_products=state.residual_products
        + (steps if state.mode != Mode.EXTEND and not state.checking else 0),
    )
    numbers = np.concatenate([np.asarray(outcome.alpha), np.asarray(outcome.beta),
                              np.asarray(outcome.residual)])  # fmt: skip
    if not np.all(np.isfinite(numbers)):
        return state._replace(mode=Mode.DONE, finite=False)
    if state.mode == Mode.EXTEND:
        return _ran(settings, state, outcome, steps)
    if state.mode == Mode.CHECK:
        return _checked(settings, state, outcome, plan)
    return _filled(state, outcome, steps)


def _ran(settings: Settings, state: State, outcome: Outcome, steps: int) -> State:
    """A run's steps into the projected matrix (up to the first that left no next vector),
    its Rayleigh-Ritz, then `_after_run`."""
    alpha, beta = np.asarray(outcome.alpha, np.float64), np.asarray(outcome.beta, np.float64)
    more = np.asarray(outcome.more)
    taken = int(np.argmin(more[:steps])) + 1 if not more[:steps].all() else steps
    proj = state.proj.copy()
    for j in range(taken):
        r = state.size + j
        proj[r, r] = alpha[j]
        if r + 1 < settings.rows:
            proj[r + 1, r] = proj[r, r + 1] = beta[j]
    size = state.size + taken
    if taken:  # the device's Rayleigh-Ritz, on which its early stop decided
        ritz = wanted_first(outcome, size, settings.which)
    else:
        ritz = rayleigh_ritz(proj, size, 0.0, settings.which)
    theta, coeffs, estimates = ritz
    state = state._replace(proj=proj, size=size, theta=theta, coeffs=coeffs, estimates=estimates)
    return _after_run(settings, state)


def _after_run(settings: Settings, state: State) -> State:
    """After a run: done, in a phase begun after the last lock, when its most wanted Ritz
    value has converged (estimate within the tolerance) and, moved by its estimate toward
    the wanted end, is no more wanted than the least wanted locked one by more than the
    tolerance; else check the candidates the estimates accept (none when not even the first
    could be kept: they leave the restart as accepted ones do)."""
    which = settings.which
    state = state._replace(
        low=min(state.low, float(state.theta.min())),
        high=max(state.high, float(state.theta.max())),
        runs=state.runs + 1,
    )
    margin = settings.rtol * scale(state)
    if len(state.values) == settings.k and state.unchanged and state.estimates[0] <= margin:
        toward = state.estimates[0] if which == "largest" else -state.estimates[0]
        worst = min(state.values) if which == "largest" else max(state.values)
        beyond = worst + margin if which == "largest" else worst - margin
        if not _more_wanted(which, state.theta[0] + toward, beyond):
            return state._replace(mode=Mode.DONE, converged=True)
    accepted = state.estimates <= margin
    candidates = min(int(np.argmin(accepted)) if not accepted.all() else accepted.size, settings.k)
    if candidates and _useful(settings, state, np.arange(candidates)):
        return state._replace(mode=Mode.CHECK, cursor=0, stop=candidates)
    return _decide(settings, state, candidates)  # none, or none that could be kept


def _useful(settings: Settings, state: State, chosen: np.ndarray) -> int:
    """How many of the `chosen` candidates (most wanted first) come before the first that
    could not be kept if accepted (no more wanted than every locked pair, once those before it
    are: the later ones neither): its product could change no answer, so it is not made."""
    slots = _slots(settings, state, chosen)
    return int(np.argmax(slots >= settings.k)) if np.any(slots >= settings.k) else chosen.size


def _checked(settings: Settings, state: State, outcome: Outcome, plan: Plan) -> State:
    """The candidates' exact residuals: the accepted prefix (the device stopped at the first
    refused one) merged into the locked pairs at their slots, then `_decide`; when every
    checked one was accepted, the unchecked ones after them (no more wanted than every locked
    pair, `_useful`) leave the restart as accepted ones do."""
    accepted = np.asarray(outcome.accepted)[: int(outcome.taken)]
    count = int(np.argmin(accepted)) if not accepted.all() else accepted.size
    past = state.stop if count == int(plan.steps) else state.cursor + count
    slots, residuals = np.asarray(plan.slots), np.asarray(outcome.residual, np.float64)
    values, exact, unchanged = list(state.values), list(state.residuals), state.unchanged
    for j in range(count):
        slot, theta = int(slots[j]), float(state.theta[state.cursor + j])
        if slot >= settings.k:  # accepted, but less wanted than every locked pair
            continue
        if slot == len(values):
            values.append(theta)
            exact.append(float(residuals[j]))
        else:
            values[slot], exact[slot] = theta, float(residuals[j])
        unchanged = False
    state = state._replace(values=tuple(values), residuals=tuple(exact), unchanged=unchanged)
    return _decide(settings, state, past)


def _filled(state: State, outcome: Outcome, steps: int) -> State:
    """An unconverged search's free slots take the best remaining Ritz pairs, uncertified,
    each with its exact residual."""
    residuals = np.asarray(outcome.residual, np.float64)
    chosen = range(state.cursor, state.cursor + steps)
    return state._replace(
        mode=Mode.DONE,
        values=state.values + tuple(float(state.theta[j]) for j in chosen),
        residuals=state.residuals + tuple(float(residuals[j]) for j in range(steps)),
    )


def _decide(settings: Settings, state: State, accepted: int) -> State:
    """After the checks: every direction locked, or the one pair asked for (done: a further
    copy of it would not change the answer, so no fresh phase looks for one), the last run
    (fill the free slots with the best remaining Ritz pairs, uncertified), or a restart past
    the `accepted` prefix of the Ritz pairs."""
    free = settings.k - len(state.values)
    if len(state.values) >= settings.dim or (settings.k == 1 and not free):
        return state._replace(mode=Mode.DONE, converged=True)
    if state.runs >= settings.max_runs and free and accepted < state.theta.size:
        stop = min(accepted + free, state.theta.size)
        return state._replace(mode=Mode.FILL, cursor=accepted, stop=stop)
    if state.runs >= settings.max_runs:
        return state._replace(mode=Mode.DONE)
    return _restart(settings, state, accepted)


def _restart(settings: Settings, state: State, accepted: int) -> State:
    """A fresh phase (a random start seeded with the best unconverged Ritz vectors) once k
    pairs are locked and one changed since the phase began, or when the space is exhausted:
    a further copy of a locked eigenvalue lies outside the current Krylov space. Otherwise a
    thick restart: keep about half the basis, the best unconverged Ritz pairs, and continue
    from the next Lanczos vector (row `size`), bordered by their arrowhead β s_last."""
    rows, size, rest = settings.rows, state.size, state.coeffs[:, accepted:]
    beta = state.proj[size, size - 1] if size < rows else 0.0
    rotation, proj = np.zeros((rows, rows)), np.zeros((rows, rows))
    complete = len(state.values) == settings.k and not state.unchanged
    if complete or beta == 0.0:
        rotation[:, 0] = rest[:, : settings.k].sum(axis=1)  # the seed, in row 0
        return state._replace(
            mode=Mode.EXTEND,
            rotation=rotation,
            fresh=True,
            proj=proj,
            size=0,
            unchanged=True,
            checking=state.checking or complete,
        )
    kept = min(kept_rows(rows), rest.shape[1])
    rotation[:, :kept], rotation[size, kept] = rest[:, :kept], 1.0
    arrow = beta * rest[size - 1, :kept]
    proj[np.arange(kept), np.arange(kept)] = state.theta[accepted : accepted + kept]
    proj[kept, :kept] = proj[:kept, kept] = arrow
    return state._replace(mode=Mode.EXTEND, rotation=rotation, fresh=False, proj=proj, size=kept)


# of a full basis's rows, the Ritz vectors a thick restart keeps (the host's: the device rotates
# by the q it is given, whose zero columns drop the rest)
KEEP = 0.5


def kept_rows(rows: int) -> int:
    """The Ritz vectors a thick restart of a basis of `rows` rows keeps (the row after them
    holds the next Lanczos vector): KEEP of the rows before the last."""
    return int(KEEP * (rows - 1))


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


def wanted_first(
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
