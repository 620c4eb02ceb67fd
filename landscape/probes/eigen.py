"""Certified extreme eigenpairs of the Hessian at a Point, and the escape directions of a saddle.

    eigenpairs(point, k, which)   the k largest or smallest eigenpairs, each with its residual
    escape_directions(point)      eigenvectors of negative eigenvalues, checked at second order

Dense `eigh` for small D, thick-restarted Lanczos with deflation on exact HVPs above. The method,
its stopping rule and its tolerances: docs/design/curvature.md.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from landscape import _checks
from landscape import point as point_lib
from landscape.point import Point
from landscape.probes import compiled, curvature, gradient, results
from landscape.typing import PyTree

WHICH = ("largest", "smallest")
_DEFAULT_EPSILONS = (1e-3, 3e-3, 1e-2)


def _eps(dtype: Any) -> float:
    return float(np.finfo(dtype).eps)


def lanczos_rtol(dtype: Any) -> float:
    """Default relative residual at which a Lanczos Ritz pair is accepted: max(1e-10, 100 eps)."""
    return max(1e-10, 100 * _eps(dtype))


def multiplicity_rtol(dtype: Any) -> float:
    """Default relative gap under which two eigenvalues count as one: max(1e-6, 1e5 eps)."""
    return max(1e-6, 1e5 * _eps(dtype))


def negative_rtol(dtype: Any) -> float:
    """Default relative threshold below -which an eigenvalue is negative: max(1e-9, 1000 eps)."""
    return max(1e-9, 1000 * _eps(dtype))


# --------------------------------------------------------------------------------------------------
# compiled programs (objective static: one compile per model)
# --------------------------------------------------------------------------------------------------


@functools.partial(jax.jit, static_argnames=("objective",))
def hvps(
    objective: compiled.Objective, params: PyTree, inputs: PyTree, vectors: jax.Array
) -> jax.Array:
    """H v for each row v of `vectors` (K, D): compiled.flat_hvp vmapped over the rows."""
    matvec = compiled.flat_hvp(objective, params, inputs)
    return jax.vmap(matvec)(vectors)


@functools.partial(jax.jit, static_argnames=("objective",))
def losses_along(
    objective: compiled.Objective,
    params: PyTree,
    inputs: PyTree,
    directions: jax.Array,
    epsilons: jax.Array,
) -> jax.Array:
    """L(θ + ε v) for each direction v (rows of (N, D)) and each ε of (E,), as (N, E + 1): column
    0 is ε = 0, evaluated in the same batched program so that differences cancel rounding
    (pass ε and -ε for symmetric differences)."""
    flat, unravel = ravel_pytree(params)
    steps = jnp.concatenate([jnp.zeros(1, flat.dtype), epsilons.astype(flat.dtype)])

    def loss_at(delta: jax.Array) -> jax.Array:
        return objective(unravel(flat + delta), inputs)

    deltas = steps[None, :, None] * directions[:, None, :]
    return jax.vmap(jax.vmap(loss_at))(deltas)


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


# --------------------------------------------------------------------------------------------------
# results
# --------------------------------------------------------------------------------------------------


def _group(values: np.ndarray, gap: float) -> list[tuple[float, int]]:
    """(mean, count) of runs of `values` (in their order) within `gap` of the run's first value."""
    groups: list[list[float]] = []
    for value in values:
        if groups and abs(value - groups[-1][0]) <= gap:
            groups[-1].append(float(value))
        else:
            groups.append([float(value)])
    return [(float(np.mean(g)), len(g)) for g in groups]


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class Eigenpairs:
    """The k wanted eigenpairs of the Hessian at `point`, most wanted first (largest: descending;
    smallest: ascending), each with its residual certificate ||H v - λ v|| (a fresh exact HVP).

    `spectrum_min` and `spectrum_max` are the ends of the spectrum (dense: exact; Lanczos: the
    extreme Ritz values seen, which lie inside [λ_min, λ_max]), `scale` the larger in magnitude.
    `converged` is False when Lanczos stopped at max_restarts before certifying the k values.
    """

    point: Point
    which: str
    values: np.ndarray
    vectors: list[PyTree]
    flat_vectors: np.ndarray
    residuals: np.ndarray
    method: str
    spectrum_min: float
    spectrum_max: float
    converged: bool
    num_hvps: int
    runs: int
    tol: float
    gradient: gradient.Gradient | None = None  # the dense path's, computed with the Hessian

    @property
    def scale(self) -> float:
        """The spectral scale max|λ| (Lanczos: a lower bound, the largest |Ritz value| seen)."""
        return max(abs(self.spectrum_min), abs(self.spectrum_max))

    @property
    def finite(self) -> bool:
        """Every value and residual is a finite number (no NaN from a non-finite Hessian)."""
        return bool(np.all(np.isfinite(self.values)) and np.all(np.isfinite(self.residuals)))

    def multiplicity_tol(self, rtol: float | None = None) -> float:
        """The absolute gap under which two values are one eigenvalue: rtol * scale."""
        if rtol is not None:
            _checks.check_real("rtol", rtol, low=0, meaning="a gap relative to the scale")
        rtol = multiplicity_rtol(self.values.dtype) if rtol is None else rtol
        return rtol * self.scale

    def multiplicities(self, rtol: float | None = None) -> list[tuple[float, int]]:
        """[(eigenvalue, multiplicity)], most wanted first: values within `multiplicity_tol`
        of a group's first value are one eigenvalue. A group at the end may be cut by k."""
        if not self.finite:
            raise ValueError("multiplicities are undefined: the eigenvalues are not finite.")
        return _group(self.values, self.multiplicity_tol(rtol))

    def describe(self, rtol: float | None = None) -> str:
        """Method, scale, each value with its residual, the multiplicities and convergence."""
        dim = self.flat_vectors.shape[1]
        how = (
            "dense (numpy eigh of the exact Hessian)"
            if self.method == "dense"
            else f"thick-restarted Lanczos with deflation on exact HVPs ({self.runs} runs, "
            f"{self.num_hvps} HVPs)"
        )
        lines = [
            f"Eigenpairs at {self.point.name or '<unnamed point>'}  (D = {dim}, "
            f"{self.values.dtype}): the {self.values.size} {self.which}, {how}",
        ]
        if not self.finite:
            return "\n".join(lines + ["  non-finite Hessian-vector products: no eigenpairs."])
        exact = "exact" if self.method == "dense" else "largest |Ritz value| seen"
        lines += [
            f"  spectral scale max|λ| = {self.scale:.6g} ({exact})",
            f"  {'#':>3}  {'λ':>15}  {'||Hv - λv||':>12}",
        ]
        for i, (value, res) in enumerate(zip(self.values, self.residuals, strict=True)):
            lines.append(f"  {i + 1:>3}  {value:>15.9g}  {res:>12.2e}")
        groups = ", ".join(f"{v:.9g} x{n}" for v, n in self.multiplicities(rtol))
        lines.append(
            f"  multiplicities (within {self.multiplicity_tol(rtol):.2g} = rtol * scale): {groups}"
        )
        if self.method == "lanczos":
            lines.append(
                f"  converged: every value accepted at residual <= {self.tol:.2g} * scale"
                if self.converged
                else "  NOT converged: max_restarts reached before the k values were certified "
                "(raise num_iters or max_restarts)"
            )
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (
            f"Eigenpairs({self.point.name!r}, {self.which}, k={self.values.size}, "
            f"method={self.method!r})"
        )


