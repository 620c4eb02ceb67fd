"""The n-gram figures (notes/ngrams.md §5): test loss with the estimator lines (Figs 1, 3a, 4a/c),
layer-1 attention at highlighted steps (Figs 3b, 4b/d), heads by seed (Fig. 5) and the gradient
norm along training (Figs 6, 7)."""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np
from ml_collections import ConfigDict

from landscape.engine import plotting, records
from landscape.ngrams.claims import Lines, program_label


def _highlights(cfg: ConfigDict, group: dict) -> list[int]:
    """Steps shown in the attention panels: the config's, else start / mid-plateau / end."""
    steps = group["result"].snapshot_steps
    if cfg.figure.highlight_steps:
        return [int(steps[np.argmin(np.abs(steps - s))]) for s in cfg.figure.highlight_steps]
    middle = group["rows"][0]["plateaus"]
    chosen = [int(steps[min(2, len(steps) - 1)])]
    chosen += [int(steps[np.argmin(np.abs(steps - (p["start"] + p["end"]) / 2))]) for p in middle]
    chosen.append(int(steps[-1]))
    return sorted(set(chosen))


def figures_train(
    cfg: ConfigDict, groups: list[dict], lines: Lines, workdir: records.Workdir
) -> list[pathlib.Path]:
    paths = []
    for i, g in enumerate(groups):
        suffix = f"_{i}" if len(groups) > 1 else ""
        paths.append(plot_loss(g, lines, workdir.figure_path(f"test_loss{suffix}")))
        if cfg.train.attention_maps:
            paths.append(plot_attention(g, workdir.figure_path(f"attention{suffix}")))
        if g["result"].num_runs > 1 and cfg.train.attention_maps:
            paths.append(plot_seeds(g, workdir.figure_path(f"heads_by_seed{suffix}")))
        paths.append(plot_grad_norm(g, lines, workdir.figure_path(f"grad_norm{suffix}")))
    return paths


_LINE_COLORS = ("tab:gray", "tab:red", "tab:orange", "tab:green", "tab:blue")


def _draw_lines(ax: Any, lines: Lines, n: int) -> None:
    """k-gram lines: add-alpha dashed, best smoothing dotted; the Bayes n-gram dashed."""
    for k in range(1, n + 1):
        color = _LINE_COLORS[k % len(_LINE_COLORS)]
        names = [("bayes", "--")] if k == n else [(f"{k}-gram +alpha", "--")]
        for name, style in names + [(f"{k}-gram opt", ":")]:
            value = lines.base[name]
            ax.axhline(
                value, color=color, linestyle=style, linewidth=0.9, label=f"{name} {value:.3f}"
            )


def plot_loss(group: dict, lines: Lines, path: str | pathlib.Path) -> pathlib.Path:
    """Test loss against step (every seed), the estimator lines dashed (add-alpha, the authors'
    lines) and dotted (best smoothing), the highlighted steps marked (Figs 1, 3a, 4a/c)."""
    cfg, res = group["cfg"], group["result"]
    fig, axes = plotting.subplots(1, 1, width=6.0, height=3.8)
    ax = axes[0, 0]
    for r in range(res.num_runs):
        ax.plot(
            res.snapshot_steps,
            res.snapshots["test_loss"][r],
            linewidth=1.1,
            label=f"seed {res.seeds[r]}" if res.num_runs > 1 else "test loss",
        )
    _draw_lines(ax, lines, cfg.task.order_n)
    for s in _highlights(cfg, group):
        j = int(np.flatnonzero(res.snapshot_steps == s)[0])
        ax.plot(s, res.snapshots["test_loss"][0, j], "o", color="k", markersize=4)
    low = min(lines.base["bayes"], res.snapshots["test_loss"].min()) - 0.02
    high = max(res.snapshots["test_loss"][:, 1:].max(), lines.base["uniform"]) + 0.02
    ax.set(xlabel="step", ylabel="test loss (nats)", ylim=(low, high), title=program_label(group))
    ax.legend(fontsize=6, ncol=2)
    return plotting.save(fig, path)


