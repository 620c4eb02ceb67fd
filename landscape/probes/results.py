"""What every probe result shares: the curvature kinds, the verdict rule and the text helpers.

A result has `point`, `finite`, `describe()` (text for a person), `summary()` (a flat dict: one
row of a pandas table), a one-line repr and, where it judges, `kind()` (a `Curvature`) beside
its `verdict()` sentence. The verdict rules: docs/design/curvature.md.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
from jax.typing import DTypeLike

from landscape import _checks
from landscape.point import Names, Point, params_table

NON_FINITE = "non-finite"


STATIONARITY_RULE = "sqrt(eps) max(1, |L|)"


_NO_SPECTRUM = (
    "eigenvalues not computed: a matrix with NaN or inf entries has no meaningful "
    "spectrum, so no curvature verdict is given (look for log(0), sqrt or log of a "
    "negative number, 0/0 or overflow in the loss at these parameters)"
)


def _check_tol(tol: float | None) -> None:
    if tol is not None:
        _checks.check_real(
            "tol", tol, low=0, meaning="an absolute eigenvalue threshold; None for the default"
        )


def _count_nonfinite(values: np.ndarray) -> str:
    nan = int(np.sum(np.isnan(values)))
    inf = int(np.sum(np.isinf(values)))
    return ", ".join(part for part in (f"{nan} NaN" * bool(nan), f"{inf} inf" * bool(inf)) if part)


def _nonfinite_vector_blocks(vector: np.ndarray, names: Names) -> dict[str, str]:
    """{leaf name: "2 NaN, 1 inf"} for the leaves of a flat vector holding non-finite entries."""
    return {
        leaf: _count_nonfinite(vector[s])
        for leaf, s, _ in names
        if not np.all(np.isfinite(vector[s]))
    }


def _nonfinite_matrix_blocks(matrix: np.ndarray, names: Names) -> dict[str, str]:
    """{"a" or "a × b": counts} for the (upper-triangular) blocks holding non-finite entries."""
    out = {}
    for i, (a, sa, _) in enumerate(names):
        for b, sb, _ in names[i:]:
            block = matrix[sa, sb]
            if not np.all(np.isfinite(block)):
                out[a if a == b else f"{a} × {b}"] = _count_nonfinite(block)
    return out


def _nonfinite_lines(
    gradient: Any, matrix_blocks: dict[str, str] | None = None, matrix_label: str = "Hessian"
) -> list[str]:
    """Where the non-finite numbers are: the loss, the gradient's blocks, the matrix's blocks."""
    lines = ["non-finite entries (NaN or inf)"]
    if not np.isfinite(gradient.loss):
        lines.append(f"  loss: {gradient.loss}")
    for leaf, counts in gradient.nonfinite_blocks().items():
        lines.append(f"  gradient block {leaf}: {counts}")
    for block, counts in (matrix_blocks or {}).items():
        lines.append(f"  {matrix_label} block {block}: {counts}")
    return lines


def _default_tol(eigenvalues: np.ndarray, dtype: DTypeLike) -> float:
    relative = max(1e-9, 100 * float(np.finfo(dtype).eps))
    return relative * float(np.max(np.abs(eigenvalues), initial=0.0))


def _verdict(eigenvalues: np.ndarray, tol: float) -> str:
    negative = int(np.sum(eigenvalues < -tol))
    positive = int(np.sum(eigenvalues > tol))
    zero = eigenvalues.size - negative - positive
    zero_modes = f"{zero} zero mode{'s' * (zero != 1)}"
    if negative and positive:
        return f"saddle ({negative} negative eigenvalue{'s' * (negative != 1)})"
    if negative:
        if zero:
            return f"degenerate maximum candidate (negative semi-definite with {zero_modes})"
        return "local maximum (negative definite)"
    if zero:
        return f"degenerate minimum candidate (positive semi-definite with {zero_modes})"
    return "local minimum (positive definite)"


def _not_stationary(gradient: Any, grad_tol: float | None = None) -> str:
    rule, bound = (
        (STATIONARITY_RULE, gradient.stationarity_tol())
        if grad_tol is None
        else ("grad_tol", grad_tol)
    )
    return (
        f"not stationary (|g| = {gradient.norm:.3e} > {rule} = {bound:.3g}): no curvature "
        "verdict at a point that is not critical"
    )


def _name_width(names: Names) -> int:
    return max([len("name")] + [len(leaf) for leaf, _, _ in names]) + 2


def _numbers(values: Iterable[float]) -> str:
    return "  ".join(f"{v: .6g}" for v in values)


def _header(kind: str, gradient: Any, dtype: DTypeLike) -> list[str]:
    point = gradient.point
    loss_line = f"  loss           {gradient.loss:.12g}"
    expected = point.meta.get("expected_loss")
    if expected is not None:
        loss_line += f"   (expected {expected:.12g}, difference {gradient.loss - expected:.2e})"
    return [
        f"{kind} at {point.name or '<unnamed point>'}  (D = {gradient.vector.size}, {dtype})",
        loss_line,
        f"  gradient norm  {gradient.norm:.3e}",
        "",
        *("  " + line for line in params_table(point.params).splitlines()),
    ]


def _spectrum_lines(values: np.ndarray, tol: float, label: str) -> list[str]:
    negative = int(np.sum(values < -tol))
    positive = int(np.sum(values > tol))
    lines = [
        f"{label}: min {values[0]:.6g}, max {values[-1]:.6g}; negative {negative}, "
        f"zero {values.size - negative - positive}, positive {positive}  "
        f"(|λ| <= tol = {tol:.3g} counts as zero)"
    ]
    if values.size <= 10:
        return lines + [f"  all       {_numbers(values)}"]
    return lines + [f"  smallest  {_numbers(values[:5])}", f"  largest   {_numbers(values[-5:])}"]


def _verdict_lines(measured: str, point: Point) -> list[str]:
    lines = [f"verdict (measured)   {measured}"]
    if "prediction" in point.meta:
        lines.append(f"prediction (theory)  {point.meta['prediction']}")
    return lines
