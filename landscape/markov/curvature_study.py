"""The curvature study of the single-layer trap (notes/markov.md §14; docs/studies/
markov_curvature.md): λ_min along training for every seed at the authors' recipe, trapped against
escaping seeds; at each seed's plateau point its near-stationary verdict, negative curvature,
escape directions against its real escape (and chance), and the radius of the basin (basin.py).
Claims where Thm 2 predicts (the tied theory model), findings elsewhere (GPT-2 blocks).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from jax.flatten_util import ravel_pytree

from landscape.core import compiled
from landscape.engine import config as config_lib
from landscape.engine import experiment as engine_experiment
from landscape.engine import records
from landscape.engine import study as study_lib
from landscape.markov import basin, curvature_figures, points, theory, trap_study
from landscape.markov import model as model_lib
from landscape.point import Point, param_names
from landscape.probes import curvature
from landscape.typing import Progress, PyTree, Row

Group = dict[str, Any]  # experiment.train_group's: fields, cfg, grid, result
Batch = Callable[[ml_collections.ConfigDict, dict[str, jax.Array]], Any]
RESOLVED = 1e-4  # eigenvalues below -RESOLVED λ_max count as resolved negatives (atlas's)
EPSILON = 1e-3  # the symmetric second-order check's step (notes/landscape_geometry.md §9)
SECOND_ORDER_RTOL = 0.05  # |ratio - 1| at EPSILON for the most negative direction
TRACKED_RTOL = 1e-4  # float32 HVPs: a tracked λ_min may sit this far (x λ_max) below eigh's


def default_study() -> ml_collections.ConfigDict:
    """The `curvature` group of a Markov config (read by experiment = 'curvature')."""
    return ml_collections.ConfigDict(
        dict(
            lead=50,  # an escaping seed's plateau point: this many steps before its escape
            after=0,  # its real escape: to the kept step this many steps after the escape step
            directions=4,  # k: escape directions, the eigenvectors of the k most negative λ
            random_frames=200,  # random k-dimensional subspaces: the chance baseline's spread
            random_directions=8,  # random directions for the basin radius
            margins=[0.01, 0.03, 0.1],  # drops below the plateau, x (H(pi) - entropy rate)
            radius_max=1.0,  # the farthest radius, x |theta| at the plateau point
            probed_seeds=0,  # seeds of a program probed at their plateau (0: all)
        )
    )


def validate(cfg: ml_collections.ConfigDict) -> None:
    """The study's fields, for experiment = 'curvature': one ConfigError sentence each."""
    if cfg.experiment != "curvature":
        return
    r, require = config_lib.require_number, config_lib.require
    for field, low in (("lead", 0), ("after", 0), ("directions", 1), ("random_frames", 2)):
        r(cfg, f"curvature.{field}", low=low, integer=True)
    r(cfg, "curvature.random_directions", low=0, integer=True)
    r(cfg, "curvature.probed_seeds", low=0, integer=True)
    r(cfg, "curvature.radius_max", low=0, low_open=True)
    config_lib.require_numbers(cfg, "curvature.margins", low=0, low_open=True)
    study_lib.require_own_claims(cfg, "curvature")
    require(cfg.chain.num_states == 2, "chain.num_states", cfg.chain.num_states, "2 (binary)")
    study_lib.require_every(
        cfg, "curvature", "the plateau points are kept parameters; λ_min is tracked"
    )


# ----------------------------------------------------------------------------- plateau points


def _on_plateau(group: Group, run: int, step: int) -> bool:
    res = group["result"]
    where = int(np.flatnonzero(res.snapshot_steps == step)[0])
    loss, unigram = float(res.snapshots["test_loss"][run, where]), _levels(group)[0]
    return abs(loss - unigram) < trap_study.TRAP_TOLERANCE


def _levels(group: Group) -> tuple[float, float]:
    """(H(pi), entropy rate) of the group's chain (one chain per study)."""
    res = group["result"]
    p, q = float(res.hparams["chain.p"][0]), float(res.hparams["chain.q"][0])
    return float(theory.unigram_loss(p, q)), float(theory.entropy_rate(p, q))