def plot_attention(group: dict, path: str | pathlib.Path) -> pathlib.Path:
    """First-layer attention of each head (rows) at the highlighted steps (columns): Fig 3b/4b."""
    cfg, res = group["cfg"], group["result"]
    chosen = _highlights(cfg, group)
    att = res.snapshots["attention"][0]  # (snaps, heads, T, T)
    heads = att.shape[1]
    fig, axes = plotting.subplots(heads, len(chosen), width=2.6, height=2.4)
    for c, s in enumerate(chosen):
        j = int(np.flatnonzero(res.snapshot_steps == s)[0])
        for h in range(heads):
            ax = axes[h, c]
            ax.imshow(att[j, h], cmap="viridis", vmin=0, vmax=1, interpolation="nearest")
            lags = res.snapshots["head_offsets"][0, j, h]
            ax.set_title(
                f"step {s}, head {h + 1}\n-1: {lags[0]:.2f}  -2: {lags[1]:.2f}", fontsize=7
            )
            ax.set(xlabel="key position", ylabel="query position")
    fig.suptitle(f"{program_label(group)}: layer-1 attention (seed {res.seeds[0]})", fontsize=8)
    return plotting.save(fig, path)


def plot_seeds(group: dict, path: str | pathlib.Path) -> pathlib.Path:
    """Fig. 5: each seed's heads (columns) at the middle of its longest intermediate plateau,
    and each head's attention on offsets -1 / -2 along training."""
    res, rows = group["result"], group["rows"]
    heads = res.snapshots["attention"].shape[2]
    fig, axes = plotting.subplots(res.num_runs, heads + 1, width=2.5, height=2.2)
    for r, row in enumerate(rows):
        middle = [p for p in row["plateaus"] if p["k"] < group["cfg"].task.order_n]
        mid = max(middle, key=lambda p: p["end"] - p["start"]) if middle else None
        step = (mid["start"] + mid["end"]) / 2 if mid else res.snapshot_steps[-1] / 2
        j = int(np.argmin(np.abs(res.snapshot_steps - step)))
        for h in range(heads):
            axes[r, h].imshow(
                res.snapshots["attention"][r, j, h],
                cmap="viridis",
                vmin=0,
                vmax=1,
                interpolation="nearest",
            )
            axes[r, h].set_title(
                f"seed {row['seed']}, head {h + 1}, step {res.snapshot_steps[j]}", fontsize=7
            )
            axes[r, h].axis("off")
        ax = axes[r, heads]
        for h in range(heads):
            for lag, style in ((1, "-"), (2, "--")):
                ax.plot(
                    res.snapshot_steps,
                    res.snapshots["head_offsets"][r, :, h, lag - 1],
                    style,
                    linewidth=1,
                    label=f"head {h + 1}, -{lag}",
                )
        ax.set(ylim=(0, 1), xlabel="step", ylabel="attention on offset")
        if r == 0:
            ax.legend(fontsize=5)
    return plotting.save(fig, path)


def plot_grad_norm(
    group: dict, lines: Lines, path: str | pathlib.Path, max_runs: int = 4
) -> pathlib.Path:
    """Figs 6-7: test loss (left axis) and gradient norms (right axis), one row per seed (at most
    `max_runs`), one column per measure (metrics_at "both": the parameter EMA, then the current
    parameters); every panel shares one gradient scale, so spikes compare by eye."""
    panels = [group] + ([group["other_measure"]] if group.get("other_measure") else [])
    runs = min(group["result"].num_runs, max_runs)
    fig, axes = plotting.subplots(runs, len(panels), width=6.0, height=3.2)
    twins = []
    for r in range(runs):
        for c, view in enumerate(panels):
            ax, res, row = axes[r, c], view["result"], view["rows"][r]
            ax.plot(
                res.snapshot_steps,
                res.snapshots["test_loss"][r],
                color="tab:blue",
                label="test loss",
            )
            _draw_lines(ax, lines, view["cfg"].task.order_n)
            ax.set(
                xlabel="step",
                ylabel="test loss (nats)",
                title=f"{program_label(view)}, seed {row['seed']}".replace(", at the", ",\nat the"),
            )
            twin = ax.twinx()
            twin.plot(
                res.snapshot_steps[1:],
                row["grad_norm_per_snapshot"],
                color="tab:purple",
                linewidth=0.9,
                alpha=0.6,
                label="minibatch gradient norm (current parameters, mean per interval)",
            )
            twin.plot(
                res.snapshot_steps,
                res.snapshots["test_grad_norm"][r],
                color="tab:red",
                linewidth=1.1,
                label="population gradient norm (unbiased, test set)",
            )
            twin.set_ylabel("gradient norm")
            twin.spines["right"].set_visible(True)
            twins.append(twin)
            if r == 0:
                twin.legend(fontsize=6, loc="center right")
                ax.legend(fontsize=6, loc="upper right")
    low, high = min(t.get_ylim()[0] for t in twins), max(t.get_ylim()[1] for t in twins)
    for t in twins:
        t.set_ylim(low, high)
    return plotting.save(fig, path)


