"""What every probe result shares: the curvature kinds, the verdict rule and the text helpers.

A result has `point`, `finite`, `describe()` (text for a person), `summary()` (a flat dict: one
row of a pandas table), a one-line repr and, where it judges, `kind()` (a `Curvature`) beside
its `verdict()` sentence. The verdict rules: docs/design/curvature.md.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable

import numpy as np
from jax.typing import DTypeLike

from landscape import _checks
from landscape.point import Names, Point, params_table


class Curvature(str, enum.Enum):
    """What a probe concludes about a point: the `kind()` beside a result's `verdict()` sentence.
    A str enum, so `summary()` rows and pandas show its value ("saddle", ...)."""

    MINIMUM = "minimum"  # positive definite (or PSD with its flat directions accounted for)
    DEGENERATE_MINIMUM = "degenerate minimum"  # positive semi-definite with zero modes
    SADDLE = "saddle"  # negative and positive eigenvalues
    MAXIMUM = "maximum"  # negative definite
    DEGENERATE_MAXIMUM = "degenerate maximum"  # negative semi-definite with zero modes
    STATIONARY = "stationary"  # a critical point whose curvature was not examined
    NOT_STATIONARY = "not stationary"  # the gradient is not small: no curvature verdict
    NON_FINITE = "non-finite"  # NaN or inf in the loss, gradient or curvature
    INCONCLUSIVE = "inconclusive"  # the probe cannot decide (e.g. Lanczos found no negative)

    def __str__(self) -> str:
        return self.value


@runtime_checkable
class Result(Protocol):
    """What every probe result gives: the point it judges, whether its numbers are finite, text
    for a person and one flat row of plain numbers and strings (`pandas.DataFrame(rows)`)."""

    @property
    def point(self) -> Point: ...

    @property
    def finite(self) -> bool: ...

    def describe(self) -> str: ...

    def summary(self) -> dict[str, Any]: ...


class Ends:
    """`lambda_min` and `lambda_max` of a result whose values `_ascending()` are sorted: its
    eigenvalues (NaN where not computed), or Ritz values, which lie inside the spectrum."""

    def _ascending(self) -> np.ndarray:
        raise NotImplementedError

    @property
    def lambda_min(self) -> float:
        """The smallest value (a Ritz value: an upper bound of the smallest eigenvalue)."""
        return float(self._ascending()[0])

    @property
    def lambda_max(self) -> float:
        """The largest value (a Ritz value: a lower bound of the largest eigenvalue)."""
        return float(self._ascending()[-1])


NON_FINITE = Curvature.NON_FINITE.value


STATIONARITY_RULE = "sqrt(eps) max(1, |L|)"


NO_SPECTRUM = (
    "eigenvalues not computed: a matrix with NaN or inf entries has no meaningful "
    "spectrum, so no curvature verdict is given (look for log(0), sqrt or log of a "
    "negative number, 0/0 or overflow in the loss at these parameters)"
)


def check_tol(tol: float | None) -> None:
    if tol is not None:
        _checks.check_real(
            "tol", tol, low=0, meaning="an absolute eigenvalue threshold; None for the default"
        )


def count_nonfinite(values: np.ndarray) -> str:
    nan = int(np.sum(np.isnan(values)))
    inf = int(np.sum(np.isinf(values)))
    return ", ".join(part for part in (f"{nan} NaN" * bool(nan), f"{inf} inf" * bool(inf)) if part)


def nonfinite_vector_blocks(vector: np.ndarray, names: Names) -> dict[str, str]:
    """{leaf name: "2 NaN, 1 inf"} for the leaves of a flat vector holding non-finite entries."""
    return {
        leaf: count_nonfinite(vector[s])
        for leaf, s, _ in names
        if not np.all(np.isfinite(vector[s]))
    }


def nonfinite_matrix_blocks(matrix: np.ndarray, names: Names) -> dict[str, str]:
    """{"a" or "a × b": counts} for the (upper-triangular) blocks holding non-finite entries."""
    out = {}
    for i, (a, sa, _) in enumerate(names):
        for b, sb, _ in names[i:]:
            block = matrix[sa, sb]
            if not np.all(np.isfinite(block)):
                out[a if a == b else f"{a} × {b}"] = count_nonfinite(block)
    return out


def nonfinite_lines(
    gradient: Any, matrix_blocks: dict[str, str] | None = None, matrix_label: str = "Hessian"
) -> list[str]:
    """Where the non-finite numbers are: the parameters, the loss, the gradient's blocks, the
    matrix's blocks."""
    lines = ["non-finite entries (NaN or inf)"]
    for leaf, counts in getattr(gradient, "nonfinite_params", {}).items():
        lines.append(f"  parameter {leaf}: {counts} (no landscape to judge there)")
    if not np.isfinite(gradient.loss):
        lines.append(f"  loss: {gradient.loss}")
    for leaf, counts in gradient.nonfinite_blocks().items():
        lines.append(f"  gradient block {leaf}: {counts}")
    for block, counts in (matrix_blocks or {}).items():
        lines.append(f"  {matrix_label} block {block}: {counts}")
    return lines


