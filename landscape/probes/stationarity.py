"""Near-stationary points: the Newton step to the critical point of the quadratic model at a point,
the check that the loss agrees with the model there, and the curvature verdict of that critical
point. The rule and its tolerances: docs/notes/landscape_geometry.md §9.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from landscape import _checks
from landscape.core import compiled
from landscape.point import Point
from landscape.probes.gradient import Gradient
from landscape.probes.results import (
    Curvature,
    curvature_kind,
    fields,
    not_stationary,
    point_row,
    verdict_sentence,
)
from landscape.trees import ravel_numpy, unravel_numpy

MODEL_RTOL = 0.1  # the model's error at its critical point, relative to its predicted change
MAX_ROUNDS = 8  # raises of the flat cut to the curvature change over the step (§9)


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class NearStationary:
    """The quadratic model's critical point x + s near a point x (notes/landscape_geometry.md §9).

    `step` s = -H⁺g over the eigenvalues with |λ| > `cut` (flat below); `distance` |s|;
    `predicted` g·s + ½ sᵀHs and `measured` L(x + s) - L(x); `curvature_change` κ =
    |(H(x + s) - H(x)) s/|s||; `flat_gradient` the part of g in the flat directions;
    `gradient_there` |∇L(x + s)|. `trusted` says whether the rule holds, `reason` why not.
    """

    point: Point
    eigenvalues: np.ndarray
    step: np.ndarray
    tol: float
    cut: float
    rtol: float
    gradient: Gradient
    grad_tol: float | None
    flat_gradient: float
    predicted: float
    measured: float
    floor: float
    curvature_change: float
    gradient_there: float
    rounds: int
    trusted: bool
    reason: str

    @property
    def gradient_norm(self) -> float:
        return self.gradient.norm

    @property
    def distance(self) -> float:
        return float(np.linalg.norm(self.step))

    @property
    def num_negative(self) -> int:
        """Eigenvalues below -cut: the critical point's negative directions."""
        return int(np.sum(self.eigenvalues < -self.cut))

    @property
    def num_zero(self) -> int:
        return int(np.sum(np.abs(self.eigenvalues) <= self.cut))

    def curvature(self) -> str:
        """The critical point's curvature verdict: the spectrum with |λ| <= cut as zero."""
        return verdict_sentence(self.eigenvalues, self.cut)

    def kind(self) -> Curvature:
        """The critical point's kind (|λ| <= cut as zero) when the rule holds, else
        NOT_STATIONARY."""
        if not self.trusted:
            return Curvature.NOT_STATIONARY
        return curvature_kind(self.eigenvalues, self.cut)

    @property
    def finite(self) -> bool:
        return bool(np.isfinite(self.measured) and np.all(np.isfinite(self.step)))

    def summary(self) -> dict[str, Any]:
        """One row: the kind, whether the model is trusted, the step's length, the loss change
        measured and predicted, the curvature change and the flat cut."""
        return point_row(
            self.point,
            self.step.size,
            self.step.dtype,
            kind=self.kind().value,
            **fields(
                self, "trusted distance measured predicted curvature_change cut num_negative reason"
            ),
            grad_norm=self.gradient_norm,
        )

    def verdict(self) -> str:
        """ "near-stationary <curvature>: its critical point <distance> away" when the rule
        holds, else "not stationary (...)" and why the model is not trusted."""
        if self.trusted:
            return (
                f"near-stationary {self.curvature()}: its critical point {self.distance:.2g} away"
            )
        return (
            f"{not_stationary(self.gradient, self.grad_tol)}; its quadratic model is not "
            f"trusted: {self.reason}"
        )

    def describe(self) -> str:
        """The step, the model's check and the verdict, a line each."""
        lines = [
            "near-stationary check (quadratic model, notes/landscape_geometry.md §9)",
            f"  Newton step over the eigenvalues |λ| > cut = {self.cut:.3g} (tol {self.tol:.3g}, "
            f"raised to κ where larger; {self.rounds} round(s)): |s| = {self.distance:.4g}",
            f"  loss change at x + s: measured {self.measured:.6g}, model {self.predicted:.6g} "
            f"(agree within rtol = {self.rtol:g} of it + {self.floor:.2g})",
            f"  curvature change over the step κ = {self.curvature_change:.3g}; gradient there "
            f"{self.gradient_there:.3e}; gradient in flat directions {self.flat_gradient:.3e} "
            f"of |g| = {self.gradient_norm:.3e}",
            f"  {self.verdict()}",
        ]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (
            f"NearStationary({self.point.name!r}, trusted={self.trusted}, |s|={self.distance:.3g})"
        )