# ----------------------------------------------------------------------------- curvature study


def _shade_plateaus(ax: Any, rows: list[dict], order_n: int) -> None:
    for row in rows[:1]:  # the first run's plateaus (a sub-n-gram one darker)
        for p in row["plateaus"]:
            alpha = 0.18 if p["k"] < order_n else 0.08
            ax.axvspan(p["start"], p["end"], color="tab:blue", alpha=alpha, linewidth=0)


def _training_panels(axes: Any, view: dict, rows: list[dict], tables: dict) -> None:
    """Test loss, and the tracked λ_max / λ_min (symlog), with the plateaus shaded, the probed
    steps (solid) and the steps after the drop (dotted) marked, the dense values starred."""
    res, n = view["result"], view["cfg"].task.order_n
    points = tables["curvature_points"]
    tracked = f"{view['cfg'].train.track_sequences} test sequences"
    for r in range(res.num_runs):
        axes[0].plot(
            res.snapshot_steps, res.snapshots["test_loss"][r], lw=1, label=f"seed {res.seeds[r]}"
        )
        if res.tracked_steps is not None:
            for name, color in (("lambda_max", "tab:red"), ("lambda_min", "tab:blue")):
                axes[1].plot(
                    res.tracked_steps,
                    res.metrics[name][r],
                    lw=0.9,
                    color=color,
                    alpha=0.8,
                    label=name.replace("lambda", "λ") + f" ({tracked})" if r == 0 else None,
                )
    for p in points:
        for ax in axes:
            ax.axvline(p["step"], color="k", lw=0.8)
            if p["after"] is not None:
                ax.axvline(p["after"], color="k", lw=0.8, ls=":")
        for name in ("lambda_min", "lambda_max"):
            axes[1].plot(p["step"], p[name], "*", color="k", ms=9)
    for ax in axes:
        _shade_plateaus(ax, rows, n)
        ax.set_xlabel("step")
    axes[0].set(ylabel="test loss (nats)", title="test loss; plateaus shaded")
    axes[1].set_yscale("symlog", linthresh=0.01)
    size = points[0]["num_sequences"] if points else 0
    axes[1].set(
        ylabel="Hessian eigenvalue",
        title=f"extreme eigenvalues (★: dense, {size} population sequences)",
    )
    axes[1].legend(fontsize=6)


def _population_panel(ax: Any, tables: dict) -> None:
    """-λ_min and |g| at each probed point against the population's size."""
    runs = sorted({(r["run"], r["step"]) for r in tables["lambda_vs_population"]})
    for run, step in runs:
        rows = [r for r in tables["lambda_vs_population"] if (r["run"], r["step"]) == (run, step)]
        sizes = [r["num_sequences"] for r in rows]
        ax.plot(
            sizes, [-r["lambda_min"] for r in rows], "o-", label=f"-λ_min, run {run} step {step}"
        )
        ax.plot(
            sizes, [r["grad_norm"] for r in rows], "s--", ms=3, label=f"|g|, run {run} step {step}"
        )
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="sequences in the population",
        title="λ_min and |g| against the sample (Lanczos)",
    )
    ax.legend(fontsize=6)