# --------------------------------------------------------------------------------------------------
# eigenpairs
# --------------------------------------------------------------------------------------------------


def _check_arguments(
    points: list[Point],
    k: int,
    which: str,
    dense_below: int,
    num_iters: int | None,
    tol: float | None,
    max_restarts: int | None,
) -> None:
    _checks.check_int("k", k, 1, "the number of eigenpairs")
    _checks.check_choice("which", which, WHICH)
    _checks.check_int("dense_below", dense_below, 0, "the largest D solved densely")
    if num_iters is not None:
        _checks.check_int("num_iters", num_iters, 1, "Lanczos steps per run")
    if tol is not None:
        _checks.check_real("tol", tol, low=0, low_open=True, meaning="relative Ritz residual")
    if max_restarts is not None:
        _checks.check_int("max_restarts", max_restarts, 1, "the most Lanczos runs")
    dim = points[0].num_params
    if k > dim:
        raise ValueError(
            f"k = {k}: must be at most D = {dim}, the number of parameters of "
            f"{points[0].name or 'the point'}."
        )


def _wanted_order(values: np.ndarray, which: str) -> np.ndarray:
    """Indices of `values`, most wanted first (stable)."""
    return np.argsort(-values if which == "largest" else values, kind="stable")


def _certified(
    point: Point,
    which: str,
    values: np.ndarray,
    flat_vectors: np.ndarray,
    method: str,
    extremes: tuple[float, float],
    lanczos: tuple[bool, int, int, float] | None = None,
    gradient: gradient.Gradient | None = None,
) -> Eigenpairs:
    """An Eigenpairs with residuals from fresh exact HVPs (one batched call); `lanczos` is
    (converged, HVPs, runs, tol) for the Lanczos path."""
    objective, inputs = point.shared
    unravel = ravel_pytree(point.params)[1]
    products = np.asarray(hvps(objective, point.params, inputs, jnp.asarray(flat_vectors)))
    residuals = np.linalg.norm(products - values[:, None] * flat_vectors, axis=1)
    vectors = [jax.tree.map(np.asarray, unravel(jnp.asarray(v))) for v in flat_vectors]
    converged, num_hvps, runs, tol = lanczos or (True, flat_vectors.shape[1], 0, 0.0)
    return Eigenpairs(
        point=point,
        which=which,
        values=values,
        vectors=vectors,
        flat_vectors=flat_vectors,
        residuals=residuals,
        method=method,
        spectrum_min=extremes[0],
        spectrum_max=extremes[1],
        converged=converged,
        num_hvps=num_hvps,
        runs=runs,
        tol=tol,
        gradient=gradient,
    )