def plateau_steps(group: Group, rows: Sequence[Row], lead: int) -> list[int | None]:
    """Each seed's plateau step (a kept step on the plateau, |test loss - H(pi)| < the trap
    tolerance): an escaped seed's latest at least `lead` steps before its escape (else its
    latest before it); the others' nearest to the median of the escaped seeds' (else mid-run)."""
    kept = [int(s) for s in group["result"].params_steps]
    out: list[int | None] = []
    for run, row in enumerate(rows):
        if row["escape_step"] is None:
            out.append(None)
            continue
        before = [s for s in kept if s < row["escape_step"] and _on_plateau(group, run, s)]
        early = [s for s in before if s <= row["escape_step"] - lead]
        out.append(max(early) if early else (max(before) if before else None))
    chosen = [s for s in out if s is not None]
    target = float(np.median(chosen)) if chosen else kept[-1] / 2
    for run, row in enumerate(rows):
        if row["escape_step"] is None:
            on = [s for s in kept if s > 0 and _on_plateau(group, run, s)]
            out[run] = min(on, key=lambda s: (abs(s - target), s)) if on else None
    return out


def _after_step(group: Group, row: Row, after: int) -> int | None:
    """The kept step of an escaped seed's real escape: the first at or after its escape step +
    `after`."""
    if row["escape_step"] is None:
        return None
    later = [int(s) for s in group["result"].params_steps if s >= row["escape_step"] + after]
    return later[0] if later else None


def probe_model(cfg: ml_collections.ConfigDict) -> model_lib.MarkovModel:
    """The model the probes judge: the run's, computing in its parameters' precision (float64
    when x64 is on), not a half type's (a Hessian in float16 is rounding)."""
    dtype = jnp.float64 if jax.config.read("jax_enable_x64") else jnp.float32
    return model_lib.from_config(cfg).clone(dtype=None, param_dtype=dtype)


def study_point(group: Group, run: int, step: int, batch: Batch) -> Point:
    """Run `run` at `step` as a Point on the tracked loss (the evaluation batch's first
    train.track_sequences sequences, soft targets, at the run's chain), named after run and
    step: the loss whose λ_min the run tracked."""
    cfg, res = group["cfg"], group["result"]
    model = probe_model(cfg)
    # the run's hyperparameters in its training dtype, as the tracked loss saw them: the
    # sampler draws its uniforms in the kernel's dtype
    hp = {k: jnp.asarray(v[run], cfg.train.dtype) for k, v in res.hparams.items()}
    x, weights, targets = batch(cfg, hp)
    inputs = (x, weights.astype(model.param_dtype), targets.astype(model.param_dtype))
    objective = points.population_objective(model)
    return res.point(run, (objective, inputs), dtype=model.param_dtype, step=step)


# ----------------------------------------------------------------------------- probes


def _flat(params: PyTree) -> np.ndarray:
    return np.asarray(ravel_pytree(params)[0], np.float64)


def _second_order(point: Point, vector: np.ndarray, value: float) -> float:
    """[L(θ + εv) + L(θ - εv) - 2 L(θ)] / (ε² λ) at ε = EPSILON (escape_directions' check)."""
    objective, inputs = point.shared
    eps = jnp.asarray([EPSILON, -EPSILON])
    losses = np.asarray(
        compiled.losses_along(
            objective, point.params, inputs, compiled.rows_like(point.params, vector[None]), eps
        )
    )[0]
    return float((losses[1] + losses[2] - 2 * losses[0]) / (EPSILON**2 * value))


def hessian_row(hessian: curvature.Hessian, k: int) -> tuple[Row, np.ndarray]:
    """The plateau point's curvature: its summary (kind, near-stationary or not, λ_min, λ_max,
    counts), the resolved negatives, the escape directions (the eigenvectors of the k most
    negative eigenvalues below -tol, as columns) and the most negative one's second-order
    ratio; the (b, e) block's smallest eigenvalue where the model has them (Thm 2's α)."""
    summary = hessian.summary()
    values, tol = hessian.eigenvalues, hessian.tolerance()
    chosen = np.flatnonzero(values[:k] < -tol)
    vectors = hessian.eigenvectors[:, chosen]
    near = (
        hessian.near_stationary() if hessian.finite and summary["stationary"] != "exact" else None
    )
    row = {
        "kind": summary["kind"],
        "stationary": summary["stationary"],
        "critical_distance": summary.get("critical_distance"),
        "reason": near.reason if near is not None else "",
        "grad_norm": summary["grad_norm"],
        "lambda_min": summary["lambda_min"],
        "lambda_max": summary["lambda_max"],
        "num_negative": summary["num_negative"],
        "resolved_negative": int(np.sum(values < -RESOLVED * values[-1])),
        "escape_values": values[chosen].tolist(),
        "second_order": (
            _second_order(hessian.point, vectors[:, 0], float(values[0])) if chosen.size else None
        ),
    }
    names = {n for n, _, _ in param_names(hessian.point.params)}
    if {"b", "e"} <= names:
        row["alpha_lambda_min"] = float(np.linalg.eigvalsh(hessian.block(["b", "e"]))[0])
    return row, vectors


