"""Stochastic estimates of the Hessian's spectrum, trace and diagonal at a Point, from HVPs alone.

spectral_density (stochastic Lanczos quadrature), trace (Hutchinson or Hutch++) and diagonal
(Hutchinson), each with its standard error over probes; one compiled, vmapped program per call,
shared by every point of one model. Details: docs/design/curvature.md.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, cast, overload

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from landscape import _checks
from landscape.point import Point, as_points, block_indices, param_names
from landscape.probes import compiled, results
from landscape.probes.lanczos import lanczos_from
from landscape.probes.uncertainty import (
    QuadratureWarning,
    cut_weight,
    mean_and_stderr,
    quadrature_bounds,
    rounding,
)
from landscape.typing import PyTree

if TYPE_CHECKING:  # matplotlib loads only when a figure is drawn
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

ProbeKind = Literal["rademacher", "gaussian"]
TraceMethod = Literal["hutchinson", "hutch++"]
Names = list[tuple[str, slice, tuple[int, ...]]]


# ---------------------------------------------------------------- compiled programs


def _probes(key: jax.Array, kind: str, num: int, dim: int, dtype: Any) -> jax.Array:
    """(num, dim) probes: Rademacher signs, or Gaussian vectors scaled to norm sqrt(dim)."""
    if kind == "rademacher":
        return jax.random.rademacher(key, (num, dim), dtype)
    gaussian = jax.random.normal(key, (num, dim), dtype)
    return gaussian * (math.sqrt(dim) / jnp.linalg.norm(gaussian, axis=1, keepdims=True))


def _slq_one(
    objective: compiled.Objective,
    num_probes: int,
    num_iters: int,
    probe: str,
    key: jax.Array,
    params: PyTree,
    inputs: PyTree,
) -> tuple[jax.Array, jax.Array]:
    flat = ravel_pytree(params)[0]
    matvec = compiled.flat_hvp(objective, params, inputs)
    probe_key, restart_key = jax.random.split(key)
    starts = _probes(probe_key, probe, num_probes, flat.size, flat.dtype)
    restart_keys = jax.random.split(restart_key, num_probes)
    return jax.vmap(lambda v, k: lanczos_from(matvec, v, num_iters, k))(starts, restart_keys)


@functools.partial(
    jax.jit, static_argnames=("objective", "num_probes", "num_iters", "probe", "batched")
)
def slq_program(
    objective: compiled.Objective,
    params: PyTree,
    inputs: PyTree,
    key: jax.Array,
    num_probes: int,
    num_iters: int,
    probe: str,
    batched: bool,
) -> tuple[jax.Array, jax.Array]:
    """(alphas (P, m), betas (P, m - 1)): Lanczos from each of P probes, one vmapped program."""
    body = functools.partial(_slq_one, objective, num_probes, num_iters, probe, key)
    return compiled.maybe_batched(body, batched, params, inputs)


def _quadratic_forms(matvec: Callable, vectors: jax.Array) -> jax.Array:
    return jnp.sum(vectors * jax.vmap(matvec)(vectors), axis=1)


def _trace_one(
    objective: compiled.Objective,
    num_probes: int,
    method: str,
    key: jax.Array,
    params: PyTree,
    inputs: PyTree,
) -> tuple[jax.Array, jax.Array]:
    """(exact part, Hutchinson samples): the trace estimate is exact + mean(samples)."""
    flat = ravel_pytree(params)[0]
    matvec = compiled.flat_hvp(objective, params, inputs)
    dim, dtype = flat.size, flat.dtype
    if method == "hutchinson":
        probes = _probes(key, "rademacher", num_probes, dim, dtype)
        return jnp.zeros((), dtype), _quadratic_forms(matvec, probes)
    sketch_key, probe_key = jax.random.split(key)
    rank = num_probes // 3
    sketch = jax.vmap(matvec)(_probes(sketch_key, "rademacher", rank, dim, dtype))  # (k, D)
    basis = jnp.linalg.qr(sketch.T)[0]  # (D, k), orthonormal columns
    exact = jnp.sum(_quadratic_forms(matvec, basis.T))  # tr(Q^T H Q)
    probes = _probes(probe_key, "rademacher", num_probes - 2 * rank, dim, dtype)
    rest = probes - (probes @ basis) @ basis.T  # (I - Q Q^T) g
    return exact, _quadratic_forms(matvec, rest)


@functools.partial(jax.jit, static_argnames=("objective", "num_probes", "method", "batched"))
def trace_program(
    objective: compiled.Objective,
    params: PyTree,
    inputs: PyTree,
    key: jax.Array,
    num_probes: int,
    method: str,
    batched: bool,
) -> tuple[jax.Array, jax.Array]:
    """(exact part, samples) of a Hutchinson or Hutch++ trace estimate, num_probes HVPs."""
    body = functools.partial(_trace_one, objective, num_probes, method, key)
    return compiled.maybe_batched(body, batched, params, inputs)


def _diagonal_one(
    objective: compiled.Objective, num_probes: int, key: jax.Array, params: PyTree, inputs: PyTree
) -> jax.Array:
    flat = ravel_pytree(params)[0]
    matvec = compiled.flat_hvp(objective, params, inputs)
    probes = _probes(key, "rademacher", num_probes, flat.size, flat.dtype)
    return probes * jax.vmap(matvec)(probes)


@functools.partial(jax.jit, static_argnames=("objective", "num_probes", "batched"))
def diagonal_program(
    objective: compiled.Objective,
    params: PyTree,
    inputs: PyTree,
    key: jax.Array,
    num_probes: int,
    batched: bool,
) -> jax.Array:
    """Samples v * Hv (P, D) of Hutchinson's diagonal estimator, one vmapped program."""
    body = functools.partial(_diagonal_one, objective, num_probes, key)
    return compiled.maybe_batched(body, batched, params, inputs)