def _dense(points: list[Point], listed: bool, k: int, which: str) -> list[Eigenpairs]:
    size = max(points[0].num_params, 1)  # dense_below decides; hessian_at still checks memory
    hessians = (
        curvature.hessian_at(points, max_dense_dim=size)
        if listed
        else [curvature.hessian_at(points[0], max_dense_dim=size)]
    )
    out = []
    for point, hessian in zip(points, hessians, strict=True):
        values, vectors = hessian.eigenvalues, hessian.eigenvectors  # NaN when non-finite
        finite = bool(np.all(np.isfinite(values)))
        chosen = _wanted_order(values, which)[:k] if finite else np.arange(k)
        extremes = (float(values[0]), float(values[-1]))  # eigh: ascending
        flat_vectors = vectors[:, chosen].T.copy()
        pair = _certified(
            point, which, values[chosen], flat_vectors, "dense", extremes, None, hessian.gradient
        )
        out.append(pair)
    return out


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


def _lanczos_one(
    point: Point, k: int, which: str, num_iters: int, key: jax.Array, tol: float, runs: int
) -> Eigenpairs:
    """Thick-restarted, deflated Lanczos (module docstring) on one point."""
    flat = np.asarray(ravel_pytree(point.params)[0])
    empty = np.zeros((0, flat.size), flat.dtype)
    state = _Search(np.zeros(0, flat.dtype), empty, empty, empty, np.zeros_like(flat))
    converged, done = False, 0
    while done < runs and not converged:
        subspace = _one_run(point, state, k, num_iters, jax.random.fold_in(key, done))
        done += 1
        if subspace is None:
            return _nan_result(point, which, np.full(k, np.nan, flat.dtype), done, num_iters, tol)
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
    if state.values.size < k:  # fewer than k accepted: fill with the best Ritz pairs, uncertified
        _lock(state, theta[count:], ritz[count:], k - state.values.size, k, which)
    return _certified(
        point, which, state.values, state.vectors, "lanczos", (state.low, state.high),
        (converged, done * num_iters, done, tol),
    )  # fmt: skip


def _nan_result(
    point: Point, which: str, nan: np.ndarray, runs: int, num_iters: int, tol: float
) -> Eigenpairs:
    vectors = np.full((nan.size, point.num_params), np.nan, nan.dtype)
    return Eigenpairs(
        point, which, nan, [], vectors, nan.copy(), "lanczos", float("nan"), float("nan"),
        False, runs * num_iters, runs, tol,
    )  # fmt: skip


