"""The index of the saddles along the saddle-to-saddle path (notes/assoc_recall.md §4.10;
docs/studies/recall_curvature.md): the Hessian of the exact population loss at every save of the
gradient flow and at every kept step of the SGD runs, its negative eigenvalues and index against
the theory's sequence (one negative direction per inactive head on each plateau, none after the
last jump); at each plateau's midpoint the probes' verdict (hessian_at, near_stationary).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from jax.flatten_util import ravel_pytree

from landscape.engine import config as config_lib
from landscape.engine import records
from landscape.engine import study as study_lib
from landscape.point import Point
from landscape.probes import curvature, results
from landscape.recall import curvature_figures, flow, theory
from landscape.recall import model as model_lib
from landscape.typing import NDArray, Progress, PyTree, Row

EIGEN_RTOL = 0.05  # the measured negative eigenvalues against §4.10's, at plateau midpoints
ESCAPE_RTOL = 0.05  # T_1 |λ_min(0)| against pi / sqrt(2) (finite eps: notes §4.4's 2% offset)
SAME_RTOL = 1e-10  # hessian_at against the vmapped Hessians of the trajectory, x max |λ| ...
TRACKED_RTOL = 1e-6  # tracked λ_min (Lanczos with num_lanczos >= D) against eigh, x max |λ| ...
ROUNDING = 1e-12  # ... + this: ~1e4 eps, the rounding of a loss of O(1) terms (at the last
# plateau the SGD runs reach losses ~1e-11 and eigenvalues ~1e-9, all near rounding)
RESOLVED = 1e-3  # the resolved index counts eigenvalues below -RESOLVED max |λ| (§4.10's
# leading order; the O(beta^2) and rounding-level ones of the last plateau fall under it)


def default_study() -> ml_collections.ConfigDict:
    """The `curvature` group of a recall config (read by experiment = 'curvature')."""
    return ml_collections.ConfigDict(
        dict(
            plateau_tol=0.02,  # on plateau j: |L - L_j| < plateau_tol x the gap to its neighbour
            active_beta=1.0,  # a head is on (its offset dead for the others) once |beta| > this
            loose_rtol=0.5,  # the near-stationary rule's model error, loosened, for comparison
        )
    )


def validate(cfg: Any) -> None:
    """experiment = 'curvature' needs the simplified model with the DP loss (the flow's closed
    form), a shape init, kept parameters and tracked curvature, one program, its own claims."""
    require = config_lib.require
    if cfg.experiment != "curvature":
        require(cfg.claims != "curvature", "claims", cfg.claims, "not 'curvature' here")
        return
    study_lib.require_own_claims(cfg, "curvature")
    config_lib.require_empty_sweep(cfg, "experiment = 'curvature'")
    require(not cfg.get("variants"), "variants", cfg.get("variants"), "empty (one program)")
    r = config_lib.require_number
    r(cfg, "curvature.plateau_tol", low=0, high=0.5, low_open=True)
    r(cfg, "curvature.active_beta", low=0, low_open=True)
    r(cfg, "curvature.loose_rtol", low=0, low_open=True)
    study_lib.require_every(
        cfg, "curvature", "the SGD runs' Hessians are taken at kept parameters; λ_min is tracked"
    )


# ----------------------------------------------------------------------------- spectra


@functools.lru_cache(maxsize=8)
def _spectra_program(model: model_lib.RecallModel) -> Callable[[PyTree], Any]:
    """params stacked on a leading axis -> (losses, ascending Hessian eigenvalues), compiled
    once per model (and shapes)."""

    def one(params: PyTree) -> tuple[jax.Array, jax.Array]:
        flat, unravel = ravel_pytree(params)

        def loss(x: jax.Array) -> jax.Array:
            return model_lib.population_loss(unravel(x), model)

        return loss(flat), jnp.linalg.eigvalsh(jax.hessian(loss)(flat))

    return jax.jit(jax.vmap(one))


def spectra_along(model: model_lib.RecallModel, params: PyTree) -> tuple[NDArray, NDArray]:
    """(losses (S,), eigenvalues (S, D) ascending) of the exact population loss at a stack of
    parameters (leading axis S): one vmapped program of dense Hessians (D = H + H k)."""
    losses, values = _spectra_program(model)(jax.tree.map(jnp.asarray, params))
    return np.asarray(losses), np.asarray(values)


def index_of(values: NDArray, resolved: bool = False) -> NDArray:
    """The number of eigenvalues below -tol per row, tol the probes' default (max(1e-9,
    100 eps) x max |λ|, docs/design/curvature.md), or RESOLVED x max |λ| (`resolved`)."""
    if resolved:
        tols = RESOLVED * np.max(np.abs(values), axis=1)
    else:
        tols = np.array([results.default_tol(v, v.dtype) for v in values])
    return np.sum(values < -tols[:, None], axis=1)


def active_heads(beta: NDArray, threshold: float) -> list[int]:
    """The heads that are on: |beta_h| > threshold (0-based)."""
    return [h for h, b in enumerate(np.asarray(beta)) if abs(b) > threshold]


def plateau_midpoints(losses: NDArray, levels: NDArray, tol: float) -> list[tuple[int, int]]:
    """[(j, index)]: for each plateau level L_j the middle of the longest run of saves with
    |L - L_j| < tol x the smallest gap from L_j to a neighbouring level (levels it never
    reaches are left out)."""
    out = []
    for j, level in enumerate(levels):
        gaps = [abs(level - levels[i]) for i in (j - 1, j + 1) if 0 <= i < len(levels)]
        on = np.abs(losses - level) < tol * min(gaps)
        best, start = (0, 0), None
        for i, flag in enumerate(np.append(on, False)):
            if flag and start is None:
                start = i
            elif not flag and start is not None:
                best, start = max(best, (i - start, start)), None
        if best[0]:
            out.append((j, best[1] + best[0] // 2))
    return out


# ----------------------------------------------------------------------------- plateau points


def plateau_rows(
    label: str,
    points: Sequence[Point],
    plateaus: Sequence[int],
    spectra: NDArray,
    cfg: ml_collections.ConfigDict,
) -> list[Row]:
    """At each plateau midpoint (plateau j of `plateaus`, its Point and the trajectory's
    eigenvalues there): the probes' Hessian, its index and near-stationary verdicts (default
    and loosened model error) against §4.10's index and negative eigenvalues."""
    k, num_responses, c = cfg.task.k, cfg.task.num_responses, cfg.model.scale
    study = cfg.curvature
    rows = []
    hessians = curvature.hessian_at(list(points), progress=None) if points else []
    for j, point, hessian, along in zip(plateaus, points, hessians, spectra, strict=True):
        beta, w = np.asarray(point.params["beta"]), np.asarray(point.params["w"])
        on = active_heads(beta, study.active_beta)
        predicted = theory.plateau_eigenvalues(beta, w, on, k, num_responses, c)
        values, tol = hessian.eigenvalues, hessian.tolerance()
        measured = values[values < -tol]
        same = measured.size == predicted.size
        near, loose = hessian.near_stationary(), hessian.near_stationary(rtol=study.loose_rtol)
        rows.append(
            {
                "trajectory": label,
                "plateau": j,
                "level": float(theory.plateau_levels(k, num_responses)[j]),
                "point": point.name,
                "loss": hessian.gradient.loss,
                "active_heads": [h + 1 for h in on],
                "index": int(measured.size),
                "resolved_index": int(index_of(values[None], resolved=True)[0]),
                "predicted_index": theory.plateau_index(beta, on, k),
                "negative": measured.tolist(),
                "predicted": predicted.tolist(),
                "eigen_error": (
                    float(np.max(np.abs(measured / predicted - 1)))
                    if same and measured.size
                    else (0.0 if same else float("nan"))
                ),
                "kind": hessian.kind().value,
                "reason": near.reason,
                "kind_loose": loose.kind().value,
                "grad_norm": hessian.gradient.norm,
                "lambda_min": float(values[0]),
                "lambda_max": float(values[-1]),
                "same_as_trajectory": float(
                    np.max(np.abs(values - along)) / (np.max(np.abs(values)) + ROUNDING / SAME_RTOL)
                ),
            }
        )
    return rows