# ---------------------------------------------------------------- results


def _check_interval(lo: float, hi: float) -> None:
    _checks.check_real("lo", lo, finite=False, meaning="the interval's lower end")
    _checks.check_real("hi", hi, finite=False, meaning="the interval's upper end")
    if hi < lo:
        raise ValueError(f"hi = {hi:g} is below lo = {lo:g}: give an interval lo <= hi.")


def _dtype(point: Point) -> np.dtype:
    """The dtype the point's HVPs are computed in (the rounding of every sample)."""
    return np.dtype(ravel_pytree(point.params)[0].dtype)


def _label(point: Point) -> str:
    return point.name or "<unnamed point>"


def _plus_minus(value: float, stderr: float) -> str:
    return f"{value:.6g} ± {stderr:.2g}"


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class SpectralDensity:
    """SLQ estimate of the Hessian's eigenvalue density at a point.

    `nodes` and `weights` have shape (num_probes, num_iters): per probe, the Ritz values
    (ascending) and the Gauss quadrature weights (squared first components of the Ritz vectors,
    summing to 1), so probe i estimates the density as sum_j weights[i, j] delta(λ - nodes[i, j]);
    the estimate is their mean over probes. A probe whose HVPs were NaN or inf has NaN nodes.
    """

    point: Point
    nodes: np.ndarray
    weights: np.ndarray
    dim: int
    probe: str

    @property
    def num_probes(self) -> int:
        return int(self.nodes.shape[0])

    @property
    def num_iters(self) -> int:
        return int(self.nodes.shape[1])

    @property
    def finite(self) -> bool:
        return bool(np.all(np.isfinite(self.nodes)))

    @property
    def dtype(self) -> np.dtype:
        return _dtype(self.point)

    def density(self, grid: np.ndarray, sigma: float) -> np.ndarray:
        """The density smoothed by a Gaussian kernel of width `sigma`, on `grid` (it integrates
        to about 1 over a grid covering the nodes +- a few sigma)."""
        _checks.check_real("sigma", sigma, low=0, low_open=True, meaning="the kernel width")
        _checks.check_real("grid", grid, scalar=False, meaning="eigenvalues to evaluate at")
        x = np.asarray(grid, np.float64)
        z = (x[..., None, None] - self.nodes) / sigma
        kernel = np.exp(-0.5 * z**2) / (sigma * math.sqrt(2 * math.pi))
        return np.sum(kernel * self.weights, axis=(-2, -1)) / self.num_probes

    def mass_per_probe(self, lo: float, hi: float) -> np.ndarray:
        """Each probe's estimate of the fraction of eigenvalues in [lo, hi] (num_probes,)."""
        _check_interval(lo, hi)
        inside = (self.nodes >= lo) & (self.nodes <= hi)
        return np.sum(np.where(inside, self.weights, 0.0), axis=1)

    def mass(self, lo: float, hi: float) -> tuple[float, float]:
        """(fraction of eigenvalues in [lo, hi], its standard error over probes, floored at the
        weights' rounding); times `dim` it estimates their number. A QuadratureWarning says when
        lo or hi cuts Ritz nodes (`uncertainty.cut_weight`) carrying more than that error: then
        `mass_interval` is the range to quote."""
        value, stderr = self._mass(lo, hi)
        for name, end in (("lo", lo), ("hi", hi)):
            weight = cut_weight(self.nodes, self.weights, end)
            if weight > max(stderr, 1.0 / self.dim):
                low, high = self.mass_interval(lo, hi)
                warnings.warn(
                    f"mass({lo:g}, {hi:g}) = {value:.3g} ± {stderr:.2g}: {name} = {end:g} cuts "
                    f"Ritz nodes carrying {weight:.3g} of the spectrum (mean over probes), whose "
                    f"side of it {self.num_iters} Lanczos steps do not resolve; "
                    f"mass_interval({lo:g}, {hi:g}) = [{low:.3g}, {high:.3g}] covers it.",
                    QuadratureWarning,
                    stacklevel=2,
                )
        return value, stderr

    def _mass(self, lo: float, hi: float) -> tuple[float, float]:
        floor = rounding(self.dtype, self.num_iters, 1.0)  # weights sum to 1
        value, stderr = mean_and_stderr(self.mass_per_probe(lo, hi), floor)
        return float(value), float(stderr)

    def mass_bounds_per_probe(self, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
        """Each probe's certified range (lower, upper), (num_probes,) each, for its own spectral
        measure's mass in [lo, hi]: what its Gauss rule guarantees, whatever the eigenvalues
        between the nodes (`quadrature_bounds`)."""
        _check_interval(lo, hi)
        return quadrature_bounds(self.nodes, self.weights, lo, hi)

    def mass_interval(self, lo: float, hi: float, z: float = 2.0) -> tuple[float, float]:
        """A range for the fraction of eigenvalues in [lo, hi] that covers the quadrature's
        error (certified per probe) and the probes' sampling (z standard errors of the mean
        bounds): wider than `mass` +- stderr where a threshold cuts a cluster the Lanczos steps
        cannot resolve, which `mass` alone cannot show."""
        _checks.check_real("z", z, low=0, meaning="the standard errors of sampling to cover")
        lower, upper = self.mass_bounds_per_probe(lo, hi)
        (low, low_se), (high, high_se) = mean_and_stderr(lower), mean_and_stderr(upper)
        return max(0.0, float(low - z * low_se)), min(1.0, float(high + z * high_se))

    def describe(self) -> str:
        kind = "Rademacher" if self.probe == "rademacher" else "normalised Gaussian"
        lines = [
            f"Hessian spectral density (SLQ) at {_label(self.point)}  (D = {self.dim})",
            f"  {self.num_probes} {kind} probes x {self.num_iters} Lanczos steps",
        ]
        if not self.finite:
            bad = int(np.sum(~np.all(np.isfinite(self.nodes), axis=1)))
            return "\n".join(lines + [f"  {bad} probe(s) met NaN or inf HVPs: no density."])
        low, high = float(self.nodes.min()), float(self.nodes.max())
        tol = max(1e-9, 100 * float(np.finfo(np.float64).eps)) * max(abs(low), abs(high))
        lines.append(f"  Ritz values in [{low:.6g}, {high:.6g}]")
        for label, lo, hi in (
            ("λ < -tol  ", -np.inf, -tol),
            ("|λ| <= tol", -tol, tol),
            ("λ > tol   ", tol, np.inf),
        ):
            value, stderr = self._mass(lo, hi)  # the interval beside it says the rest
            low, high = self.mass_interval(lo, hi)
            count = (
                f"≈ {value * self.dim:.1f} ± {stderr * self.dim:.1f} eigenvalues, "
                f"{low * self.dim:.1f}-{high * self.dim:.1f} with the quadrature's error"
            )
            lines.append(f"  fraction {label} {_plus_minus(value, stderr)}  ({count})")
        lines.append(f"  (tol = {tol:.3g}, relative to the largest |Ritz value|)")
        return "\n".join(lines)

    def summary(self) -> dict[str, Any]:
        """One row: the point, D, the probes and steps, the Ritz values' range, and the
        estimated number of eigenvalues below -tol (relative to the largest |Ritz value|) with
        its standard error and its range with the quadrature's error (`mass_interval`)."""
        nodes = self.nodes[np.all(np.isfinite(self.nodes), axis=1)]
        low, high = (float(nodes.min()), float(nodes.max())) if nodes.size else (np.nan, np.nan)
        tol = max(1e-9, 100 * float(np.finfo(np.float64).eps)) * max(abs(low), abs(high))
        negative = (np.nan, np.nan) if not self.finite else self.mass(-np.inf, -tol)
        interval = (np.nan, np.nan) if not self.finite else self.mass_interval(-np.inf, -tol)
        return results.point_row(
            self.point,
            self.dim,
            self.nodes.dtype,
            probes=self.num_probes,
            iterations=self.num_iters,
            probe=self.probe,
            lambda_min=low,
            lambda_max=high,
            num_negative=negative[0] * self.dim,
            num_negative_stderr=negative[1] * self.dim,
            num_negative_low=interval[0] * self.dim,
            num_negative_high=interval[1] * self.dim,
            tol=tol,
            finite=self.finite,
        )

    def __repr__(self) -> str:
        return (
            f"SpectralDensity({self.point.name!r}, D={self.dim}, probes={self.num_probes}, "
            f"iters={self.num_iters})"
        )


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class TraceEstimate:
    """A stochastic estimate of tr(H) at a point, with its standard error.

    Hutch++: `exact_part` is tr(Q^T H Q) on the sketched range Q and `stderr` is the standard error
    of the Hutchinson part on its complement (given Q); Hutchinson: exact_part is 0.
    """

    point: Point
    value: float
    stderr: float
    method: str
    num_probes: int
    dim: int
    exact_part: float

    def describe(self) -> str:
        lines = [
            f"Hessian trace at {_label(self.point)}  (D = {self.dim})",
            f"  trace      {_plus_minus(self.value, self.stderr)}  "
            f"({self.method}, {self.num_probes} HVPs)",
            f"  mean λ     {_plus_minus(self.value / self.dim, self.stderr / self.dim)}",
        ]
        if self.method == "hutch++":
            lines.append(f"  of which {self.exact_part:.6g} exactly on the sketched range")
        return "\n".join(lines)

    @property
    def finite(self) -> bool:
        return bool(np.isfinite(self.value) and np.isfinite(self.stderr))

    def summary(self) -> dict[str, Any]:
        """One row: the point, D, the trace with its standard error, the method and its HVPs."""
        return results.point_row(
            self.point,
            self.dim,
            np.asarray(self.value).dtype,
            trace=self.value,
            trace_stderr=self.stderr,
            exact_part=self.exact_part,
            method=self.method,
            num_hvps=self.num_probes,
            finite=self.finite,
        )

    def __repr__(self) -> str:
        return f"TraceEstimate({self.point.name!r}, {self.value:.6g} ± {self.stderr:.2g})"


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class DiagonalEstimate:
    """Hutchinson's estimate of diag(H) at a point: `values` and `stderr` (D,), labelled by
    parameter names (`names`, as in landscape.param_names); `block_traces` holds each leaf's
    (trace, standard error), the stderr from the per-probe block sums."""

    point: Point
    values: np.ndarray
    stderr: np.ndarray
    names: Names
    num_probes: int
    block_traces: dict[str, tuple[float, float]]

    def block(self, name: str | Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(values, stderr) of the named block (a name, or a list of names: concatenated)."""
        index = block_indices(self.names, name)
        return self.values[index], self.stderr[index]

    def describe(self) -> str:
        width = max([len("name")] + [len(leaf) for leaf, _, _ in self.names]) + 2
        lines = [
            f"Hessian diagonal (Hutchinson) at {_label(self.point)}  "
            f"(D = {self.values.size}, {self.num_probes} Rademacher probes)",
            f"  {'name':<{width}}{'size':>6}  {'block trace':>22}  {'max |diag|':>11}",
        ]
        for leaf, s, _ in self.names:
            value, stderr = self.block_traces[leaf]
            top = float(np.max(np.abs(self.values[s]), initial=0.0))
            trace = _plus_minus(value, stderr)
            lines.append(f"  {leaf:<{width}}{s.stop - s.start:>6}  {trace:>22}  {top:>11.4g}")
        return "\n".join(lines)

    @property
    def finite(self) -> bool:
        return bool(np.all(np.isfinite(self.values)) and np.all(np.isfinite(self.stderr)))

    def summary(self) -> dict[str, Any]:
        """One row: the point, D, the probes, the largest |diagonal entry| and the largest
        standard error of an entry (`trace` estimates the trace with its own error)."""
        return results.point_row(
            self.point,
            self.values.size,
            self.values.dtype,
            probes=self.num_probes,
            max_abs_diagonal=float(np.max(np.abs(self.values), initial=0.0)),
            max_stderr=float(np.max(self.stderr, initial=0.0)),
            finite=self.finite,
        )

    def __repr__(self) -> str:
        return f"DiagonalEstimate({self.point.name!r}, D={self.values.size})"


# ---------------------------------------------------------------- public functions


def _arguments(points: list[Point], listed: bool) -> tuple[Any, PyTree, PyTree]:
    if listed:
        return compiled.stack(points)
    objective, inputs = points[0].shared
    return objective, points[0].params, inputs


def _check_probes(num_probes: object, low: int, what: str) -> int:
    return _checks.check_int("num_probes", num_probes, low, what)


def _key(key: jax.Array | None) -> jax.Array:
    _checks.check_key("key", key)
    return jax.random.key(0) if key is None else key


def _quadrature(alphas: np.ndarray, betas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights (P, m) from each probe's tridiagonal T; NaN rows where T is not finite."""
    alphas, betas = alphas.astype(np.float64), betas.astype(np.float64)
    good = np.all(np.isfinite(alphas), axis=1) & np.all(np.isfinite(betas), axis=1)
    m = alphas.shape[1]
    tridiagonal = np.zeros(alphas.shape + (m,))
    rows = np.arange(m)
    tridiagonal[:, rows, rows] = np.where(good[:, None], alphas, 0.0)
    tridiagonal[:, rows[:-1], rows[1:]] = np.where(good[:, None], betas, 0.0)
    tridiagonal[:, rows[1:], rows[:-1]] = tridiagonal[:, rows[:-1], rows[1:]]
    nodes, vectors = np.linalg.eigh(tridiagonal)
    weights = vectors[:, 0, :] ** 2
    nodes[~good], weights[~good] = np.nan, np.nan
    return nodes, weights


@overload
def spectral_density(
    point: Point,
    num_probes: int = 16,
    num_iters: int = 30,
    key: jax.Array | None = None,
    probe: ProbeKind = "rademacher",
) -> SpectralDensity: ...


@overload
def spectral_density(
    point: Sequence[Point],
    num_probes: int = 16,
    num_iters: int = 30,
    key: jax.Array | None = None,
    probe: ProbeKind = "rademacher",
) -> list[SpectralDensity]: ...


def spectral_density(
    point: Point | Sequence[Point],
    num_probes: int = 16,
    num_iters: int = 30,
    key: jax.Array | None = None,
    probe: ProbeKind = "rademacher",
) -> SpectralDensity | list[SpectralDensity]:
    """The Hessian's eigenvalue density by stochastic Lanczos quadrature: `num_probes` probes
    (Rademacher, or normalised Gaussian, drawn from `key`, default jax.random.key(0)), each
    `num_iters` Lanczos steps (1 <= num_iters <= D), all in one compiled call. A list of points of
    one model gives a list, from one call."""
    points, listed = as_points(point, "spectral_density")
    num_probes = _check_probes(num_probes, 2, "SLQ probes; two or more for a standard error")
    dim = points[0].num_params
    num_iters = _checks.check_int(
        "num_iters", num_iters, 1, f"Lanczos steps, at most D = {dim}", high=dim
    )
    _checks.check_choice("probe", probe, ("rademacher", "gaussian"))
    objective, params, inputs = _arguments(points, listed)
    alphas, betas = slq_program(
        objective, params, inputs, _key(key), num_probes, num_iters, probe, listed
    )
    alphas, betas = np.asarray(alphas), np.asarray(betas)
    if not listed:
        return SpectralDensity(points[0], *_quadrature(alphas, betas), dim, probe)
    return [
        SpectralDensity(p, *_quadrature(alphas[i], betas[i]), dim, probe)
        for i, p in enumerate(points)
    ]


@overload
def trace(
    point: Point, num_probes: int = 32, key: jax.Array | None = None, method: str = "hutch++"
) -> TraceEstimate: ...


@overload
def trace(
    point: Sequence[Point],
    num_probes: int = 32,
    key: jax.Array | None = None,
    method: str = "hutch++",
) -> list[TraceEstimate]: ...


def trace(
    point: Point | Sequence[Point],
    num_probes: int = 32,
    key: jax.Array | None = None,
    method: str = "hutch++",
) -> TraceEstimate | list[TraceEstimate]:
    """tr(H) from `num_probes` HVPs in one compiled call: method="hutchinson" (Rademacher probes,
    num_probes >= 2) or "hutch++" (num_probes // 3 to sketch the range, as many on it, the rest
    for Hutchinson on its complement; num_probes >= 4). A list of points gives a list.

    The stderr is the spread of the Hutchinson samples: with few of them (under ~10) it can badly
    understate the error (Hutch++ with 12 HVPs at tied theta_pi: 0.657 ± 1e-17 for 0.805)."""
    points, listed = as_points(point, "trace")
    _checks.check_choice("method", method, ("hutchinson", "hutch++"))
    low = 2 if method == "hutchinson" else 4
    num_probes = _check_probes(
        num_probes, low, f"HVPs; {method} needs {low} or more for a standard error"
    )
    objective, params, inputs = _arguments(points, listed)
    exact, samples = trace_program(objective, params, inputs, _key(key), num_probes, method, listed)
    exact, samples = np.asarray(exact, np.float64), np.asarray(samples, np.float64)
    dim = points[0].num_params

    def estimate(p: Point, exact_part: np.ndarray, row: np.ndarray) -> TraceEstimate:
        scale = abs(exact_part) + np.mean(np.abs(row))  # sums of D products each
        mean, stderr = mean_and_stderr(row, rounding(_dtype(p), dim, scale))
        value = float(exact_part + mean)
        return TraceEstimate(p, value, float(stderr), method, num_probes, dim, float(exact_part))

    if not listed:
        return estimate(points[0], exact, samples)
    return [estimate(p, exact[i], samples[i]) for i, p in enumerate(points)]


def _diagonal_estimate(point: Point, samples: np.ndarray) -> DiagonalEstimate:
    dtype, dim = _dtype(point), samples.shape[1]  # each sample sums D products
    values, stderr = mean_and_stderr(samples, rounding(dtype, dim, np.abs(samples).mean(0)))
    names = param_names(point.params)
    traces = {}
    for leaf, s, _ in names:
        sums = samples[:, s].sum(axis=1)
        mean, err = mean_and_stderr(sums, rounding(dtype, dim, np.abs(sums).mean()))
        traces[leaf] = (float(mean), float(err))
    return DiagonalEstimate(point, values, stderr, names, samples.shape[0], traces)


@overload
def diagonal(
    point: Point, num_probes: int = 32, key: jax.Array | None = None
) -> DiagonalEstimate: ...


@overload
def diagonal(
    point: Sequence[Point], num_probes: int = 32, key: jax.Array | None = None
) -> list[DiagonalEstimate]: ...


def diagonal(
    point: Point | Sequence[Point], num_probes: int = 32, key: jax.Array | None = None
) -> DiagonalEstimate | list[DiagonalEstimate]:
    """diag(H) by Hutchinson's estimator, the mean of v * Hv over `num_probes` >= 2 Rademacher
    probes (one compiled call), with per-entry standard errors and named blocks. A list of points
    of one model gives a list."""
    points, listed = as_points(point, "diagonal")
    num_probes = _check_probes(num_probes, 2, "Rademacher probes; two or more for a stderr")
    objective, params, inputs = _arguments(points, listed)
    samples = np.asarray(
        diagonal_program(objective, params, inputs, _key(key), num_probes, listed), np.float64
    )
    if not listed:
        return _diagonal_estimate(points[0], samples)
    return [_diagonal_estimate(p, samples[i]) for i, p in enumerate(points)]


def density_figure(
    density: SpectralDensity,
    ax: Axes | None = None,
    *,
    sigma: float | None = None,
    num_grid: int = 1000,
    log_scale: bool = True,
) -> Figure:
    """A plot of the smoothed SLQ density (Gaussian kernel of width `sigma`, default 1% of the
    Ritz values' range) on a new figure or on `ax`; a log density axis by default. Returns the
    figure (save it with landscape.engine.plotting.save)."""
    from landscape.engine import plotting

    if not isinstance(density, SpectralDensity):
        raise TypeError(
            f"density_figure expects a SpectralDensity (from spectral_density); got "
            f"{type(density).__name__}."
        )
    if not density.finite:
        raise ValueError("density_figure: the density has NaN nodes (non-finite HVPs).")
    num_grid = _checks.check_int("num_grid", num_grid, 2, "grid points")
    low, high = float(density.nodes.min()), float(density.nodes.max())
    if sigma is None:
        sigma = 0.01 * (high - low) or 1e-3 * max(1.0, abs(high))
    _checks.check_real("sigma", sigma, low=0, low_open=True, meaning="the kernel width")
    grid = np.linspace(low - 4 * sigma, high + 4 * sigma, num_grid)
    values = density.density(grid, sigma)
    if ax is None:
        fig, axes = plotting.subplots(1, 1, width=4.5, height=3.0)
        ax = axes[0, 0]
    else:
        fig = cast("Figure", ax.get_figure(root=True))
    ax.plot(grid, values, linewidth=1.2)
    if log_scale:
        ax.set_yscale("log")
        top = max(float(values.max()), np.finfo(np.float64).tiny)
        ax.set_ylim(bottom=top * 1e-7, top=top * 3)
    ax.set_xlabel("eigenvalue λ")
    ax.set_ylabel("density")
    ax.set_title(
        f"{density.point.name or 'Hessian'} (SLQ, {density.num_probes}x{density.num_iters})",
        fontsize=8,
    )
    fig.tight_layout()
    return fig
