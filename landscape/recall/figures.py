"""The associative-recall figures: gradient-flow losses and stage plots (E1-E4), SGD loss curves
and attention maps (Fig. 1, E5, E6)."""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Sequence

import numpy as np
from ml_collections import ConfigDict

from landscape.engine import config as config_lib
from landscape.engine import plotting, records
from landscape.recall import flow, theory
from landscape.recall.claims import Group, levels, longest_run


def figures_flow(
    cfg: ConfigDict, groups: Sequence[Group], workdir: records.Workdir
) -> list[pathlib.Path]:
    if cfg.claims == "stages":
        return [_plot_stages(cfg, g, workdir, i) for i, g in enumerate(groups)]
    paths = []
    for i, g in enumerate(groups):
        L = levels(g["cfg"])
        fig, axes = plotting.subplots(1, 2, width=4.6, height=3.3)
        ax_loss, ax_beta = axes[0]
        log_time = g["cfg"].flow.log_time
        for r, point in enumerate(g["grid"]):
            x = g["times"][r] if log_time else g["eps"][r] * g["times"][r]
            label = ", ".join(f"{k.split('.')[-1]}={v}" for k, v in point.items())
            (line,) = ax_loss.plot(x, g["loss"][r], label=label, linewidth=1.2)
            if r == int(np.argmin(g["eps"])) or len(g["grid"]) <= 4:
                for h in range(g["params"]["beta"].shape[-1]):
                    ax_beta.plot(
                        x,
                        g["params"]["beta"][r, :, h],
                        color=line.get_color(),
                        alpha=1.0 - 0.2 * h,
                        linewidth=1,
                    )
        for level in L:
            ax_loss.axhline(level, color="gray", linestyle=":", linewidth=0.8)
        xlabel = "t" if log_time else r"$\varepsilon t$"
        for ax in (ax_loss, ax_beta):
            ax.set_xlabel(xlabel)
            if log_time:
                ax.set_xscale("log")
        ax_loss.set(ylabel="population loss", title="loss (dotted: plateau levels $L_m$)")
        ax_beta.set(ylabel=r"$\beta_h$", title=r"$\beta_h(t)$")
        if 1 < len(g["grid"]) <= 10:
            ax_loss.legend(fontsize=6)
        paths.append(plotting.save(fig, workdir.figure_path(f"flow{i}")))
        if cfg.claims == "first_jump":
            paths.append(_plot_first_jump_scaling(cfg, g, workdir))
    return paths


def _plot_stages(cfg: ConfigDict, g: Group, workdir: records.Workdir, index: int) -> pathlib.Path:
    """E3: per beta(0) shape, L against eps*t for every eps (colour) with the eps -> 0 step
    function of the recursion (dashed), and beta_h at the smallest eps."""
    L = levels(cfg)
    shapes = []
    for point in g["grid"]:
        shape = tuple(config_lib.with_fields(cfg, point).init.beta_shape)
        if shape not in shapes:
            shapes.append(shape)
    eps_values = sorted(set(g["eps"]), reverse=True)
    colors = plotting.plt.cm.viridis(np.linspace(0, 0.9, len(eps_values)))
    fig, axes = plotting.subplots(2, len(shapes), width=3.0, height=2.5, sharex=True)
    for j, shape in enumerate(shapes):
        runs = [
            r
            for r, p in enumerate(g["grid"])
            if tuple(config_lib.with_fields(cfg, p).init.beta_shape) == shape
        ]
        for r in runs:
            color = colors[eps_values.index(g["eps"][r])]
            axes[0, j].plot(
                g["eps"][r] * g["times"][r],
                g["loss"][r],
                color=color,
                linewidth=1.2,
                label=f"eps={g['eps'][r]:g}",
            )
        taus = theory.vanishing_init_jumps(np.asarray(shape), cfg.task.k, cfg.task.num_responses)[
            "taus"
        ]
        x = np.linspace(0, cfg.flow.tau_max, 3000)
        axes[0, j].plot(
            x, L[np.searchsorted(taus, x, side="right")], "k--", linewidth=1, label="eps -> 0 limit"
        )
        axes[0, j].set_title(f"beta(0) = eps x {list(shape)}", fontsize=8)
        smallest = min(runs, key=lambda r: g["eps"][r])
        for h in range(g["params"]["beta"].shape[-1]):
            axes[1, j].plot(
                g["eps"][smallest] * g["times"][smallest],
                g["params"]["beta"][smallest, :, h],
                label=f"head {h + 1}",
            )
        axes[1, j].set_xlabel(r"$\varepsilon t$")
    axes[0, 0].set_ylabel("population loss")
    axes[1, 0].set_ylabel(rf"$\beta_h$ at eps = {min(eps_values):g}")
    axes[0, -1].legend(fontsize=6)
    axes[1, -1].legend(fontsize=6)
    return plotting.save(fig, workdir.figure_path(f"stages{index}"))