def overlap_row(
    vectors: np.ndarray, gradient: np.ndarray, escape: np.ndarray, k: int, frames: int, seed: int
) -> Row:
    """The escape directions' overlap |P_V u| with the real escape u (unit), the single most
    negative direction's |v_1 . u|, the gradient's |g . u|/|g|, against chance sqrt(k/D) and
    the spread of |P u| over `frames` random k-dimensional subspaces (notes §14)."""
    u = escape / np.linalg.norm(escape)
    dim, found = u.size, vectors.shape[1]
    overlap = float(np.linalg.norm(vectors.T @ u)) if found else float("nan")
    chance = basin.chance_overlap_rms(max(found, 1), dim)
    random = basin.random_overlaps(u, max(found, 1), frames, seed)
    return {
        "escape_distance": float(np.linalg.norm(escape)),
        "overlap": overlap,
        "overlap_v1": float(abs(vectors[:, 0] @ u)) if found else float("nan"),
        "overlap_gradient": float(abs(gradient @ u) / np.linalg.norm(gradient)),
        "chance": chance,
        "above_chance": overlap / chance if found else float("nan"),
        "random_mean": float(random.mean()),
        "random_std": float(random.std()),
        "random_at_or_above": float(np.mean(random >= overlap)) if found else float("nan"),
        "directions_found": found,
    }


def radius_rows(
    point: Point, vectors: np.ndarray, escape: np.ndarray | None, margins: np.ndarray, study: Any
) -> tuple[list[Row], dict[str, basin.Radius]]:
    """The radius of the basin (notes §14) at each margin along the most negative direction v1,
    the real escape u and P_V u, its projection on the escape directions (escaped seeds), and
    `study.random_directions` random directions, out to study.radius_max x |θ|: one row per
    direction, and the Radius results by name."""
    flat = _flat(point.params)
    radius_max = float(study.radius_max * np.linalg.norm(flat))
    rng = np.random.default_rng(0)
    named: list[tuple[str, np.ndarray]] = []
    if vectors.shape[1]:
        named.append(("v1", vectors[:, 0]))
    if escape is not None:
        named.append(("escape", escape))
        projected = vectors @ (vectors.T @ escape)  # the escape directions' closest combination
        if vectors.shape[1] and np.linalg.norm(projected) > 0:
            named.append(("span", projected))
    named += [
        (f"random {i}", rng.standard_normal(flat.size)) for i in range(study.random_directions)
    ]
    rows, found = [], {}
    for name, vector in named:
        result = basin.basin_radius(point, vector, margins, radius_max=radius_max)
        found[name] = result
        row = {"direction": name, "theta_norm": float(np.linalg.norm(flat))}
        for fraction, radius in zip(study.margins, result.radii, strict=True):
            row[radius_key(fraction)] = float(radius)
        rows.append({**row, "drop": result.drop, "drop_at": result.drop_at})
    return rows, found


def radius_key(fraction: float) -> str:
    """The radius table's column at a margin of `fraction` x (H(pi) - entropy rate)."""
    return f"radius_{fraction:g}I"


def _tracked_at(group: Group, run: int, step: int) -> float:
    res = group["result"]
    if res.tracked_steps is None or step not in res.tracked_steps:
        return float("nan")
    return float(res.metrics["lambda_min"][run, list(res.tracked_steps).index(step)])


def cell_label(cfg: ml_collections.ConfigDict) -> str:
    """'GPT-2 tied, float16 autocast', 'theory tied, float32', ...: a program of the study."""
    family = "GPT-2" if cfg.model.family == "gpt" else "theory"
    tying = "tied" if cfg.model.tied else "untied"
    return f"{family} {tying}, {trap_study.precision_name(cfg)}"


