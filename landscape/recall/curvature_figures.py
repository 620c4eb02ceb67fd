"""The recall curvature study's figure (curvature_study.py; docs/studies/recall_curvature.md): the
loss, the saddle's index and its negative eigenvalues along the gradient flow and the SGD runs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from landscape.engine import plotting

save = plotting.save
Along = dict[str, Any]


def draw(
    along: Along, sgd: Sequence[Along], levels: np.ndarray, flow_rows: Sequence[dict]
) -> Figure:
    """Six panels: the flow's loss, index and negative eigenvalues against tau (§4.10's values
    at the plateau midpoints marked), the SGD runs' loss, index and tracked λ_min."""
    fig, axes = plotting.subplots(2, 3, width=3.8, height=2.8)
    _loss(axes[0, 0], [along], levels, "tau = eps t", "(a) gradient flow: loss")
    _index(axes[0, 1], [along], "tau = eps t", "(b) gradient flow: the saddle's index")
    for row in flow_rows:
        axes[0, 1].plot(row["time"], row["predicted_index"], "kx", markersize=6)
    _negative(axes[0, 2], along, flow_rows)
    _loss(axes[1, 0], sgd, levels, "step", "(d) SGD (Fig. 1 setting): population loss")
    _index(axes[1, 1], sgd, "step", "(e) SGD: the index at the kept steps")
    ax = axes[1, 2]
    for i, a in enumerate(sgd):
        ax.plot(a["tracked_steps"], a["tracked_lambda_min"], color=f"C{i}", linewidth=0.8)
    ax.set_yscale("symlog", linthresh=1e-6)
    ax.set(xlabel="step", ylabel="λ_min", title="(f) SGD: tracked λ_min")
    fig.tight_layout()
    return fig


def _title(ax: Axes, title: str) -> None:
    ax.set_title(title)
    ax.title.set_fontsize(8)


def _loss(ax: Axes, alongs: Sequence[Along], levels: np.ndarray, xlabel: str, title: str) -> None:
    for i, a in enumerate(alongs):
        ax.plot(a["time"], a["losses"], color=f"C{i}", linewidth=0.9, label=a["label"])
    for level in levels:
        ax.axhline(level, color="k", linestyle=":", linewidth=0.6)
    ax.set(xlabel=xlabel, ylabel="population loss")
    _title(ax, title + " (plateaus L_j dotted)")
    if len(alongs) > 1:
        ax.legend(fontsize=6)


def _index(ax: Axes, alongs: Sequence[Along], xlabel: str, title: str) -> None:
    """The resolved index (below -1e-3 max |λ|) as steps; for one trajectory the probes'
    tolerance's beside it."""
    for i, a in enumerate(alongs):
        offset = 0.06 * (i - (len(alongs) - 1) / 2) if len(alongs) > 1 else 0.0
        ax.step(a["time"], a["resolved"] + offset, where="post", color=f"C{i}", linewidth=0.9)
        if len(alongs) == 1:
            ax.step(a["time"], a["index"], where="post", color="C1", linewidth=0.6)
    ax.set(xlabel=xlabel, ylabel="negative eigenvalues")
    thin = "; x: §4.10\n(orange: at the probes' tolerance)" if len(alongs) == 1 else ""
    _title(ax, title + thin)


def _negative(ax: Axes, along: Along, rows: Sequence[dict]) -> None:
    """-λ of the four most negative eigenvalues where below the probes' tolerance, log scale;
    §4.10's at the plateau midpoints as crosses."""
    values = along["values"]
    for h in range(min(4, values.shape[1])):
        shown = np.where(values[:, h] < -along["tol"], -values[:, h], np.nan)
        ax.plot(along["time"], shown, color=f"C{h}", linewidth=0.9, label=f"λ_{h + 1}")
    for row in rows:
        for value in row["predicted"]:
            ax.plot(row["time"], -value, "kx", markersize=5)
    ax.set_yscale("log")
    ax.set(xlabel="tau = eps t", ylabel="-λ (negative eigenvalues)")
    _title(ax, "(c) gradient flow: negative eigenvalues; x: §4.10")
    ax.legend(fontsize=6)
