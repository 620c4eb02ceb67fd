"""What `eigenpairs` returns: `Eigenpairs`, the k wanted eigenpairs of the Hessian (or of the
Gauss-Newton matrix) with their residual certificates, and the default tolerances they are judged
by (docs/design/curvature.md, "Tolerances")."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np

from landscape import _checks, trees
from landscape.point import Point
from landscape.probes import gradient, results
from landscape.typing import PyTree


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
    """The k wanted eigenpairs of the Hessian at `point` (of G where `matrix` is "ggn"), most
    wanted first (largest: descending; smallest: ascending), each with its residual certificate
    ||H v - λ v|| (a fresh exact product).

    `spectrum_min` and `spectrum_max` are the ends of the spectrum (dense: exact; Lanczos: the
    extreme Ritz values seen, which lie inside [λ_min, λ_max]), `scale` the larger in magnitude.
    `converged` is False when Lanczos stopped at max_restarts before certifying the k values.
    `num_hvps_check` of the `num_hvps` products went to the multiplicity check (Lanczos: the
    fresh start, once the k pairs are locked, that looks for a missed copy of a locked value)
    and `num_hvps_residuals` to the candidates' exact residuals outside it (one for each
    certified pair and one for each refused candidate); the rest are Lanczos steps.
    `vectors` are pytrees like the parameters (over a mesh, split as they are); `flat_vectors`
    their host copy.
    """

    point: Point
    which: str
    values: np.ndarray
    vectors: list[PyTree]
    residuals: np.ndarray
    method: str
    spectrum_min: float
    spectrum_max: float
    converged: bool
    num_hvps: int
    runs: int
    tol: float
    gradient: gradient.Gradient | None = None  # the dense path's, computed with the Hessian
    reason: str = ""  # why this method: D against dense_below, or the dense fallback's cause
    matrix: str = "hessian"  # or "ggn": the Gauss-Newton matrix's eigenpairs
    num_hvps_check: int = 0  # of num_hvps, the multiplicity check's (Lanczos)
    num_hvps_residuals: int = 0  # of num_hvps, the candidates' exact residuals (Lanczos)

    @functools.cached_property
    def flat_vectors(self) -> np.ndarray:
        """The vectors as rows (k, D) on the host in `ravel_pytree`'s order. Over a mesh
        `vectors` stay on the devices, split as the parameters; this copies them once, when
        asked."""
        return trees.host_rows(self.vectors, self.point.num_params, self.values.dtype)

    @property
    def scale(self) -> float:
        """The spectral scale max|λ| (Lanczos: a lower bound, the largest |Ritz value| seen)."""
        return max(abs(self.spectrum_min), abs(self.spectrum_max))

    @property
    def lambda_min(self) -> float:
        """The smallest eigenvalue (dense) or the smallest Ritz value seen (Lanczos)."""
        return float(self.spectrum_min)

    @property
    def lambda_max(self) -> float:
        """The largest eigenvalue (dense) or the largest Ritz value seen (Lanczos)."""
        return float(self.spectrum_max)

    def summary(self) -> dict[str, Any]:
        """One row: the point, D, dtype, which and how many, the method, the most and least
        wanted values found, the largest residual, the spectrum's ends, convergence, the
        products, those of the multiplicity check and those of the exact residuals."""
        finite = self.finite and self.values.size > 0
        return results.point_row(
            self.point,
            self.point.num_params,
            self.values.dtype,
            which=self.which,
            k=self.values.size,
            method=self.method,
            matrix=self.matrix,
            first=float(self.values[0]) if finite else np.nan,
            last=float(self.values[-1]) if finite else np.nan,
            max_residual=float(np.max(self.residuals, initial=0.0)),
            **results.fields(
                self,
                "lambda_min lambda_max converged num_hvps num_hvps_check num_hvps_residuals finite",
            ),
        )

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
        dim = self.point.num_params
        method_text = (
            "dense (numpy eigh of the exact Hessian)"
            if self.method == "dense"
            else f"thick-restarted Lanczos with deflation on exact HVPs ({self.runs} runs, "
            f"{self.num_hvps} HVPs, {self.num_hvps_check} of them the multiplicity check and "
            f"{self.num_hvps_residuals} exact residuals)"
        )
        lines = [
            f"Eigenpairs{' of the Gauss-Newton matrix' * (self.matrix == 'ggn')} at "
            f"{self.point.name or '<unnamed point>'}  (D = {dim}, "
            f"{self.values.dtype}): the {self.values.size} {self.which}, {method_text}",
        ] + [f"  method: {self.reason}"] * bool(self.reason)
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
                "(raise ncv or max_restarts)"
            )
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (
            f"Eigenpairs({self.point.name!r}, {self.which}, k={self.values.size}, "
            f"method={self.method!r})"
        )
