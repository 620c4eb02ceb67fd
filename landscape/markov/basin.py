"""The radius of the basin (notes/markov.md §14): how far from a point the loss must be moved
along a straight line, either way, before it falls below the point's own loss by a margin, from
the losses `landscape.path` measures on a grid of radii, refined where the line first crosses.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.flatten_util import ravel_pytree

from landscape import _checks
from landscape.point import Point
from landscape.probes import geometry
from landscape.typing import PyTree

REFINE_POINTS = 16  # losses per refinement round inside the bracket of the first crossing


@dataclasses.dataclass(frozen=True, eq=False)
class Radius:
    """The radius of the basin along one direction (notes/markov.md §14).

    `radii[j]`: the smallest r on either side with L(θ ± r v) <= L(θ) - `margins[j]`, v the unit
    direction; inf when no grid radius up to `radius_max` reaches it. `sides[j]`: +1 or -1, the
    side that crossed first (0: none). `drop`: the largest L(θ) - L(θ ± r v) on the grid, at the
    signed radius `drop_at`. `grid` and `losses`: the signed radii and the losses there.
    """

    loss: float
    margins: np.ndarray
    radii: np.ndarray
    sides: np.ndarray
    drop: float
    drop_at: float
    radius_max: float
    grid: np.ndarray
    losses: np.ndarray

    def summary(self) -> dict[str, Any]:
        """One row: the loss, the radius at each margin, the largest drop and where."""
        row: dict[str, Any] = {"loss": self.loss, "radius_max": self.radius_max}
        for margin, radius in zip(self.margins, self.radii, strict=True):
            row[f"radius@{margin:.3g}"] = float(radius)
        return {**row, "drop": self.drop, "drop_at": self.drop_at}


def unit_direction(point: Point, direction: PyTree | np.ndarray) -> np.ndarray:
    """`direction` (a flat vector of the point's D parameters, or a pytree shaped like them) as
    a flat unit vector in float64."""
    flat = np.asarray(ravel_pytree(point.params)[0])
    if isinstance(direction, np.ndarray) and direction.ndim == 1:
        vector = np.asarray(direction, np.float64)
    else:
        vector = np.asarray(ravel_pytree(jax.tree.map(np.asarray, direction))[0], np.float64)
    if vector.shape != flat.shape:
        raise ValueError(
            f"direction has {vector.size} entries: must have the point's D = {flat.size}."
        )
    norm = float(np.linalg.norm(vector))
    if not np.isfinite(norm) or norm == 0:
        raise ValueError(f"direction has norm {norm}: must be finite and non-zero.")
    return vector / norm


def _check(
    margins: Sequence[float] | np.ndarray, radius_max: float, num_radii: int, refine: int
) -> np.ndarray:
    values = _checks.real_array("margins", margins, scalar=False)
    if values is None or values.ndim != 1 or values.size == 0:
        raise ValueError(f"margins = {margins!r}: must be a non-empty list of loss drops.")
    _checks.check_real("margins", values, low=0, low_open=True, scalar=False, meaning="drops")
    _checks.check_real("radius_max", radius_max, low=0, low_open=True, meaning="the farthest r")
    _checks.check_int("num_radii", num_radii, 2, "radii on the first grid")
    _checks.check_int("refine", refine, 0, "rounds of refinement at a crossing")
    return values.astype(np.float64)


def basin_radius(
    point: Point,
    direction: PyTree | np.ndarray,
    margins: Sequence[float] | np.ndarray,
    *,
    radius_max: float,
    num_radii: int = 33,
    refine: int = 2,
    smallest: float = 1e-3,
) -> Radius:
    """The radius of the basin of `point` along `direction` (normalised) at each margin δ: the
    smallest r with min(L(θ + r v), L(θ - r v)) <= L(θ) - δ (notes/markov.md §14). The losses
    come from `landscape.path` on `num_radii` radii spaced geometrically from `smallest` x
    `radius_max` to `radius_max`, both sides in one call; each first crossing is bracketed,
    narrowed `refine` times by REFINE_POINTS losses, and interpolated linearly. A dip narrower
    than the grid's spacing can be missed: the radius is the first crossing the grid sees."""
    deltas = _check(margins, radius_max, num_radii, refine)
    _checks.check_real("smallest", smallest, low=0, high=1, low_open=True, meaning="r / r_max")
    unit = unit_direction(point, direction)
    flat, unravel = ravel_pytree(point.params)
    ahead = point.with_params(unravel(flat + unit.astype(flat.dtype)), name="direction")

    def losses(ts: np.ndarray) -> tuple[float, np.ndarray]:
        found = geometry.path(point, ahead, ts)
        return found.loss_a, np.asarray(found.losses, np.float64)

    radii = np.geomspace(smallest * radius_max, radius_max, num_radii)
    loss, both = losses(np.concatenate([radii, -radii]))
    sides = {1: both[:num_radii], -1: both[num_radii:]}
    found, side_of = np.full(deltas.size, np.inf), np.zeros(deltas.size, int)
    for j, delta in enumerate(deltas):
        for sign, profile in sides.items():
            r = _crossing(losses, loss, loss - delta, sign, radii, profile, refine)
            if r < found[j]:
                found[j], side_of[j] = r, sign
    grid = np.concatenate([radii, -radii])
    drops = loss - both
    best = int(np.argmax(drops))
    return Radius(
        loss=float(loss),
        margins=deltas,
        radii=found,
        sides=side_of,
        drop=float(drops[best]),
        drop_at=float(grid[best]),
        radius_max=float(radius_max),
        grid=grid,
        losses=both,
    )


def _crossing(
    losses: Any,
    loss: float,
    level: float,
    sign: int,
    radii: np.ndarray,
    profile: np.ndarray,
    refine: int,
) -> float:
    """The first r on one side (`sign`) where the loss reaches `level`: the grid's first index
    at or below it, its bracket narrowed `refine` times, then linear interpolation; inf if
    the grid never reaches it."""
    below = np.flatnonzero(profile <= level)
    if below.size == 0:
        return np.inf
    i = int(below[0])
    low, high = (0.0, loss) if i == 0 else (float(radii[i - 1]), float(profile[i - 1]))
    high_r, high_loss = float(radii[i]), float(profile[i])
    for _ in range(refine):
        inner = np.linspace(low, high_r, REFINE_POINTS + 1)[1:-1]
        _, values = losses(sign * inner)
        hit = np.flatnonzero(values <= level)
        if hit.size:
            k = int(hit[0])
            high_r, high_loss = float(inner[k]), float(values[k])
            if k > 0:
                low, high = float(inner[k - 1]), float(values[k - 1])
        else:
            low, high = float(inner[-1]), float(values[-1])
    return low + (high - level) / (high - high_loss) * (high_r - low)


def chance_overlap_rms(k: int, dim: int) -> float:
    """sqrt(k / D): the root-mean-square overlap |P u| of a fixed unit vector u with a uniformly
    random k-dimensional subspace of R^D (E |P u|^2 = k / D; notes §14)."""
    return float(np.sqrt(k / dim))


def random_overlaps(u: np.ndarray, k: int, draws: int, seed: int = 0) -> np.ndarray:
    """|P u| for `draws` uniformly random k-dimensional subspaces (orthonormalised Gaussian
    frames): the spread of the chance baseline."""
    rng = np.random.default_rng(seed)
    out = np.empty(draws)
    for i in range(draws):
        frame = np.linalg.qr(rng.standard_normal((u.size, k)))[0]
        out[i] = np.linalg.norm(frame.T @ u)
    return out
