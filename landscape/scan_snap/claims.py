"""What a Scan & Snap run reproduces: one claim function per name of `claims` in a config
(`CLAIMS`: Figs. 4, 5, 6, notes §7.4, §5.5, §5.6), the Fig. 6 entropy table, and the theory
figures' curves (Figs. 3, 8, 9) with their claims (notes §5.3, §5.8, §5.9).
"""

from __future__ import annotations

import math
from typing import Any

import ml_collections
import numpy as np

from landscape.engine import records, sweeps, training
from landscape.scan_snap import task as task_lib
from landscape.scan_snap import theory
from landscape.scan_snap.wikitext import TRACED

# One structural cell of a run: (its structural fields, task, traced grid, result).
Group = tuple[dict[str, Any], task_lib.SequenceClasses, sweeps.Grid, training.RunResult]


def traced_cells(
    grid: sweeps.Grid, result: training.RunResult
) -> list[tuple[dict[str, float], np.ndarray]]:
    """[(traced values dict, run indices)] for each traced-sweep cell (seeds pooled)."""
    hp = {k: np.asarray(v) for k, v in result.hparams.items()}
    keys = sorted({tuple(float(hp[k][r]) for k in TRACED) for r in range(result.num_runs)})
    return [
        (
            dict(zip(TRACED, key, strict=True)),
            np.flatnonzero(
                np.all([np.isclose(hp[k], v) for k, v in zip(TRACED, key, strict=True)], axis=0)
            ),
        )
        for key in keys
    ]


def _first_below(losses: np.ndarray, threshold: float) -> np.ndarray:
    """Per run, the first step whose batch loss is below `threshold`; inf for a run that never
    gets there (a NaN loss is never below)."""
    below = losses < threshold
    return np.where(below.any(axis=1), below.argmax(axis=1), np.inf)


def _steps_or_never(first: np.ndarray) -> list[int | str]:
    return [int(s) if np.isfinite(s) else "never" for s in first]


def _missing(statement: str, what: str, expected: Any, source: str) -> records.Claim:
    """A claim whose inputs the run lacks: reported NOT reproduced, saying what is missing."""
    return records.claim(statement, f"not measured: {what}", expected, False, source)


# ----------------------------------------------------------------------------- Fig. 4

_FIG4_SRC = "notes §7.4"


def claims_fig4(cfg: ml_collections.ConfigDict, groups: list[Group]) -> list[records.Claim]:
    """Notes §7.4 acceptance for Syn-Small (Fig. 4 left: ratio 1; right: ratio 10)."""
    ((_, task, grid, result),) = groups
    out = [_fig4_starts_at_ln_m(task, result)]
    by_ratio = {
        cell["optim.lr_y_over_lr_z"]: runs
        for cell, runs in traced_cells(grid, result)
        if np.isclose(cell["optim.lr_z"], 1.0)
    }
    attention = result.snapshots["attention"][:, -1]  # (R, K, M) final c_n
    entropy = result.snapshots["distinct_entropy"][:, -1]  # (R,)
    if 1.0 not in by_ratio and 10.0 not in by_ratio:
        out.append(
            _missing(
                "Fig. 4: runs at eta_Z = 1 with eta_Y / eta_Z = 1 or 10",
                f"no such cell (ratios at eta_Z = 1: {sorted(by_ratio)})",
                "ratio 1 (left) and/or 10 (right) at eta_Z = 1",
                _FIG4_SRC,
            )
        )
    if 1.0 in by_ratio:
        out += _fig4_left(cfg, task, result, by_ratio[1.0], attention, entropy)
    if 1.0 in by_ratio and 10.0 in by_ratio:
        out += _fig4_left_vs_right(result, by_ratio[1.0], by_ratio[10.0], entropy)
    return out


def _fig4_starts_at_ln_m(
    task: task_lib.SequenceClasses, result: training.RunResult
) -> records.Claim:
    ln_m = math.log(task.num_tokens)
    start = float(np.abs(result.losses[:, 0] - ln_m).max())
    return records.sanity(
        f"loss at step 0 equals ln M = {ln_m:.4f} (softmax over all M ids)",
        start,
        "< 1e-4",
        start < 1e-4,
        _FIG4_SRC,
    )