def check_rtol(rtol: float | None) -> float:
    if rtol is None:
        return MODEL_RTOL
    meaning = "the model's allowed error relative to its predicted change"
    _checks.check_real("rtol", rtol, low=0, low_open=True, meaning=meaning)
    return float(rtol)


def check_grad_tol(grad_tol: float | None) -> None:
    if grad_tol is not None:
        meaning = "the gradient norm that counts as zero; None for sqrt(eps) max(1, |L|)"
        _checks.check_real("grad_tol", grad_tol, low=0, meaning=meaning)


@dataclasses.dataclass
class _Round:
    """One Newton step and what the loss and Hessian do there."""

    step: np.ndarray
    flat_gradient: float
    predicted: float
    measured: float
    curvature_change: float
    gradient_there: float


def _step(
    point: Point,
    matrix: np.ndarray,
    eigen: tuple[np.ndarray, np.ndarray],
    grad: tuple[np.ndarray, float],
    keep: np.ndarray,
) -> _Round:
    """The Newton step over the eigenvectors `keep`; the loss, gradient and H ŝ at x + s."""
    values, vectors = eigen
    g, loss = grad
    coefficients = vectors.T @ g
    step = -(vectors[:, keep] @ (coefficients[keep] / values[keep]))
    flat_gradient = float(np.linalg.norm(coefficients[~keep]))
    predicted = float(g @ step + 0.5 * step @ (matrix @ step))
    norm = float(np.linalg.norm(step))
    direction = step / norm if norm > 0 else np.zeros_like(step)
    flat = ravel_numpy(point.params)
    objective, inputs = point.shared
    there = unravel_numpy(point.params, flat + step.astype(flat.dtype))
    tangent = unravel_numpy(point.params, direction.astype(flat.dtype))
    loss_there, grad_there, hv = compiled.value_grad_hvp(objective, there, inputs, tangent)
    change = ravel_numpy(hv) - matrix @ direction
    return _Round(
        step=step,
        flat_gradient=flat_gradient,
        predicted=predicted,
        measured=float(loss_there) - loss,
        curvature_change=float(np.linalg.norm(change)) if norm > 0 else 0.0,
        gradient_there=float(np.linalg.norm(ravel_numpy(grad_there))),
    )


def near_stationary(
    point: Point,
    matrix: np.ndarray,
    eigen: tuple[np.ndarray, np.ndarray],
    gradient: Gradient,
    tol: float,
    grad_tol: float | None,
    rtol: float,
) -> NearStationary:
    """The rule of notes/landscape_geometry.md §9 at a point with Hessian `matrix`, its `eigen`
    (values ascending, vectors as columns) and `gradient`; `tol` the eigenvalue tolerance,
    `grad_tol` the gradient norm that counts as zero (None: `Gradient.stationarity_tol`), `rtol`
    the model's allowed relative error. `Hessian.near_stationary` calls it with its numbers."""
    grad = (gradient.vector, gradient.loss)
    values = eigen[0]
    done, cut, rounds, settled = _settle(
        lambda keep: _step(point, matrix, eigen, grad, keep), values, tol
    )
    floor = 1e3 * float(np.finfo(matrix.dtype).eps) * max(1.0, abs(gradient.loss))
    bound = gradient.stationarity_tol() if grad_tol is None else grad_tol
    reason = _distrust(done, settled, cut, rtol, floor, max(bound, rtol * gradient.norm))
    done = done or _Round(np.zeros_like(grad[0]), gradient.norm, 0.0, 0.0, 0.0, gradient.norm)
    return NearStationary(
        point=point,
        eigenvalues=values,
        step=done.step,
        tol=tol,
        cut=cut,
        rtol=rtol,
        gradient=gradient,
        grad_tol=grad_tol,
        flat_gradient=done.flat_gradient,
        predicted=done.predicted,
        measured=done.measured,
        floor=floor,
        curvature_change=done.curvature_change,
        gradient_there=done.gradient_there,
        rounds=rounds,
        trusted=not reason,
        reason=reason,
    )


