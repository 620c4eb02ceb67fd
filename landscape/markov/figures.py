"""The Markov figures: test-loss curves with the unigram and bigram levels (Figs. 1, 3, 5), the
Fig. 4 grid of trapped fractions, and the trap study's curves and fractions (trap_study.py)."""

from __future__ import annotations

import pathlib
from collections.abc import Sequence

import numpy as np
from ml_collections import ConfigDict

from landscape.engine import plotting, records
from landscape.markov import trap_study
from landscape.markov.claims import Group, outcomes, program_label, references, runs_at
from landscape.typing import NDArray


def draw(cfg: ConfigDict, groups: Sequence[Group], workdir: records.Workdir) -> list[pathlib.Path]:
    if cfg.claims == "trap":
        workdir.save_table("trap_runs", [row for g in groups for row in trap_study.run_rows(g)])
        workdir.save_table("trap_cells", trap_study.cell_rows(groups))
        return [
            trap_study.plot_curves(groups, workdir.figure_path("trap_curves")),
            trap_study.plot_fractions(groups, workdir.figure_path("trap_fractions")),
        ]
    paths = [plot_losses(groups, workdir.figure_path("test_loss"))]
    if cfg.claims == "fig4":
        paths.append(plot_grid(groups, workdir.figure_path("fig4_heatmaps")))
    return paths


def plot_losses(groups: Sequence[Group], path: pathlib.Path) -> pathlib.Path:
    """Test loss against iteration per program, unigram and bigram levels dashed (Figs. 1, 3, 5)."""
    cells = [(g, c) for g in groups for c in _cells_of(g)]
    fig, axes = plotting.subplots(1, len(cells), width=3.6, height=2.9)
    for ax, (g, (p, q, runs)) in zip(axes[0], cells, strict=True):
        res = g["result"]
        plotting.mean_and_band(
            ax, res.snapshot_steps, res.snapshots["test_loss"][runs], label="test loss"
        )
        unigram, bigram = references(g["cfg"], p, q)
        ax.axhline(unigram, color="tab:red", linestyle="--", linewidth=1, label="unigram H(pi)")
        ax.axhline(bigram, color="tab:green", linestyle="--", linewidth=1, label="entropy rate")
        ax.set(
            xlabel="iteration",
            title=f"{program_label(g)}\np={p:g}"
            + (f", q={q:g}" if g["cfg"].chain.num_states == 2 else ""),
        )
        ax.title.set_fontsize(7)
    axes[0, 0].set_ylabel("test loss (nats)")
    axes[0, -1].legend(fontsize=6)
    return plotting.save(fig, path)


def _cells_of(group: Group) -> list[tuple[float, float, NDArray]]:
    res = group["result"]
    keys = sorted(
        {
            (float(p), float(q))
            for p, q in zip(res.hparams["chain.p"], res.hparams["chain.q"], strict=True)
        }
    )
    return [
        (
            p,
            q,
            np.flatnonzero(
                np.isclose(res.hparams["chain.p"], p) & np.isclose(res.hparams["chain.q"], q)
            ),
        )
        for p, q in keys
    ]


def plot_grid(groups: Sequence[Group], path: pathlib.Path) -> pathlib.Path:
    """Fig. 4: mean predicted P(1 | x_n = 0) and the stuck fraction over the (p, q) grid."""
    fig, axes = plotting.subplots(2, len(groups), width=3.8, height=3.2)
    for j, g in enumerate(groups):
        rows = outcomes(g)
        ps = sorted({r["p"] for r in rows})
        qs = sorted({r["q"] for r in rows})
        f0 = np.array([[np.mean([r["f0"] for r in runs_at(rows, p, q)]) for q in qs] for p in ps])
        stuck = np.array(
            [[np.mean([r["stuck"] for r in runs_at(rows, p, q)]) for q in qs] for p in ps]
        )
        for i, (values, title) in enumerate(
            [(f0, "mean predicted P(1 | 0)"), (stuck, "fraction of stuck runs")]
        ):
            plotting.heatmap(
                axes[i, j],
                values,
                row_labels=[f"{p:g}" for p in ps],
                col_labels=[f"{q:g}" for q in qs],
                title=f"{program_label(g)}\n{title}",
                vmin=0,
                vmax=1,
                cmap="viridis",
            )
            axes[i, j].title.set_fontsize(7)
            for a in range(len(ps)):
                for b in range(len(qs)):
                    axes[i, j].text(
                        b,
                        a,
                        f"{values[a, b]:.2f}",
                        ha="center",
                        va="center",
                        fontsize=6,
                        color="k" if values[a, b] > 0.6 else "w",
                    )
            axes[i, j].set(xlabel="q", ylabel="p")
    return plotting.save(fig, path)