def status(row: Row) -> str:
    """trapped (trap_study's rule), escaped (below the midpoint of H(pi) and the entropy rate at
    some evaluation) or leaving (neither by the end)."""
    if row["trapped"]:
        return "trapped"
    return "escaped" if row["escape_step"] is not None else "leaving"


def seed_probe(
    group: Group,
    row: Row,
    run: int,
    step: int,
    point: Point,
    hessian: curvature.Hessian,
    study: Any,
) -> tuple[Row, list[Row], dict[str, basin.Radius]]:
    """One seed (its trap_study row) at its plateau point: curvature (hessian_row), the real
    escape's overlaps (escaped seeds) and the basin radii (radius_rows)."""
    curv, vectors = hessian_row(hessian, study.directions)
    unigram, rate = _levels(group)
    after = _after_step(group, row, study.after)
    escape = None
    if after is not None:
        escape = _flat(group["result"].params_at(after, run)) - _flat(point.params)
    out: Row = {
        "cell": cell_label(group["cfg"]),
        "seed": row["seed"],
        "status": status(row),
        "escape_step": row["escape_step"],
        "plateau_step": step,
        "after_step": after,
        "loss": hessian.gradient.loss,
        "tracked_lambda_min": _tracked_at(group, run, step),
        "theta_norm": float(np.linalg.norm(_flat(point.params))),
        **curv,
    }
    if escape is not None:
        out.update(
            overlap_row(
                vectors,
                hessian.gradient.vector,
                escape,
                study.directions,
                study.random_frames,
                seed=row["seed"],
            )
        )
    margins = np.asarray(study.margins, np.float64) * (unigram - rate)
    radii, found = radius_rows(point, vectors, escape, margins, study)
    for radius in radii:
        radius.update(cell=out["cell"], seed=row["seed"], status=out["status"])
        if radius["direction"] == "v1":  # the quadratic model's radius sqrt(2 δ / |λ_1|)
            radius["quadratic"] = np.sqrt(2 * margins / abs(curv["lambda_min"])).tolist()
    return out, radii, found


def probe_group(
    group: Group, batch: Batch, study: Any, progress: Progress
) -> tuple[list[Row], list[Row], dict[tuple[int, str], basin.Radius]]:
    """Every probed seed of one program: its plateau point's dense Hessian, then seed_probe;
    (seed rows, radius rows, {(seed, direction): Radius})."""
    rows = trap_study.run_rows(group)
    steps = plateau_steps(group, rows, study.lead)
    runs = [r for r, s in enumerate(steps) if s is not None][: study.probed_seeds or None]
    points_ = [study_point(group, r, steps[r], batch) for r in runs]  # type: ignore[arg-type]
    if progress:
        progress(f"curvature study: {cell_label(group['cfg'])}: {len(runs)} plateau points")

    def probe(at: tuple[int, Point]) -> tuple[Row, list[Row], dict[str, basin.Radius]]:
        run, point = at
        # one point at a time: a single point's columns go to every device (a list is vmapped
        # on one; docs/performance.md)
        hessian = curvature.hessian_at(point, progress=progress)
        step = steps[run]
        assert step is not None  # runs holds the seeds with a plateau point
        return seed_probe(group, rows[run], run, step, point, hessian, study)

    seeds, radii, found = [], [], {}
    for seed, rows_, by_name in study_lib.probe_each(
        list(zip(runs, points_, strict=True)), probe, progress
    ):
        seeds.append(seed)
        radii += rows_
        found.update({(seed["seed"], name): r for name, r in by_name.items()})
    return seeds, radii, found


# ----------------------------------------------------------------------------- claims, findings


def _thm2_applies(cfg: ml_collections.ConfigDict) -> bool:
    """Thm 2 (notes §6.2): the tied theory model (no LayerNorm) at p + q > 1."""
    return bool(cfg.model.family == "theory" and cfg.model.tied and cfg.chain.p + cfg.chain.q > 1)


