"""The Scan & Snap figures: batch-loss curves, c_n over iterations (Figs. 4, 5), entropy against
eta_Y/eta_Z (Fig. 6), and the theory figures from the closed forms (Figs. 3, 8, 9)."""

from __future__ import annotations

import pathlib

import ml_collections
import numpy as np

from landscape.engine import config as config_lib
from landscape.engine import plotting, records, sweeps, training
from landscape.scan_snap import task as task_lib
from landscape.scan_snap import theory
from landscape.scan_snap.claims import Group, fig6_table, traced_cells


def draw(
    cfg: ml_collections.ConfigDict, groups: list[Group], workdir: records.Workdir
) -> list[str]:
    """The figures of a training run: losses, the attention (one program), Fig. 6's curves."""
    paths = [plot_losses(groups, workdir.figure_path("loss"))]
    if cfg.eval.snapshot_attention and len(groups) == 1:
        paths.append(plot_attention(cfg, *groups[0][1:], workdir.figure_path("attention")))
    if cfg.claims == "fig6" or (
        len(groups) > 1
        and "optim.lr_y_over_lr_z" in config_lib.flatten(cfg.sweep)
        and "optim.lr_z" in config_lib.flatten(cfg.sweep)
    ):
        paths.append(plot_entropy_vs_ratio(groups, workdir.figure_path("entropy_vs_ratio")))
    return [str(p) for p in paths]


def _cell_label(cell: dict[str, float]) -> str:
    return (
        f"$\\eta_Z$={cell['optim.lr_z']:g}, "
        f"$\\eta_Y$={cell['optim.lr_z'] * cell['optim.lr_y_over_lr_z']:g}"
    )


def plot_losses(groups: list[Group], path: pathlib.Path) -> pathlib.Path:
    """Batch loss against iteration, one panel per program, one curve per traced cell."""
    fig, axes = plotting.subplots(1, len(groups), width=4.2, height=3.0)
    for ax, (_, task, grid, result) in zip(axes[0], groups, strict=True):
        steps = np.arange(result.losses.shape[1])
        for cell, runs in traced_cells(grid, result):
            plotting.mean_and_band(
                ax,
                steps,
                np.maximum(result.losses[runs], 1e-8),
                label=_cell_label(cell),
                log_y=True,
            )
        ax.set_xlabel("iteration")
        ax.set_ylabel("batch loss")
        ax.set_title(f"K = {task.num_classes}, M = {task.num_tokens}")
        if len(traced_cells(grid, result)) <= 8:
            ax.legend(fontsize=7)
    return plotting.save(fig, path)


def plot_attention(
    cfg: ml_collections.ConfigDict,
    task: task_lib.SequenceClasses,
    grid: sweeps.Grid,
    result: training.RunResult,
    path: pathlib.Path,
) -> pathlib.Path:
    """Fig. 4/5: c_n over iterations (rows) for common | distinct tokens (columns), first seed."""
    steps = list(result.snapshot_steps)
    rows = [s if s >= 0 else steps[-1] for s in cfg.eval.plot_steps if s in steps or s < 0]
    row_index = [steps.index(s) for s in rows]
    cells = traced_cells(grid, result)
    classes = min(cfg.eval.plot_classes, task.num_classes)
    fig, axes = plotting.subplots(classes, len(cells), width=4.0, height=2.4)
    vmax = float(result.snapshots["attention"][[runs[0] for _, runs in cells]].max())
    for j, (cell, runs) in enumerate(cells):
        for n in range(classes):
            common = np.flatnonzero(task.is_common)[: cfg.eval.plot_common]
            distinct = np.flatnonzero(task.is_distinct[n])[: cfg.eval.plot_distinct]
            tokens = np.concatenate([common, distinct])
            values = result.snapshots["attention"][runs[0]][row_index][:, n, tokens]
            plotting.heatmap(
                axes[n, j],
                values,
                row_labels=[str(s) if s != steps[-1] else f"final ({s})" for s in rows],
                col_labels=[str(t) for t in tokens],
                separators=[len(common) - 0.5],
                title=f"class {n} (query {task.last_token[n]}) | {_cell_label(cell)}",
                vmin=0.0,
                vmax=vmax,
                colorbar=j == len(cells) - 1,
            )
            axes[n, j].set_xlabel("token (common | distinct)")
            axes[n, j].set_ylabel("iteration")
    return plotting.save(fig, path)


