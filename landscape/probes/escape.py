"""Escape directions: the negative-curvature eigenpairs at a point, each checked at second order
with symmetric differences, which hold off a critical point (notes/landscape_geometry.md §9)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from landscape import _checks, trees
from landscape import point as point_lib
from landscape.point import Point
from landscape.probes import eigen as eigen_lib
from landscape.probes import gradient, results
from landscape.probes.eigen import Eigenpairs, Progress, negative_rtol
from landscape.typing import PyTree

_DEFAULT_EPSILONS = (1e-3, 3e-3, 1e-2)


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
    vectors: list[PyTree]
    residuals: np.ndarray
    epsilons: np.ndarray
    measured: np.ndarray
    predicted: np.ndarray

    @functools.cached_property
    def flat_vectors(self) -> np.ndarray:
        """The vectors as rows on the host in `ravel_pytree`'s order (copied when asked)."""
        return trees.host_rows(self.vectors, self.point.num_params, self.values.dtype)

    @property
    def ratios(self) -> np.ndarray:
        """measured / predicted, (directions, epsilons): about 1 for small ε."""
        return self.measured / self.predicted

    @property
    def stationary(self) -> bool:
        """|g| <= sqrt(eps) max(1, |L|) (`Gradient.stationarity_tol`), every number finite."""
        return self.gradient.stationary

    @property
    def point(self) -> Point:
        return self.eigen.point

    @property
    def finite(self) -> bool:
        return self.gradient.finite and self.eigen.finite

    def num_negative(self) -> int:
        """The number of computed eigenvalues below -tol (at most k)."""
        return int(self.values.size)

    def kind(self) -> results.Curvature:
        """NON_FINITE, NOT_STATIONARY, SADDLE (a direction below -tol and a positive eigenvalue
        seen); with the k smallest all >= -tol, MINIMUM or DEGENERATE_MINIMUM by the smallest;
        INCONCLUSIVE when negatives were found but no positive eigenvalue."""
        Curvature = results.Curvature
        if not self.finite:
            return Curvature.NON_FINITE
        if not self.gradient.stationary:
            return Curvature.NOT_STATIONARY
        if self.num_negative() == 0:
            zero = self.eigen.values.size and self.eigen.values[0] <= self.tol
            return Curvature.DEGENERATE_MINIMUM if zero else Curvature.MINIMUM
        if self.eigen.spectrum_max > self.tol:
            return Curvature.SADDLE
        return Curvature.INCONCLUSIVE

    def summary(self) -> dict[str, Any]:
        """One row: the point, D, dtype, kind, loss, gradient norm, the directions found, the
        most negative value and its second-order ratio at the smallest epsilon."""
        found = self.values.size > 0
        return results.point_row(
            self.point,
            self.point.num_params,
            self.gradient.dtype,
            kind=self.kind().value,
            loss=self.gradient.loss,
            grad_norm=self.gradient.norm,
            num_negative=self.num_negative(),
            lambda_min=float(self.values[0]) if found else np.nan,
            ratio=float(self.ratios[0, 0]) if found else np.nan,
            tol=self.tol,
            method=self.eigen.method,
            finite=self.finite,
        )

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
        n, shown = self.num_negative(), self.eigen.values.size
        if n == 0:
            return (
                f"no negative eigenvalue below -tol = -{self.tol:.3g} among the {shown} "
                "smallest: no escape direction"
            )
        at_least = "at least " if n == shown and shown < self.point.num_params else ""
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
            f"(D = {eigen.point.num_params}, {eigen.method}, {g.dtype})",
            f"  gradient norm  |g| = {g.norm:.3e}  (stationary iff |g| <= "
            f"{results.STATIONARITY_RULE} = {g.stationarity_tol():.3g}); loss {g.loss:.12g}",
            f"  verdict: {self.verdict()}",
            f"  method: {eigen.reason or eigen.method}",
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
        return (
            f"EscapeDirections({self.eigen.point.name!r}, negative={self.num_negative()}, "
            f"kind={self.kind().value!r})"
        )