Step = Callable[[np.ndarray], "_Round"]


def _settle(step: Step, values: np.ndarray, tol: float) -> tuple[_Round | None, float, int, bool]:
    """(the last step, the cut, rounds, whether κ <= cut): raise the cut from `tol` to the
    curvature change over the step until it holds (at most MAX_ROUNDS); where a raise would leave
    no eigenvalue or a step's loss is not finite (a step divided by tiny eigenvalues can be
    absurdly long), bisect between that cut and the largest |λ| for the smallest cut that holds
    (notes/landscape_geometry.md §9)."""
    magnitudes, cut, rounds, done = np.abs(values), tol, 0, None
    while rounds < MAX_ROUNDS:
        keep = magnitudes > cut
        if not np.any(keep):
            return done, cut, rounds, False
        done, rounds = step(keep), rounds + 1
        change = done.curvature_change
        if np.isfinite(done.measured) and change <= cut:
            return done, cut, rounds, True
        if not (np.isfinite(done.measured) and np.any(magnitudes > change)):
            return _bisect(step, magnitudes, cut, done, rounds)
        cut = change
        if np.array_equal(magnitudes > cut, keep):  # the same step: κ is the new cut
            return done, cut, rounds, True
    return done, cut, rounds, False


def _bisect(
    step: Step, magnitudes: np.ndarray, low: float, done: _Round, rounds: int
) -> tuple[_Round, float, int, bool]:
    """The smallest cut among the |λ| above `low` (each keeping at least the largest) at which
    the step's loss is finite and its curvature change at most the cut, by bisection (κ falls as
    the cut rises and shortens the step); the top cut's step, not settled, when none holds."""
    cuts = np.unique(magnitudes[magnitudes > low])[:-1]
    if cuts.size == 0:
        return done, low, rounds, False

    def holds(i: int) -> tuple[_Round, bool]:
        trial = step(magnitudes > cuts[i])
        return trial, bool(np.isfinite(trial.measured) and trial.curvature_change <= cuts[i])

    best, settled = holds(cuts.size - 1)
    rounds += 1
    if not settled:
        return best, float(cuts[-1]), rounds, False
    lo, hi = -1, cuts.size - 1  # cuts[hi] holds (best); cuts[lo] fails (lo = -1: `low`)
    while hi - lo > 1:
        middle = (lo + hi) // 2
        trial, settled = holds(middle)
        rounds += 1
        if settled:
            best, hi = trial, middle
        else:
            lo = middle
    return best, float(cuts[hi]), rounds, True


def _distrust(
    done: _Round | None,
    settled: bool,
    cut: float,
    rtol: float,
    floor: float,
    flat_tol: float,
) -> str:
    """Why the model's critical point is not trusted ("" when it is): notes §9's checks."""
    if done is None:
        return f"no eigenvalue above the cut {cut:.3g}, so no step to a critical point"
    if not np.isfinite(done.measured):
        return "the loss at its critical point is not finite"
    if not settled:
        return (
            "over every step tried the curvature changes by more than the eigenvalues the step "
            f"divides by (last: κ = {done.curvature_change:.3g} over |s| = "
            f"{np.linalg.norm(done.step):.3g})"
        )
    if abs(done.measured - done.predicted) > rtol * abs(done.predicted) + floor:
        return (
            f"at its critical point, |s| = {np.linalg.norm(done.step):.3g} away, the loss "
            f"changes by {done.measured:.3g}, the model says {done.predicted:.3g}"
        )
    if done.flat_gradient > flat_tol:
        return (
            f"|g| = {done.flat_gradient:.3g} lies in directions with |λ| <= {cut:.3g}, which no "
            "Newton step removes"
        )
    return ""