def plot_entropy_vs_ratio(groups: list[Group], path: pathlib.Path) -> pathlib.Path:
    """Fig. 6: final distinct-token entropy vs eta_Y/eta_Z, one curve per eta_Z, one panel per K."""
    table = fig6_table(groups)
    fig, axes = plotting.subplots(1, len(table), width=3.3, height=3.0)
    for ax, (K, t) in zip(axes[0], sorted(table.items()), strict=True):
        for i, lr in enumerate(t["lr_z"]):
            ax.errorbar(
                t["ratio"],
                t["mean"][i],
                yerr=t["std"][i],
                marker="o",
                markersize=3,
                capsize=2,
                label=f"$\\eta_Z$={lr:g}",
            )
        ax.axvline(1.0, color="gray", linestyle="--", linewidth=1)
        ax.set_xscale("log")
        ax.set_xticks(t["ratio"], [f"{r:g}" for r in t["ratio"]])
        ax.set_xlabel("$\\eta_Y / \\eta_Z$")
        ax.set_title(f"#last/next tokens = {K // 2 if K > 1 else 1}/{K}")
    axes[0, 0].set_ylabel("entropy of distinct-token attention (nats)")
    axes[0, -1].legend(fontsize=7)
    return plotting.save(fig, path)


# ----------------------------------------------------------------------------- theory figures


def plot_growth_factor(
    th: ml_collections.ConfigDict, t: np.ndarray, chis: list[np.ndarray], path: pathlib.Path
) -> pathlib.Path:
    """Fig. 3: chi_up(t) at fixed eta_Z for several eta_Y (`claims.growth_factors`); t0 dotted."""
    fig, axes = plotting.subplots(1, 1, width=4.6, height=3.4)
    for eta_y, chi in zip(th.fig3_eta_y, chis, strict=True):
        (line,) = axes[0, 0].plot(t, chi, label=f"$\\eta_Y$={eta_y:g}")
        axes[0, 0].axvline(theory.t0(th.M, th.K, eta_y), color=line.get_color(), linestyle=":")
    axes[0, 0].set(
        xscale="log",
        yscale="log",
        xlabel="t",
        ylabel="$\\chi_l(t)$ upper bound",
        title=f"Fig. 3: M={th.M}, K={th.K}, $\\eta_Z$={th.fig3_eta_z:g}",
    )
    axes[0, 0].legend(fontsize=7)
    return plotting.save(fig, path)


def plot_h_star_vs_h(
    th: ml_collections.ConfigDict,
    curves: list[tuple[np.ndarray, float | np.ndarray]],
    path: pathlib.Path,
) -> pathlib.Path:
    """Fig. 8: h*(s) vs h(s) (`claims.h_curves`) and the gap with its bound 2 eta_Y / M."""
    fig, axes = plotting.subplots(1, 2, width=4.0, height=3.2)
    s = np.arange(th.fig8_steps + 1)
    for eta_y, (h_star, h) in zip(th.fig8_eta_y, curves, strict=True):
        (line,) = axes[0, 0].step(s, h_star, where="post", label=f"$h^*$, $\\eta_Y$={eta_y:g}")
        axes[0, 0].plot(s, h, color=line.get_color(), linestyle="--")
        axes[0, 1].plot(s, h_star - h, color=line.get_color())
        axes[0, 1].axhline(2 * eta_y / th.M, color=line.get_color(), linestyle=":")
    axes[0, 0].set(xlabel="s", ylabel="h", title="Fig. 8: $h^*$ (steps) vs $h$ (dashed)")
    axes[0, 1].set(
        xlabel="s",
        ylabel="$h^* - h$",
        yscale="log",
        title="gap and its bound $2\\eta_Y/M$ (dotted)",
    )
    axes[0, 0].legend(fontsize=7)
    return plotting.save(fig, path)


def plot_B_fixed_ratio(
    th: ml_collections.ConfigDict,
    t: np.ndarray,
    by_ratio: list[list[tuple[float, np.ndarray, float, np.ndarray]]],
    path: pathlib.Path,
) -> pathlib.Path:
    """Fig. 9: B_n(t) at each fixed ratio for several eta_Z (`claims.B_at_fixed_ratio`); B_n(t0)
    is the same dot for each eta_Z."""
    fig, axes = plotting.subplots(1, len(by_ratio), width=3.4, height=3.0)
    for ax, ratio, curves in zip(axes[0], th.fig9_ratios, by_ratio, strict=True):
        for eta_z, B, t0, at_t0 in curves:
            (line,) = ax.plot(t, B, label=f"$\\eta_Z$={eta_z:g}")
            ax.axvline(t0, color=line.get_color(), linestyle=":")
            ax.plot([t0], [at_t0], "o", color=line.get_color())
        ax.set(
            xscale="log",
            xlabel="t",
            ylabel="$B_n(t)$",
            title=f"Fig. 9: $\\eta_Y/\\eta_Z$={ratio:g}, $B_n(t_0)$={curves[0][3]:.4f}",
        )
        ax.legend(fontsize=7)
    return plotting.save(fig, path)