def _flow_trajectory(
    cfg: ml_collections.ConfigDict, flow_run: dict[str, Any], loss: Callable
) -> tuple[dict[str, Any], list[Row]]:
    """The gradient flow's spectra at every save and its plateau rows."""
    model = model_lib.from_config(cfg)
    params = jax.tree.map(lambda a: a[0], flow_run["params"])
    losses, values = spectra_along(model, params)
    taus = flow_run["times"][0] * flow_run["eps"][0]
    levels = theory.plateau_levels(cfg.task.k, cfg.task.num_responses)
    found = plateau_midpoints(losses, levels, cfg.curvature.plateau_tol)
    points_ = [
        Point(
            jax.tree.map(lambda a, i=i: jnp.asarray(a[i]), params),
            loss,
            name=f"gradient flow, tau = {taus[i]:.4g}",
        )
        for _, i in found
    ]
    rows = plateau_rows(
        "gradient flow", points_, [j for j, _ in found], values[[i for _, i in found]], cfg
    )
    for row, (_, i) in zip(rows, found, strict=True):
        row["time"] = float(taus[i])
    along = dict(
        label="gradient flow",
        time=taus,
        losses=losses,
        values=values,
        beta=np.asarray(params["beta"]),
    )
    return along, rows


def _sgd_trajectories(
    cfg: ml_collections.ConfigDict, result: Any, loss: Callable
) -> tuple[list[dict[str, Any]], list[Row]]:
    """Each SGD run's spectra at every kept step (the population loss, not its batches), its
    tracked λ_min beside them, and its plateau rows."""
    model = model_lib.from_config(cfg)
    levels = theory.plateau_levels(cfg.task.k, cfg.task.num_responses)
    steps = np.asarray(result.params_steps)
    alongs, rows = [], []
    for run in range(result.num_runs):
        params = jax.tree.map(lambda a, r=run: np.asarray(a[r]), result.kept_params)
        losses, values = spectra_along(model, params)
        found = plateau_midpoints(losses, levels, cfg.curvature.plateau_tol)
        label = f"SGD seed {int(result.seeds[run])}"
        chosen = [int(steps[i]) for _, i in found]
        points_ = [result.point(run, loss, step=s) for s in chosen]
        found_rows = plateau_rows(
            label, points_, [j for j, _ in found], values[[i for _, i in found]], cfg
        )
        for row, s in zip(found_rows, chosen, strict=True):
            row["time"] = s
        rows += found_rows
        tracked = np.asarray(result.tracked_steps)
        at = np.searchsorted(steps, tracked)
        alongs.append(
            dict(
                label=label,
                time=steps,
                losses=losses,
                values=values,
                beta=params["beta"],
                tracked_steps=tracked,
                tracked_lambda_min=result.metrics["lambda_min"][run],
                eigh_lambda_min=values[at, 0],
            )
        )
    return alongs, rows