def default_tol(eigenvalues: np.ndarray, dtype: DTypeLike) -> float:
    relative = max(1e-9, 100 * float(np.finfo(dtype).eps))
    return relative * float(np.max(np.abs(eigenvalues), initial=0.0))


def counts(eigenvalues: np.ndarray, tol: float) -> tuple[int, int, int]:
    """(negative, zero, positive): eigenvalues below -tol, within tol of 0, above tol."""
    negative = int(np.sum(eigenvalues < -tol))
    positive = int(np.sum(eigenvalues > tol))
    return negative, eigenvalues.size - negative - positive, positive


def curvature_kind(eigenvalues: np.ndarray, tol: float) -> Curvature:
    """The kind of a critical point with these Hessian eigenvalues (|λ| <= tol counts as 0)."""
    negative, zero, positive = counts(eigenvalues, tol)
    if negative and positive:
        return Curvature.SADDLE
    if negative:
        return Curvature.DEGENERATE_MAXIMUM if zero else Curvature.MAXIMUM
    return Curvature.DEGENERATE_MINIMUM if zero else Curvature.MINIMUM


def verdict_sentence(eigenvalues: np.ndarray, tol: float) -> str:
    """`curvature_kind` in words, with the counts that decided it."""
    negative, zero, _ = counts(eigenvalues, tol)
    zero_modes = f"{zero} zero mode{'s' * (zero != 1)}"
    return {
        Curvature.SADDLE: f"saddle ({negative} negative eigenvalue{'s' * (negative != 1)})",
        Curvature.DEGENERATE_MAXIMUM: "degenerate maximum candidate (negative semi-definite "
        f"with {zero_modes})",
        Curvature.MAXIMUM: "local maximum (negative definite)",
        Curvature.DEGENERATE_MINIMUM: "degenerate minimum candidate (positive semi-definite "
        f"with {zero_modes})",
        Curvature.MINIMUM: "local minimum (positive definite)",
    }[curvature_kind(eigenvalues, tol)]


def not_stationary(gradient: Any, grad_tol: float | None = None) -> str:
    rule, bound = (
        (STATIONARITY_RULE, gradient.stationarity_tol())
        if grad_tol is None
        else ("grad_tol", grad_tol)
    )
    return (
        f"not stationary (|g| = {gradient.norm:.3e} > {rule} = {bound:.3g}): no curvature "
        "verdict at a point that is not critical"
    )


def name_width(names: Names) -> int:
    return max([len("name")] + [len(leaf) for leaf, _, _ in names]) + 2


def format_numbers(values: Iterable[float]) -> str:
    return "  ".join(f"{v: .6g}" for v in values)


def header_lines(kind: str, gradient: Any, dtype: DTypeLike) -> list[str]:
    point = gradient.point
    loss_line = f"  loss           {gradient.loss:.12g}"
    expected = point.meta.get("expected_loss")
    if expected is not None:
        loss_line += f"   (expected {expected:.12g}, difference {gradient.loss - expected:.2e})"
    return [
        f"{kind} at {point.name or '<unnamed point>'}  (D = {point.num_params}, {dtype})",
        loss_line,
        f"  gradient norm  {gradient.norm:.3e}",
        "",
        *("  " + line for line in params_table(point.params).splitlines()),
    ]


def spectrum_lines(values: np.ndarray, tol: float, label: str) -> list[str]:
    negative, zero, positive = counts(values, tol)
    lines = [
        f"{label}: min {values[0]:.6g}, max {values[-1]:.6g}; negative {negative}, "
        f"zero {zero}, positive {positive}  "
        f"(|λ| <= tol = {tol:.3g} counts as zero)"
    ]
    if values.size <= 10:
        return lines + [f"  all       {format_numbers(values)}"]
    return lines + [
        f"  smallest  {format_numbers(values[:5])}",
        f"  largest   {format_numbers(values[-5:])}",
    ]


def verdict_lines(measured: str, point: Point) -> list[str]:
    lines = [f"verdict (measured)   {measured}"]
    if "prediction" in point.meta:
        lines.append(f"prediction (theory)  {point.meta['prediction']}")
    return lines


def plain(value: Any) -> Any:
    """A number or string as plain Python (numpy scalars and 0-d arrays unwrapped)."""
    if isinstance(value, np.generic) or (isinstance(value, np.ndarray) and value.ndim == 0):
        return value.item()
    return value


def point_row(point: Point, dim: int, dtype: DTypeLike, **fields: Any) -> dict[str, Any]:
    """A summary row: the point's name, its plain meta entries (p, q, seed, prediction, ...),
    D and the dtype, then `fields` (which win over a meta entry of the same name)."""
    row: dict[str, Any] = {"point": point.name}
    for key, value in point.meta.items():
        if isinstance(value, bool | int | float | str | np.generic):
            row[key] = plain(value)
    row.update(dim=int(dim), dtype=str(np.dtype(dtype)))
    row.update({key: plain(value) for key, value in fields.items()})
    return row


def fields(result: object, names: str) -> dict[str, Any]:
    """{name: result.name} for each of the space-separated `names`: the summary columns a result
    holds under their own names."""
    return {name: getattr(result, name) for name in names.split()}