def _fig4_left(
    cfg: ml_collections.ConfigDict,
    task: task_lib.SequenceClasses,
    result: training.RunResult,
    runs: np.ndarray,
    attention: np.ndarray,
    entropy: np.ndarray,
) -> list[records.Claim]:
    """Fig. 4 left (eta_Y = eta_Z = 1): convergence, the final c_0 and the distinct entropy."""
    out = [_fig4_converges(result.losses[runs])]
    out += _fig4_final_c0(task, attention[runs, 0])  # class 0, (runs, M)
    out.append(
        records.claim(
            "distinct entropy of final c (mean over classes) < 2.0 (init 2.151)",
            float(entropy[runs].max()),
            "< 2.0",
            entropy[runs].max() < 2.0,
            _FIG4_SRC,
        )
    )
    if cfg.optim.name == "sgd" and cfg.model.init == "zeros":
        out.append(_zero_row_sums(result, runs))
    return out


def _fig4_converges(loss: np.ndarray) -> records.Claim:
    statement = "eta_Y = eta_Z = 1: batch loss < 0.05 at step 10 and < 1e-3 at step 30"
    if loss.shape[1] <= 30:
        return _missing(
            statement, f"the run has {loss.shape[1]} steps", "[< 0.05, < 1e-3]", _FIG4_SRC
        )
    return records.claim(
        statement,
        [float(loss[:, 10].max()), float(loss[:, 30].max())],
        "[< 0.05, < 1e-3]",
        loss[:, 10].max() < 0.05 and loss[:, 30].max() < 1e-3,
        _FIG4_SRC,
    )


def _fig4_final_c0(task: task_lib.SequenceClasses, c0: np.ndarray) -> list[records.Claim]:
    """Claims on the final c_0 (runs, M): common tokens suppressed, the scan order on distinct
    tokens, the most frequent distinct token's weight."""
    out = []
    distinct, common = task.is_distinct[0], task.is_common
    statement = "final c_0: every common token < 0.05 (common tokens suppressed, Thm 2)"
    if common.any():
        out.append(
            records.claim(
                statement,
                float(c0[:, common].max()),
                "< 0.05",
                c0[:, common].max() < 0.05,
                _FIG4_SRC,
            )
        )
    else:
        out.append(_missing(statement, "the task has no common token", "< 0.05", _FIG4_SRC))
    statement = "final c_0 on distinct tokens 10..19 increases with P(l|n) (scan, Thm 3)"
    expected = ">= -1e-3 (ties within 1e-3)"
    if distinct.sum() > 1:
        steps = np.diff(c0[:, distinct], axis=1)
        out.append(
            records.claim(statement, float(steps.min()), expected, steps.min() >= -1e-3, _FIG4_SRC)
        )
    else:
        out.append(_missing(statement, "fewer than 2 distinct tokens", expected, _FIG4_SRC))
    top = c0[:, np.flatnonzero(distinct)[-1]]
    out.append(
        records.claim(
            "final c_0 of the most frequent distinct token > 0.14",
            float(top.min()),
            "> 0.14",
            top.min() > 0.14,
            _FIG4_SRC,
        )
    )
    return out


def _zero_row_sums(result: training.RunResult, runs: np.ndarray) -> records.Claim:
    """Lemma 1's invariant: from zero init under SGD the rows of Y and Z keep summing to 0."""
    rows = max(float(np.abs(result.final_params[p][runs].sum(-1)).max()) for p in "YZ")
    rows = rows if all(np.isfinite(result.final_params[p][runs]).all() for p in "YZ") else math.nan
    return records.sanity(
        "row sums of Y and Z stay 0 from zero init under SGD (Lemma 1 invariant)",
        rows,
        "< 1e-4",
        rows < 1e-4,
        "notes §3.3, T2",
    )


def _fig4_left_vs_right(
    result: training.RunResult, left: np.ndarray, right: np.ndarray, entropy: np.ndarray
) -> list[records.Claim]:
    """Fig. 4 right against left: eta_Y = 10 gives denser attention and converges faster."""
    first_left, first_right = (_first_below(result.losses[r], 1e-2) for r in (left, right))
    return [
        records.claim(
            "eta_Y = 10: higher distinct entropy than eta_Y = 1 (denser attention)",
            {"eta_Y=1": float(entropy[left].mean()), "eta_Y=10": float(entropy[right].mean())},
            "eta_Y=10 > eta_Y=1 (notes: 2.08 vs 1.93)",
            entropy[right].min() > entropy[left].max(),
            "Fig. 4, notes §7.4, T12",
        ),
        records.claim(
            "eta_Y = 10 converges faster: first step with batch loss < 1e-2",
            {"eta_Y=1": _steps_or_never(first_left), "eta_Y=10": _steps_or_never(first_right)},
            "eta_Y=10 at <= 5, eta_Y=1 later (notes: 3-4 vs 11)",
            first_right.max() <= 5 and first_right.max() < first_left.min(),
            "Fig. 4, notes §7.4, T12",
        ),
    ]


