"""What a stochastic estimate knows: its standard error over probes floored at the rounding of
the computation, the certified range of a Gauss rule's mass in an interval, and whether an
interval's end cuts a Ritz node the Lanczos steps did not resolve (docs/guide/reliability.md).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

# an interval's end within this fraction of a Ritz node's spacing "cuts" the node
CUT_FRACTION = 0.25


class QuadratureWarning(UserWarning):
    """An SLQ mass whose standard error understates its error: an end of the interval cuts
    Ritz nodes carrying more of the spectrum than that error (`SpectralDensity.mass`)."""


def rounding(dtype: Any, count: int, scale: Any) -> Any:
    """The rounding level of a sum of `count` terms of size `scale` in `dtype`:
    eps sqrt(count) scale (a random walk of roundings, the typical error)."""
    return float(np.finfo(np.dtype(dtype)).eps) * math.sqrt(max(count, 1)) * np.abs(scale)


def mean_and_stderr(
    samples: np.ndarray, floor: Any = 0.0, axis: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """The mean over `axis` and its standard error over the samples, floored at `floor` (the
    rounding level: samples that agree to rounding give that, not a smaller error)."""
    count = samples.shape[axis]
    stderr = samples.std(axis=axis, ddof=1) / math.sqrt(count)
    return samples.mean(axis=axis), np.maximum(stderr, floor)


def quadrature_bounds(
    nodes: np.ndarray, weights: np.ndarray, lo: float, hi: float
) -> tuple[np.ndarray, np.ndarray]:
    """Per row (a probe's Gauss rule: nodes, weights), the certified range of its measure's mass
    in [lo, hi], by the Chebyshev-Markov-Stieltjes inequalities
    sum_{x_i < x_j} w_i <= mu(-inf, x_j) <= mu(-inf, x_j] <= sum_{x_i <= x_j} w_i
    (docs/notes/landscape_geometry.md §8)."""
    nodes, weights = np.asarray(nodes, np.float64), np.asarray(weights, np.float64)

    def below(x: np.ndarray, strict: bool) -> np.ndarray:  # sum of w_i over x_i < x (or <=)
        return np.sum(
            np.where(nodes < x[:, None] if strict else nodes <= x[:, None], weights, 0), 1
        )

    def cdf_range(t: float, closed: bool) -> tuple[np.ndarray, np.ndarray]:
        """(lower, upper) for mu(-inf, t] (closed) or mu(-inf, t)."""
        if np.isinf(t):
            value = np.full(len(nodes), 1.0 if t > 0 else 0.0)
            return value, value
        first_at_or_above = np.where(nodes >= t, nodes, np.inf).min(1)
        inside = nodes <= t if closed else nodes < t
        last_inside = np.where(inside, nodes, -np.inf).max(1)
        return below(last_inside, strict=True), below(first_at_or_above, strict=False)

    (hi_low, hi_high), (lo_low, lo_high) = cdf_range(hi, True), cdf_range(lo, False)
    return np.clip(hi_low - lo_high, 0.0, 1.0), np.clip(hi_high - lo_low, 0.0, 1.0)


def cut_weight(nodes: np.ndarray, weights: np.ndarray, t: float) -> float:
    """The weight, averaged over probes (rows), of the Ritz nodes that `t` cuts: nodes within
    CUT_FRACTION of their spacing (the distance to the nearest other node of their probe) of t.
    Which side of t their eigenvalues lie on is what the Lanczos steps did not resolve."""
    if not np.isfinite(t) or nodes.shape[1] < 2:
        return 0.0
    gaps = np.diff(nodes, axis=1)
    spacing = np.minimum(
        np.concatenate([np.full((len(nodes), 1), np.inf), gaps], axis=1),
        np.concatenate([gaps, np.full((len(nodes), 1), np.inf)], axis=1),
    )
    cut = np.abs(nodes - t) < CUT_FRACTION * spacing
    return float(np.mean(np.sum(np.where(cut, weights, 0.0), axis=1)))
