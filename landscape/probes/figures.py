"""Figures of probe results: the loss along paths, 2-D slices, and spectral densities."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.colors import BoundaryNorm
from matplotlib.figure import Figure

from landscape import _checks
from landscape.engine import plotting as plotting_lib
from landscape.point import Point
from landscape.probes.estimates import SpectralDensity
from landscape.probes.geometry import PathResult
from landscape.probes.slices import SliceResult


def _axes(ax: Axes | None, width: float = 4.2, height: float = 3.2) -> tuple[Axes, bool]:
    """(the axes to draw on, whether this module made its figure of `width` x `height` inches)."""
    if ax is None:
        _, axes = plotting_lib.subplots(1, 1, width=width, height=height)
        return axes[0, 0], True
    if not isinstance(ax, Axes):
        raise TypeError(f"ax = {ax!r}: must be a matplotlib Axes or None, not {type(ax).__name__}.")
    return ax, False


def _finished(ax: Axes, made: bool) -> Figure:
    figure = ax.get_figure(root=True)
    assert isinstance(figure, Figure)  # an Axes drawn on by pyplot lies in a Figure
    if made:
        figure.tight_layout()
    return figure


def _short(name: str, fallback: str) -> str:
    """A point's name up to its parenthesised details: "theta_pi (tied, ...)" -> "theta_pi"."""
    return name.split(" (")[0] or fallback


def plot_path(results: PathResult | Sequence[PathResult], ax: Axes | None = None) -> Figure:
    """Loss against t for one or more paths, each peak marked; returns the figure."""
    listed = [results] if isinstance(results, PathResult) else list(results)
    if not listed or not all(isinstance(r, PathResult) for r in listed):
        raise TypeError("plot_path expects a PathResult or a non-empty list of them.")
    ax, made = _axes(ax)
    for r in listed:
        label = f"{'line' if r.shape == 'line' else 'Bézier'} (barrier {r.barrier:.3g})"
        (line,) = ax.plot(r.ts, r.losses, label=label)
        peak = max(r.loss_a, r.loss_b) + r.barrier
        ax.plot([r.argmax_t], [peak], "o", color=line.get_color(), markersize=4)
    ends = listed[0]
    ax.axhline(max(ends.loss_a, ends.loss_b), color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel(f"t  ({_short(ends.endpoints[0], 'a')} → {_short(ends.endpoints[1], 'b')})")
    ax.set_ylabel("loss")
    ax.legend(fontsize=7)
    return _finished(ax, made)


def plot_slice(
    result: SliceResult,
    ax: Axes | None = None,
    points: Point | Sequence[Point] = (),
    levels: int = 30,
) -> Figure:
    """Filled contours of the slice, the point marked at (0, 0) and `points` (of the same model)
    at their projections onto the plane (off-plane distance in the label); returns the figure."""
    if not isinstance(result, SliceResult):
        raise TypeError(f"plot_slice expects a SliceResult, not {type(result).__name__}.")
    _checks.check_int("levels", levels, 2, "contour levels")
    others = [points] if isinstance(points, Point) else list(points)
    ax, made = _axes(ax)
    # levels at quantiles of the grid: equal areas per band, so a sharp wall far from the point
    # does not flatten the basin around it into one colour
    bounds = np.unique(np.quantile(result.losses, np.linspace(0.0, 1.0, levels)))
    contour_levels: Any = bounds if bounds.size >= 2 else levels
    norm = BoundaryNorm(bounds, ncolors=256) if bounds.size >= 2 else None
    alphas, betas, values = result.alphas, result.betas, result.losses.T
    filled = ax.contourf(alphas, betas, values, levels=contour_levels, norm=norm)
    ax.contour(alphas, betas, values, levels=contour_levels, colors="k", linewidths=0.3)
    ax.figure.colorbar(filled, ax=ax, label="loss", format="%.3g")
    ax.plot([0.0], [0.0], "*", color="white", markeredgecolor="k", markersize=11)
    ax.annotate(_short(result.point.name, "point"), (0.0, 0.0), fontsize=7, color="white")
    for other in others:
        alpha, beta, off = result.project(other)
        ax.plot([alpha], [beta], "o", color="red", markeredgecolor="k", markersize=6)
        label = _short(other.name, "point") + (f" (off plane {off:.2g})" if off > 1e-9 else "")
        ax.annotate(label, (alpha, beta), fontsize=7, color="white")
    normalised = "" if result.normalize is None else f", {result.normalize}-normalised"
    ax.set_xlabel(f"α (u{normalised})")
    ax.set_ylabel(f"β (v{normalised})")
    ax.set_title(result.point.name, fontsize=8)
    return _finished(ax, made)


def density_figure(
    density: SpectralDensity,
    ax: Axes | None = None,
    *,
    sigma: float | None = None,
    num_grid: int = 1000,
    log_scale: bool = True,
) -> Figure:
    """A plot of the smoothed SLQ density (Gaussian kernel of width `sigma`, default 1% of the
    Ritz values' range) on a new figure or on `ax`; a log density axis by default. Returns the
    figure (save it with landscape.engine.plotting.save)."""
    if not isinstance(density, SpectralDensity):
        raise TypeError(
            f"density_figure expects a SpectralDensity (from spectral_density); got "
            f"{type(density).__name__}."
        )
    if not density.finite:
        raise ValueError("density_figure: the density has NaN nodes (non-finite HVPs).")
    num_grid = _checks.check_int("num_grid", num_grid, 2, "grid points")
    low, high = float(density.nodes.min()), float(density.nodes.max())
    if sigma is None:
        sigma = 0.01 * (high - low) or 1e-3 * max(1.0, abs(high))
    _checks.check_real("sigma", sigma, low=0, low_open=True, meaning="the kernel width")
    grid = np.linspace(low - 4 * sigma, high + 4 * sigma, num_grid)
    values = density.density(grid, sigma)
    ax, made = _axes(ax, width=4.5, height=3.0)
    ax.plot(grid, values, linewidth=1.2)
    if log_scale:
        ax.set_yscale("log")
        top = max(float(values.max()), np.finfo(np.float64).tiny)
        ax.set_ylim(bottom=top * 1e-7, top=top * 3)
    ax.set_xlabel("eigenvalue λ")
    ax.set_ylabel("density")
    ax.set_title(
        f"{density.point.name or 'Hessian'} (SLQ, {density.num_probes}x{density.num_iters})",
        fontsize=8,
    )
    return _finished(ax, made)
