"""The single-layer trap at the authors' recipe and precision (notes/markov.md §13).

Depth crossed with precision (float16 autocast, as the authors trained, against float32), over
enough seeds for trapped fractions with 95% Wilson intervals; escape steps and the gradients at
the plateau. Definitions and decision rules: docs/design/markov.md.
"""

from __future__ import annotations

import math
import pathlib
from collections.abc import Sequence
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np
from ml_collections import ConfigDict

from landscape.engine import plotting, precision, records
from landscape.markov import model as model_lib
from landscape.markov import task, theory
from landscape.typing import ArrayLike, PyTree, Row

Group = dict[str, Any]  # one program's results: fields, cfg, grid, result (experiment.train_group)

TRAP_TOLERANCE = 0.005  # |final loss - H(pi)| (the criterion)
FLAT = 0.02  # |f0 - f1|: the prediction ignores x_n
PROBE_BATCH = 16
PROBE_KEY = 20_000  # the probe batch's key: one fixed batch per (p, q)


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """The 95% Wilson score interval of a binomial proportion k / n."""
    if n == 0:
        return 0.0, 1.0
    phat = k / n
    centre = (phat + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(phat * (1 - phat) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    # exact at the ends (0/n and n/n), where rounding would leave 1 - 1e-16
    return (0.0 if k == 0 else centre - half), (1.0 if k == n else centre + half)


def depth_name(layers: int) -> str:
    return f"{layers} layer{'s' if layers > 1 else ''}"


def precision_name(cfg: ConfigDict) -> str:
    return precision.of(cfg.train.dtype, cfg.model.dtype).name


def cell_name(cfg: ConfigDict) -> str:
    return f"{depth_name(cfg.model.num_layers)}, {precision_name(cfg)}"


def run_rows(group: Group) -> list[Row]:
    """Per run: seed, final loss, f0, f1, trapped, escape step (None if never), and under a half
    type the fraction of gradient entries flushed to zero over the last 10% of steps."""
    cfg, res = group["cfg"], group["result"]
    test_loss = res.snapshots["test_loss"]
    zeros = res.metrics.get("grad_zero_fraction")
    rows = []
    for r in range(res.num_runs):
        p, q = float(res.hparams["chain.p"][r]), float(res.hparams["chain.q"][r])
        unigram, rate = float(theory.unigram_loss(p, q)), float(theory.entropy_rate(p, q))
        loss, f0, f1 = (
            float(test_loss[r, -1]),
            float(res.snapshots["f0"][r, -1]),
            float(res.snapshots["f1"][r, -1]),
        )
        below = np.flatnonzero(test_loss[r] < (unigram + rate) / 2)
        row = dict(
            layers=cfg.model.num_layers,
            precision=precision_name(cfg),
            p=p,
            q=q,
            seed=int(res.seeds[r]),
            loss=loss,
            unigram=unigram,
            entropy_rate=rate,
            f0=f0,
            f1=f1,
            trapped=bool(abs(loss - unigram) < TRAP_TOLERANCE and abs(f0 - f1) < FLAT),
            escape_step=int(res.snapshot_steps[below[0]]) if below.size else None,
        )
        if zeros is not None:
            tail = zeros[r, -max(1, zeros.shape[1] // 10) :]
            row["grad_zero_fraction_end"] = float(np.mean(tail))
        rows.append(row)
    return rows


# ----------------------------------------------------------------------------- the plateau probe


def _probe_loss(model: model_lib.MarkovModel, params: PyTree, x_BN: jax.Array) -> jax.Array:
    log_probs = cast(jax.Array, model.apply({"params": params}, x_BN[:, :-1]))
    return -jnp.take_along_axis(log_probs, x_BN[:, 1:, None], axis=-1).mean()


_probe_grad = jax.jit(jax.grad(_probe_loss, argnums=1), static_argnums=0)


def probe_batch(p: float, q: float, seq_len: int, batch: int = PROBE_BATCH) -> jax.Array:
    kernel = task.binary_kernel(p, q)
    key = jax.random.key(PROBE_KEY)
    return task.sample(key, kernel, task.stationary(kernel), batch, seq_len + 1, sequential=True)


def half_vs_float32(
    model: model_lib.MarkovModel, params: PyTree, x_BN: jax.Array, half: str
) -> dict[str, Any]:
    """The gradient at `params` on the batch x_BN computed with `half` as the computation dtype
    against float32: cosine, flushed fraction (exactly zero in half, not in float32) overall and
    per parameter, and the norm ratio."""
    g32 = _probe_grad(model.clone(dtype=jnp.float32), params, x_BN)
    gh = _probe_grad(model.clone(dtype=jnp.dtype(half)), params, x_BN)
    flat32 = np.concatenate([np.ravel(a) for a in jax.tree.leaves(g32)]).astype(np.float64)
    flath = np.concatenate([np.ravel(a) for a in jax.tree.leaves(gh)]).astype(np.float64)
    norms = np.linalg.norm(flat32) * np.linalg.norm(flath)
    live = flat32 != 0

    def flushed(a32: ArrayLike, ah: ArrayLike) -> float:
        a32, ah = np.ravel(a32), np.ravel(ah)
        return float(np.mean(ah[a32 != 0] == 0)) if np.any(a32 != 0) else 0.0

    per_parameter = {
        jax.tree_util.keystr(path, simple=True, separator="/"): flushed(a, b)
        for (path, a), b in zip(
            jax.tree_util.tree_leaves_with_path(g32), jax.tree.leaves(gh), strict=True
        )
    }
    return dict(
        cosine=float(flat32 @ flath / norms) if norms > 0 else float("nan"),
        flushed=float(np.mean(flath[live] == 0)) if live.any() else 0.0,
        norm_ratio=float(np.linalg.norm(flath) / max(np.linalg.norm(flat32), 1e-30)),
        per_parameter=per_parameter,
    )


def plateau_probe(group: Group) -> list[dict[str, Any]]:
    """half_vs_float32 with float16 autocast (the authors' mode) at the final weights of each
    trapped run of the group: the gradient on the unigram plateau."""
    cfg, res = group["cfg"], group["result"]
    model = model_lib.from_config(cfg)
    out = []
    for r, row in enumerate(run_rows(group)):
        if not row["trapped"]:
            continue
        params = jax.tree.map(lambda a, r=r: jnp.asarray(a[r]), res.final_params)
        x = probe_batch(row["p"], row["q"], cfg.model.seq_len)
        out.append(dict(seed=row["seed"], **half_vs_float32(model, params, x, "float16")))
    return out


# ----------------------------------------------------------------------------- claims


def _fraction(rows: Sequence[Row]) -> dict[str, Any]:
    k, n = sum(r["trapped"] for r in rows), len(rows)
    lo, hi = wilson(k, n)
    return {
        "trapped": k,
        "runs": n,
        "fraction": round(k / n, 3) if n else None,
        "95% interval": [round(lo, 3), round(hi, 3)],
    }


def cell_rows(groups: Sequence[Group]) -> list[Row]:
    """Per (depth, precision): runs, trapped count and fraction with its 95% Wilson interval,
    escaped runs and the median escape step (trap_cells.csv)."""
    rows = []
    for g in groups:
        runs = run_rows(g)
        k, n = sum(r["trapped"] for r in runs), len(runs)
        low, high = wilson(k, n)
        escapes = escape_steps(runs)
        rows.append(
            dict(
                layers=g["cfg"].model.num_layers,
                precision=precision_name(g["cfg"]),
                runs=n,
                trapped=k,
                fraction=k / n if n else float("nan"),
                wilson_low=low,
                wilson_high=high,
                escaped=escapes["escaped"],
                median_escape_step=escapes.get("median"),
            )
        )
    return rows


def claims(cfg: ConfigDict, groups: Sequence[Group]) -> list[records.Claim]:
    """The paper's statements per (depth, precision) with trapped counts and intervals, the depth
    contrast per precision, the escape-step distribution and the plateau gradients."""
    out: list[records.Claim] = []
    by_precision: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    source = "Fig. 1" if any(g["cfg"].model.num_layers > 1 for g in groups) else "Fig. 3"
    for g in groups:
        c, rows = g["cfg"], run_rows(g)
        name, layers = cell_name(c), c.model.num_layers
        stats = _fraction(rows)
        if not all(np.isfinite(r["loss"]) for r in rows):
            stats["non-finite final loss"] = sum(not np.isfinite(r["loss"]) for r in rows)
        stats["escape step"] = escape_steps(rows)
        zeros = [r["grad_zero_fraction_end"] for r in rows if "grad_zero_fraction_end" in r]
        if zeros:
            stats["gradient entries flushed, last 10% of steps (median)"] = round(
                float(np.median(zeros)), 4
            )
        lo, hi = stats["95% interval"]
        if layers == 1:
            statement, expected, ok = (
                "trapped at H(pi) (the paper: a 1-layer tied model stays at the unigram loss)",
                "most runs trapped: interval > 1/2",
                lo > 0.5,
            )
        else:
            statement, expected, ok = (
                "escapes to the entropy rate (the paper: depth escapes)",
                "most runs escape: interval < 1/2",
                hi < 0.5,
            )
        out.append(
            records.claim(f"{name}: {statement}", stats, expected, ok, f"{source}, notes §13")
        )
        by_precision.setdefault(precision_name(c), []).append((layers, stats))
        if _fig1_recipe(c) and not precision.of(c.train.dtype, c.model.dtype).is_mixed:
            out.append(_escape_claim(name, stats["escape step"]))
        probe = plateau_probe(g)
        if probe:
            out.append(_probe_claim(name, probe))
    for name, cells in by_precision.items():
        cells = sorted(cells, key=lambda cell: cell[0])
        if len(cells) < 2 or cells[0][0] != 1:
            continue
        one = cells[0][1]["95% interval"]
        deeper = {f"{layers} layers": stats["95% interval"] for layers, stats in cells[1:]}
        out.append(
            records.claim(
                f"{name}: depth escapes the trap (Fig. 1's contrast)",
                {"1 layer": one, **deeper},
                "every deeper interval below the 1-layer one",
                all(hi < one[0] for _, hi in deeper.values()),
                "Fig. 1, notes §13",
            )
        )
    return out


def _fig1_recipe(cfg: ConfigDict) -> bool:
    """N = 512 and 500 iterations: where notes §13 measured the float32 escape step."""
    return cfg.model.seq_len == 512 and cfg.train.num_steps == 500


def escape_steps(rows: Sequence[Row]) -> dict[str, Any]:
    """How many runs escaped (test loss below the midpoint of H(pi) and the entropy rate) and the
    median, quartiles and range of the first evaluation step where they did."""
    steps = [r["escape_step"] for r in rows if r["escape_step"] is not None]
    out: dict[str, Any] = {"escaped": len(steps), "runs": len(rows)}
    if steps:
        q25, q50, q75 = np.percentile(steps, [25, 50, 75])
        out.update(
            median=float(q50), quartiles=[float(q25), float(q75)], range=[min(steps), max(steps)]
        )
    return out


def _escape_claim(name: str, escapes: dict[str, Any]) -> records.Claim:
    """Notes §13: in float32 under the Fig. 1 recipe the authors' code and this model escape at
    about 200 iterations."""
    median = escapes.get("median")
    return records.claim(
        f"{name}: escaped runs leave H(pi) at about 200 iterations",
        escapes,
        "median escape step in [100, 300]",
        median is not None and 100 <= median <= 300,
        "notes §13 (the authors' code in float32, Fig. 1 recipe)",
    )


def _probe_claim(name: str, probe: Sequence[dict[str, Any]]) -> records.Claim:
    """Notes §13: at the plateau float16 flushes the query, key and first-LayerNorm gradients."""
    blocks = ("block_0/W_Q", "block_0/W_K", "block_0/ln_1")
    per = {
        b: round(float(np.median([p["per_parameter"].get(b, np.nan) for p in probe])), 3)
        for b in blocks
    }
    measured = {
        "runs at the plateau": len(probe),
        "gradient cosine vs float32 (median, min)": [
            round(float(np.median([p["cosine"] for p in probe])), 4),
            round(float(np.min([p["cosine"] for p in probe])), 4),
        ],
        "flushed entries (median)": round(float(np.median([p["flushed"] for p in probe])), 4),
        "norm ratio half / float32 (median)": round(
            float(np.median([p["norm_ratio"] for p in probe])), 4
        ),
        "flushed per parameter (median)": per,
    }
    ok = all(v > 0.9 for v in per.values())
    return records.claim(
        f"{name}: at the plateau, the float16 gradient flushes the query, "
        "key and first-LayerNorm gradients",
        measured,
        "> 90% of W_Q, W_K and ln_1 entries of block 0 flushed to zero",
        ok,
        "notes §13 (the authors' float16 autocast)",
    )


# ----------------------------------------------------------------------------- figures


def plot_curves(groups: Sequence[Group], path: pathlib.Path) -> pathlib.Path:
    """Test loss against iteration: median and interquartile band over seeds per depth, one panel
    per precision, H(pi) and the entropy rate dashed."""
    names = list(dict.fromkeys(precision_name(g["cfg"]) for g in groups))
    fig, axes = plotting.subplots(1, len(names), width=3.8, height=3.0, sharey=True)
    colors: dict[int, str] = {}
    for g in groups:
        c, res = g["cfg"], g["result"]
        ax = axes[0, names.index(precision_name(c))]
        layers = c.model.num_layers
        color = colors.setdefault(layers, f"C{len(colors)}")
        loss = res.snapshots["test_loss"]
        lo, mid, hi = np.nanpercentile(loss, [25, 50, 75], axis=0)
        ax.plot(res.snapshot_steps, mid, color=color, label=depth_name(layers))
        ax.fill_between(res.snapshot_steps, lo, hi, color=color, alpha=0.2, linewidth=0)
    p, q = (float(groups[0]["result"].hparams[k][0]) for k in ("chain.p", "chain.q"))
    for j, name in enumerate(names):
        ax = axes[0, j]
        ax.axhline(
            float(theory.unigram_loss(p, q)), color="k", linestyle="--", linewidth=1, label="H(pi)"
        )
        ax.axhline(
            float(theory.entropy_rate(p, q)),
            color="gray",
            linestyle=":",
            linewidth=1,
            label="entropy rate",
        )
        ax.set(
            title=f"{name}, (p, q) = ({p:g}, {q:g})\nmedian and interquartile band over "
            f"{groups[0]['result'].num_runs} seeds",
            xlabel="iteration",
        )
        ax.title.set_fontsize(8)
    axes[0, 0].set_ylabel("test loss (nats)")
    axes[0, -1].legend(fontsize=7)
    return plotting.save(fig, path)


def plot_fractions(groups: Sequence[Group], path: pathlib.Path) -> pathlib.Path:
    """Trapped fraction per depth, one bar per precision, with 95% Wilson intervals."""
    cells = {
        (g["cfg"].model.num_layers, precision_name(g["cfg"])): _fraction(run_rows(g))
        for g in groups
    }
    depths = sorted({d for d, _ in cells})
    names = list(dict.fromkeys(n for _, n in cells))
    fig, axes = plotting.subplots(
        1, 1, width=1.2 + 1.1 * len(depths) * max(1, len(names)) / 2, height=3.0
    )
    ax, width = axes[0, 0], 0.8 / len(names)
    for j, name in enumerate(names):
        present = [(i, cells[(d, name)]) for i, d in enumerate(depths) if (d, name) in cells]
        xs = [i + (j - (len(names) - 1) / 2) * width for i, _ in present]
        fractions = [st["trapped"] / st["runs"] for _, st in present]
        intervals = [wilson(st["trapped"], st["runs"]) for _, st in present]
        errors = [
            [f - lo for f, (lo, _) in zip(fractions, intervals, strict=True)],
            [hi - f for f, (_, hi) in zip(fractions, intervals, strict=True)],
        ]
        ax.bar(
            xs,
            fractions,
            width,
            yerr=errors,
            capsize=3,
            label=name,
            color=f"C{j}",
            error_kw=dict(ecolor=f"C{j}", alpha=0.8),
        )
        for x, (_, st) in zip(xs, present, strict=True):
            ax.annotate(
                f"{st['trapped']}/{st['runs']}", (x, 0.01), ha="center", va="bottom", fontsize=7
            )
    ax.set_xticks(range(len(depths)), [depth_name(d) for d in depths])
    ax.set(ylim=(0, 1.05), ylabel="trapped fraction (95% interval)", title="runs trapped at H(pi)")
    ax.axhline(0.5, color="gray", linewidth=0.8, linestyle=":")
    ax.legend(fontsize=7)
    return plotting.save(fig, path)