def theorem_claims(group: Group, seeds: Sequence[Row]) -> list[records.Claim]:
    """Where Thm 2 predicts: every seed trapped at H(pi); at each plateau point the (b, e) block
    positive definite (H_α ≻ 0 for p + q > 1, whatever the positions); no near-stationary
    verdict a saddle (θ_π is a local minimum, flat in β)."""
    cfg, label = group["cfg"], cell_label(group["cfg"])
    runs = trap_study.run_rows(group)
    p, q = float(cfg.chain.p), float(cfg.chain.q)
    pi0, pi1 = (float(x) for x in theory.stationary_binary(p, q))
    canonical = 2 * pi0 * pi1 * (p + q - 1)
    alphas = [s["alpha_lambda_min"] for s in seeds if "alpha_lambda_min" in s]
    kinds = [s["kind"] for s in seeds]
    return [
        records.claim(
            f"{label}: every seed stays at H(pi) (Thm 2's trap)",
            {
                "trapped": sum(r["trapped"] for r in runs),
                "runs": len(runs),
                "final losses": [round(r["loss"], 4) for r in runs],
            },
            f"all {len(runs)} trapped (|L - H(pi)| < {trap_study.TRAP_TOLERANCE}, |f0 - f1| < "
            f"{trap_study.FLAT})",
            all(r["trapped"] for r in runs),
            "Thm 2, notes §6.2, §11.4",
        ),
        records.claim(
            f"{label}: the (b, e) block is positive definite at every plateau point",
            {
                "smallest (b, e) eigenvalue per seed": [round(a, 5) for a in alphas],
                "theta_pi's (p_n = 0): 2 pi0 pi1 (p + q - 1)": round(canonical, 5),
            },
            "every smallest (b, e) eigenvalue > 0",
            bool(alphas) and min(alphas) > 0,
            "Thm 2 (H_alpha positive definite for p + q > 1), notes §6.2",
        ),
        records.claim(
            f"{label}: no plateau point's near-stationary verdict is a saddle",
            kinds,
            "minimum, degenerate minimum or not stationary (no verdict) at every seed",
            bool(kinds) and "saddle" not in kinds,
            "Thm 2 (a local minimum, flat in beta), notes §6.2, landscape_geometry §9",
        ),
    ]


def sanity_claims(seeds: Sequence[Row]) -> list[records.Claim]:
    """Every probed number finite; the escape directions' symmetric second-order check; the
    tracked λ_min inside the dense spectrum (Lanczos interlacing, float32 rounding)."""
    keys = ("loss", "grad_norm", "lambda_min", "lambda_max")
    finite = all(np.isfinite(s[k]) for s in seeds for k in keys)
    ratios = [s["second_order"] for s in seeds if s["second_order"] is not None]
    below = [
        s["seed"]
        for s in seeds
        if s["tracked_lambda_min"] < s["lambda_min"] - TRACKED_RTOL * s["lambda_max"]
    ]
    return [
        records.sanity(
            "every plateau point's loss, gradient and extreme eigenvalues are finite",
            len(seeds),
            "finite",
            finite and bool(seeds),
        ),
        records.sanity(
            f"the most negative direction's [L(θ+εv) + L(θ-εv) - 2L(θ)] / (ε² λ) at ε = "
            f"{EPSILON:g}",
            [round(r, 4) for r in ratios],
            f"within {SECOND_ORDER_RTOL} of 1",
            all(abs(r - 1) <= SECOND_ORDER_RTOL for r in ratios),
            "notes/landscape_geometry.md §9",
        ),
        records.sanity(
            "the tracked λ_min at each plateau step is not below the dense one",
            {"seeds below": below},
            f"tracked >= dense λ_min - {TRACKED_RTOL:g} λ_max (Ritz values lie inside)",
            not below,
            "docs/guide/tracking.md",
        ),
    ]


def _median(values: Sequence[float]) -> float | None:
    kept = [v for v in values if v is not None and np.isfinite(v)]
    return float(np.median(kept)) if kept else None


