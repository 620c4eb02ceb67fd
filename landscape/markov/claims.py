"""What a trained Markov run shows and which of the paper's claims it reproduces (notes/markov.md
§8, §11-§13): per run the final test loss, f0, f1 and whether it is stuck at the unigram
(`outcomes`), and one claim function per name of `claims` in a config (`CLAIMS`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from ml_collections import ConfigDict

from landscape.engine import records
from landscape.markov import theory, trap_study
from landscape.markov.trap_study import Group, Row
from landscape.typing import PyTree


def references(cfg: ConfigDict, p: float, q: float) -> tuple[float, float]:
    """(unigram loss, bigram loss) of the chain of a run."""
    S = cfg.chain.num_states
    if S == 2:
        return float(theory.unigram_loss(p, q)), float(theory.entropy_rate(p, q))
    return float(theory.symmetric_unigram_loss(S)), float(theory.symmetric_entropy_rate(S, p))


def outcomes(group: Group) -> list[Row]:
    """Per run: p, q, seed, final test loss, f0, f1, and whether it is stuck at the unigram.

    Stuck (notes §12.7): |L - H(pi)| < I/4 (and |f0 - f1| < 0.02 for S = 2), with I the gap
    between the unigram and bigram losses; escaped: |L - L*| < I/4. Where I < 1e-3 (p + q = 1,
    or p = (S-1)/S: the chain is i.i.d.) no run is stuck and escaped is |L - L*| < 0.01.
    """
    cfg, res = group["cfg"], group["result"]
    rows = []
    for r in range(res.num_runs):
        p, q = float(res.hparams["chain.p"][r]), float(res.hparams["chain.q"][r])
        unigram, bigram = references(cfg, p, q)
        gap = unigram - bigram
        loss = float(res.snapshots["test_loss"][r, -1])
        row = {
            "p": p,
            "q": q,
            "seed": int(res.seeds[r]),
            "loss": loss,
            "unigram": unigram,
            "bigram": bigram,
        }
        flat = True
        if "f0" in res.snapshots:
            row.update(f0=float(res.snapshots["f0"][r, -1]), f1=float(res.snapshots["f1"][r, -1]))
            flat = abs(row["f0"] - row["f1"]) < 0.02
        row["stuck"] = bool(abs(loss - unigram) < gap / 4 and flat) if gap > 1e-3 else False
        row["escaped"] = bool(abs(loss - bigram) < (gap / 4 if gap > 1e-3 else 0.01))
        rows.append(row)
    return rows


def run_table(groups: Sequence[Group]) -> list[Row]:
    return [
        dict(program=", ".join(f"{k}={v}" for k, v in g["fields"].items()) or "base", **row)
        for g in groups
        for row in outcomes(g)
    ]


def program_label(group: Group) -> str:
    fields = group["fields"]
    cfg = group["cfg"]
    fam = "GPT-2 (LN)" if cfg.model.layer_norm else cfg.model.family
    return (
        f"{fam}, {'tied' if cfg.model.tied else 'untied'}, {cfg.model.num_layers} layer"
        + ("s" if cfg.model.num_layers > 1 else "")
        + (f" ({', '.join(f'{k}={v}' for k, v in fields.items())})" if fields else "")
    )


# ----------------------------------------------------------------------------- claims


def runs_at(rows: Sequence[Row], p: float, q: float) -> list[Row]:
    return [r for r in rows if np.isclose(r["p"], p) and np.isclose(r["q"], q)]


FIG3_POINTS = ((0.5, 0.8), (0.2, 0.3))


def all_finite(rows: Sequence[Row]) -> bool:
    return all(np.isfinite(r["loss"]) for r in rows)


def claims_fig3(cfg: ConfigDict, groups: Sequence[Group]) -> list[records.Claim]:
    """Fig. 3 (a-d): tied stuck at the unigram for (0.5, 0.8), untied at the bigram; both at the
    bigram for (0.2, 0.3) (notes §8, §11.2)."""
    out = []
    for g in groups:
        rows, label, tied = outcomes(g), program_label(g), g["cfg"].model.tied
        for p, q in FIG3_POINTS:
            if not runs_at(rows, p, q):
                out.append(
                    records.claim(
                        f"{label}, (p, q) = ({p:g}, {q:g}): Fig. 3's point",
                        "not measured: no run at this (p, q)",
                        "runs at (0.5, 0.8) and (0.2, 0.3)",
                        False,
                        "Fig. 3, notes §8",
                    )
                )
        for p, q in sorted({(r["p"], r["q"]) for r in rows}):
            runs = runs_at(rows, p, q)
            pi1 = p / (p + q)
            measured = {
                "final loss": [round(r["loss"], 4) for r in runs],
                "f0": [round(r["f0"], 3) for r in runs],
                "f1": [round(r["f1"], 3) for r in runs],
            }
            unigram, bigram = runs[0]["unigram"], runs[0]["bigram"]
            if tied and p + q > 1:
                ok = all(r["stuck"] and abs(r["f0"] - pi1) < 0.01 for r in runs)
                expected = (
                    f"stuck at H(pi) = {unigram:.4f}, f0 = f1 = pi_1 = {pi1:.4f} in every run"
                )
            else:
                ok = all(
                    r["escaped"] and abs(r["f0"] - p) < 0.02 and abs(r["f1"] - (1 - q)) < 0.02
                    for r in runs
                )
                expected = (
                    f"entropy rate {bigram:.4f}, f0 = p = {p:g}, f1 = 1 - q = {1 - q:g} in "
                    "every run"
                )
            out.append(
                records.claim(
                    f"{label}, (p, q) = ({p:g}, {q:g}): "
                    + ("the unigram trap" if tied and p + q > 1 else "the bigram"),
                    measured,
                    expected,
                    ok,
                    "Fig. 3, notes §8",
                )
            )
    return out


def claims_fig4(cfg: ConfigDict, groups: Sequence[Group]) -> list[records.Claim]:
    """Fig. 4: tied models get stuck only when p + q > 1; untied never (notes §8)."""
    out = []
    for g in groups:
        rows, label = outcomes(g), program_label(g)
        cells = sorted({(r["p"], r["q"]) for r in rows})
        stuck = {c: np.mean([r["stuck"] for r in runs_at(rows, *c)]) for c in cells}
        below = [c for c in cells if sum(c) < 1 - 1e-9]  # p + q = 1: unigram = bigram, skip
        above = [c for c in cells if sum(c) > 1 + 1e-9]
        # a diverged run (non-finite loss) is neither stuck nor escaped: it fails "no stuck run"
        bad = [
            f"{r['p']:g},{r['q']:g} seed {r['seed']}" for r in rows if not np.isfinite(r["loss"])
        ]
        if g["cfg"].model.tied:
            measured = (
                ({f"{p:g},{q:g}": stuck[(p, q)] for p, q in below if stuck[(p, q)]} or "none stuck")
                if below
                else "not measured: no cell with p + q < 1"
            )
            if bad:
                measured = {"stuck": measured, "non-finite loss": bad}
            out.append(
                records.claim(
                    f"{label}: no stuck run where p + q < 1",
                    measured,
                    "none stuck",
                    bool(below) and not bad and all(stuck[c] == 0 for c in below),
                    "Fig. 4",
                )
            )
            share = float(np.mean([stuck[c] > 0 for c in above])) if above else 0.0
            out.append(
                records.claim(
                    f"{label}: stuck runs where p + q > 1 (the demarcation along p + q = 1)",
                    {
                        "cells with a stuck run": share,
                        "stuck fraction per cell": {
                            f"{p:g},{q:g}": stuck[(p, q)] for p, q in above
                        },
                    }
                    if above
                    else "not measured: no cell with p + q > 1",
                    ">= half of the p + q > 1 cells have stuck runs",
                    share >= 0.5,
                    "Fig. 4",
                )
            )
        else:
            total = float(np.mean([r["stuck"] for r in rows]))
            out.append(
                records.claim(
                    f"{label}: no run is stuck anywhere",
                    {"stuck fraction": total, "non-finite loss": bad} if bad else total,
                    "0",
                    total == 0 and not bad,
                    "Fig. 4",
                )
            )
    return out


def claims_fig1(cfg: ConfigDict, groups: Sequence[Group]) -> list[records.Claim]:
    """Fig. 1: at (0.5, 0.8) a 1-layer tied model stays at the unigram; depth >= 2 escapes after a
    plateau at H(pi) (notes §8; §11.4 expects each model family to miss one half)."""
    out = []
    for g in groups:
        label = program_label(g)
        layers = g["cfg"].model.num_layers
        res = g["result"]
        every = outcomes(g)
        index = [
            r
            for r, row in enumerate(every)
            if np.isclose(row["p"], 0.5) and np.isclose(row["q"], 0.8)
        ]
        rows = [every[r] for r in index]
        if not rows:
            out.append(
                records.claim(
                    f"{label}, (0.5, 0.8): " + ("trapped" if layers == 1 else "escapes"),
                    "not measured: no run at (p, q) = (0.5, 0.8)",
                    "runs at (0.5, 0.8)",
                    False,
                    "Fig. 1",
                )
            )
            continue
        unigram = rows[0]["unigram"]
        if layers == 1:
            ok = all(r["stuck"] for r in rows)
            expected = "stuck at H(pi) in every run"
        else:
            test_loss = res.snapshots["test_loss"][index]
            early = test_loss[:, : max(2, test_loss.shape[1] // 5)]
            plateau = np.abs(early - unigram).min(axis=1) < (unigram - rows[0]["bigram"]) / 4
            ok = all(r["escaped"] for r in rows) and plateau.all()
            expected = "a plateau near H(pi), then the entropy rate, in every run"
        out.append(
            records.claim(
                f"{label}, (0.5, 0.8): " + ("trapped" if layers == 1 else "escapes"),
                {
                    "final loss": [round(r["loss"], 4) for r in rows],
                    "stuck": [r["stuck"] for r in rows],
                },
                expected,
                ok,
                "Fig. 1",
            )
        )
    return out


def claims_fig5(cfg: ConfigDict, groups: Sequence[Group]) -> list[records.Claim]:
    """Fig. 5 (S = 5): tied stuck at log 5 for p above the threshold (S-1)/S = 0.8 (the notes'
    derivation, §6.8), the bigram below it; untied always the bigram."""
    out = []
    threshold = theory.multistate_threshold(cfg.chain.num_states)
    for g in groups:
        rows, label, tied = outcomes(g), program_label(g), g["cfg"].model.tied
        for p in sorted({r["p"] for r in rows}):
            runs = [r for r in rows if np.isclose(r["p"], p)]
            trapped = tied and p > threshold
            ok = all(r["stuck"] if trapped else r["escaped"] for r in runs)
            out.append(
                records.claim(
                    f"{label}, S = {cfg.chain.num_states}, p = {p:g}: "
                    + ("trapped at log S" if trapped else "the bigram"),
                    [round(r["loss"], 4) for r in runs],
                    (
                        f"log S = {runs[0]['unigram']:.4f}"
                        if trapped
                        else f"entropy rate {runs[0]['bigram']:.4f}"
                    )
                    + " (within I/4)",
                    ok,
                    "Fig. 5 (004), notes §6.8",
                )
            )
    return out


def claims_appendix_d(cfg: ConfigDict, groups: Sequence[Group]) -> list[records.Claim]:
    """App. D: the learned global minimum at (0.2, 0.3), tied, has the rank-one structure, and the
    formula evaluated on the fitted scalars predicts p and 1 - q (notes §6.6)."""
    out = []
    for g in groups:
        res, c = g["result"], g["cfg"]
        for r in range(res.num_runs):
            params = jax.tree.map(lambda x, r=r: np.asarray(x[r], np.float64), res.final_params)
            p, q = float(res.hparams["chain.p"][r]), float(res.hparams["chain.q"][r])
            statement = (
                f"{program_label(g)}, seed {int(res.seeds[r])}: e and p_n share one sign "
                "pattern v, W_1 is rank one, W_2 ~ W_1^T, and the App. D formula gives p "
                "and 1 - q"
            )
            expected = (
                f"|cos(e, p_n)| > 0.95, sigma_2/sigma_1(W_1) < 0.1, f(0) ~ {p:g}, f(1) ~ {1 - q:g}"
            )
            if not all(np.isfinite(x).all() for x in jax.tree.leaves(params)):
                out.append(
                    records.claim(
                        statement, "non-finite weights", expected, False, "App. D, notes §6.6"
                    )
                )
                continue
            fit = fit_appendix_d(params, c)
            probs = 1 / (1 + np.exp(-np.asarray(fit["formula_logits"])))
            out.append(
                records.claim(
                    statement,
                    {
                        k: (round(v, 3) if isinstance(v, float) else v)
                        for k, v in fit.items()
                        if k != "formula_logits"
                    }
                    | {"formula f(0), f(1)": np.round(probs[::-1], 3).tolist()},
                    expected,
                    fit["cos_e_p"] > 0.95
                    and fit["rank_one"] < 0.1
                    and abs(probs[1] - p) < 0.05
                    and abs(probs[0] - (1 - q)) < 0.05,
                    "App. D, notes §6.6",
                )
            )
    return out


def fit_appendix_d(params: PyTree, cfg: ConfigDict) -> dict[str, Any]:
    """Fit App. D's scalars (e, p, w_1, b, beta) to trained tied theory-model weights."""
    d = cfg.model.d
    r = cfg.model.mlp_width or 4 * d
    e = params["e"]
    v = np.sign(e)
    pos = params["pos"].mean(axis=0)
    block = params["block_0"]
    W1, W2 = block["W_1"], block["W_2"]
    u, s, vt = np.linalg.svd(W1)
    w = np.sign(u[:, 0]) * np.sign(vt[0] @ v)
    w1 = s[0] / np.sqrt(r * d)
    e_scalar, p_scalar = float(e @ v / d), float(pos @ v / d)
    beta = int(np.sum(w > 0))
    logits = theory.appendix_d_logits(e_scalar, p_scalar, w1, float(params["b"]), beta, d, r)
    return {
        "e": e_scalar,
        "p": p_scalar,
        "w1": float(w1),
        "b": float(params["b"]),
        "beta": beta,
        "cos_e_p": float(abs(e @ pos) / (np.linalg.norm(e) * np.linalg.norm(pos) + 1e-12)),
        "rank_one": float(s[1] / s[0]),
        "W2_vs_W1T": float(np.linalg.norm(W2 - W1.T) / np.linalg.norm(W1)),
        "formula_logits": [float(x) for x in logits],
    }


def claims_trap(cfg: ConfigDict, groups: Sequence[Group]) -> list[records.Claim]:
    """The trap study (notes/markov.md §13): trapped fractions per (depth, precision), with
    intervals."""
    return trap_study.claims(cfg, groups)


CLAIMS: dict[str, records.ClaimFn] = {
    "fig1": claims_fig1,
    "fig3": claims_fig3,
    "fig4": claims_fig4,
    "fig5": claims_fig5,
    "appendix_d": claims_appendix_d,
    "trap": claims_trap,
    "none": lambda cfg, groups: [],
}
