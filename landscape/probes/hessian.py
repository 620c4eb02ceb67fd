"""The dense Hessian as a result: named blocks, its spectrum, the kind of point it shows (with
the near-stationary check where the gradient is not small) and its focus block's report."""

from __future__ import annotations

import dataclasses
import functools
import itertools
from typing import Any

import numpy as np

from landscape.point import BlockName, Names, Point, block_indices
from landscape.probes.gradient import Gradient
from landscape.probes.results import (
    NO_SPECTRUM,
    NON_FINITE,
    Curvature,
    Ends,
    check_tol,
    counts,
    curvature_kind,
    default_tol,
    fields,
    format_numbers,
    header_lines,
    name_width,
    nonfinite_lines,
    nonfinite_matrix_blocks,
    point_row,
    spectrum_lines,
    verdict_lines,
    verdict_sentence,
)
from landscape.probes.stationarity import (
    NearStationary,
    check_grad_tol,
    check_rtol,
    near_stationary,
)


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class FocusReport(Ends):
    """The spectrum of a Hessian's focus block (`meta["focus_blocks"]`, e.g. the alpha block of
    Thm 2) and the largest |entry| in its other rows and columns. `eigenvalues` are NaN when the
    block holds a non-finite entry (`finite` False); `outside` is NaN when a row outside it does."""

    point: Point
    names: list[str]
    eigenvalues: np.ndarray
    outside: float
    finite: bool

    def _ascending(self) -> np.ndarray:
        return self.eigenvalues

    def describe(self) -> str:
        return (
            f"focus block ({', '.join(self.names)}) at {self.point.name or '<unnamed point>'}: "
            f"eigenvalues {format_numbers(self.eigenvalues)}; max |H| outside {self.outside:.3g}"
        )

    def summary(self) -> dict[str, Any]:
        return point_row(
            self.point,
            self.eigenvalues.size,
            self.eigenvalues.dtype,
            focus="+".join(self.names),
            **fields(self, "lambda_min lambda_max outside finite"),
        )

    def __repr__(self) -> str:
        return f"FocusReport({'+'.join(self.names)}, λ_min={self.lambda_min:.4g})"


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class Hessian(Ends):
    """The dense Hessian at a point (symmetrised), with named blocks and a cached spectrum."""

    matrix: np.ndarray
    names: Names
    point: Point
    gradient: Gradient
    _near: dict = dataclasses.field(default_factory=dict, init=False, repr=False, compare=False)

    def block(self, a: BlockName, b: BlockName | None = None) -> np.ndarray:
        """The (a, b) block; b defaults to a; each may be a name or a list of names."""
        rows = block_indices(self.names, a)
        cols = rows if b is None else block_indices(self.names, b)
        return self.matrix[np.ix_(rows, cols)]

    @property
    def finite(self) -> bool:
        """Every Hessian entry, the gradient and the loss are finite (no NaN, no inf)."""
        return bool(np.all(np.isfinite(self.matrix)) and self.gradient.finite)

    def nonfinite_blocks(self) -> dict[str, str]:
        """{"a" or "a × b": "n NaN, m inf"} for the blocks holding non-finite entries."""
        return nonfinite_matrix_blocks(self.matrix, self.names)

    @functools.cached_property
    def _eigh(self) -> tuple[np.ndarray, np.ndarray]:
        if not np.all(np.isfinite(self.matrix)):  # eigh on NaN/inf raises or returns garbage
            nan = np.full(self.matrix.shape, np.nan, self.matrix.dtype)
            return nan[0].copy(), nan
        return np.linalg.eigh(self.matrix)

    @functools.cached_property
    def _block_extremes(self) -> dict[str, tuple[float, float] | None]:
        """{leaf: (λ_min, λ_max) of its diagonal block}, None where the block is non-finite."""
        return {
            leaf: block_extremes(self.matrix[s, s])
            if np.all(np.isfinite(self.matrix[s, s]))
            else None
            for leaf, s, _ in self.names
        }

    @property
    def eigenvalues(self) -> np.ndarray:
        """Ascending; all NaN (not computed) when the matrix has a non-finite entry."""
        return self._eigh[0]

    @property
    def eigenvectors(self) -> np.ndarray:
        """Columns, in the order of `eigenvalues`; all NaN when the matrix is non-finite."""
        return self._eigh[1]

    def _require_finite(self, what: str) -> None:
        if not np.all(np.isfinite(self.matrix)):
            blocks = "; ".join(f"{b}: {c}" for b, c in self.nonfinite_blocks().items())
            raise ValueError(
                f"{what} is undefined: the Hessian has NaN or inf entries ({blocks}), "
                "so its eigenvalues are not computed (verdict 'non-finite')."
            )

    def tolerance(self, tol: float | None = None) -> float:
        """`tol` if given, else the default relative tolerance (module docstring); NaN for a
        non-finite matrix."""
        check_tol(tol)
        return default_tol(self.eigenvalues, self.matrix.dtype) if tol is None else tol

    def num_negative(self, tol: float | None = None) -> int:
        self._require_finite("num_negative")
        return int(np.sum(self.eigenvalues < -self.tolerance(tol)))

    def num_zero(self, tol: float | None = None) -> int:
        self._require_finite("num_zero")
        return int(np.sum(np.abs(self.eigenvalues) <= self.tolerance(tol)))

    def num_positive(self, tol: float | None = None) -> int:
        self._require_finite("num_positive")
        return int(np.sum(self.eigenvalues > self.tolerance(tol)))

    def _ascending(self) -> np.ndarray:
        return self.eigenvalues

    def kind(self, tol: float | None = None, grad_tol: float | None = None) -> Curvature:
        """What the Hessian shows (`Curvature`): NON_FINITE; where |g| > grad_tol (default
        `Gradient.stationarity_tol`), the kind of the quadratic model's critical point when
        `near_stationary` trusts it, else NOT_STATIONARY; at a stationary point the kind of the
        spectrum, a focus block positive definite with zero elsewhere a MINIMUM
        (docs/design/curvature.md, notes/landscape_geometry.md §9)."""
        check_tol(tol)
        check_grad_tol(grad_tol)
        if not self.finite:
            return Curvature.NON_FINITE
        if not self._stationary(grad_tol):
            return self.near_stationary(tol, grad_tol).kind()
        tol = self.tolerance(tol)
        if self._focus_minimum(tol):
            return Curvature.MINIMUM
        return curvature_kind(self.eigenvalues, tol)

    def _stationary(self, grad_tol: float | None) -> bool:
        bound = self.gradient.stationarity_tol() if grad_tol is None else grad_tol
        return self.gradient.norm <= bound

    def verdict(self, tol: float | None = None, grad_tol: float | None = None) -> str:
        """`kind()` as a sentence, with the counts, the bound or the near-stationary check that
        decided it."""
        kind = self.kind(tol, grad_tol)
        if kind is Curvature.NON_FINITE:
            return NON_FINITE
        if not self._stationary(grad_tol):
            return self.near_stationary(tol, grad_tol).verdict()
        tol = self.tolerance(tol)
        focus = self._focus_minimum(tol)
        if focus:
            return (
                f"local minimum (PSD: positive definite on {', '.join(focus.names)}, zero "
                f"elsewhere; {self.point.meta.get('flat_argument', 'flat directions unchecked')})"
            )
        return verdict_sentence(self.eigenvalues, tol)

    def _focus_minimum(self, tol: float) -> FocusReport | None:
        """The focus report when it proves a minimum: no negative eigenvalue, the focus block
        positive definite and nothing outside it (the flat directions argued in meta)."""
        focus = self.focus_report(tol)
        if (
            focus
            and self.num_negative(tol) == 0
            and focus.lambda_min > tol
            and focus.outside <= tol
        ):
            return focus
        return None

    def near_stationary(
        self, tol: float | None = None, grad_tol: float | None = None, rtol: float | None = None
    ) -> NearStationary:
        """The Newton step to the critical point of the quadratic model in the non-flat
        directions, the loss there against the model's prediction, and that critical point's
        curvature (notes/landscape_geometry.md §9); `rtol` the model's allowed relative error."""
        tol = self.tolerance(tol)
        check_grad_tol(grad_tol)
        rtol = check_rtol(rtol)
        self._require_finite("near_stationary")
        key = (tol, grad_tol, rtol)
        if key not in self._near:
            eigen = (self.eigenvalues, self.eigenvectors)
            self._near[key] = near_stationary(
                self.point, self.matrix, eigen, self.gradient, tol, grad_tol, rtol
            )
        return self._near[key]

    def focus_report(self, tol: float | None = None) -> FocusReport | None:
        """The focus block's spectrum and the largest |entry| outside it (None without
        `meta["focus_blocks"]`)."""
        check_tol(tol)
        return self._focus

    @functools.cached_property
    def _focus(self) -> FocusReport | None:
        """`focus_report`'s numbers, computed once (they do not depend on the tolerance)."""
        names = self.point.meta.get("focus_blocks")
        if not names:
            return None
        inside = block_indices(self.names, list(names))
        outside = np.setdiff1d(np.arange(self.matrix.shape[0]), inside)
        block = self.matrix[np.ix_(inside, inside)]
        finite = bool(np.all(np.isfinite(block)))
        eigenvalues = (
            np.linalg.eigvalsh(block) if finite else np.full(inside.size, np.nan, self.matrix.dtype)
        )
        rows = self.matrix[outside]
        rest = (
            (np.abs(rows).max() if np.all(np.isfinite(rows)) else np.nan) if outside.size else 0.0
        )
        return FocusReport(self.point, list(names), eigenvalues, float(rest), finite)

    def summary(self, tol: float | None = None, grad_tol: float | None = None) -> dict[str, Any]:
        """One row: the point, D, dtype, kind, whether the point is stationary ("exact", "near"
        with its critical point `critical_distance` away, or "no"; "non-finite" with a NaN
        distance where the loss, gradient or Hessian is not finite), loss, gradient norm, the
        extreme eigenvalues, the negative, zero and positive counts at the tolerance."""
        kind = self.kind(tol, grad_tol)
        near = (
            None
            if not self.finite or self._stationary(grad_tol)
            else self.near_stationary(tol, grad_tol)
        )
        stationary = "exact" if near is None else ("near" if near.trusted else "no")
        # NaN where no critical point is located (a non-finite loss, gradient or Hessian)
        distance = np.nan if not self.finite else (0.0 if near is None else near.distance)
        tol = self.tolerance(tol)
        finite_matrix = bool(np.all(np.isfinite(self.matrix)))
        negative, zero, positive = (
            counts(self.eigenvalues, tol) if finite_matrix else (np.nan, np.nan, np.nan)
        )
        return point_row(
            self.point,
            self.matrix.shape[0],
            self.matrix.dtype,
            kind=kind.value,
            stationary=stationary if self.finite else "non-finite",
            critical_distance=distance,
            loss=self.gradient.loss,
            grad_norm=self.gradient.norm,
            lambda_min=self.lambda_min,
            lambda_max=self.lambda_max,
            num_negative=negative,
            num_zero=zero,
            num_positive=positive,
            tol=tol,
            finite=self.finite,
        )

    def describe(self, tol: float | None = None, grad_tol: float | None = None) -> str:
        """Loss, gradient norm, per-block eigenvalues and norms, spectrum, the near-stationary
        check where |g| > grad_tol, verdict and prediction."""
        tol = self.tolerance(tol)
        check_grad_tol(grad_tol)
        width = name_width(self.names)
        lines = header_lines("Hessian", self.gradient, self.matrix.dtype)
        lines += [
            "",
            "diagonal blocks",
            f"  {'name':<{width}}{'shape':<14}{'λ_min':>13}{'λ_max':>13}{'‖·‖_F':>13}",
        ]
        for leaf, s, shape in self.names:
            extremes = self._block_extremes[leaf]
            ends = ("non-finite", "") if extremes is None else [f"{e:.5g}" for e in extremes]
            row = f"  {leaf:<{width}}{str(shape):<14}{ends[0]:>13}{ends[1]:>13}"
            lines.append(f"{row}{np.linalg.norm(self.matrix[s, s]):>13.5g}")
        if not self.finite:
            lines += [""] + nonfinite_lines(self.gradient, self.nonfinite_blocks())
            lines += [
                "",
                (
                    NO_SPECTRUM
                    if not np.all(np.isfinite(self.matrix))
                    else "the Hessian is finite but the parameters, loss or gradient are not, "
                    "so no curvature verdict is given"
                )
                + ".",
            ]
            lines += [""] + verdict_lines(self.verdict(), self.point)
            return "\n".join(lines)
        coupled = [
            (a, b, np.linalg.norm(self.matrix[sa, sb]))
            for (a, sa, _), (b, sb, _) in itertools.combinations(self.names, 2)
        ]
        coupled = [(a, b, norm) for a, b, norm in coupled if norm > tol]
        lines += ["", "off-diagonal blocks with ‖·‖_F > tol"]
        lines += [f"  {a} × {b}: {norm:.5g}" for a, b, norm in coupled] or ["  none"]
        focus = self.focus_report(tol)
        if focus:
            lines += [
                "",
                f"focus block ({', '.join(focus.names)})",
                f"  eigenvalues  {format_numbers(focus.eigenvalues)}",
            ]
            if "focus_prediction" in self.point.meta:
                lines.append(
                    f"  predicted    {format_numbers(self.point.meta['focus_prediction'])}"
                )
            lines.append(
                f"  max |H| outside the focus block (rows and columns): {focus.outside:.3g}"
            )
        lines += [""] + spectrum_lines(self.eigenvalues, tol, "spectrum")
        if not self._stationary(grad_tol):
            lines += [""] + self.near_stationary(tol, grad_tol).describe().splitlines()
        lines += [""] + verdict_lines(self.verdict(tol, grad_tol), self.point)
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (
            f"Hessian({self.point.name!r}, D={self.matrix.shape[0]}, dtype={self.matrix.dtype}, "
            f"kind={self.kind().value!r})"
        )


LANCZOS_BLOCKS_ABOVE = 512  # a larger diagonal block's extremes come from ARPACK, not eigvalsh


def block_extremes(block: np.ndarray) -> tuple[float, float]:
    """(λ_min, λ_max) of a symmetric block: eigvalsh up to LANCZOS_BLOCKS_ABOVE rows; above,
    ARPACK's Lanczos to machine precision (tol=0, faster: docs/performance.md), eigvalsh again
    should ARPACK not converge."""
    if block.shape[0] <= LANCZOS_BLOCKS_ABOVE:
        values = np.linalg.eigvalsh(block)
        return float(values[0]), float(values[-1])
    # scipy ships no type stubs here; imported where needed (0.8 s): large blocks only
    import scipy.sparse.linalg  # type: ignore[import-untyped]  # no stubs installed

    try:
        low, high = (
            float(scipy.sparse.linalg.eigsh(block, 1, which=w, tol=0, return_eigenvectors=False)[0])
            for w in ("SA", "LA")
        )
    except scipy.sparse.linalg.ArpackNoConvergence:
        values = np.linalg.eigvalsh(block)
        return float(values[0]), float(values[-1])
    return low, high
