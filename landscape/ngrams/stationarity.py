"""The Theorem 4.2 study: how stationary are the constructions theta_*^k(c)? (notes/ngrams.md §4.5,
§4.6, §4.7 C3, C7, C8, C10)

    rows = study(ks=(2, 3), cs=(2, 4, 8, 16), seq_lens=(32, 64, 128, 256, 512), log_c0=2.0)
    print(table(rows)); plot(rows, "grad_vs_T.png"); plot_loss_vs_c(rows, "loss_vs_c.png")

One Monte-Carlo set per T judges every point. Details: docs/design/ngrams.md.
"""

from __future__ import annotations

import functools
import math
import pathlib
from collections.abc import Callable, Iterable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from landscape.ngrams import estimators, points
from landscape.ngrams import gradients as gradients_lib
from landscape.ngrams import model as model_lib
from landscape.typing import PyTree


def _estimator_losses(
    x_BT: jax.Array, target_BS: jax.Array, num_states: int, k: int, alpha: float, floor: float
) -> dict:
    """Mean CE on the set of the k-gram estimators with the same floor (notes §4.1, §4.4)."""
    probs = {
        "loss_padded": estimators.padded_kgram_estimate(x_BT, num_states, k),
        "loss_mle": estimators.kgram_estimate(x_BT, num_states, k),
        "loss_smoothed": estimators.smoothed_estimate(x_BT, num_states, k, alpha),
    }
    return {
        name: float(jnp.mean(estimators.cross_entropy(p, target_BS, floor)))
        for name, p in probs.items()
    }


def _row(stats: dict, **fields: Any) -> dict:
    row = dict(fields)
    row["loss"] = stats["loss"]
    for name, value in stats.items():
        if name != "loss":
            row["grad_" + name] = value
    return row


def _checked_grid(
    ks: Iterable[int],
    cs: Iterable[float],
    seq_lens: Iterable[int],
    num_states: int,
    order_n: int,
    alpha: float,
    log_c0: float | None,
) -> tuple[list[int], list[float], list[int]]:
    """(ks, cs, seq_lens) as lists, each value checked as points.check_construction checks it."""
    ks = [int(k) for k in ks]
    cs = [float(c) for c in cs]
    for k in ks:
        points.check_construction(num_states, order_n, None, alpha, None, k=k)
    for c in cs:
        points.check_construction(num_states, order_n, None, alpha, None, c=c)
    seq_lens = list(seq_lens)
    if not seq_lens:
        raise ValueError("seq_lens = []: give at least one sequence length T.")
    for T in seq_lens:
        points.check_construction(num_states, order_n, T, alpha, None)
        if log_c0 is not None and not float(log_c0) + math.log(T) > 0:
            raise ValueError(
                f"log_c0 = {log_c0!r}: c = log_c0 + log T = "
                f"{float(log_c0) + math.log(T):g} at T = {T} must be > 0."
            )
    return ks, cs, seq_lens


def _statistics(
    model: model_lib.NgramModel,
    x_BT: jax.Array,
    target_BS: jax.Array,
    floor: float,
    gradients: bool,
    chunk_size: int,
) -> Callable[[PyTree], dict]:
    """params -> the point's statistics on the set: the gradient statistics, or the loss alone."""
    if gradients:
        return functools.partial(
            gradients_lib.gradient_statistics,
            model=model,
            x_BT=x_BT,
            target_BS=target_BS,
            floor=floor,
            chunk_size=chunk_size,
        )
    loss_at = jax.jit(
        functools.partial(points.mean_ce, x_BT=x_BT, target_BS=target_BS, model=model, floor=floor)
    )

    def loss_only(params: PyTree) -> dict:
        return {"loss": float(loss_at(params))}

    return loss_only