# ----------------------------------------------------------------------------- Fig. 5


def claims_fig5(cfg: ml_collections.ConfigDict, groups: list[Group]) -> list[records.Claim]:
    """Fig. 5: Adam's learning rate steers attention to different distinct tokens (notes §5.5)."""
    ((_, task, grid, result),) = groups
    distinct = np.flatnonzero(task.is_distinct[0])
    final = result.snapshots["attention"][:, -1, 0][:, distinct]  # (R, 10) class 0
    by_lr = {cell["optim.lr_z"]: final[runs].mean(0) for cell, runs in traced_cells(grid, result)}
    out = [_fig5_peak_at_half(by_lr, distinct)]
    lrs = sorted(by_lr)
    statement = (
        "different Adam learning rates give different distinct-token patterns (L1 distance "
        "of neighbouring lr's final c_0 on distinct tokens)"
    )
    if len(lrs) > 1:
        gaps = [
            float(np.abs(by_lr[a] - by_lr[b]).sum()) for a, b in zip(lrs, lrs[1:], strict=False)
        ]
        out.append(records.claim(statement, gaps, "each > 0.1", min(gaps) > 0.1, "Fig. 5"))
    else:
        out.append(_missing(statement, f"one learning rate only ({lrs})", "each > 0.1", "Fig. 5"))
    Z = result.final_params["Z"]
    rows = float(np.abs(Z.sum(-1)).max()) if np.isfinite(Z).all() else math.nan
    out.append(
        records.sanity(
            "the zero row-sum invariant does not hold under Adam",
            rows,
            "> 1e-3",
            rows > 1e-3,
            "notes §3.3, T2",
        )
    )
    return out


def _fig5_peak_at_half(by_lr: dict[float, np.ndarray], distinct: np.ndarray) -> records.Claim:
    """At Adam lr 0.5 the most attended distinct token is one of tokens 14-16."""
    statement = (
        "Adam lr 0.5: the most attended distinct token is not the most frequent one; it "
        "lies in tokens 14-16"
    )
    src = "Fig. 5, notes §5.5"
    lr_half = next((lr for lr in by_lr if np.isclose(lr, 0.5)), None)
    if lr_half is None:
        return _missing(statement, f"no run at lr 0.5 (lrs {sorted(by_lr)})", "14, 15 or 16", src)
    if not np.isfinite(by_lr[lr_half]).all():
        return records.claim(statement, "non-finite attention", "14, 15 or 16", False, src)
    argmax = int(np.argmax(by_lr[lr_half]))
    return records.claim(statement, int(distinct[argmax]), "14, 15 or 16", 4 <= argmax <= 6, src)


# ----------------------------------------------------------------------------- Fig. 6


def fig6_table(groups: list[Group]) -> dict[int, dict[str, np.ndarray]]:
    """{K: {"lr_z", "ratio", "mean" (lr_z x ratio), "std" (ddof=1)}} of the final distinct
    entropy."""
    table = {}
    for _, task, grid, result in groups:
        entropy = grid.unflatten(result.snapshots["distinct_entropy"][:, -1])
        lr_axis = list(grid.axes).index("optim.lr_z")
        entropy = np.moveaxis(entropy, lr_axis, 0)  # (lr_z, ratio, seeds)
        std = entropy.std(axis=-1, ddof=1) if entropy.shape[-1] > 1 else 0 * entropy[..., 0]
        table[task.num_classes] = dict(
            lr_z=grid.axes["optim.lr_z"],
            ratio=grid.axes["optim.lr_y_over_lr_z"],
            mean=entropy.mean(axis=-1),
            std=std,
        )
    return table


_FIG6_SRC = "Fig. 6, notes §5.6/§7.2"


def _rounded(a: np.ndarray) -> list:
    return np.round(a, 3).tolist()