def eigenpairs(
    point: Point | Sequence[Point],
    k: int = 6,
    which: str = "smallest",
    *,
    dense_below: int = 3000,
    num_iters: int | None = None,
    key: jax.Array | None = None,
    tol: float | None = None,
    max_restarts: int | None = None,
) -> Any:
    """The k smallest or largest eigenpairs of the Hessian at `point`, with certificates.

    D <= dense_below: dense eigh of the exact Hessian. Above: thick-restarted Lanczos with
    deflation on exact HVPs (module docstring; `num_iters` new Krylov vectors per run, default
    min(D, max(40, 4k)); at most `max_restarts` runs, default 2k + 10; a Ritz pair is accepted at
    residual <= tol * scale, tol default `lanczos_rtol`). Repeated eigenvalues come out with their
    multiplicity. A list of points of one model gives a list (compiled once per model).
    """
    points, listed = point_lib.as_points(point, "eigenpairs")
    _check_arguments(points, k, which, dense_below, num_iters, tol, max_restarts)
    _checks.check_key("key", key)
    dim = points[0].num_params
    if dim <= dense_below:
        results = _dense(points, listed, k, which)
    else:
        dtype = ravel_pytree(points[0].params)[0].dtype
        steps = min(dim, num_iters if num_iters is not None else max(40, 4 * k))
        key = jax.random.key(0) if key is None else key
        tol = lanczos_rtol(dtype) if tol is None else tol
        restarts = 2 * k + 10 if max_restarts is None else max_restarts
        results = [_lanczos_one(p, k, which, steps, key, tol, restarts) for p in points]
    return results if listed else results[0]