def _construction_rows(
    grads: Callable[[PyTree], dict],
    model: model_lib.NgramModel,
    x_BT: jax.Array,
    target_BS: jax.Array,
    T: int,
    ks: list[int],
    cs: list[float],
    log_c0: float | None,
    alpha: float,
    common: dict,
    verbose: bool,
) -> list[dict]:
    """The theta_star rows at one T: per k, every fixed c, then c = log_c0 + log T if given."""
    rows = []
    for k in ks:
        estimator = _estimator_losses(x_BT, target_BS, model.num_states, k, alpha, common["floor"])
        scales = [("fixed", c) for c in cs]
        if log_c0 is not None:
            scales.append(("log", float(log_c0) + math.log(T)))
        for rule, c in scales:
            stats = grads(points.construction_params(k, c, model))
            rows.append(
                _row(stats, point="theta_star", rule=rule, k=k, c=c, T=T, **estimator, **common)
            )
            if verbose:
                print(
                    f"T={T} k={k} c={c:.3g}: loss {stats['loss']:.4f}, grad "
                    f"{stats.get('unbiased', math.nan):.4g} (noise "
                    f"{stats.get('noise', math.nan):.2g})",
                    flush=True,
                )
    return rows


def study(
    ks: Iterable[int],
    cs: Iterable[float],
    seq_lens: Iterable[int],
    *,
    num_states: int = 3,
    order_n: int = 3,
    alpha: float = 1.0,
    num_sequences: int = 16384,
    seed: int = 0,
    log_c0: float | None = None,
    init: str = "uniform",
    floor: float = 1e-8,
    random_seed: int = 0,
    gradients: bool = True,
    chunk_size: int = 2048,
    verbose: bool = False,
) -> list[dict]:
    """One row per (T, k, c), per (T, k) for c = log_c0 + log T, and per T for the random init.

    Row keys:
      point      "theta_star" or "random"
      rule       "fixed" (c from cs), "log" (c = log_c0 + log T) or "init" (random point)
      k, c, T    the construction (k = None and c = nan for the random point)
      loss       mean soft-target CE at the point (floor `floor`)
      grad_unbiased, grad_plain, grad_noise             total norms (gradients.gradient_norms)
      grad_unbiased/A1, ..., grad_noise/V1/head2, ...   the same per block and per head
      loss_padded, loss_mle, loss_smoothed   (theta_star rows) the padded k-gram MLE (the c -> inf
                 limit), the Def. 2.1 MLE (uniform fallback) and the add-alpha k-gram estimator on
                 the same set with the same floor (notes §4.1, §4.4)
      S, n, alpha, num_sequences, seed, floor, init
    Every point at a given T is judged on the same set (population_set(..., seed)).
    gradients=False skips the gradient statistics (rows without grad_* keys: the cheap C8
    loss-vs-c curve). The jitted loss / gradient functions take the params as traced arguments,
    so they compile once per T whatever the number of (k, c).
    """
    ks, cs, seq_lens = _checked_grid(ks, cs, seq_lens, num_states, order_n, alpha, log_c0)
    rows = []
    common = dict(
        S=num_states,
        n=order_n,
        alpha=alpha,
        num_sequences=num_sequences,
        seed=seed,
        floor=floor,
        init=init,
    )
    for T in seq_lens:
        model = model_lib.NgramModel(
            kind="simplified",
            num_states=num_states,
            seq_len=T,
            num_heads=order_n - 1,
            learn_value=True,
        )
        x_BT, target_BS = points.population_set(
            num_states, order_n, T, alpha, num_sequences, seed, init
        )
        grads = _statistics(model, x_BT, target_BS, floor, gradients, chunk_size)
        rows += _construction_rows(
            grads, model, x_BT, target_BS, T, ks, cs, log_c0, alpha, common, verbose
        )
        params = model_lib.init_params(jax.random.PRNGKey(random_seed), model, points.float_dtype())
        rows.append(
            _row(
                grads(params),
                point="random",
                rule="init",
                k=None,
                c=math.nan,
                T=T,
                random_seed=random_seed,
                **common,
            )
        )
    return rows


# --------------------------------------------------------------------------------------------------
# Text table (the notes' C7 table)
# --------------------------------------------------------------------------------------------------


def _fmt(value: float | None, width: int = 10) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return f"{'-':>{width}}"
    return f" {value:>{width - 1}.4g}"


def _grid_cell(row: dict, width: int) -> str:
    value, noise = row.get("grad_unbiased", math.nan), row.get("grad_noise", math.nan)
    if math.isnan(value):
        return f"{'-':>{width}}"
    mark = "~" if value <= noise else " "
    return f"{value:>{width - 1}.3g}{mark}"