# ----------------------------------------------------------------------------- claims, findings


def escape_product(along: dict[str, Any], levels: NDArray) -> float:
    """T_1 |λ_min(0)|: the first jump's time (the loss crossing (L_0 + L_1) / 2, in flow time)
    times the initial point's most negative eigenvalue; -> pi / sqrt(2) as eps -> 0 (§4.10)."""
    taus, eps = along["time"], along["eps"]
    crossing = flow.crossing_times(
        taus[None] / eps, along["losses"][None], [(levels[0] + levels[1]) / 2]
    )
    return float(crossing[0, 0] * abs(along["values"][0, 0]))


def theory_claims(
    flow_rows: Sequence[Row], along: dict[str, Any], k: int, levels: NDArray
) -> list[records.Claim]:
    """Where §4.10 predicts (gradient flow): the index on each plateau before the last and none
    after the last jump, the negative eigenvalues there, and the first plateau's length against
    its curvature."""
    saddles = [r for r in flow_rows if r["plateau"] < k - 1]
    last = [r for r in flow_rows if r["plateau"] == k - 1]
    product = escape_product(along, levels)
    return [
        records.claim(
            "gradient flow: the saddle's index on each plateau = the inactive heads",
            {f"L_{r['plateau']}": [r["index"], r["resolved_index"]] for r in saddles},
            {f"L_{r['plateau']}": [r["predicted_index"]] * 2 for r in saddles},
            bool(saddles)
            and all(r["index"] == r["resolved_index"] == r["predicted_index"] for r in saddles),
            "notes/assoc_recall.md §4.10 (ours); [at the probes' tolerance, resolved]",
        ),
        records.claim(
            f"gradient flow: after the last jump no resolved negative eigenvalue (L_{k - 1} = 0)",
            {
                "resolved index": [r["resolved_index"] for r in last],
                "lambda_min": [r["lambda_min"] for r in last],
                "lambda_max": [r["lambda_max"] for r in last],
            },
            f"0 below -{RESOLVED:g} max |λ| (k' = 1: |g| = 0 at leading order)",
            bool(last) and all(r["resolved_index"] == 0 for r in last),
            "notes/assoc_recall.md §4.10 (ours)",
        ),
        records.claim(
            "gradient flow: the negative eigenvalues at the plateau midpoints",
            {f"L_{r['plateau']}": [f"{v:.4g}" for v in r["negative"]] for r in saddles}
            | {"largest relative error": max((r["eigen_error"] for r in saddles), default=None)},
            f"t_h - sqrt(t_h^2 + 4 beta_h^2 |g|^2) per inactive head, within {EIGEN_RTOL:.0%}",
            bool(saddles) and all(r["eigen_error"] <= EIGEN_RTOL for r in saddles),
            "notes/assoc_recall.md §4.10 (ours)",
        ),
        records.claim(
            "gradient flow: the first plateau lasts pi / sqrt(2) over its initial |λ_min|",
            {"T_1 |λ_min(0)|": round(product, 4), "eps": float(along["eps"])},
            f"pi / sqrt(2) = {math.pi / math.sqrt(2):.4f} within {ESCAPE_RTOL:.0%} (leading order "
            "in eps)",
            abs(product / (math.pi / math.sqrt(2)) - 1) <= ESCAPE_RTOL,
            "notes/assoc_recall.md §4.4, §4.10 (ours)",
        ),
    ]