def _first_run(table: list[dict]) -> tuple[list[dict], list[int]]:
    """The rows of the first probed run and its probed steps."""
    rows = [r for r in table if r["run"] == table[0]["run"]]
    return rows, sorted({r["step"] for r in rows})


def _overlap_panel(ax: Any, table: list[dict], measure: str) -> None:
    """Bars: the overlap of each target with each subspace, a bar per probed step (first run),
    chance as a black tick with ± 2 std whiskers (random directions in the coordinates training
    moves)."""
    rows, steps = _first_run(table)
    combos = list(dict.fromkeys((r["target"], r["basis"]) for r in rows))
    ks = {
        c: "/".join(dict.fromkeys(str(r["k"]) for r in rows if (r["target"], r["basis"]) == c))
        for c in combos
    }
    width = 0.8 / len(steps)
    for i, step in enumerate(steps):
        at = {(r["target"], r["basis"]): r for r in rows if r["step"] == step}
        chosen = [at[c] for c in combos if c in at]
        x = np.flatnonzero([c in at for c in combos]) - 0.4 + width * (i + 0.5)
        ax.bar(x, [r[measure] for r in chosen], width * 0.9, alpha=0.8, label=f"step {step}")
        ax.errorbar(
            x,
            [r[f"random_{measure}_mean"] for r in chosen],
            yerr=[2 * r[f"random_{measure}_std"] for r in chosen],
            fmt="_",
            color="k",
            ms=8,
            capsize=2,
            label="chance ± 2 std" if i == 0 else None,
        )
    labels = [f"{t}\n{b} (k={ks[(t, b)]})" for t, b in combos]
    ax.set_xticks(np.arange(len(combos)), labels, fontsize=5.5, rotation=30, ha="right")
    word = "|projection| on the span" if measure == "span" else "max |cos| with one vector"
    ax.set(ylabel=word, title=f"{word}, seed {rows[0]['seed']}")
    ax.legend(fontsize=6)


def _shares_panel(ax: Any, table: list[dict]) -> None:
    """Stacked bars: the squared norm per block of each subspace or direction, at each probed
    step (first run)."""
    rows, _ = _first_run(table)
    rows = sorted(rows, key=lambda r: (r["vectors"], r["step"]))
    blocks = [k for k in rows[0] if k not in ("run", "seed", "step", "vectors")]
    left = np.zeros(len(rows))
    colors = plotting.plt.cm.tab10(np.arange(len(blocks)))
    for block, color in zip(blocks, colors, strict=True):
        values = np.array([r[block] for r in rows])
        ax.barh(np.arange(len(rows)), values, left=left, color=color, label=block)
        left += values
    labels = [f"{r['vectors']}, step {r['step']}" for r in rows]
    ax.set_yticks(np.arange(len(rows)), labels, fontsize=5.5)
    ax.set(xlabel="share of the squared norm", xlim=(0, 1), title="where the directions live")
    ax.legend(fontsize=6, ncol=6, loc="upper center", bbox_to_anchor=(0.5, -0.16))


def plot_curvature_study(
    view: dict, rows: list[dict], tables: dict, path: str | pathlib.Path
) -> pathlib.Path:
    """The curvature study's figure (docs/studies/ngrams_curvature.md): training (loss, tracked
    extreme eigenvalues, λ_min against the sample) above, the overlaps against chance and the
    blocks the directions live in below."""
    fig, axes = plotting.subplots(2, 3, width=4.2, height=3.4)
    _training_panels(axes[0, :2], view, rows, tables)
    if tables["lambda_vs_population"]:
        _population_panel(axes[0, 2], tables)
    if tables["overlaps"]:
        _overlap_panel(axes[1, 0], tables["overlaps"], "span")
        _overlap_panel(axes[1, 1], tables["overlaps"], "max_cos")
        _shares_panel(axes[1, 2], tables["block_shares"])
    fig.suptitle(f"{program_label(view)}: curvature at the plateau", fontsize=9)
    return plotting.save(fig, path)
