"""The WikiText curvature study's figure (curvature_study.py; docs/studies/wikitext_curvature.md):
layer 0's entropy with the phase steps, λ along training, and the blocks of the top and the
negative eigenvectors at each phase against the blocks' share of the parameters."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from landscape.engine import plotting
from landscape.typing import Row

save = plotting.save


def draw(
    along: Sequence[Row],
    probed: Sequence[Row],
    phases: Mapping[str, int | None],
    sizes: Mapping[str, float],
    blocks: Sequence[str],
) -> Figure:
    """Four panels: (a) entropy and loss at the kept steps, the phase steps marked; (b) tracked
    λ_max and λ_min, the top Ritz values and the certified top and bottom eigenvalues at the
    phases; (c) the top eigenvectors' shares per block; (d) the negative eigenvectors'."""
    fig, axes = plotting.subplots(2, 2, width=4.6, height=3.0)
    steps = [r["step"] for r in along]
    ax = axes[0, 0]
    ax.plot(steps, [r["entropy_layer0"] for r in along], "C0-", linewidth=1.0)
    ax.set(xlabel="step", ylabel="layer 0 attention entropy")
    twin = ax.twinx()
    twin.plot(steps, [r["loss"] for r in along], "C1--", linewidth=0.9)
    twin.set_ylabel("loss (curvature chunks)", color="C1")
    for phase, step in phases.items():
        if step is not None:
            ax.axvline(step, color="k", linestyle=":", linewidth=0.6)
            ax.annotate(phase, (step, ax.get_ylim()[1]), fontsize=6, rotation=90, va="top")
    _title(ax, "(a) entropy (blue), loss (orange); phase steps dotted")
    _lambdas(axes[0, 1], along, probed)
    _shares(axes[1, 0], probed, "top", sizes, blocks, "(c) top eigenvectors: share per block")
    _shares(axes[1, 1], probed, "negative", sizes, blocks, "(d) negative eigenvectors")
    fig.tight_layout()
    return fig


def _title(ax: Axes, title: str) -> None:
    ax.set_title(title)
    ax.title.set_fontsize(8)


def _lambdas(ax: Axes, along: Sequence[Row], probed: Sequence[Row]) -> None:
    tracked = [r for r in along if "tracked_lambda_max" in r]
    steps = [r["step"] for r in tracked]
    ax.plot(steps, [r["tracked_lambda_max"] for r in tracked], "C0-", linewidth=1.0, label="λ_max")
    ax.plot(steps, [r["tracked_lambda_min"] for r in tracked], "C3-", linewidth=1.0, label="λ_min")
    ritz = [r for r in along if "ritz_1" in r]
    for k in range(1, 9):
        if ritz and f"ritz_{k}" in ritz[0]:
            ax.plot(
                [r["step"] for r in ritz],
                [r[f"ritz_{k}"] for r in ritz],
                "C2.",
                markersize=3,
                label="top Ritz values" if k == 1 else None,
            )
    for r in probed:
        ax.plot([r["step"]] * len(r["top"]), r["top"], "kx", markersize=4)
        ax.plot([r["step"]] * len(r["bottom"]), r["bottom"], "k+", markersize=4)
    ax.axhline(0, color="k", linewidth=0.5)
    ax.set(xlabel="step", ylabel="Hessian eigenvalue")
    ax.legend(fontsize=6)
    _title(ax, "(b) tracked λ (lines), Ritz values, certified at the phases (x, +)")


def _shares(
    ax: Axes,
    probed: Sequence[Row],
    which: str,
    sizes: Mapping[str, float],
    blocks: Sequence[str],
    title: str,
) -> None:
    """Stacked bars: the shares per block at each phase, and the parameters' shares."""
    labels = [f"{r['phase']}\n{r['step']}" for r in probed] + ["parameters"]
    rows = [[r.get(f"{which} {b}", np.nan) for b in blocks] for r in probed]
    rows.append([sizes[b] for b in blocks])
    values = np.nan_to_num(np.array(rows, float))
    bottom = np.zeros(len(labels))
    for i, block in enumerate(blocks):
        ax.bar(labels, values[:, i], bottom=bottom, color=f"C{i}", label=block)
        bottom += values[:, i]
    ax.set(ylabel="share of the squared norm", ylim=(0, 1.05))
    ax.tick_params(axis="x", labelsize=6)
    ax.legend(fontsize=5, loc="lower right")
    _title(ax, title + ("" if which == "top" else " (none certified: empty bar)"))