def sanity_claims(rows: Sequence[Row], sgd: Sequence[dict[str, Any]]) -> list[records.Claim]:
    """hessian_at at the plateau points equals the trajectory's vmapped Hessians there; the SGD
    runs' tracked λ_min (Lanczos over all D directions) equals eigh's at every tracked step."""
    same = max((r["same_as_trajectory"] for r in rows), default=float("nan"))
    tracked = max((_tracked_error(a) for a in sgd), default=float("nan"))
    return [
        records.sanity(
            "hessian_at at the plateau points = the trajectory's vmapped Hessians (eigenvalues)",
            same,
            f"<= {SAME_RTOL:g} x max |λ|",
            same <= SAME_RTOL,
        ),
        records.sanity(
            "SGD runs: tracked λ_min = eigh's at every tracked step",
            tracked,
            f"<= {TRACKED_RTOL:g} x max |λ| + {ROUNDING:g} (train.track_lanczos >= D)",
            tracked <= TRACKED_RTOL,
        ),
    ]


def _tracked_error(along: dict[str, Any]) -> float:
    """max over tracked steps of |tracked λ_min - eigh's| / max |λ| there."""
    at = np.searchsorted(along["time"], along["tracked_steps"])
    scale = np.max(np.abs(along["values"][at]), axis=1) + ROUNDING / TRACKED_RTOL
    return float(np.max(np.abs(along["tracked_lambda_min"] - along["eigh_lambda_min"]) / scale))


def index_segments(along: dict[str, Any], resolved: bool = True) -> list[list[float]]:
    """[[start, end, index]]: the runs of constant (resolved) index along a trajectory."""
    index, times = index_of(along["values"], resolved), along["time"]
    cuts = np.flatnonzero(np.diff(index)) + 1
    starts, ends = np.concatenate([[0], cuts]), np.concatenate([cuts, [index.size]])
    return [
        [float(times[a]), float(times[b - 1]), int(index[a])]
        for a, b in zip(starts, ends, strict=True)
    ]


