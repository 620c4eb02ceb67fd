"""The Markov curvature study's figure (curvature_study.py; docs/studies/markov_curvature.md):
loss and tracked λ_min along training per seed, λ_min against the steps to the escape, the escape
directions' overlap against chance, and the loss along lines from two plateau points."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from landscape.engine import plotting
from landscape.markov import basin, theory
from landscape.typing import Row

COLORS = {"trapped": "C3", "escaped": "C0", "leaving": "C1"}
save = plotting.save


def _label(group: Mapping[str, Any]) -> str:
    cfg = group["cfg"]
    family = "GPT-2" if cfg.model.family == "gpt" else "theory"
    return f"{family} {'tied' if cfg.model.tied else 'untied'}"


def draw(
    groups: Sequence[Mapping[str, Any]],
    rows: Sequence[Sequence[Row]],
    found: Mapping[tuple, basin.Radius],
    margins: Sequence[float],
) -> Figure:
    """Six panels from each program's group and seed rows (`rows[i]` those of `groups[i]`);
    the first program (the GPT-2 seeds at the authors' recipe) in colour by status, the
    others (the theory model) in grey. `found`: {(program, seed, direction): Radius}."""
    fig, axes = plotting.subplots(2, 3, width=3.8, height=2.9)
    status = {(i, s["seed"]): s["status"] for i, group in enumerate(rows) for s in group}
    _loss_panel(axes[0, 0], groups, status)
    _lambda_panel(axes[0, 1], groups, status, [s for group in rows for s in group])
    _relative_panel(axes[0, 2], groups, rows[0])
    _overlap_panel(axes[1, 0], rows[0])
    escaped = [s for s in rows[0] if s["status"] == "escaped"]
    others = [s for s in rows[0] if s["status"] != "escaped"]
    if escaped:
        _profile_panel(axes[1, 1], found, 0, escaped[len(escaped) // 2], margins)
    if others:
        _profile_panel(axes[1, 2], found, 0, others[0], margins)
    elif len(rows) > 1 and rows[1]:
        _profile_panel(axes[1, 2], found, 1, rows[1][0], margins)
    fig.tight_layout()
    return fig


def _levels(group: Mapping[str, Any]) -> tuple[float, float]:
    res = group["result"]
    p, q = float(res.hparams["chain.p"][0]), float(res.hparams["chain.q"][0])
    return float(theory.unigram_loss(p, q)), float(theory.entropy_rate(p, q))


def _color(status: Mapping[tuple[int, int], str], cell: int, seed: int) -> str:
    return COLORS.get(status.get((cell, seed), ""), "0.5") if cell == 0 else "0.6"


def _runs(ax: Axes, status: Mapping, cell: int, res: Any, steps: Any, values_RS: Any) -> None:
    """One line a run: cell 0 solid and coloured by its status, the other cells grey dashed."""
    for run in range(res.num_runs):
        ax.plot(
            steps,
            values_RS[run],
            color=_color(status, cell, int(res.seeds[run])),
            linewidth=0.9 if cell == 0 else 0.6,
            linestyle="-" if cell == 0 else "--",
        )


def _loss_panel(ax: Axes, groups: Sequence[Mapping[str, Any]], status: Mapping) -> None:
    for i, group in enumerate(groups):
        res = group["result"]
        _runs(ax, status, i, res, res.snapshot_steps, res.snapshots["test_loss"])
    unigram, rate = _levels(groups[0])
    ax.axhline(unigram, color="k", linestyle=":", linewidth=0.8)
    ax.axhline(rate, color="k", linestyle="--", linewidth=0.8)
    ax.set_ylim(rate - 0.01, unigram + 0.03)
    ax.set(xlabel="step", ylabel="test loss (nats)")
    _title(
        ax,
        f"(a) loss: H(pi) dotted, entropy rate dashed\n{_label(groups[0])} in colour, "
        "grey dashed: theory",
    )
    present = set(status.values())
    for name, color in COLORS.items():
        if name in present:
            ax.plot([], [], color=color, label=name)
    _legend(ax, fontsize=7)


def _lambda_panel(
    ax: Axes, groups: Sequence[Mapping[str, Any]], status: Mapping, seeds: Sequence[Row]
) -> None:
    for i, group in enumerate(groups):
        res = group["result"]
        if res.tracked_steps is not None:
            _runs(ax, status, i, res, res.tracked_steps, res.metrics["lambda_min"])
    for s in seeds:
        ax.plot(s["plateau_step"], s["lambda_min"], "o", markersize=3, color="k")
    ax.set_yscale("symlog", linthresh=1e-3)
    ax.set(xlabel="step", ylabel="λ_min (tracked)")
    _title(ax, "(b) tracked λ_min; dots: eigh at the plateau points")


def _relative_panel(ax: Axes, groups: Sequence[Mapping[str, Any]], rows: Sequence[Row]) -> None:
    res = groups[0]["result"]
    for s in rows:
        if s["status"] != "escaped" or res.tracked_steps is None:
            continue
        run = int(np.flatnonzero(res.seeds == s["seed"])[0])
        ax.plot(
            res.tracked_steps - s["escape_step"],
            res.metrics["lambda_min"][run],
            color=COLORS["escaped"],
            linewidth=0.8,
        )
    trapped = [s["lambda_min"] for s in rows if s["status"] != "escaped"]
    if trapped:
        ax.axhspan(
            min(trapped),
            max(trapped),
            color=COLORS["trapped"],
            alpha=0.25,
            label="trapped seeds at their plateau point",
        )
        _legend(ax, fontsize=7)
    ax.set_yscale("symlog", linthresh=1e-3)
    ax.set(xlabel="step - escape step", ylabel="λ_min (tracked)")
    _title(ax, "(c) escaped seeds: λ_min before the escape")


def _overlap_panel(ax: Axes, rows: Sequence[Row]) -> None:
    escaped = [s for s in rows if s["status"] == "escaped" and "overlap" in s]
    if not escaped:
        ax.set_axis_off()
        return
    x = np.arange(len(escaped))
    ax.bar(x, [s["overlap"] for s in escaped], color=COLORS["escaped"], label="|P_V u|")
    ax.errorbar(
        x,
        [s["random_mean"] for s in escaped],
        yerr=[2 * s["random_std"] for s in escaped],
        fmt="_",
        color="k",
        capsize=3,
        label="random subspaces (mean ± 2 sd)",
    )
    ax.plot(x, [s["overlap_gradient"] for s in escaped], "x", color="C2", label="|g . u| / |g|")
    ax.set_xticks(x, [f"seed {s['seed']}" for s in escaped], fontsize=7)
    ax.set(ylabel="overlap with the real escape u")
    _title(ax, f"(d) the {escaped[0]['directions_found']} most negative directions vs chance")
    _legend(ax, fontsize=6, loc="upper right", framealpha=0.9)
    ax.set_ylim(0, 1.35 * max(s["overlap"] for s in escaped))


def _profile_panel(
    ax: Axes, found: Mapping[tuple, basin.Radius], cell: int, row: Row, margins: Sequence[float]
) -> None:
    """L(θ + r v) - L(θ) against r / |θ| along v1, the real escape and random directions."""
    names = [key[2] for key in found if key[0] == cell and key[1] == row["seed"]]
    colors = {"v1": "C3", "escape": "C0", "span": "C2"}
    for name in names:
        result = found[(cell, row["seed"], name)]
        order = np.argsort(result.grid)
        color = colors.get(name, "0.6")
        label = name if not name.startswith("random") or name == "random 0" else None
        ax.plot(
            result.grid[order] / row["theta_norm"],
            result.losses[order] - result.loss,
            color=color,
            linewidth=1.0 if color != "0.6" else 0.6,
            label="random" if label == "random 0" else label,
        )
    deltas = found[(cell, row["seed"], names[0])].margins
    for margin, delta in zip(margins, deltas, strict=True):
        ax.axhline(-delta, color="k", linestyle=":", linewidth=0.6)
        ax.annotate(
            f"-{margin:g} I",
            (0.01, -delta),
            xycoords=("axes fraction", "data"),
            fontsize=6,
            va="top",
        )
    ax.set_xscale("symlog", linthresh=0.01)
    ax.set_ylim(-2 * deltas.max(), 2 * deltas.max())
    ax.set(xlabel="signed r / |θ| (linear below 0.01)", ylabel="L(θ + r v) - L(θ)")
    letter = "e" if row["status"] == "escaped" else "f"
    _title(
        ax,
        f"({letter}) lines from {row['cell'].split(',')[0]} seed {row['seed']} "
        f"({row['status']}),\nstep {row['plateau_step']}; dotted: minus the margins",
    )
    _legend(ax, fontsize=6)


def _title(ax: Axes, title: str) -> None:
    ax.set_title(title)
    ax.title.set_fontsize(8)


def _legend(ax: Axes, **kwargs: Any) -> None:
    """A legend where the panel has labelled lines (a tiny run may have none)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**kwargs)