def findings(seeds: Sequence[Row], radii: Sequence[Row], margins: Sequence[float]) -> dict:
    """What the study measured per program, where no theorem predicts: trapped and escaped
    seeds, negative curvature, overlaps against chance, near-stationary kinds, basin radii."""
    out: dict[str, Any] = {}
    for label in dict.fromkeys(s["cell"] for s in seeds):
        rows = [s for s in seeds if s["cell"] == label]
        by = {k: [s for s in rows if s["status"] == k] for k in ("trapped", "escaped", "leaving")}
        trapped_min = _median([s["lambda_min"] for s in by["trapped"]])
        ratios = [s["lambda_min"] / trapped_min for s in by["escaped"]] if trapped_min else []
        out[label] = {
            "seeds": {k: [s["seed"] for s in v] for k, v in by.items()},
            "escape steps": {s["seed"]: s["escape_step"] for s in by["escaped"]},
            "plateau steps": {s["seed"]: s["plateau_step"] for s in rows},
            "lambda_min at the plateau point (median)": {
                k: _median([s["lambda_min"] for s in v]) for k, v in by.items() if v
            },
            "escaped lambda_min / trapped median": [round(r, 2) for r in ratios],
            "near-stationary kinds": {s["seed"]: s["kind"] for s in rows},
            "overlap with the real escape (escaped seeds)": _overlaps(by["escaped"]),
            "basin radius / |theta| (median over seeds)": _radii(radii, label, margins),
        }
    return out


def _overlaps(rows: Sequence[Row]) -> dict[str, Any]:
    rows = [s for s in rows if "overlap" in s]  # an escape past the last kept step has none
    if not rows:
        return {}
    return {
        "overlap |P_V u|": [round(s["overlap"], 3) for s in rows],
        "x chance sqrt(k/D)": [round(s["above_chance"], 1) for s in rows],
        "chance sqrt(k/D)": round(rows[0]["chance"], 4),
        "random subspaces at or above (largest fraction)": max(
            s["random_at_or_above"] for s in rows
        ),
        "|v_1 . u|": [round(s["overlap_v1"], 3) for s in rows],
        "|g . u| / |g|": [round(s["overlap_gradient"], 3) for s in rows],
    }


def _radii(radii: Sequence[Row], label: str, margins: Sequence[float]) -> dict[str, Any]:
    """Per margin and direction kind (v1, span, escape, random): the median radius / |θ| over
    seeds (inf: never within radius_max) and how many are finite."""
    rows = [r for r in radii if r["cell"] == label]
    out: dict[str, Any] = {}
    for margin in margins:
        for kind in ("v1", "span", "escape", "random"):
            chosen = [r for r in rows if r["direction"].startswith(kind)]
            if not chosen:
                continue
            values = [r[radius_key(margin)] / r["theta_norm"] for r in chosen]
            finite = [v for v in values if np.isfinite(v)]
            out[f"{kind}, margin {margin:g} I"] = {
                "median": float(np.median(values)),
                "finite": f"{len(finite)}/{len(values)}",
            }
    return out


# ----------------------------------------------------------------------------- the run


Train = Callable[..., Group]  # experiment.train_group(cfg, fields, workdir, progress)


def run(
    cfg: ml_collections.ConfigDict,
    workdir: records.Workdir,
    progress: Progress,
    *,
    cells: Sequence[dict[str, Any]],
    train: Train,
    batch: Batch,
) -> dict[str, Any]:
    """Train each program (`cells`, one per variant) with its kept parameters and tracked λ,
    probe every seed at its plateau point, and write curvature_seeds.csv, curvature_radii.csv,
    figures/curvature_study.png (curvature_figures.py), the claims and the findings."""
    groups, seeds, radii, found = [], [], [], {}
    start = time.perf_counter()
    for i, group in study_lib.programs(
        cells, lambda fields: train(cfg, fields, workdir, progress), workdir, progress
    ):
        groups.append(group)
        rows, radius, by_name = probe_group(group, batch, group["cfg"].curvature, progress)
        seeds += rows
        radii += radius
        found.update({(i, *key): value for key, value in by_name.items()})
    study_lib.write(workdir, {"curvature_seeds": seeds, "curvature_radii": radii})
    by_group = [[s for s in seeds if s["cell"] == cell_label(g["cfg"])] for g in groups]
    figure = curvature_figures.draw(groups, by_group, found, list(cfg.curvature.margins))
    claims = [
        c
        for g, rows in zip(groups, by_group, strict=True)
        if _thm2_applies(g["cfg"])
        for c in theorem_claims(g, rows)
    ]
    return workdir.finish(
        claims + sanity_claims(seeds),
        progress,
        figures=[str(curvature_figures.save(figure, workdir.figure_path("curvature_study")))],
        findings=findings(seeds, radii, list(cfg.curvature.margins)),
        seconds={
            **engine_experiment.seconds_of([g["result"] for g in groups]),
            "total": time.perf_counter() - start,
        },
    )