def findings(
    along: dict[str, Any],
    flow_rows: Sequence[Row],
    sgd: Sequence[dict[str, Any]],
    sgd_rows: Sequence[Row],
    cfg: ml_collections.ConfigDict,
) -> dict[str, Any]:
    """What the study measured beyond §4.10's leading order: the index along the flow, the last
    plateau's remaining negative eigenvalue, the near-stationary verdicts, the SGD runs' index."""
    beta_end = np.abs(along["beta"][-1])
    unused = [h for h, b in enumerate(beta_end) if b <= cfg.curvature.active_beta]
    loss_end, lam_end = float(along["losses"][-1]), float(along["values"][-1, 0])
    return {
        "gradient flow: resolved index along tau ([start, end, index])": index_segments(along),
        "gradient flow: index at the probes' tolerance along tau": index_segments(along, False),
        "gradient flow, end: lambda_min, loss, lambda_min / (beta_unused L)": [
            lam_end,
            loss_end,
            lam_end / (float(beta_end[unused].max()) * loss_end) if unused and loss_end else None,
        ],
        "near-stationary verdicts at the plateau midpoints (default; model error 0.5)": {
            f"{r['trajectory']}, L_{r['plateau']}": [r["kind"], r["kind_loose"]]
            for r in list(flow_rows) + list(sgd_rows)
        },
        "why the default rule does not trust the model (gradient flow)": {
            f"L_{r['plateau']}": r["reason"] for r in flow_rows if r["reason"]
        },
        "SGD: index at the plateau midpoints (probes' tolerance, resolved, predicted)": {
            f"{r['trajectory']}, L_{r['plateau']}": [
                r["index"],
                r["resolved_index"],
                r["predicted_index"],
            ]
            for r in sgd_rows
        },
        "SGD: resolved index along training ([start, end, index])": {
            a["label"]: index_segments(a) for a in sgd
        },
    }


# ----------------------------------------------------------------------------- the run


def run(
    cfg: ml_collections.ConfigDict,
    workdir: records.Workdir,
    progress: Progress,
    *,
    flow_run: Callable[..., dict[str, Any]],
    sgd_run: Callable[..., dict[str, Any]],
) -> dict[str, Any]:
    """The gradient flow (`flow_run`, experiment.run_flow) and the SGD runs (`sgd_run`,
    experiment.run_sgd) from the config's init; their spectra, plateau rows (recall_plateaus.csv),
    the index along each (recall_index.csv), figures/curvature_study.png, claims and findings."""
    start = time.perf_counter()
    model = model_lib.from_config(cfg)
    loss = flow.evaluation_loss(model)  # one loss function: the points share programs
    levels = theory.plateau_levels(cfg.task.k, cfg.task.num_responses)
    flowed = flow_run(cfg, progress)
    workdir.save_arrays(**{f"flow_{k}": v for k, v in flowed["arrays"].items()})
    along, flow_rows = _flow_trajectory(cfg, flowed, loss)
    along["eps"] = float(flowed["eps"][0])
    trained = sgd_run(cfg, {}, workdir, progress)
    workdir.save_arrays(**trained["arrays"])
    sgd, sgd_rows = _sgd_trajectories(cfg, trained["result"], loss)
    study_lib.write(
        workdir,
        {
            "recall_plateaus": list(flow_rows) + list(sgd_rows),
            "recall_index": _index_rows([along, *sgd]),
        },
    )
    for a in [along, *sgd]:
        a.update(index=index_of(a["values"]), resolved=index_of(a["values"], resolved=True))
        a["tol"] = np.array([results.default_tol(v, v.dtype) for v in a["values"]])
    figure = curvature_figures.draw(along, sgd, levels, flow_rows)
    claims = theory_claims(flow_rows, along, cfg.task.k, levels)
    return workdir.finish(
        claims + sanity_claims(list(flow_rows) + list(sgd_rows), sgd),
        progress,
        figures=[str(curvature_figures.save(figure, workdir.figure_path("curvature_study")))],
        findings=findings(along, flow_rows, sgd, sgd_rows, cfg),
        seconds={"total": time.perf_counter() - start, **trained["seconds"]},
    )


def _index_rows(alongs: Sequence[dict[str, Any]], most: int = 400) -> list[Row]:
    """About `most` rows per trajectory: time, loss, index, λ_min, λ_max."""
    rows = []
    for a in alongs:
        index, resolved = index_of(a["values"]), index_of(a["values"], resolved=True)
        for i in range(0, len(a["time"]), max(1, len(a["time"]) // most)):
            rows.append(
                dict(
                    trajectory=a["label"],
                    time=float(a["time"][i]),
                    loss=float(a["losses"][i]),
                    index=int(index[i]),
                    resolved_index=int(resolved[i]),
                    lambda_min=float(a["values"][i, 0]),
                    lambda_max=float(a["values"][i, -1]),
                )
            )
    return rows
