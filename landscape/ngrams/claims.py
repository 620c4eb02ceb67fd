"""What a trained n-gram run shows, and which of the paper's claims it reproduces (notes/ngrams.md
§4.1, §5, §7): the estimator lines a figure draws, the plateaus of the test loss and the history
the heads read on each, and the claim functions that turn them into verdicts (`CLAIMS`, one per
name of `claims` in a config; Theorem 4.2's study: `stationarity_claims`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import Any, SupportsFloat

import jax
import jax.numpy as jnp
import numpy as np
from ml_collections import ConfigDict

from landscape.engine import records, training
from landscape.ngrams import estimators, task

OFFSETS = (1, 2, 3)
BETA_GRID = (0.0,) + tuple(float(b) for b in np.logspace(-3, 2, 21))

# ----------------------------------------------------------------------------- estimator lines


class Lines:
    """Estimator losses on `lines.num_sequences` fresh sequences (notes §4.1 table).

    `base` holds the figures' lines: "uniform" (log S); per k < n "k-gram +alpha" (add-alpha,
    lags 1..k-1, keys with a full n-1 history: the authors' counting, notes §4.1 [code]),
    "k-gram +alpha (far lags)" (the authors' dashed lines, lags n-k+1..n-1) and "k-gram opt"
    (Def. 2.1's counts with the best add-beta over BETA_GRID); "bayes" (the Bayes n-gram
    predictor) and "n-gram opt". `for_lags(lags)` gives the +alpha and opt losses of the estimator
    that reads any set of past offsets (App. F.2's N-history), e.g. the offsets a model's heads
    attend to.
    """

    def __init__(self, cfg: ConfigDict) -> None:
        t = cfg.task
        self.num_states, self.order_n, self.alpha = t.num_states, t.order_n, t.alpha
        self.floor = cfg.train.floor
        self.x, y, _ = task.sample(
            jax.random.key(cfg.lines.seed),
            t.num_states,
            t.order_n,
            t.seq_len,
            t.alpha,
            cfg.lines.num_sequences,
            t.init,
        )
        self.y = y.astype(jnp.float32)
        self._cache: dict[tuple[int, ...], dict[str, float]] = {}
        S, n = self.num_states, self.order_n
        self.base = {"uniform": math.log(S)}
        for k in range(1, n + 1):
            name, lags = f"{k}-gram", tuple(range(1, k))
            if k == n:
                self.base["bayes"] = self.for_lags(lags)["+alpha"]
            else:
                self.base[f"{name} +alpha"] = self.for_lags(lags)["+alpha"]
                if k > 1:
                    self.base[f"{name} +alpha (far lags)"] = self.for_lags(
                        tuple(range(n - k + 1, n))
                    )["+alpha"]
            self.base[f"{name} opt"] = self.for_lags(lags)["opt"]

    def _loss(self, probs: jax.Array) -> float:
        return float(jnp.mean(estimators.cross_entropy(probs, self.y, self.floor)))

    def for_lags(self, lags: Iterable[int]) -> dict[str, float]:
        """{"+alpha", "opt"} losses of the estimator reading the offsets `lags` (() = unigram)."""
        key = tuple(sorted(lags))
        if key not in self._cache:
            S, n = self.num_states, self.order_n
            k = len(key) + 1
            smoothed = estimators.smoothed_estimate(
                self.x, S, k, self.alpha, lags=key or None, min_position=n if key else None
            )
            counts, matches = estimators.kgram_counts(self.x, S, k, lags=key or None)
            best = min(
                self._loss(estimators._normalise(counts, matches, beta, S)) for beta in BETA_GRID
            )
            self._cache[key] = {"+alpha": self._loss(smoothed), "opt": best}
        return self._cache[key]


# ----------------------------------------------------------------------------- analysis


def plateaus(
    steps: np.ndarray, loss: np.ndarray, window: int, tol: float, min_length: int
) -> list[dict[str, float]]:
    """Maximal stretches where the test loss moves less than `tol` within +-window/2 steps, of
    at least `min_length` steps: [{"start", "end", "level"}] (level = median loss)."""
    half = max(1, int(round(window / 2 / (steps[1] - steps[0]))))
    flat = np.array([np.ptp(loss[max(0, j - half) : j + half + 1]) < tol for j in range(len(loss))])
    out, j = [], 0
    while j < len(flat):
        if not flat[j]:
            j += 1
            continue
        end = j
        while end + 1 < len(flat) and flat[end + 1]:
            end += 1
        if steps[end] - steps[j] >= min_length:
            out.append(
                dict(
                    start=int(steps[j]),
                    end=int(steps[end]),
                    level=float(np.median(loss[j : end + 1])),
                )
            )
        j = end + 1
    return out


def _stage(
    plateau: dict, steps: np.ndarray, offsets_SHL: np.ndarray, threshold: float, lines: Lines
) -> dict[str, Any]:
    """What the heads implement at the end of a plateau, and the matching estimator's losses.

    The history read is the set of offsets -l some head attends to with weight > threshold (at
    the plateau's last snapshot, where its heads are most formed); the plateau is compared with
    the +alpha and best-smoothed estimators of exactly that history.
    """
    j = int(np.flatnonzero(steps == plateau["end"])[0])
    lags = tuple(
        int(lag)
        for i, lag in enumerate(OFFSETS[: offsets_SHL.shape[-1]])
        if lag < lines.order_n and offsets_SHL[j, :, i].max() > threshold
    )
    refs = lines.for_lags(lags)
    name, value = min(refs.items(), key=lambda kv: abs(plateau["level"] - kv[1]))
    return dict(
        lags=list(lags),
        k=len(lags) + 1,
        line=name,
        line_value=round(value, 4),
        distance=round(abs(plateau["level"] - value), 4),
        lines={k: round(v, 4) for k, v in refs.items()},
    )


def run_analysis(group: dict, lines: Lines) -> list[dict[str, Any]]:
    """Per run: plateaus with the history their heads read and that estimator's loss, the step
    each offset's head forms, and the mean minibatch gradient norm per log interval."""
    cfg, res = group["cfg"], group["result"]
    a, n = cfg.analysis, cfg.task.order_n
    steps = res.snapshot_steps
    rows = []
    for r in range(res.num_runs):
        loss = res.snapshots["test_loss"][r]
        offsets = res.snapshots["head_offsets"][r]  # (snaps, heads, lags)
        found = plateaus(steps, loss, a.flat_window, a.flat_tol, a.min_plateau)
        for p in found:
            p.update(_stage(p, steps, offsets, a.head_threshold, lines))
        formed: dict[str, int | None] = {}
        for j, lag in enumerate(OFFSETS[: n - 1]):
            hit = np.flatnonzero(offsets[:, :, j].max(axis=1) > a.head_threshold)
            formed[f"lag{lag}"] = int(steps[hit[0]]) if hit.size else None
        grad = res.metrics["grad_norm"][r].reshape(len(steps) - 1, -1).mean(axis=1)
        rows.append(
            dict(
                seed=int(res.seeds[r]),
                lr=float(res.hparams["optim.lr"][r]),
                final_loss=float(loss[-1]),
                plateaus=found,
                head_formed=formed,
                grad_norm_per_snapshot=grad,
            )
        )
    return rows


def _jump(steps: np.ndarray, loss: np.ndarray, after: int) -> int:
    """Index j (snapshot) of the largest test-loss drop loss[j-1] - loss[j] after step `after`."""
    drops = np.where(steps[1:] > after, loss[:-1] - loss[1:], -np.inf)
    return int(np.argmax(drops)) + 1


# ----------------------------------------------------------------------------- claims


def claims_staircase(
    cfg: ConfigDict, group: dict, lines: Lines, rows: list[dict]
) -> list[records.Claim]:
    """Figs 1/3/4/6: every sub-n-gram plateau sits at the loss of the k-gram estimator whose
    history the heads read at its end, and the histories grow along training (notes §7: within
    ~0.01-0.02 of the lines)."""
    tol, n, out = cfg.analysis.line_tol, cfg.task.order_n, []
    for row in rows:
        sub = [p for p in row["plateaus"] if p["k"] < n]
        measured = [
            dict(
                steps=f"{p['start']}-{p['end']}",
                level=round(p["level"], 4),
                heads_read=[-lag for lag in p["lags"]],
                nearest=p["line"],
                line=p["line_value"],
                distance=p["distance"],
            )
            for p in sub
        ]
        orders = [p["k"] for p in sub]
        ok = bool(sub) and all(p["distance"] <= tol for p in sub) and orders == sorted(orders)
        out.append(
            records.claim(
                f"{program_label(group)}, seed {row['seed']}: sub-n-gram plateaus sit at the "
                "loss of the estimator of the history the heads read",
                measured or "no sub-n-gram plateau found",
                f"each within {tol} of that estimator's +alpha or best-smoothed loss; k increasing",
                ok,
                "Figs 1, 3, 4, 6; notes §7",
            )
        )
        final = row["final_loss"]
        out.append(
            records.sanity(
                f"{program_label(group)}, seed {row['seed']}: final test loss against the "
                "n-gram (Bayes) line",
                dict(
                    final=round(final, 4),
                    bayes=round(lines.base["bayes"], 4),
                    gap=round(final - lines.base["bayes"], 4),
                ),
                "at or above the Bayes loss (no predictor beats it), within 0.01",
                final >= lines.base["bayes"] - 0.01,
                "notes §4.1",
            )
        )
    return out


def claims_heads(
    cfg: ConfigDict, group: dict, lines: Lines, rows: list[dict]
) -> list[records.Claim]:
    """Figs 3-5: the previous-token (-1) head forms before the (-2) head (notes §5 Fig. 5).

    A seed counts only when both heads formed, the -1 head first: a seed whose -2 head never
    formed shows no order (e.g. a run stopped after the first transition)."""
    n = cfg.task.order_n
    if n < 3:
        return []
    first = [r["head_formed"] for r in rows]
    before = [
        f["lag1"] is not None and f["lag2"] is not None and f["lag1"] < f["lag2"] for f in first
    ]
    escaped = sum(f["lag2"] is not None for f in first)
    need = max(1, math.ceil(0.8 * len(rows)))
    measured: dict[str, Any] = dict(
        first_step_per_seed=first, seeds_in_order=int(sum(before)), seeds_with_a_minus2_head=escaped
    )
    if escaped < len(rows):
        measured["note"] = f"the -2 head never formed in {len(rows) - escaped} of {len(rows)} seeds"
    return [
        records.claim(
            f"{program_label(group)}: the (-1) head forms before the (-2) head "
            f"(attention > {cfg.analysis.head_threshold})",
            measured,
            f"both heads form, -1 first, in >= {need} of {len(rows)} seeds",
            sum(before) >= need,
            "Figs 3, 5; notes §5",
        )
    ]


def spike(cfg: ConfigDict, group: dict, r: int, row: dict) -> dict[str, Any] | None:
    """Run r's gradient norm on its longest sub-n-gram plateau and at the largest test-loss drop
    after it (None without such a plateau). Measured on the test-set gradient (a population
    estimate: sign(<g_A, g_B>) sqrt|<g_A, g_B>| over two halves, unbiased for ||grad L||^2); the
    minibatch norm (at the current parameters, whose noise floor hides the plateau) beside it."""
    res, steps = group["result"], group["result"].snapshot_steps
    before = [p for p in row["plateaus"] if p["k"] < cfg.task.order_n]
    if not before:
        return None
    loss, test_grad = res.snapshots["test_loss"][r], res.snapshots["test_grad_norm"][r]
    batch_grad = row["grad_norm_per_snapshot"]
    plateau = max(before, key=lambda p: p["end"] - p["start"])
    j = _jump(steps, loss, plateau["end"] - cfg.analysis.flat_window)
    on = (steps >= plateau["start"]) & (steps <= plateau["end"])
    near = slice(max(0, j - 4), min(len(steps), j + 5))
    # the median is robust to the estimate's noise; clip at a tenth of the peak, which keeps
    # a plateau whose unbiased estimate is ~0 (or negative) from giving an infinite ratio
    peak = float(test_grad[near].max())
    median = float(np.median(test_grad[on])) if on.any() else np.nan
    level = float(np.max([median, 0.1 * peak]))
    near_b = slice(max(0, j - 5), min(len(batch_grad), j + 4))
    batch_ratio = safe_ratio(batch_grad[near_b].max(), np.median(batch_grad[on[1:]]))
    ratio = safe_ratio(peak, level) if peak > 0 else 0.0  # no positive estimate: no spike
    return dict(
        plateau_steps=f"{plateau['start']}-{plateau['end']}",
        escaped=bool(plateau["end"] < steps[-1]),
        jump_step=int(steps[j]),
        test_grad_norm_plateau=round(level, 4),
        test_grad_norm_peak=round(peak, 4),
        ratio=round(ratio, 2),
        minibatch_ratio=round(batch_ratio, 2),
        **(
            {
                "plateau_floored": f"median {median:.4f} < a tenth of the peak: the ratio is "
                f"capped at 10 (uncapped {safe_ratio(peak, median):.1f})"
            }
            if median < 0.1 * peak
            else {}
        ),
    )


def claims_grad_norm(
    cfg: ConfigDict, group: dict, lines: Lines, rows: list[dict]
) -> list[records.Claim]:
    """Figs 6-7: the gradient norm is small on the plateau before the largest jump and spikes at
    the jump (paper: ~10x, measured at averaged parameters, notes §8), per run (`spike`)."""
    out = []
    for r, row in enumerate(rows):
        label = (
            f"{program_label(group)}, seed {row['seed']}: gradient norm small on the plateau, "
            "spiking at the jump"
        )
        measured = spike(cfg, group, r, row)
        if measured is None or measured["escaped"] is False:
            out.append(
                records.claim(
                    label,
                    "no sub-n-gram plateau found"
                    if measured is None
                    else f"no jump: the run ends on the plateau ({measured['plateau_steps']})",
                    "a plateau, then a jump",
                    False,
                    "Figs 6, 7",
                )
            )
            continue
        out.append(
            records.claim(
                label,
                measured,
                f"peak / plateau >= {cfg.analysis.spike_ratio} (test-set gradient)",
                measured["ratio"] >= cfg.analysis.spike_ratio,
                "Figs 6, 7 (notes §5)",
            )
        )
    return out


def claims_spike_by_measure(
    cfg: ConfigDict,
    averaged: dict,
    rows_averaged: list[dict],
    current: dict,
    rows_current: list[dict],
) -> list[records.Claim]:
    """Notes §8: the paper's ~10x spike is a measure at averaged parameters. Per seed, the spike
    ratio at the parameter EMA against the ratio at the current parameters (each on its own
    plateau and jump; a seed that never leaves its plateau shows no spike at either)."""
    out = []
    for r, (row_a, row_c) in enumerate(zip(rows_averaged, rows_current, strict=True)):
        a, c = spike(cfg, averaged, r, row_a), spike(cfg, current, r, row_c)
        measured: dict[str, Any] = {
            "averaged": a or "no sub-n-gram plateau",
            "current": c or "no sub-n-gram plateau",
        }
        ok = (
            a is not None
            and c is not None
            and a["escaped"]
            and c["escaped"]
            and a["ratio"] > c["ratio"]
        )
        if ok and a is not None and c is not None:  # ok implies both (for mypy)
            measured["averaged / current"] = round(safe_ratio(a["ratio"], c["ratio"]), 2)
        out.append(
            records.claim(
                f"{program_label(current, measured_at=False)}, seed {row_a['seed']}: the "
                f"gradient spike is larger at the parameter EMA (decay {cfg.train.ema_decay}) "
                "than at the current parameters",
                measured,
                "peak / plateau ratio at the EMA > at the current parameters",
                ok,
                "Fig. 6; notes §8 (the authors' ema_metrics)",
            )
        )
    return out


def claims_paper_levels(
    cfg: ConfigDict, group: dict, lines: Lines, rows: list[dict]
) -> list[records.Claim]:
    """Fig. 3's absolute values (the authors' notebook, notes §5): the longest sub-n-gram plateau
    and the final test loss against analysis.paper_plateau / paper_final, within line_tol. The
    authors' Fig. 3 model had a layer-2 query/key width of S (notes §8), so model.head_dim = S
    is the model to compare."""
    a, out = cfg.analysis, []
    last = group["result"].snapshot_steps[-1]
    for row in rows:
        middle = [p for p in row["plateaus"] if p["k"] < cfg.task.order_n]
        plateau = max(middle, key=lambda p: p["end"] - p["start"]) if middle else None
        level = plateau["level"] if plateau else math.nan
        escaped = plateau is not None and plateau["end"] < last
        gaps = dict(
            plateau=round(level - a.paper_plateau, 4),
            final=round(row["final_loss"] - a.paper_final, 4),
        )
        measured = dict(
            plateau=round(level, 4) if plateau else "no sub-n-gram plateau",
            plateau_steps=f"{plateau['start']}-{plateau['end']}" if plateau else None,
            final=round(row["final_loss"], 4),
            gap=gaps,
        )
        if plateau is not None and not escaped:
            measured["note"] = f"no escape: the run ends on the plateau (step {int(last)})"
        out.append(
            records.claim(
                f"{program_label(group)}, seed {row['seed']}: plateau and final test loss "
                f"(after leaving the plateau) at the paper's values ({a.paper_plateau}, "
                f"{a.paper_final})",
                measured,
                f"an escape, and both within {a.line_tol}",
                escaped and max(abs(v) for v in gaps.values()) <= a.line_tol,
                "Fig. 3 (authors' notebook, notes §5, §8)",
            )
        )
    return out


def claims_single_plateau(
    cfg: ConfigDict, group: dict, lines: Lines, rows: list[dict]
) -> list[records.Claim]:
    """Fig. 7 (MLP variant): one intermediate plateau only, at the unigram level (notes §5: the
    plateau ~1.602 is the best-smoothed unigram). The plateau is judged by its level against the
    unigram lines, not by the heads at its end: a plateau that slides into the escape ends with
    the next stage's heads already forming. The test loss must also not stay near the
    best-smoothed bigram line (within line_tol / 4) for a plateau's length (min_plateau): a
    bigram stage the plateau detector merged into the unigram plateau shows there."""
    tol, out = cfg.analysis.line_tol, []
    unigram = {name: lines.base[name] for name in ("1-gram +alpha", "1-gram opt")}
    res = group["result"]
    step = float(res.snapshot_steps[1] - res.snapshot_steps[0])
    for r, row in enumerate(rows):
        middle = [p for p in row["plateaus"] if p["k"] < cfg.task.order_n]
        measured = [
            dict(
                steps=f"{p['start']}-{p['end']}",
                level=round(p["level"], 4),
                unigram_distance=round(min(abs(p["level"] - v) for v in unigram.values()), 4),
            )
            for p in middle
        ]
        near_bigram = np.abs(res.snapshots["test_loss"][r] - lines.base["2-gram opt"]) <= tol / 4
        at_bigram = int(near_bigram.sum() * step)
        ok = (
            len(middle) == 1
            and measured[0]["unigram_distance"] <= tol
            and at_bigram < cfg.analysis.min_plateau
        )
        out.append(
            records.claim(
                f"{program_label(group)}, seed {row['seed']}: a single intermediate plateau, "
                "the unigram",
                dict(
                    plateaus=measured or "none",
                    steps_near_bigram_line=at_bigram,
                    bigram_line=round(lines.base["2-gram opt"], 4),
                ),
                f"one sub-n-gram plateau, within {tol} of a unigram line "
                f"({', '.join(f'{k} {v:.4f}' for k, v in unigram.items())}), and fewer than "
                f"{cfg.analysis.min_plateau} steps (a plateau's length) within {tol / 4} of the "
                "bigram line",
                ok,
                "Fig. 7",
            )
        )
    return out


def safe_ratio(a: SupportsFloat, b: SupportsFloat) -> float:
    """a / b as a float: inf for a positive a over 0, NaN for 0/0 or a NaN (a failing ratio)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.float64(a) / np.float64(b))


CLAIMS = {
    "staircase": claims_staircase,
    "heads": claims_heads,
    "grad_norm": claims_grad_norm,
    "single_plateau": claims_single_plateau,
    "paper_levels": claims_paper_levels,
}


def program_label(group: dict, measured_at: bool = True) -> str:
    """The program in words (model, task) and, for a run measured at averaged parameters, where
    its snapshots were measured (group["measured_at"], set by `measured_view`)."""
    cfg = group["cfg"]
    m = cfg.model
    if m.kind == "simplified":
        kind = (
            "simplified"
            + (f" (Q2/K2 width {m.head_dim})" if m.head_dim else "")
            + (" (V1 = I)" if not m.learn_value else "")
        )
    else:
        kind = f"{m.kind} ({m.embedding}{', MLP' if m.mlp else ''})"
    t = cfg.task
    label = f"{kind}, S={t.num_states}, n={t.order_n}, T={t.seq_len}"
    if measured_at and group.get("measured_at"):
        label += f", {group['measured_at']}"
    return label


def measures(cfg: ConfigDict) -> list[tuple[str, str]]:
    """(snapshot-name prefix, words) of each measure a run logged (training.train's metrics_at):
    the analysed one first."""
    t = cfg.train
    ema = f"at the parameter EMA ({t.ema_decay})"
    return {
        "current": [("", "")],
        "ema": [("", ema)],
        "both": [("", ema), (training.CURRENT_PREFIX, "at the current parameters")],
    }[t.metrics_at]


def measured_view(group: dict, prefix: str, words: str) -> dict[str, Any]:
    """The group as seen by one measure: its result's snapshots are the ones named with `prefix`
    (prefix stripped; "" keeps the names that carry no measure's prefix)."""
    snaps = group["result"].snapshots
    others = tuple(p for p, _ in measures(group["cfg"]) if p and p != prefix)
    chosen = {
        k[len(prefix) :]: v
        for k, v in snaps.items()
        if k.startswith(prefix) and not (not prefix and k.startswith(others))
    }
    return {
        **group,
        "result": dataclasses.replace(group["result"], snapshots=chosen),
        "measured_at": words,
    }
