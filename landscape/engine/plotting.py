"""Matplotlib helpers shared by the experiments (headless: the Agg backend)."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.image import AxesImage  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.typing import ColorType  # noqa: E402

from landscape.engine.writes import WriteError, writes_to  # noqa: E402

plt.rcParams.update(
    {
        "figure.dpi": 110,
        "savefig.dpi": 150,
        "font.size": 9,
        "axes.titlesize": 10,
        "axes.spines.top": False,
        "axes.spines.right": False,
    }
)


def subplots(
    rows: int, cols: int, *, width: float = 3.2, height: float = 2.6, **kwargs: Any
) -> tuple[Figure, np.ndarray]:
    fig, axes = plt.subplots(
        rows, cols, figsize=(width * cols, height * rows), squeeze=False, **kwargs
    )
    return fig, axes


def heatmap(
    ax: Axes,
    values: np.ndarray,
    *,
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    separators: Sequence[float] = (),
    title: str = "",
    cmap: str = "viridis",
    vmin: float | None = None,
    vmax: float | None = None,
    colorbar: bool = True,
) -> AxesImage:
    """A rows x columns heat map with labelled ticks and dashed vertical separators."""
    image = ax.imshow(
        values, aspect="auto", cmap=cmap, vmin=vmin, vmax=vmax, interpolation="nearest"
    )
    ax.set_yticks(range(len(row_labels)), row_labels)
    step = max(1, len(col_labels) // 10)
    ticks = range(0, len(col_labels), step)
    ax.set_xticks(ticks, [col_labels[i] for i in ticks])
    for x in separators:
        ax.axvline(x, color="white", linestyle="--", linewidth=1.2)
    ax.set_title(title)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    return image


def mean_and_band(
    ax: Axes,
    x: np.ndarray,
    runs_by_x: np.ndarray,
    *,
    label: str,
    color: ColorType | None = None,
    log_y: bool = False,
) -> Line2D:
    """Mean over runs (rows) with a min-max band; runs_by_x has shape (runs, len(x))."""
    mean = np.nanmean(runs_by_x, axis=0)
    (line,) = ax.plot(x, mean, label=label, color=color)
    ax.fill_between(
        x,
        np.nanmin(runs_by_x, axis=0),
        np.nanmax(runs_by_x, axis=0),
        color=line.get_color(),
        alpha=0.2,
        linewidth=0,
    )
    if log_y:
        ax.set_yscale("log")
    return line


def save(fig: Figure, path: str | pathlib.Path) -> pathlib.Path:
    """Write the figure atomically (a temporary file, then a rename) and close it."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)  # e.g. a workdir's figures/, made on demand
    tmp = path.with_name(f".{path.name}.tmp")
    fig.tight_layout()
    try:
        with writes_to(path):  # a full disk, a refused write: one error naming the figure
            fig.savefig(tmp, format=path.suffix.lstrip(".") or "png")
            os.replace(tmp, path)
    except WriteError:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        plt.close(fig)
    return path


def tracked_curvature(
    results: Sequence[Any], path: str | pathlib.Path, labels: Sequence[str] = ()
) -> pathlib.Path | None:
    """λ_max and λ_min along training, one line per run (a color per result, e.g. a program),
    from `RunResult`s that tracked curvature (`landscape.Track`); None when none did."""
    tracked = [r for r in results if r.tracked_steps is not None]
    if not tracked:
        return None
    names = ["lambda_max", "lambda_min"] + (
        ["negative_mass"] if "negative_mass" in tracked[0].metrics else []
    )
    fig, axes = subplots(1, len(names), width=3.6, height=2.8)
    titles = {"lambda_max": "λ_max", "lambda_min": "λ_min", "negative_mass": "negative mass (SLQ)"}
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, name in zip(axes[0], names, strict=True):
        for i, result in enumerate(tracked):
            label = labels[i] if i < len(labels) else None
            for r in range(result.num_runs):
                ax.plot(
                    result.tracked_steps,
                    result.metrics[name][r],
                    color=colors[i % len(colors)],
                    alpha=0.8,
                    linewidth=1,
                    label=label if r == 0 else None,
                )
        if name == "lambda_min":
            ax.axhline(0, color="black", linewidth=0.6)
        ax.set_xlabel("step")
        ax.set_title(titles[name])
    if any(labels):
        axes[0, 0].legend(fontsize=7)
    return save(fig, path)


def draw_tracked(workdir: Any, results: Sequence[Any], labels: Sequence[str] = ()) -> list[str]:
    """figures/curvature.png in `workdir` (a records.Workdir) when any of `results` tracked
    curvature (`tracked_curvature`): its path in a list, or [] (no figure, no figures/ folder)."""
    if not any(r.tracked_steps is not None for r in results):
        return []
    return [str(tracked_curvature(results, workdir.figure_path("curvature"), labels))]