def claims_fig6(cfg: ml_collections.ConfigDict, groups: list[Group]) -> list[records.Claim]:
    """Fig. 6 structure (notes §5.6, §7.2): entropy vs eta_Z and the ratio eta_Y/eta_Z.

    Needs a K = 2 cell and a K >= 6 cell; a missing cell or sweep value gives a NOT reproduced
    claim saying what is missing."""
    out = []
    table = fig6_table(groups)
    if not any(K >= 6 for K in table):
        out.append(
            _missing(
                "K >= 6: entropy falls with eta_Z; U shape in the ratio",
                f"no cell with K >= 6 (K = {sorted(table)})",
                "a K >= 6 cell",
                _FIG6_SRC,
            )
        )
    if 2 not in table:
        out.append(
            _missing(
                "K=2: entropy at ratio 10 is above ratio 1 (every eta_Z)",
                f"no cell with K = 2 (K = {sorted(table)})",
                "a K = 2 cell",
                _FIG6_SRC,
            )
        )
    for K, t in sorted(table.items()):
        if K >= 6:
            out += [_fig6_falls_with_eta_z(K, t), _fig6_u_shape(K, t)]
        if K == 2:
            out.append(_fig6_k2_ratio_10_above_1(t))
    return out


def _fig6_falls_with_eta_z(K: int, t: dict[str, np.ndarray]) -> records.Claim:
    statement = f"K={K}: entropy falls strictly with eta_Z at every ratio"
    expected = "decreasing down each column (lr_z rows)"
    if len(t["lr_z"]) <= 1:
        return _missing(statement, f"one eta_Z only ({list(t['lr_z'])})", expected, _FIG6_SRC)
    falls = bool(np.all(np.diff(t["mean"], axis=0) < 0))
    return records.claim(statement, _rounded(t["mean"]), expected, falls, _FIG6_SRC)


def _fig6_u_shape(K: int, t: dict[str, np.ndarray]) -> records.Claim:
    statement = (
        f"K={K}, eta_Z >= 1: the minimum over ratios is at ratio 2 and ratio 10 "
        "lies above it (U shape)"
    )
    mean, ratio, lr = t["mean"], list(t["ratio"]), t["lr_z"]
    rows = lr >= 1
    lacking = ([f"eta_Z >= 1 (eta_Z = {list(lr)})"] if not rows.any() else []) + [
        f"ratio {r:g}" for r in (2.0, 10.0) if r not in ratio
    ]
    if lacking:
        return _missing(statement, "no " + ", no ".join(lacking), "all 2.0", _FIG6_SRC)
    if not np.isfinite(mean[rows]).all():
        return records.claim(statement, _rounded(mean[rows]), "all 2.0", False, _FIG6_SRC)
    at_min = [ratio[i] for i in mean[rows].argmin(axis=1)]
    higher = bool(np.all(mean[rows, ratio.index(10.0)] > mean[rows, ratio.index(2.0)]))
    passed = all(r == 2.0 for r in at_min) and higher
    return records.claim(statement, at_min, "all 2.0", passed, _FIG6_SRC)


def _fig6_k2_ratio_10_above_1(t: dict[str, np.ndarray]) -> records.Claim:
    statement = "K=2: entropy at ratio 10 is above ratio 1 (every eta_Z)"
    mean, ratio = t["mean"], list(t["ratio"])
    if 1.0 not in ratio or 10.0 not in ratio:
        return _missing(statement, f"ratios {ratio} lack 1 or 10", "all > 0", _FIG6_SRC)
    up = mean[:, ratio.index(10.0)] - mean[:, ratio.index(1.0)]
    return records.claim(statement, _rounded(up), "all > 0", bool(np.all(up > 0)), _FIG6_SRC)


def _no_claims(cfg: ml_collections.ConfigDict, groups: list[Group]) -> list[records.Claim]:
    return []


CLAIMS: dict[str, records.ClaimFn] = {
    "fig4": claims_fig4,
    "fig5": claims_fig5,
    "fig6": claims_fig6,
    "none": _no_claims,
}


# ----------------------------------------------------------------------------- theory figures


def growth_factors(th: ml_collections.ConfigDict, t: np.ndarray) -> list[np.ndarray]:
    """Fig. 3: chi_up(t) = exp(2 B_exact) at theory.fig3_eta_z, one curve per fig3_eta_y."""
    return [
        np.exp(2 * theory.B_exact(th.M, th.K, eta_y, th.fig3_eta_z, t, th.rho0))
        for eta_y in th.fig3_eta_y
    ]