def _check_epsilons(epsilons: object) -> np.ndarray:
    values = _checks.real_array("epsilons", epsilons, scalar=False)
    if values is None or values.ndim != 1 or values.size == 0:
        raise ValueError(f"epsilons = {epsilons!r}: must be a non-empty list of step sizes.")
    if not np.all(np.isfinite(values) & (values > 0)):
        raise ValueError(f"epsilons = {epsilons!r}: every step size must be finite and > 0.")
    return values


def _escape_one(
    eigen: Eigenpairs,
    gradient: gradient.Gradient,
    tol: float | None,
    epsilons: np.ndarray,
    losses: np.ndarray | None,
) -> EscapeDirections:
    """The negative pairs of `eigen` and their second-order check from `losses`, the loss
    along every pair's vector at ε = 0, +epsilons and -epsilons (`compiled.losses_along`)."""
    dtype = eigen.values.dtype
    rule = f"max(1e-9, 1000 eps) * spectral scale {eigen.scale:.4g}" if tol is None else "given"
    tol = negative_rtol(dtype) * eigen.scale if tol is None else tol
    negative = np.flatnonzero(eigen.values < -tol) if eigen.finite else np.zeros(0, int)
    values = eigen.values[negative]
    measured = np.zeros((negative.size, epsilons.size), dtype)
    if negative.size and losses is not None:
        chosen = losses[negative]
        plus, minus = chosen[:, 1 : 1 + epsilons.size], chosen[:, 1 + epsilons.size :]
        measured = plus + minus - 2 * chosen[:, :1]  # odd orders cancel: §9 of the notes
    predicted = epsilons[None, :] ** 2 * values[:, None]
    return EscapeDirections(
        eigen=eigen,
        gradient=gradient,
        tol=float(tol),
        tol_rule=rule,
        values=values,
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
    ncv: int | None = None,
    key: jax.Array | None = None,
    progress: Progress = print,
    rtol: float | None = None,
) -> Any:
    """The negative-curvature directions at a point, each checked at second order.

    Each eigenvector of the k smallest eigenvalues with λ < -tol is checked by
    L(θ + ε v) + L(θ - ε v) - 2 L(θ) against ε² λ, which holds off a critical point too
    (notes/landscape_geometry.md §9); the gradient judges stationarity first.

    Args:
        point: a `Point`, or a list of points of one model.
        tol: the eigenvalue threshold (default max(1e-9, 1000 eps) * spectral scale).
        epsilons: the step sizes of the second-order check.
        k: how many of the smallest eigenvalues to examine (default min(6, D)).
        dense_below: as in `eigenpairs`.
        ncv: as in `eigenpairs`.
        key: as in `eigenpairs`.
        progress: as in `eigenpairs`.
        rtol: as in `eigenpairs`: the Lanczos accuracy (default the certified one).

    Returns:
        An `EscapeDirections` (a list for a list of points): the directions, their residuals,
        the measured and predicted changes, `kind()` and `summary()`.
    """
    points, listed = point_lib.as_points(point, "escape_directions")
    if tol is not None:
        _checks.check_real("tol", tol, low=0, meaning="an absolute eigenvalue threshold")
    steps = _check_epsilons(epsilons)
    k = min(6, points[0].num_params) if k is None else k
    search = eigen_lib.settings(
        points, k, "smallest", dense_below, ncv, key, rtol, None, eigen_lib.FALLBACK_BELOW
    )
    both = np.concatenate([steps, -steps])
    found = eigen_lib.solve(points, listed, k, "smallest", search, progress, both)
    results = [
        _escape_one(pairs, pairs.gradient or gradient.gradient_at(pairs.point), tol, steps, losses)
        for pairs, losses in found
    ]
    return results if listed else results[0]