def _grid_lines(rows: list[dict], width: int) -> list[str]:
    """The C7 grid: title, header, then one line per T."""
    seq_lens = sorted({row["T"] for row in rows})
    fixed = sorted({(row["k"], row["c"]) for row in rows if row["rule"] == "fixed"})
    log_ks = sorted({row["k"] for row in rows if row["rule"] == "log"})
    first = rows[0]
    lines = [
        f"||grad L(theta_*^k(c))||, unbiased estimate sign(<g_A, g_B>) sqrt|<g_A, g_B>| "
        f"(S={first['S']}, n={first['n']}, alpha={first['alpha']:g}, "
        f"{first['num_sequences']} sequences = 2 halves; '~': <= noise floor "
        "||g_A - g_B||/2)"
    ]
    header = f"{'T':>5} |" + "".join(f"{f'k={k} c={c:g}':>{width}}" for k, c in fixed)
    log_rows = [row for row in rows if row["rule"] == "log"]
    c0 = f"{log_rows[0]['c'] - math.log(log_rows[0]['T']):.3g}" if log_rows else ""
    header += "".join(f"{f'k={k} c={c0}+lnT':>{width + 3}}" for k in log_ks)
    header += f"{'random':>{width}}{'noise':>{width}}"
    lines += [header, "-" * len(header)]
    for T in seq_lens:
        at_T = [row for row in rows if row["T"] == T]
        line = f"{T:>5} |"
        for k, c in fixed:
            match = [r for r in at_T if r["rule"] == "fixed" and r["k"] == k and r["c"] == c]
            line += _grid_cell(match[0], width) if match else f"{'-':>{width}}"
        for k in log_ks:
            match = [r for r in at_T if r["rule"] == "log" and r["k"] == k]
            line += _grid_cell(match[0], width + 3) if match else f"{'-':>{width + 3}}"
        random_rows = [r for r in at_T if r["point"] == "random"]
        line += _grid_cell(random_rows[0], width) if random_rows else f"{'-':>{width}}"
        construction_noise = [
            r["grad_noise"] for r in at_T if r["point"] == "theta_star" and "grad_noise" in r
        ]
        line += _fmt(
            float(np.median(construction_noise)) if construction_noise else math.nan, width
        )
        lines.append(line)
    return lines


def _listing_order(row: dict) -> tuple:
    """Sort key of the per-row listing: T, k (the random point last), rule, c."""
    return (
        row["T"],
        row["k"] if row["k"] is not None else 99,
        row["rule"],
        0 if math.isnan(row["c"]) else row["c"],
    )


def _listing_lines(rows: list[dict]) -> list[str]:
    """One line per row: the per-block norms, the loss and the estimator losses."""
    columns = [
        "T",
        "k",
        "c",
        "rule",
        "grad",
        "noise",
        "plain",
        "A1",
        "V1",
        "Q2",
        "K2",
        "loss",
        "padded",
        "mle",
        "+alpha",
    ]
    lines = ["".join(f"{name:>10}" for name in columns)]
    for row in sorted(rows, key=_listing_order):
        cells = [
            f"{row['T']:>10}",
            f"{'-' if row['k'] is None else row['k']:>10}",
            _fmt(row["c"]),
            f"{row['rule']:>10}",
        ]
        cells += [
            _fmt(row.get(name, math.nan)) for name in ("grad_unbiased", "grad_noise", "grad_plain")
        ]
        blocks = gradients_lib.BLOCKS
        cells += [_fmt(row.get(f"grad_unbiased/{block}", math.nan)) for block in blocks]
        cells += [_fmt(row["loss"])] + [
            _fmt(row.get(name)) for name in ("loss_padded", "loss_mle", "loss_smoothed")
        ]
        lines.append("".join(cells))
    lines.append(
        "(A1..K2: per-block unbiased norms; padded/mle/+alpha: the k-gram estimators' "
        "losses on the same set)"
    )
    return lines


def table(rows: list[dict]) -> str:
    """The C7 grid (T down, (k, c) across; '~' marks an unbiased norm <= the noise floor, i.e.
    not distinguishable from an exactly stationary point), then one line per row with the
    per-block norms, the loss and the estimator losses."""
    if not rows:
        return "(no rows)"
    lines = _grid_lines(rows, width=10)
    lines += ["", "noise: median noise floor of the construction rows at that T", ""]
    lines += _listing_lines(rows)
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------------------


