"""Lanczos on exact Hessian-vector products: `lanczos_spectrum`, the Ritz values at a point
without forming the D x D matrix, on the core's Lanczos and Ritz extraction
(`landscape.core.lanczos`, `landscape.core.ritz`), which every Krylov probe, the tracker and the
engine's Track share."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np

from landscape import _checks
from landscape.core import blocks, data, operator, ritz, sizes
from landscape.core import layout as layout_lib
from landscape.point import Point, check_point
from landscape.probes import preconditioning
from landscape.probes.gradient import Gradient, labelled
from landscape.probes.results import (
    NON_FINITE,
    Curvature,
    Ends,
    check_tol,
    default_tol,
    header_lines,
    nonfinite_lines,
    not_stationary,
    point_row,
    spectrum_lines,
    verdict_lines,
)


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class Spectrum(Ends):
    """Lanczos estimate of the Hessian spectrum at a point (of the Gauss-Newton matrix G where
    `matrix` is "ggn": then it judges nothing, G not being the point's curvature).

    `ritz_values` (ascending) lie inside [λ_min, λ_max] and the extreme ones converge first;
    `weights` (squared first components of the Ritz vectors, summing to 1) make the spectral
    density estimate sum_j weights[j] * delta(λ - ritz_values[j]).
    """

    point: Point
    ritz_values: np.ndarray
    weights: np.ndarray
    gradient: Gradient
    matrix: str = "hessian"

    def _ascending(self) -> np.ndarray:
        return self.ritz_values

    @property
    def finite(self) -> bool:
        """The Ritz values, the gradient and the loss are finite (no NaN, no inf)."""
        return bool(np.all(np.isfinite(self.ritz_values)) and self.gradient.finite)

    def tolerance(self, tol: float | None = None) -> float:
        """`tol` if given, else the default relative tolerance (module docstring)."""
        check_tol(tol)
        return default_tol(self.ritz_values, self.ritz_values.dtype) if tol is None else tol

    def kind(self, tol: float | None = None) -> Curvature:
        """What the Ritz values prove: NON_FINITE, NOT_STATIONARY, SADDLE when one is below -tol
        and one above tol; otherwise INCONCLUSIVE (Ritz values lie inside the spectrum, so they
        never prove a minimum, nor a maximum)."""
        check_tol(tol)
        if not self.finite:
            return Curvature.NON_FINITE
        if self.matrix == "ggn":
            return Curvature.INCONCLUSIVE
        if not self.gradient.stationary:
            return Curvature.NOT_STATIONARY
        tol = self.tolerance(tol)
        if self.lambda_min < -tol and self.lambda_max > tol:
            return Curvature.SADDLE
        return Curvature.INCONCLUSIVE

    def verdict(self, tol: float | None = None) -> str:
        """`kind()` as a sentence: negative curvature found, or what was not found."""
        kind = self.kind(tol)
        if kind is Curvature.NON_FINITE:
            return NON_FINITE
        if self.matrix == "ggn":
            return (
                f"Lanczos on the Gauss-Newton matrix: Ritz values in [{self.lambda_min:.6g}, "
                f"{self.lambda_max:.6g}]; G is not the Hessian, so no verdict on the point"
            )
        if kind is Curvature.NOT_STATIONARY:
            return not_stationary(self.gradient)
        tol = self.tolerance(tol)
        smallest = f"Lanczos: smallest Ritz value λ_min={self.lambda_min:.6g}"
        if self.lambda_min < -tol:
            consequence = "saddle" if kind is Curvature.SADDLE else "not a minimum"
            return f"{smallest}; negative curvature found → {consequence}"
        return (
            f"{smallest}; no negative Ritz value below -{tol:.3g} found (not a proof of a minimum)"
        )

    def summary(self, tol: float | None = None) -> dict[str, Any]:
        """One row: the point, D, dtype, kind, loss, gradient norm, the extreme Ritz values, the
        iterations and the tolerance."""
        kind = self.kind(tol)
        tol = self.tolerance(tol)
        return point_row(
            self.point,
            self.point.num_params,
            self.ritz_values.dtype,
            kind=kind.value,
            matrix=self.matrix,
            loss=self.gradient.loss,
            grad_norm=self.gradient.norm,
            lambda_min=self.lambda_min,
            lambda_max=self.lambda_max,
            iterations=self.ritz_values.size,
            tol=tol,
            finite=self.finite,
        )

    def describe(self, tol: float | None = None) -> str:
        tol = self.tolerance(tol)
        title = "Gauss-Newton" if self.matrix == "ggn" else "Hessian"
        lines = header_lines(f"{title} spectrum (Lanczos)", self.gradient, self.ritz_values.dtype)
        lines += [f"  iterations     {self.ritz_values.size}", ""]
        if not self.finite:
            lines += nonfinite_lines(self.gradient)
            if not np.all(np.isfinite(self.ritz_values)):
                lines.append(
                    "  Hessian-vector products: NaN or inf (the Lanczos tridiagonal "
                    "matrix is non-finite)"
                )
            lines += [
                "",
                "Ritz values not computed: Hessian-vector products with NaN or inf "
                "entries have no meaningful spectrum, so no curvature verdict is given."
                if not np.all(np.isfinite(self.ritz_values))
                else "Ritz values are finite, but the loss or gradient is not, so no curvature "
                "verdict is given.",
            ]
            lines += [""] + verdict_lines(self.verdict(), self.point)
            return "\n".join(lines)
        lines += spectrum_lines(self.ritz_values, tol, "Ritz values")
        lines += [""] + verdict_lines(self.verdict(tol), self.point)
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (
            f"Spectrum({self.point.name!r}, D={self.point.num_params}, "
            f"iterations={self.ritz_values.size}, "
            f"λ in [{self.lambda_min:.4g}, {self.lambda_max:.4g}])"
        )


def lanczos_spectrum(
    point: Point,
    num_iters: int = 100,
    key: jax.Array | None = None,
    progress: blocks.Progress = print,
    matrix: operator.Matrix = "hessian",
    preconditioner: object = None,
    storage: str | None = None,
    finite_difference: float | None = None,
) -> Spectrum:
    """Ritz values of the Hessian (or of the Gauss-Newton matrix) at `point` from Lanczos on
    exact products; no D x D matrix is formed.

    Args:
        point: a `Point`.
        num_iters: Lanczos steps, capped at D; an argument of the program, whose basis holds
            num_iters rounded up to a size class (`core.sizes.basis_rows`: 100 -> 128), so a new
            num_iters of the class compiles nothing.
        key: the start vector's key (default `jax.random.key(0)`, so repeated calls agree).
        progress: a line with the memory the Lanczos basis takes (num_iters x D numbers, full
            reorthogonalisation) when it is a large share of the free memory (None: silent).
        matrix: "hessian", or "ggn" for the Gauss-Newton matrix G = Jᵀ H_z J of a point that
            carries `outputs` and `output_loss` (its Spectrum then gives no verdict).
        preconditioner: None, or a diagonal P (a pytree like the params, or optax Adam's
            state): the Ritz values of P^{-1/2} H P^{-1/2} (`landscape.adam_preconditioner`).
        storage: "bfloat16" keeps the Lanczos basis in bfloat16, the products and sums in the
            point's dtype (`operator.ProductOptions`; None: the point's dtype).
        finite_difference: a step ε > 0 for central differences of the gradient in place of
            the exact products (`operator.finite_difference_operator`; None: exact).

    Returns:
        A `Spectrum`: Ritz values and weights; `kind()` proves a saddle or says inconclusive.
    """
    check_point(point, "lanczos_spectrum")
    if preconditioner is not None:  # the point in P's coordinates (`preconditioning`)
        return preconditioning.through_views(
            "lanczos_spectrum", point, preconditioner,
            lambda view: lanczos_spectrum(
                view, num_iters, key, progress, storage=storage,
                finite_difference=finite_difference,
            ), matrix,
        )  # fmt: skip
    options = operator.product_options(
        "lanczos_spectrum", [point], matrix, storage, finite_difference
    )
    objective = operator.for_matrix([point], point.shared[0], matrix, "lanczos_spectrum", options)
    _checks.check_int("num_iters", num_iters, 1, "the number of Lanczos steps")
    key = _checks.key_or_default("key", key)
    num_iters = min(num_iters, point.num_params)
    size = np.dtype(storage).itemsize if storage else blocks.itemsize(point)
    rows = sizes.basis_rows(num_iters, point.num_params)

    def check() -> int:
        """The memory policy's plan for the basis, then its rows."""
        blocks.plan(
            point, 1, "lanczos_spectrum", rows * point.num_params * size, progress=progress,
            hint="ask for fewer Lanczos steps (num_iters)", mesh=layout_lib.of(point.params).mesh,
        )  # fmt: skip
        return rows

    source = data.of([point], False, "lanczos_spectrum")
    alphas, betas, loss, tree = source.tridiagonal(objective, key, num_iters, progress, check)
    gradient = labelled(point, tree, loss)
    nodes, weights = ritz.quadrature(alphas[None], betas[None])  # NaN where T is not finite
    return Spectrum(point, nodes[0], weights[0], gradient, matrix)