def _plot_first_jump_scaling(cfg: ConfigDict, g: Group, workdir: records.Workdir) -> pathlib.Path:
    k, nr = cfg.task.k, cfg.task.num_responses
    L = levels(cfg)
    eps = g["eps"]
    eps_T = eps * flow.jump_times(g["times"], g["loss"], L[:2])[:, 0]
    fig, axes = plotting.subplots(1, 1, width=4.2, height=3.2)
    ax = axes[0, 0]
    ax.plot(eps, eps_T, "o-", label="gradient flow")
    ax.axhline(
        eps[0] * theory.jump_time(k, nr, eps[0]),
        color="k",
        linestyle="--",
        label=r"$\pi k\,k!/(2A\sqrt{2(k-1)/k})$",
    )
    ax.set(
        xscale="log",
        xlabel=r"$\varepsilon$",
        ylabel=r"$\varepsilon\,T_{mid}$",
        title="first plateau length ~ 1/eps",
    )
    ax.legend(fontsize=7)
    return plotting.save(fig, workdir.figure_path("first_jump_scaling"))


def figures_sgd(
    cfg: ConfigDict, groups: Sequence[Group], workdir: records.Workdir
) -> list[pathlib.Path]:
    """Fig. 1: loss and beta over training; layer-1 attention at a step inside each plateau."""
    paths = []
    for i, g in enumerate(groups):
        c, res = g["cfg"], g["result"]
        L = levels(c)
        steps = res.snapshot_steps
        fig, axes = plotting.subplots(1, 2, width=4.4, height=3.2)
        for level in L:
            axes[0, 0].axhline(level, color="gray", linestyle=":", linewidth=0.8)
        axes[0, 0].plot(steps, res.snapshots["eval_loss"].T, linewidth=1)
        axes[0, 0].set(xlabel="step", ylabel="population loss", title="loss (dotted: $L_m$)")
        beta = res.snapshots["beta"][0]
        for h in range(beta.shape[-1]):
            axes[0, 1].plot(steps, beta[:, h], label=f"$\\beta_{h + 1}$")
        axes[0, 1].set(xlabel="step", ylabel=r"$\beta_h$", title="second-layer scales (seed 0)")
        axes[0, 1].legend(fontsize=7)
        paths.append(plotting.save(fig, workdir.figure_path(f"fig1_loss_beta{i}")))

        loss0 = res.snapshots["eval_loss"][0]
        runs = [longest_run(np.abs(loss0 - level) < 0.01) for level in L]
        picks = [start + length // 2 for start, length in runs if length]
        fig, axes = plotting.subplots(1, len(picks), width=2.6, height=2.4)
        for ax, p in zip(axes[0], picks, strict=True):
            attention = res.snapshots["attention"][0, p]
            plotting.heatmap(
                ax,
                attention,
                row_labels=[f"head {h + 1}" for h in range(attention.shape[0])],
                col_labels=[str(o + 1) for o in range(attention.shape[1])],
                title=f"step {steps[p]} (L = {loss0[p]:.3f})",
                vmin=0,
                vmax=1,
                colorbar=ax is axes[0, -1],
            )
            ax.set_xlabel("offset")
        paths.append(plotting.save(fig, workdir.figure_path(f"fig1_attention{i}")))
    return paths


FigureFn = Callable[[ConfigDict, Sequence[Group], records.Workdir], list[pathlib.Path]]

FIGURES: dict[str, FigureFn] = {"flow": figures_flow, "sgd": figures_sgd}