# --------------------------------------------------------------------------------------------------
# escape directions
# --------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class EscapeDirections:
    """The negative-curvature directions at a point, each with a second-order check.

    `values`, `flat_vectors`, `vectors`, `residuals`: the eigenpairs with λ < -tol, most negative
    first. `measured[i, j]` = L(θ + ε_j v_i) + L(θ - ε_j v_i) - 2 L(θ), `predicted[i, j]` =
    ε_j² λ_i, `ratios` their quotient: about 1 for small ε at any point, critical or not (odd
    orders cancel; notes/landscape_geometry.md §9). `gradient` judges stationarity.
    """

    eigen: Eigenpairs
    gradient: gradient.Gradient
    tol: float
    tol_rule: str
    values: np.ndarray
    flat_vectors: np.ndarray
    vectors: list[PyTree]
    residuals: np.ndarray
    epsilons: np.ndarray
    measured: np.ndarray
    predicted: np.ndarray

    @property
    def ratios(self) -> np.ndarray:
        """measured / predicted, (directions, epsilons): about 1 for small ε."""
        return self.measured / self.predicted

    @property
    def stationary(self) -> bool:
        """|g| <= sqrt(eps) max(1, |L|) (`Gradient.stationarity_tol`), every number finite."""
        return self.gradient.stationary

    @property
    def num_negative(self) -> int:
        """The number of computed eigenvalues below -tol (at most k)."""
        return int(self.values.size)

    def verdict(self) -> str:
        """ "not stationary (...)" when |g| is not small, before any curvature; else what the
        computed eigenvalues show."""
        g = self.gradient
        if not (g.finite and self.eigen.finite):
            return results.NON_FINITE
        if not g.stationary:
            return (
                f"not stationary (|g| = {g.norm:.3e} > {results.STATIONARITY_RULE} = "
                f"{g.stationarity_tol():.3g}): no curvature verdict"
            )
        n, shown = self.num_negative, self.eigen.values.size
        if n == 0:
            return (
                f"no negative eigenvalue below -tol = -{self.tol:.3g} among the {shown} "
                "smallest: no escape direction"
            )
        at_least = "at least " if n == shown and shown < self.flat_vectors.shape[1] else ""
        count = f"{at_least}{n} negative eigenvalue{'s' * (n != 1)} below -tol = -{self.tol:.3g}"
        if self.eigen.spectrum_max > self.tol:  # a positive eigenvalue exists too
            return f"saddle ({count})"
        return f"not a minimum ({count}; no positive eigenvalue found)"

    def describe(self) -> str:
        """Gradient norm first, then the verdict, then each direction's λ, residual and the
        measured / predicted second-order ratios."""
        g, eigen = self.gradient, self.eigen
        lines = [
            f"Escape directions at {eigen.point.name or '<unnamed point>'}  "
            f"(D = {g.vector.size}, {eigen.method}, {g.vector.dtype})",
            f"  gradient norm  |g| = {g.norm:.3e}  (stationary iff |g| <= "
            f"{results.STATIONARITY_RULE} = {g.stationarity_tol():.3g}); loss {g.loss:.12g}",
            f"  verdict: {self.verdict()}",
        ]
        if not (g.finite and eigen.finite):
            return "\n".join(lines + ["  NaN or inf in the loss, gradient or HVPs: no directions."])
        lines.append(f"  negative means λ < -tol, tol = {self.tol:.3g} ({self.tol_rule})")
        if self.values.size == 0:
            return "\n".join(lines + ["  no negative eigenvalues: nothing to escape along."])
        eps = "  ".join(f"ε={e:.0e}" for e in self.epsilons)
        lines.append(
            f"  {'#':>3}  {'λ':>13}  {'||Hv - λv||':>11}   [L(θ+εv) + L(θ-εv) - 2L(θ)] / (ε² λ):  "
            f"{eps}"
        )
        for i, (value, res) in enumerate(zip(self.values, self.residuals, strict=True)):
            ratios = "  ".join(f"{r:>7.4f}" for r in self.ratios[i])
            lines.append(f"  {i + 1:>3}  {value:>13.7g}  {res:>11.2e}   {'':>16}  {ratios}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"EscapeDirections({self.eigen.point.name!r}, negative={self.num_negative})"


def _check_epsilons(epsilons: object) -> np.ndarray:
    values = _checks.real_array("epsilons", epsilons, scalar=False)
    if values is None or values.ndim != 1 or values.size == 0:
        raise ValueError(f"epsilons = {epsilons!r}: must be a non-empty list of step sizes.")
    if not np.all(np.isfinite(values) & (values > 0)):
        raise ValueError(f"epsilons = {epsilons!r}: every step size must be finite and > 0.")
    return values


def _escape_one(
    eigen: Eigenpairs, gradient: gradient.Gradient | None, tol: float | None, epsilons: np.ndarray
) -> EscapeDirections:
    point = eigen.point
    assert gradient is not None  # escape_directions computes it where the dense path did not
    dtype = eigen.values.dtype
    rule = f"max(1e-9, 1000 eps) * spectral scale {eigen.scale:.4g}" if tol is None else "given"
    tol = negative_rtol(dtype) * eigen.scale if tol is None else tol
    negative = np.flatnonzero(eigen.values < -tol) if eigen.finite else np.zeros(0, int)
    values, flat_vectors = eigen.values[negative], eigen.flat_vectors[negative]
    measured = np.zeros((negative.size, epsilons.size), dtype)
    if negative.size:
        objective, inputs = point.shared
        both = jnp.asarray(np.concatenate([epsilons, -epsilons]))
        losses = np.asarray(
            losses_along(objective, point.params, inputs, jnp.asarray(flat_vectors), both)
        )
        plus, minus = losses[:, 1 : 1 + epsilons.size], losses[:, 1 + epsilons.size :]
        measured = plus + minus - 2 * losses[:, :1]  # odd orders cancel: §9 of the notes
    predicted = epsilons[None, :] ** 2 * values[:, None]
    return EscapeDirections(
        eigen=eigen,
        gradient=gradient,
        tol=float(tol),
        tol_rule=rule,
        values=values,
        flat_vectors=flat_vectors,
        vectors=[eigen.vectors[i] for i in negative],
        residuals=eigen.residuals[negative],
        epsilons=epsilons,
        measured=measured,
        predicted=predicted,
    )


def escape_directions(
    point: Point | Sequence[Point],
    *,
    tol: float | None = None,
    epsilons: Sequence[float] = _DEFAULT_EPSILONS,
    k: int | None = None,
    dense_below: int = 3000,
    num_iters: int | None = None,
    key: jax.Array | None = None,
) -> Any:
    """The eigenvectors of the k smallest eigenvalues (k default min(6, D)) that are negative
    (λ < -tol; tol default max(1e-9, 1000 eps) * spectral scale, or an absolute threshold), each
    checked at second order by L(θ + ε v) + L(θ - ε v) - 2 L(θ) against ε² λ for each ε, which
    holds off a critical point too (notes/landscape_geometry.md §9); the gradient judges
    stationarity first. A list of points of one model gives a list."""
    points, listed = point_lib.as_points(point, "escape_directions")
    if tol is not None:
        _checks.check_real("tol", tol, low=0, meaning="an absolute eigenvalue threshold")
    steps = _check_epsilons(epsilons)
    k = min(6, points[0].num_params) if k is None else k
    target = points if listed else points[0]
    found = eigenpairs(target, k, "smallest", dense_below=dense_below, num_iters=num_iters, key=key)
    eigens: list[Eigenpairs] = found if listed else [found]
    gradients: list[Any] = [e.gradient for e in eigens]  # the dense path's, from the Hessian
    if any(g is None for g in gradients):
        gradients = gradient.gradient_at(points) if listed else [gradient.gradient_at(points[0])]
    results = [_escape_one(e, g, tol, steps) for e, g in zip(eigens, gradients, strict=True)]
    return results if listed else results[0]
