"""Which of the associative-recall claims a run reproduces (notes/assoc_recall.md §4, §7.1):
one claim function per name of `claims` in a config (`CLAIMS`), each taking the config and the
run's groups (a flow or SGD program's results) and returning `records.Claim`s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from ml_collections import ConfigDict

from landscape.engine import config as config_lib
from landscape.engine import records, training
from landscape.recall import flow, theory
from landscape.recall import model as model_lib
from landscape.typing import NDArray

Group = dict[str, Any]  # one program's results (experiment.run_flow / run_sgd) and its fields

# notes §4.4: eps * T_mid of the first jump (k = |R| = 4) measured by the notes' author with GF
NOTES_FIRST_JUMP = {
    0.2: 140.3,
    0.1: 150.4,
    0.05: 156.3,
    0.02: 160.5,
    0.01: 162.1,
    0.005: 163.1,
    0.002: 163.7,
    0.001: 163.9,
}


def levels(cfg: ConfigDict) -> NDArray:
    return theory.plateau_levels(cfg.task.k, cfg.task.num_responses)


def claims_first_jump(cfg: ConfigDict, groups: Sequence[Group]) -> list[records.Claim]:
    """E1 (notes §4.1, §4.4; checks C4, C5, C7, C8, C9) from I_1."""
    (g,) = groups
    k, nr = cfg.task.k, cfg.task.num_responses
    L = levels(cfg)
    eps, times, loss = g["eps"], g["times"], g["loss"]
    out = _first_jump_time_claims(eps, times, loss, L, k, nr)
    out += _first_manifold_claims(g["params"]["w"], g["params"]["beta"], k)
    out.append(_first_plateaus_claim(loss, L))
    return out


def _first_jump_time_claims(
    eps: NDArray, times: NDArray, loss: NDArray, L: NDArray, k: int, nr: int
) -> list[records.Claim]:
    """eps*T_mid against the notes' GF values and the eps -> 0 limit; the jump's width (C8, C9)."""
    T = flow.jump_times(times, loss, L[:2])[:, 0]
    eps_T = eps * T
    theory_eps_T = eps * theory.jump_time(k, nr, eps)
    out = []
    notes = {e: NOTES_FIRST_JUMP[e] for e in eps if e in NOTES_FIRST_JUMP and (k, nr) == (4, 4)}
    if notes:
        measured = {e: float(eps_T[list(eps).index(e)]) for e in notes}
        out.append(
            records.claim(
                "eps*T_mid of the first jump matches the notes' GF values",
                measured,
                notes,
                all(abs(measured[e] - notes[e]) < 0.3 for e in notes),
                "notes §4.4 (C8)",
            )
        )
    order = np.argsort(-eps)
    out.append(
        records.claim(
            f"eps*T_mid rises towards pi k k!/(2A sqrt(2(k-1)/k)) = "
            f"{theory_eps_T[0]:.2f} as eps -> 0 (the plateau lasts ~1/eps, not log 1/eps)",
            eps_T[order].round(2).tolist(),
            f"increasing, within 0.5% at eps = {eps.min():g} (at least two eps)",
            len(eps) > 1
            and bool(np.all(np.diff(eps_T[order]) > 0))
            and abs(eps_T[order][-1] / theory_eps_T[0] - 1) < 0.005,
            "notes §4.4 (C8)",
        )
    )
    drop = L[0] - L[1]
    t10, t90 = flow.crossing_times(times, loss, [L[0] - 0.1 * drop, L[0] - 0.9 * drop]).T
    width = t90 - t10
    if (k, nr) == (4, 4):
        out.append(
            records.claim(
                "the jump (10% -> 90% of the drop) lasts ~36.1 time units for every eps",
                width.round(2).tolist(),
                "36.1 +- 1",
                np.all(np.abs(width - 36.1) < 1.0),
                "notes §4.4 (C9)",
            )
        )
    return out


def _first_manifold_claims(w: NDArray, beta: NDArray, k: int) -> list[records.Claim]:
    """The conservation law of Thm 3.1(d) and the flow staying on M_1 (C4, C5)."""
    alpha = flow.focus_logit(w)[..., 0]
    conserved = np.asarray(theory.conserved_quantity(alpha, beta[..., 0], k))
    drift = float(np.abs(conserved - conserved[:, :1]).max())
    others = max(float(np.abs(w[:, :, 1:]).max()), float(np.abs(beta[:, :, 1:]).max()))
    spread = float(np.ptp(w[:, :, 0, 1:], axis=-1).max())
    on_line = float(np.abs(w[:, :, 0] - alpha[..., None] * (np.eye(k)[0] - 1 / k)).max())
    return [
        records.claim(
            "f(alpha_1) - beta_1^2/4 is conserved along the flow (Thm 3.1(d), '+' sign)",
            drift,
            "<= 1e-8",
            drift <= 1e-8,
            "notes §4.1 (C5)",
        ),
        records.claim(
            "the flow stays on M_1: other heads exactly 0, w^1 = alpha (e_1 - 1/k)",
            {"other heads": others, "spread of w^1_{i!=1}": spread, "off the line": on_line},
            "all <= 1e-12",
            np.max([others, spread, on_line]) <= 1e-12,
            "notes §4.1 (C4)",
        ),
    ]


def _first_plateaus_claim(loss: NDArray, L: NDArray) -> records.Claim:
    """The loss starts on L_0 and settles on L_1 (C7)."""
    final = loss[:, -1]
    return records.claim(
        f"plateaus: L(0) = L_0 = {L[0]:.5f}, then the loss settles on L_1 = {L[1]:.5f}",
        {
            "L(0)": float(np.abs(loss[:, 0] - L[0]).max()),
            "L(end) - L_1": float((final - L[1]).max()),
        },
        "|L(0) - L_0| <= 1e-12, 0 < L(end) - L_1 < 0.01",
        np.abs(loss[:, 0] - L[0]).max() <= 1e-12 and np.all((final > L[1]) & (final - L[1] < 0.01)),
        "notes §3 (C7)",
    )


def claims_ei_tail(cfg: ConfigDict, groups: Sequence[Group]) -> list[records.Claim]:
    """E1 tail (notes §4.4 regime 2, C10): e^alpha ~ k^2/(4(k-1)) ln t, t ln t (L - L_1) -> 1/4."""
    (g,) = groups
    k, L = cfg.task.k, levels(cfg)
    tail = g["times"][0] >= 1e5
    if tail.sum() < 2:
        missing = f"not measured: {int(tail.sum())} saves at t >= 1e5 (raise flow.t_max)"
        return [
            records.claim(
                "after the jump e^alpha grows linearly in ln t with slope k^2/(4(k-1))",
                missing,
                f"{k**2 / (4 * (k - 1)):.4f} within 3%",
                False,
                "notes §4.4 (C10)",
            ),
            records.claim(
                "t ln t (L - L_1) approaches 1/(4c) = 0.25 from below",
                missing,
                "within [0.20, 0.25]",
                False,
                "notes §4.4 (C10)",
            ),
        ]
    t, loss = g["times"][0][tail], g["loss"][0][tail]
    alpha = flow.focus_logit(g["params"]["w"])[0, tail, 0]
    slope = np.polyfit(np.log(t), np.exp(alpha), 1)[0]
    predicted = k**2 / (4 * (k - 1))
    product = t * np.log(t) * (loss - L[1])
    return [
        records.claim(
            "after the jump e^alpha grows linearly in ln t with slope k^2/(4(k-1))",
            float(slope),
            f"{predicted:.4f} within 3%",
            abs(slope / predicted - 1) < 0.03,
            "notes §4.4 (C10)",
        ),
        records.claim(
            "t ln t (L - L_1) approaches 1/(4c) = 0.25 from below",
            [float(product.min()), float(product.max())],
            "within [0.20, 0.25]",
            product.min() > 0.2 and product.max() < 0.25,
            "notes §4.4 (C10)",
        ),
    ]


def claims_later_jumps(cfg: ConfigDict, groups: Sequence[Group]) -> list[records.Claim]:
    """E2 (Prop. A.2 with the notes' k/k' correction, §4.5; C11) from I_h."""
    (g,) = groups
    k, nr = cfg.task.k, cfg.task.num_responses
    L = levels(cfg)
    out = []
    for r, point in enumerate(g["grid"]):
        c = config_lib.with_fields(cfg, point).init
        beta = g["params"]["beta"][r]
        T = np.inf
        if c.stage < k:
            T = flow.jump_times(
                g["times"][r : r + 1], g["loss"][r : r + 1], L[c.stage - 1 : c.stage + 1]
            )[0, 0]
            predicted = c.eps * theory.jump_time(k, nr, c.eps, stage=c.stage)
            out.append(
                records.claim(
                    f"stage {c.stage}: eps*T_{c.stage} matches pi k k'!/(2cA sqrt(2(k'-1)"
                    f"/k')) (k' = k - h + 1)",
                    float(c.eps * T),
                    f"{predicted:.2f} within 0.5%",
                    abs(c.eps * T / predicted - 1) < 0.005,
                    "notes §4.5 (C11)",
                )
            )
        else:
            moved = float(np.abs(beta[:, -1]).max())
            out.append(
                records.claim(
                    f"stage {c.stage} = k: no jump (the loss is already ~0) and beta_k "
                    "stays O(eps)",
                    {"max loss": float(g["loss"][r].max()), "max beta_k / eps": moved / c.eps},
                    "loss < 1e-3, beta_k/eps < 2",
                    g["loss"][r].max() < 1e-3 and moved / c.eps < 2,
                    "notes §4.5",
                )
            )
        # T = inf at stage k (no jump: the whole run); NaN where no jump was found
        held = beta[g["times"][r] < T][:, : c.stage - 1]
        drift = float(np.abs(held - c.big).max()) if held.size else math.nan
        out.append(
            records.claim(
                f"stage {c.stage}: the macroscopic heads (beta = c = 6) stay put until the jump",
                drift
                if held.size
                else "not measured: "
                + (
                    "no jump found"
                    if np.isnan(T)
                    else "no macroscopic head or no save before the jump"
                ),
                "<= 1e-10 (notes: < 2e-12)",
                drift <= 1e-10,
                "notes §4.5 (a)",
            )
        )
    return out


def claims_stages(cfg: ConfigDict, groups: Sequence[Group]) -> list[records.Claim]:
    """E3 (notes §4.7-4.8; C12, C13): order follows beta(0), jump times -> the recursion."""
    (g,) = groups
    k, nr = cfg.task.k, cfg.task.num_responses
    L = levels(cfg)
    out = []
    shapes = sorted({tuple(config_lib.with_fields(cfg, p).init.beta_shape) for p in g["grid"]})
    eps_min = g["eps"].min()
    limit_taus = {}
    for shape in shapes:
        runs = [
            r
            for r, p in enumerate(g["grid"])
            if tuple(config_lib.with_fields(cfg, p).init.beta_shape) == shape
        ]
        smallest = min(runs, key=lambda r: g["eps"][r])
        prediction = theory.vanishing_init_jumps(np.asarray(shape), k, nr)
        tau = (
            g["eps"][smallest]
            * flow.jump_times(
                g["times"][smallest : smallest + 1], g["loss"][smallest : smallest + 1], L
            )[0]
        )
        limit_taus[shape] = tau
        beta = g["params"]["beta"][smallest : smallest + 1]
        order = flow.activation_order(g["times"][smallest : smallest + 1], beta, threshold=1.0)[0]
        expected = [int(h) for h in np.argsort(-np.asarray(shape), kind="stable")[: k - 1]]
        out.append(
            records.claim(
                f"beta(0) = {eps_min:g} x {list(shape)}: heads activate in decreasing "
                "order of beta(0); the last head never does",
                [h + 1 for h in order],
                [h + 1 for h in expected],
                order == expected,
                "notes §4.7 (C12)",
            )
        )
        out.append(
            records.claim(
                f"beta(0) = {eps_min:g} x {list(shape)}: jump times eps*T_m match the "
                "vanishing-init recursion",
                tau.round(2).tolist(),
                f"{np.round(prediction['taus'], 2).tolist()} within 0.3%",
                np.allclose(tau, prediction["taus"], rtol=3e-3),
                "notes §4.8 (C13)",
            )
        )
        if len(runs) > 2:
            steps = np.asarray(prediction["taus"])
            distance = []
            for r in sorted(runs, key=lambda r: -g["eps"][r]):
                tau_r = g["eps"][r] * g["times"][r]
                step_fn = L[np.searchsorted(steps, tau_r, side="right")]
                distance.append(float(np.trapezoid(np.abs(g["loss"][r] - step_fn), tau_r)))
            out.append(
                records.claim(
                    f"{list(shape)}: L against eps*t collapses onto the predicted step "
                    "function as eps -> 0 (L1 distance in tau)",
                    np.round(distance, 3).tolist(),
                    "decreasing with eps",
                    bool(np.all(np.diff(distance) < 0)),
                    "notes §4.8 (C13)",
                )
            )
    by_sorted: dict[tuple[float, ...], list[NDArray]] = {}
    for shape, tau in limit_taus.items():
        by_sorted.setdefault(tuple(sorted(shape)), []).append(tau)
    for same in by_sorted.values():
        if len(same) > 1:
            spread = float(np.ptp(np.stack(same), axis=0).max())
            out.append(
                records.claim(
                    "permuting beta(0) permutes the heads but leaves the jump times unchanged",
                    spread,
                    "spread <= 1e-6 in tau",
                    spread <= 1e-6,
                    "notes §4.7 (C12)",
                )
            )
    return out


def longest_run(mask: NDArray) -> tuple[int, int]:
    """(start, length) of the longest run of True in a 1-D mask; length 0 if none."""
    best, best_start, start = 0, 0, 0
    for i, v in enumerate(list(mask) + [False]):
        if not v:
            if i - start > best:
                best, best_start = i - start, start
            start = i + 1
    return best_start, best


def _stagewise(group: Group, tol: float) -> tuple[NDArray, NDArray, NDArray]:
    """A group's levels L, its runs' population loss (R, S) and their (R, k-1) dwell fractions
    on the intermediate plateaus L_0..L_{k-2} (within `tol`)."""
    L, loss_RS = levels(group["cfg"]), group["result"].snapshots["eval_loss"]
    dwell = [
        [longest_run(np.abs(curve - level) < tol)[1] / len(curve) for level in L[:-1]]
        for curve in loss_RS
    ]
    return L, loss_RS, np.array(dwell)


def _label(group: Group, default: str) -> str:
    """The overrides that define a program, e.g. 'model.loss=ce, optim.lr=0.3'."""
    return ", ".join(f"{k}={v}" for k, v in group["fields"].items()) or default


def claims_fig1(cfg: ConfigDict, groups: Sequence[Group]) -> list[records.Claim]:
    """E4 (Fig. 1, notes §5): SGD with momentum shows the plateaus, the order and the time map."""
    out = []
    for g in groups:
        c, res, label = g["cfg"], g["result"], _label(g, "SGD")
        L, loss, dwell = _stagewise(g, 0.01)  # loss (R, S): the exact population loss
        out.append(
            records.claim(
                f"{label}: the population loss rests on L_0..L_{c.task.k - 2} "
                f"({np.round(L[:-1], 4).tolist()}) and ends below 0.01",
                {
                    "dwell fraction (min over runs)": dwell.min(axis=0).round(3).tolist(),
                    "final": float(loss[:, -1].max()),
                },
                ">= 0.03 of the run on each, final < 0.01",
                dwell.min() >= 0.03 and loss[:, -1].max() < 0.01,
                "Fig. 1, notes §5",
            )
        )
        beta = res.snapshots["beta"]
        shape = np.asarray(c.init.beta_shape)
        expected = [int(h) for h in np.argsort(-shape, kind="stable")[: c.task.k - 1]]
        orders = flow.activation_order(res.snapshot_steps, beta, threshold=1.0)
        last = int(np.argmin(shape))
        out.append(
            records.claim(
                f"{label}: heads activate in decreasing order of beta(0); the smallest "
                "stays O(eps)",
                {
                    "orders": [[h + 1 for h in o] for o in orders],
                    "max final |beta| of the last head": float(np.abs(beta[:, -1, last]).max()),
                },
                {"order": [h + 1 for h in expected], "last head": "< 0.1"},
                all(o == expected for o in orders) and np.abs(beta[:, -1, last]).max() < 0.1,
                "Fig. 1, notes §4.6-4.7",
            )
        )
        w_sum = res.snapshots["w_sum"]
        drift = float(np.abs(w_sum - w_sum[:, :1]).max())
        if c.optim.name == "sgd" and not c.optim.weight_decay:
            out.append(
                records.sanity(
                    f"{label}: 1^T w^h is conserved under SGD with momentum",
                    drift,
                    "<= 1e-10",
                    drift <= 1e-10,
                    "notes §4.1 (C3)",
                )
            )
        if c.model.loss == "dp" and flow.has_closed_form(model_lib.from_config(c)):
            out.append(_gf_time_map_claim(c, res, label))
    return out


def _gf_time_map_claim(c: ConfigDict, res: training.RunResult, label: str) -> records.Claim:
    """SGD jump steps against gradient flow from the same init, t = lr * steps / (1 - mu)."""
    model = model_lib.from_config(c)
    eps = float(res.hparams["init.eps"][0])
    params0 = flow.init_shape(model, eps, list(c.init.beta_shape))
    t_max = 1.5 * c.optim.lr * c.train.num_steps / (1 - c.optim.momentum)
    ts = jnp.linspace(0.0, t_max, 6000)[None]
    params, loss, ok = flow.population_flow(model, jax.tree.map(lambda x: x[None], params0), ts)
    L = levels(c)
    per_step = c.optim.lr / (1 - c.optim.momentum)
    predicted = flow.jump_times(np.asarray(ts), loss, L)[0] / per_step
    measured = flow.jump_times(
        np.tile(res.snapshot_steps, (res.num_runs, 1)), res.snapshots["eval_loss"], L
    )
    ratio = measured / predicted
    return records.claim(
        f"{label}: SGD jump steps match gradient flow with t = lr * steps / (1 - mu)",
        {
            "predicted steps": predicted.round(0).tolist(),
            "measured/predicted (min, max)": [float(np.nanmin(ratio)), float(np.nanmax(ratio))],
        },
        "ratio in [0.85, 1.3] (notes C16: ~10-20% late at lr 1, mu 0.9)",
        np.all((ratio > 0.85) & (ratio < 1.3)),
        "notes C16",
    )


def claims_dp_vs_ce(cfg: ConfigDict, groups: Sequence[Group]) -> list[records.Claim]:
    """E5 (notes §3, C15): DP and CE give the same stages in the same order."""
    out = claims_fig1(cfg, groups)
    orders = []
    for g in groups:
        res = g["result"]
        orders.append(flow.activation_order(res.snapshot_steps, res.snapshots["beta"], 1.0))
    losses = {g["cfg"].model.loss for g in groups}
    # the same order of all k - 1 heads in every run: runs where no head (or not every one)
    # activates show no order
    full = all(
        len(o) == g["cfg"].task.k - 1 for g, run in zip(groups, orders, strict=True) for o in run
    )
    same = full and all(o == orders[0][0] for run in orders for o in run)
    measured: list[list[list[int]]] | str = [[[h + 1 for h in o] for o in run] for run in orders]
    if not {"dp", "ce"} <= losses:
        measured = f"not measured: losses {sorted(losses)} (DP and CE both needed)"
    out.append(
        records.claim(
            "DP and CE activate the heads in the same order",
            measured,
            "identical, all k - 1 heads",
            same and {"dp", "ce"} <= losses,
            "notes §3, C15",
        )
    )
    return out


def claims_ablations(cfg: ConfigDict, groups: Sequence[Group]) -> list[records.Claim]:
    """E6 (notes §2.4 table): which simplifications the stage-wise picture needs."""
    out = []
    for g in groups:
        c, label = g["cfg"], _label(g, "simplified model")
        L, loss, dwell = _stagewise(g, 0.03)
        # k = 2 has no plateau after L_0: the stage-wise picture cannot be seen either way
        stagewise = bool((dwell[:, 1:] >= 0.03).all()) if L.size > 2 else None
        naive_v = not c.model.response_only
        expected = "not stage-wise" if naive_v else "stage-wise"
        ok = stagewise is not None and (
            (not stagewise) if naive_v else stagewise and loss[:, -1].max() < 0.05
        )
        out.append(
            records.claim(
                f"{label}: {expected}",
                {
                    "dwell on L_1..": dwell[:, 1:].round(3).tolist(),
                    "final loss": float(loss[:, -1].max()),
                },
                expected,
                ok,
                "notes §2.4 table",
            )
        )
    return out


CLAIMS: dict[str, records.ClaimFn] = {
    "first_jump": claims_first_jump,
    "ei_tail": claims_ei_tail,
    "later_jumps": claims_later_jumps,
    "stages": claims_stages,
    "fig1": claims_fig1,
    "dp_vs_ce": claims_dp_vs_ce,
    "ablations": claims_ablations,
    "none": lambda cfg, groups: [],
}