def claim_fig3(th: ml_collections.ConfigDict, chis: list[np.ndarray]) -> records.Claim:
    """At t_max a smaller eta_Y gives a larger growth factor (Thm 4)."""
    late = [float(chi[-1]) for chi in chis]
    order = sorted(th.fig3_eta_y)
    late_sorted = [late[list(th.fig3_eta_y).index(e)] for e in order]
    return records.claim(
        f"Fig. 3: at t = {th.t_max:g} a smaller eta_Y gives a larger growth factor",
        late_sorted,
        "decreasing in eta_Y (at least two eta_Y)",
        len(late_sorted) > 1 and bool(np.all(np.diff(late_sorted) < 0)),
        "Thm 4, notes §4.3/T8",
    )


def h_curves(th: ml_collections.ConfigDict) -> list[tuple[np.ndarray, float | np.ndarray]]:
    """Fig. 8: (h*(s) (Eq. 33), h(s) (Eq. 45)) for s = 0..fig8_steps, one pair per fig8_eta_y."""
    s = np.arange(th.fig8_steps + 1)
    return [
        (theory.h_star(th.M, eta_y, th.fig8_steps), theory.h_cont(th.M, eta_y, s))
        for eta_y in th.fig8_eta_y
    ]


def claim_fig8(
    th: ml_collections.ConfigDict, curves: list[tuple[np.ndarray, float | np.ndarray]]
) -> records.Claim:
    """Lemma 7: 0 <= h*(s) - h(s) <= 2 eta_Y / M."""
    gaps = [
        (float((h_star - h).min()), float((h_star - h).max()), 2 * eta_y / th.M)
        for eta_y, (h_star, h) in zip(th.fig8_eta_y, curves, strict=True)
    ]
    return records.claim(
        "Fig. 8 / Lemma 7: 0 <= h*(s) - h(s) <= 2 eta_Y / M",
        [g[:2] for g in gaps],
        "min >= 0 and max <= 2 eta_Y/M",
        all(lo >= 0 and hi <= b for lo, hi, b in gaps),
        "Lemma 7, notes T4",
    )


def B_at_fixed_ratio(
    th: ml_collections.ConfigDict, t: np.ndarray, ratio: float
) -> list[tuple[float, np.ndarray, float, np.ndarray]]:
    """Fig. 9 at one ratio eta_Y/eta_Z: per fig9_eta_z, (eta_Z, B_n(t), t0, B_n(t0))."""
    out = []
    for eta_z in th.fig9_eta_z:
        eta_y = ratio * eta_z
        t0 = theory.t0(th.M, th.K, eta_y)
        out.append(
            (
                eta_z,
                theory.B_exact(th.M, th.K, eta_y, eta_z, t, th.rho0),
                t0,
                theory.B_exact(th.M, th.K, eta_y, eta_z, t0, th.rho0),
            )
        )
    return out


def claim_fig9(by_ratio: list[list[tuple[float, np.ndarray, float, np.ndarray]]]) -> records.Claim:
    """B_n(t0) does not depend on eta_Z at a fixed ratio (Thm 4)."""
    spread = [float(np.ptp([at_t0 for *_, at_t0 in curves])) for curves in by_ratio]
    return records.claim(
        "Fig. 9: B_n(t0) does not depend on eta_Z at a fixed ratio eta_Y/eta_Z",
        spread,
        "spread < 1e-12 per ratio",
        max(spread) < 1e-12,
        "Thm 4, notes §4.3/T7",
    )


def claim_lemma9(th: ml_collections.ConfigDict) -> records.Claim:
    """Lemma 9: the exact crossing time lies within 1% of t0."""
    M, K = th.M, th.K
    return records.claim(
        "Lemma 9: the exact crossing e^{Mh} = (M-1)Mh lies within 1% of t0",
        [theory.transition_time_exact(M, K, e) / theory.t0(M, K, e) for e in th.fig3_eta_y],
        "ratio in [0.99, 1.01]",
        all(
            abs(theory.transition_time_exact(M, K, e) / theory.t0(M, K, e) - 1) < 0.01
            for e in th.fig3_eta_y
        ),
        "notes T5",
    )