def _plot_curve(
    ax: Any,
    label: str,
    color: Any,
    width: float,
    marker: str,
    line_rows: list[dict],
    below_label: str | None,
) -> str | None:
    """One curve of a panel: the unbiased norm vs T, its noise floor dashed, and open triangles at
    the floor where the estimate is <= 0 (labelled once: returns the label still unused)."""
    line_rows = sorted(line_rows, key=lambda r: r["T"])
    if not line_rows:
        return below_label
    T_ = np.array([row["T"] for row in line_rows], float)
    value = np.array([row["grad_unbiased"] for row in line_rows])
    floor = np.array([row["grad_noise"] for row in line_rows])
    style = ":" if label == "random init" else "-"
    ax.plot(
        T_,
        np.where(value > 0, value, np.nan),
        style,
        marker=marker,
        color=color,
        label=label,
        linewidth=width,
        markersize=4,
    )
    floor = np.where(floor > 0, floor, np.nan)  # k = 1: exactly 0, no floor
    ax.plot(T_, floor, "--", color=color, linewidth=0.8, alpha=0.6)
    low = (value <= 0) & np.isfinite(floor)
    if low.any():
        ax.plot(
            T_[low],
            floor[low],
            "v",
            markerfacecolor="none",
            color=color,
            markersize=7,
            label=below_label,
        )
        below_label = None
    return below_label


