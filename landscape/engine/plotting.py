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
    fig.savefig(tmp, format=path.suffix.lstrip(".") or "png")
    plt.close(fig)
    os.replace(tmp, path)
    return path
