"""What the stochastic probes return: the SLQ spectral density (with certified intervals), the
trace and the diagonal estimates, each with its standard error (docs/design/curvature.md)."""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from landscape import _checks
from landscape.point import Names, Point, block_indices
from landscape.probes import results
from landscape.probes.uncertainty import (
    QuadratureWarning,
    cut_weight,
    mean_and_stderr,
    quadrature_bounds,
    rounding,
)


def _label(point: Point) -> str:
    return point.name or "<unnamed point>"


def _matrix_name(matrix: str) -> str:
    """The matrix an estimate is of, as its header names it."""
    return "Gauss-Newton" if matrix == "ggn" else "Hessian"


def _plus_minus(value: float, stderr: float) -> str:
    return f"{value:.6g} ± {stderr:.2g}"


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class SpectralDensity:
    """SLQ estimate of the Hessian's eigenvalue density at a point (of the Gauss-Newton matrix
    G where `matrix` is "ggn").

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
    matrix: str = "hessian"
    basis: str = "full"  # "three": three vectors of D, no reorthogonalisation

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
        return self.point.dtype

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
                    stacklevel=_checks.outside_the_library(),
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
            f"{_matrix_name(self.matrix)} spectral density (SLQ) at {_label(self.point)}  "
            f"(D = {self.dim})",
            f"  {self.num_probes} {kind} probes x {self.num_iters} Lanczos steps"
            + ("" if self.basis == "full" else " in three vectors of D (no reorthogonalisation)"),
        ]
        if not self.finite:
            bad = int(np.sum(~np.all(np.isfinite(self.nodes), axis=1)))
            return "\n".join(lines + [f"  {bad} probe(s) met NaN or inf HVPs: no density."])
        low, high = float(self.nodes.min()), float(self.nodes.max())
        tol = results.default_tol(np.asarray([low, high]), self.dtype)  # the point's precision
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
        tol = results.default_tol(np.asarray([low, high]), self.dtype)  # the point's precision
        negative = (np.nan, np.nan) if not self.finite else self._mass(-np.inf, -tol)
        interval = (np.nan, np.nan) if not self.finite else self.mass_interval(-np.inf, -tol)
        return results.point_row(
            self.point,
            self.dim,
            self.dtype,
            probes=self.num_probes,
            iterations=self.num_iters,
            **results.fields(self, "probe matrix basis"),
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
    """A stochastic estimate of tr(H) at a point (tr(G), the Gauss-Newton matrix's, where
    `matrix` is "ggn"), with its standard error.

    Hutch++: `exact_part` is tr(Q^T H Q) on the sketched range Q and `stderr` is the standard error
    of the Hutchinson part on its complement (given Q); Hutchinson: exact_part is 0. `samples`
    are the Hutchinson part's per-probe forms g^T H g (value = exact_part + their mean), so
    estimates from the same probes pair up (`paired_difference`).
    """

    point: Point
    value: float
    stderr: float
    method: str
    num_probes: int
    dim: int
    exact_part: float
    matrix: str = "hessian"
    samples: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))

    def paired_difference(self, other: TraceEstimate) -> tuple[float, float]:
        """(this trace - other's, its standard error) from the probes' paired samples: two
        Hutchinson estimates of one key (tr H - tr G at a point, or a trace at two points)."""
        if not (self.method == other.method == "hutchinson"):
            raise ValueError(
                "paired_difference: pair two Hutchinson estimates of one key, trace(..., "
                "method='hutchinson', key=key): Hutch++'s sketches differ from matrix to matrix."
            )
        if self.samples.shape != other.samples.shape:
            raise ValueError(
                f"paired_difference: {self.samples.size} probes against {other.samples.size}: "
                "give both estimates the same num_probes and key."
            )
        scale = np.mean(np.abs(self.samples)) + np.mean(np.abs(other.samples))
        mean, stderr = mean_and_stderr(
            self.samples - other.samples, rounding(self.point.dtype, self.dim, scale)
        )
        return float(mean), float(stderr)

    def describe(self) -> str:
        lines = [
            f"{_matrix_name(self.matrix)} trace at {_label(self.point)}  (D = {self.dim})",
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
            self.point.dtype,
            trace=self.value,
            trace_stderr=self.stderr,
            **results.fields(self, "exact_part method matrix"),
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
            self.point.dtype,
            probes=self.num_probes,
            max_abs_diagonal=float(np.max(np.abs(self.values), initial=0.0)),
            max_stderr=float(np.max(self.stderr, initial=0.0)),
            finite=self.finite,
        )

    def __repr__(self) -> str:
        return f"DiagonalEstimate({self.point.name!r}, D={self.values.size})"


def _check_interval(lo: float, hi: float) -> None:
    _checks.check_real("lo", lo, finite=False, meaning="the interval's lower end")
    _checks.check_real("hi", hi, finite=False, meaning="the interval's upper end")
    if hi < lo:
        raise ValueError(f"hi = {hi:g} is below lo = {lo:g}: give an interval lo <= hi.")