def _plot_panel(
    ax: Any,
    k: int,
    panel: list[dict],
    random_rows: list[dict],
    cs: list[float],
    colors: Any,
) -> None:
    """Panel k of `plot`: the noise band, one curve per fixed c, the log curve, the random init."""
    seq_lens = sorted({row["T"] for row in panel})
    noise = [[row["grad_noise"] for row in panel if row["T"] == T] for T in seq_lens]
    ax.fill_between(
        seq_lens,
        [min(n) for n in noise],
        [max(n) for n in noise],
        color="0.6",
        alpha=0.2,
        linewidth=0,
        label="noise floors (MC s.e.)",
    )
    series = [
        (
            f"c = {c:g}",
            color,
            1.4,
            "o",
            [row for row in panel if row["rule"] == "fixed" and row["c"] == c],
        )
        for c, color in zip(cs, colors, strict=False)
    ]
    log_rows = [row for row in panel if row["rule"] == "log"]
    if log_rows:
        c0 = log_rows[0]["c"] - math.log(log_rows[0]["T"])
        series.append((f"c = {c0:.3g} + ln T", "crimson", 2.4, "s", log_rows))
    series.append(("random init", "black", 1.2, "x", [row for row in random_rows]))
    below_label: str | None = "estimate <= 0 (drawn at its noise floor)"
    for label, color, width, marker, line_rows in series:
        below_label = _plot_curve(ax, label, color, width, marker, line_rows, below_label)
    ax.plot([], [], "--", color="0.3", linewidth=0.8, label="noise floor of each curve")
    if all(row["grad_plain"] == 0 for row in panel):
        ax.text(
            0.5,
            0.75,
            "||grad L|| = 0 exactly\n(Q2 = K2 = 0, notes C5)",
            transform=ax.transAxes,
            ha="center",
            va="center",
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(seq_lens, [str(T) for T in seq_lens])
    ax.minorticks_off()
    ax.set_xlabel("sequence length T")
    ax.set_title(rf"k = {k}: $\theta_*^{{{k}}}(c)$")
    ax.grid(True, which="both", alpha=0.25)


def plot(rows: list[dict], path: str | pathlib.Path) -> pathlib.Path:
    """Log-log ||grad L(theta_*^k(c))|| vs T: one panel per k, one solid line per fixed c, the
    c = log_c0 + ln T curve (thick, crimson) and the random initialisation (black, dotted). Each
    curve's noise floor ||g_A - g_B||/2 is the thin dashed line of its colour, and the grey band
    spans the noise floors of all the panel's points: a value inside it is indistinguishable from
    an exactly stationary point. Unbiased estimates <= 0 are open triangles at their noise floor.
    Saved as a png at `path`; returns the path."""
    from landscape.engine import plotting

    star = [row for row in rows if row["point"] == "theta_star"]
    ks = sorted({row["k"] for row in star})
    if not ks:
        raise ValueError("rows: no theta_star rows to plot (run study with ks non-empty).")
    if any("grad_unbiased" not in row for row in rows):
        raise ValueError(
            "rows: no gradient statistics to plot (study(..., gradients=False) "
            "rows; use plot_loss_vs_c, or run study with gradients=True)."
        )
    random_rows = sorted((row for row in rows if row["point"] == "random"), key=lambda r: r["T"])
    fig, axes = plotting.subplots(1, len(ks), width=4.0, height=3.8, sharey=True)
    cs = sorted({row["c"] for row in star if row["rule"] == "fixed"})
    colors = plotting.plt.cm.viridis(np.linspace(0.0, 0.85, max(len(cs), 1)))
    first = rows[0]
    for ax, k in zip(axes[0], ks, strict=True):
        _plot_panel(ax, k, [row for row in star if row["k"] == k], random_rows, cs, colors)
    axes[0][0].set_ylabel(r"$\|\nabla L(\theta_*^k(c))\|$  (unbiased, two halves)")
    axes[0][-1].legend(fontsize=7.5, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.suptitle(
        f"Near-stationarity of the k-gram constructions (Thm 4.2): S={first['S']}, "
        f"n={first['n']}, alpha={first['alpha']:g}, {first['num_sequences']} sequences "
        "per T"
    )
    return plotting.save(fig, path)


def plot_loss_vs_c(rows: list[dict], path: str | pathlib.Path) -> pathlib.Path:
    """C8: the loss at theta_*^k(c) against c, one panel per T, one colour per k, each curve's
    minimum starred; dashed lines: the add-alpha k-gram estimator's loss; dotted: the padded
    k-gram MLE (the c -> inf limit of theta_*^k); the Def. 2.1 MLE's loss (usually far above
    the chart, zero-count events) is in the legend. Saved as a png at `path`; returns the path."""
    from landscape.engine import plotting

    star = [row for row in rows if row["point"] == "theta_star" and row["rule"] == "fixed"]
    if not star:
        raise ValueError("rows: no fixed-c theta_star rows to plot.")
    seq_lens = sorted({row["T"] for row in star})
    ks = sorted({row["k"] for row in star})
    colors = dict(zip(ks, plotting.plt.cm.tab10(np.arange(len(ks))), strict=True))
    fig, axes = plotting.subplots(1, len(seq_lens), width=7.6, height=3.6)
    first = star[0]
    for ax, T in zip(axes[0], seq_lens, strict=True):
        at_T = [row for row in star if row["T"] == T]
        lows, highs = [], []
        for k in ks:
            line = sorted((row for row in at_T if row["k"] == k), key=lambda r: r["c"])
            if not line:
                continue
            c_ = np.array([row["c"] for row in line])
            loss = np.array([row["loss"] for row in line])
            best = int(np.argmin(loss))
            color = colors[k]
            label = (
                rf"$\theta_*^{{{k}}}(c)$: min {loss[best]:.3f} at c = {c_[best]:g}"
                if k > 1
                else rf"$\theta_*^1$ (the same for every c): {loss[best]:.3f}"
            )
            ax.plot(c_, loss, "-o", color=color, markersize=3, label=label)
            ax.plot(
                c_[best],
                loss[best],
                "*",
                color=color,
                markersize=13,
                markeredgecolor="black",
                markeredgewidth=0.5,
            )
            smoothed, padded, mle = (
                line[0]["loss_smoothed"],
                line[0]["loss_padded"],
                line[0]["loss_mle"],
            )
            ax.axhline(
                smoothed,
                color=color,
                linestyle="--",
                linewidth=1.1,
                label=f"{k}-gram add-alpha: {smoothed:.3f}",
            )
            ax.axhline(
                padded,
                color=color,
                linestyle=":",
                linewidth=1.3,
                label=f"padded {k}-gram MLE (c->inf): {padded:.3f}; Def. 2.1: {mle:.3f}",
            )
            lows += [loss.min(), smoothed]
            highs += [loss[0], smoothed]
        low, high = min(lows), max(highs)
        span = max(high - low, 1e-3)
        ax.set_ylim(low - 0.15 * span, high + 0.8 * span)
        ax.set_xlabel("attention scale c")
        ax.set_ylabel("population loss (soft-target CE)")
        ax.set_title(f"T = {T}")
        ax.grid(True, alpha=0.25)
        ax.legend(fontsize=6.5, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.suptitle(
        rf"Loss at $\theta_*^k(c)$ vs c (C8): S={first['S']}, n={first['n']}, "
        f"alpha={first['alpha']:g}, {first['num_sequences']} sequences"
    )
    return plotting.save(fig, path)
