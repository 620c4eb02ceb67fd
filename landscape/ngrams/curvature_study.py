"""The curvature of a trained run at its plateau (Fig. 3's setting): λ_min/λ_max tracked along
training, the plateaus, and at kept steps inside the first sub-n-gram plateau the trained point's
Hessian kind, Gauss-Newton split and escape directions, with their overlap with the run's real
next stage and with the direction to θ_*^(k+1), against chance. docs/studies/ngrams_curvature.md.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.flatten_util import ravel_pytree
from ml_collections import ConfigDict

from landscape import _checks
from landscape.engine import config as config_lib
from landscape.engine import records
from landscape.engine import study as study_lib
from landscape.engine.result import RunResult
from landscape.ngrams import claims as claims_lib
from landscape.ngrams import figures, points, trained
from landscape.point import Point
from landscape.probes import curvature, gauss_newton, results
from landscape.probes import escape as escape_lib
from landscape.probes.escape import EscapeDirections
from landscape.probes.gauss_newton import GaussNewton
from landscape.typing import ArrayLike, Progress, PyTree

TARGETS = ("next stage", "to theta_star^(k+1)")
BASES = ("escape directions", "negative eigenspace", "gradient")


# ----------------------------------------------------------------------------- overlaps


def _unit_rows(name: str, basis: ArrayLike, dim: int | None = None) -> np.ndarray:
    rows = _checks.real_array(name, basis, scalar=False)
    assert rows is not None  # numpy input, never traced
    rows = np.atleast_2d(rows)
    norms = np.linalg.norm(rows, axis=1)
    if rows.ndim != 2 or rows.shape[0] == 0 or (dim is not None and rows.shape[1] != dim):
        want = f"(k, {dim})" if dim is not None else "(k, D) with k >= 1"
        raise ValueError(f"{name} has shape {rows.shape}: must be {want}, one vector a row.")
    if not np.all(np.isfinite(rows)) or not np.all(norms > 0):
        raise ValueError(f"{name}: every row must be finite and non-zero.")
    return rows / norms[:, None]


def span_basis(basis: ArrayLike) -> np.ndarray:
    """An orthonormal basis (rows) of the span of `basis`'s rows (k x D), rank-revealing: rows
    that add nothing to the span add no vector."""
    rows = _unit_rows("basis", basis)
    u, s, _ = np.linalg.svd(rows.T, full_matrices=False)
    return u[:, s > max(rows.shape) * np.finfo(rows.dtype).eps * s[0]].T


def overlap(vector: ArrayLike, basis: ArrayLike) -> dict[str, float]:
    """How much of `vector` lies along the rows of `basis` (k x D): `max_cos`, the largest
    |cos| with one row, and `span`, the norm of its projection onto their span over |vector|
    (1 in the span, 0 orthogonal to it). docs/studies/ngrams_curvature.md."""
    unit = _unit_rows("vector", vector)
    if unit.shape[0] != 1:
        raise ValueError(f"vector has shape {np.shape(vector)}: must be one vector (D,).")
    rows = _unit_rows("basis", basis, unit.shape[1])
    return {
        "max_cos": float(np.abs(rows @ unit[0]).max()),
        "span": float(np.linalg.norm(span_basis(rows) @ unit[0])),
        "k": int(rows.shape[0]),
    }


def chance_overlap_mean(k: int, dim: int) -> float:
    """E |P v| / |v| for v uniform on the sphere of R^dim and P the projection onto a k-plane:
    |P v|² / |v|² ~ Beta(k/2, (dim-k)/2), so E = Γ((k+1)/2) Γ(dim/2) / (Γ(k/2) Γ((dim+1)/2)),
    just below sqrt(k/dim) (its mean square). docs/studies/ngrams_curvature.md."""
    dim = _checks.check_int("dim", dim, 1, "the dimension of the space")
    k = _checks.check_int("k", k, 1, "the dimension of the span")
    if k > dim:
        raise ValueError(f"k = {k}: a span in R^{dim} has at most dim = {dim} dimensions.")
    log = math.lgamma((k + 1) / 2) + math.lgamma(dim / 2)
    return math.exp(log - math.lgamma(k / 2) - math.lgamma((dim + 1) / 2))


def random_overlaps(
    basis: ArrayLike, key: jax.Array, num: int = 2000, mask: ArrayLike | None = None
) -> dict[str, float]:
    """The chance baseline measured: `overlap` of `num` Gaussian random directions (only the
    coordinates where `mask` is true, when given) with `basis`; the mean and standard deviation
    of max_cos and span over them."""
    rows = _unit_rows("basis", basis)
    _checks.check_key("key", key)
    num = _checks.check_int("num", num, 2, "the number of random directions")
    draws = np.array(jax.random.normal(key, (num, rows.shape[1])), np.float64)
    if mask is not None:
        keep = np.asarray(mask, bool)
        if keep.shape != (rows.shape[1],) or not keep.any():
            raise ValueError(f"mask: must be {rows.shape[1]} booleans, at least one true.")
        draws *= keep
    draws /= np.linalg.norm(draws, axis=1, keepdims=True)
    span = np.linalg.norm(draws @ span_basis(rows).T, axis=1)
    cos = np.abs(draws @ rows.T).max(axis=1)
    return {
        "max_cos_mean": float(cos.mean()),
        "max_cos_std": float(cos.std(ddof=1)),
        "span_mean": float(span.mean()),
        "span_std": float(span.std(ddof=1)),
        "num": num,
    }


# ----------------------------------------------------------------------------- what to probe


def plateau_of(row: dict[str, Any], order_n: int) -> dict[str, Any] | None:
    """A run's first sub-n-gram plateau (k < n; claims.run_analysis's row), or None."""
    return next((p for p in row["plateaus"] if p["k"] < order_n), None)


def probe_steps(
    kept: Sequence[int], plateau: dict[str, Any], fractions: Sequence[float]
) -> list[int]:
    """The kept steps nearest to start + f (end - start) for each fraction f, inside the
    plateau (each once, ascending); [] when no kept step lies inside it."""
    inside = np.array([s for s in kept if plateau["start"] <= s <= plateau["end"]], int)
    if not inside.size:
        return []
    span = plateau["end"] - plateau["start"]
    chosen = {
        int(inside[np.argmin(np.abs(inside - plateau["start"] - f * span))]) for f in fractions
    }
    return sorted(chosen)


def after_step(
    row: dict[str, Any], plateau: dict[str, Any], kept: Sequence[int], tol: float
) -> int | None:
    """A kept step after the drop: the first at or after the next plateau's start; without a
    next plateau, the last kept step if the final loss lies `tol` below the plateau; else None."""
    later = [p for p in row["plateaus"] if p["start"] > plateau["end"]]
    if later:
        return next((int(s) for s in kept if s >= later[0]["start"]), None)
    return int(kept[-1]) if row["final_loss"] < plateau["level"] - tol else None


def next_construction(point: Point, k: int, c: float, offsets_HL: np.ndarray) -> PyTree:
    """θ_*^k(c) (notes/ngrams.md §4.4) for the trained point's model, its heads permuted so that
    the construction's head for offset o is the trained head attending most to o
    (`offsets_HL`: heads x offsets 1, 2, ...; the study takes them after the drop), in the
    point's dtype."""
    model = point.meta["model"]
    dtype = np.asarray(point.params["A1"]).dtype
    star = points.construction_params(k, c, model, dtype)
    m, S = model.num_heads, model.num_states
    order: list[int] = []
    for o in range(min(m, offsets_HL.shape[1])):  # construction head o reads offset o + 1
        free = [h for h in range(m) if h not in order]
        order.append(max(free, key=lambda h: offsets_HL[h, o]))
    order += [h for h in range(m) if h not in order]
    columns = np.arange(model.width)
    for i, h in enumerate(order):  # residual block 1 + i of the construction -> 1 + h
        columns[(1 + h) * S : (2 + h) * S] = np.arange((1 + i) * S, (2 + i) * S)
    permuted = {name: np.asarray(value) for name, value in star.items()}
    for name in ("A1", "V1"):
        permuted[name] = permuted[name][np.argsort(order)]
    for name in ("Q2", "K2"):
        permuted[name] = permuted[name][:, columns]
    return permuted


def block_shares(vectors: np.ndarray, unravel: Callable, num_heads: int) -> dict[str, float]:
    """The share of the squared norm of orthonormal `vectors` (rows) in each block, per head for
    A1 and V1 (their mean over the vectors: the trace of the projector on the block over k)."""
    shares: dict[str, float] = {}
    for row in np.atleast_2d(vectors):
        tree = unravel(row / np.linalg.norm(row))
        parts = {f"{n} h{h + 1}": tree[n][h] for n in ("A1", "V1") for h in range(num_heads)}
        parts.update(Q2=tree["Q2"], K2=tree["K2"])
        for name, part in parts.items():
            shares[name] = shares.get(name, 0.0) + float(np.sum(np.square(part)))
    return {name: value / np.atleast_2d(vectors).shape[0] for name, value in shares.items()}


# ----------------------------------------------------------------------------- one probed point


def _flat(params: PyTree, dtype: Any) -> np.ndarray:
    return np.asarray(ravel_pytree(jax.tree.map(lambda x: np.asarray(x, dtype), params))[0])


# the near-stationary rule's verdict and numbers a point's row keeps, as near_<name>
_NEAR_FIELDS = "trusted reason cut curvature_change flat_gradient measured predicted".split()


def _curvature_row(
    split: GaussNewton, escape: EscapeDirections, tracked: dict[str, float]
) -> dict[str, Any]:
    """The point's numbers: loss, gradient, spectrum, its kind (near-stationary rule) and the
    spectrum's own kind, the quadratic model's check, G and R = H - G, the escape directions."""
    H = split.hessian
    tol = H.tolerance()
    near = H.near_stationary() if H.kind() is not results.Curvature.NON_FINITE else None
    row = dict(
        H.summary(),
        spectrum_kind=results.curvature_kind(H.eigenvalues, tol).value,
        ggn_min=float(split.ggn_eigenvalues[0]),
        ggn_max=float(split.ggn_eigenvalues[-1]),
        ggn_negative=int(np.sum(split.ggn_eigenvalues < -tol)),
        remainder_min=float(split.remainder_eigenvalues[0]),
        escape_values=[float(v) for v in escape.values],
        escape_ratios=[float(r) for r in escape.ratios[:, 0]],
        escape_epsilon=float(escape.epsilons[0]),
        **tracked,
    )
    if near is not None:
        row.update({f"near_{name}": getattr(near, name) for name in _NEAR_FIELDS})
    return row


def _lanczos_rows(
    workdir: records.Workdir, run: int, step: int, s: ConfigDict, progress: Progress
) -> list[dict[str, Any]]:
    """λ_min and λ_max at the point by Lanczos (`lanczos_iters` steps) on populations of each of
    `lanczos_sizes` sequences (nested: a smaller set is a prefix of a larger one)."""
    out = []
    for size in s.lanczos_sizes:
        point = trained.trained_point(
            workdir.path, run, step, num_sequences=size, seed=s.population_seed
        )
        spectrum = curvature.hessian_at(point, "lanczos", num_iters=s.lanczos_iters)
        out.append(
            dict(
                run=run,
                step=step,
                num_sequences=size,
                lambda_min=spectrum.lambda_min,
                lambda_max=spectrum.lambda_max,
                grad_norm=spectrum.gradient.norm,
                loss=spectrum.gradient.loss,
            )
        )
        if progress:
            progress(
                f"  {size:>6} sequences: Lanczos λ_min {spectrum.lambda_min:+.5f}, λ_max "
                f"{spectrum.lambda_max:.4f}, |g| {spectrum.gradient.norm:.4f}"
            )
    return out


def _directions(
    point: Point, result: RunResult, run: int, after: int | None, star: PyTree
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """({target: its direction from the point}, the live mask: the coordinates training moved
    from the initialisation by the step or by `after`)."""
    dtype = np.asarray(point.params["A1"]).dtype
    here = _flat(point.params, dtype)
    start = _flat(result.params_at(0, run), dtype)
    targets = {TARGETS[1]: _flat(star, dtype) - here}
    live = here != start
    if after is not None:
        later = _flat(result.params_at(after, run), dtype)
        targets[TARGETS[0]] = later - here
        live |= later != start
    return targets, live


def rayleigh_rows(
    split: GaussNewton, targets: dict[str, np.ndarray], live: np.ndarray
) -> dict[str, float]:
    """The curvature along each target u, uᵀMu / uᵀu for M = H, G and R = H - G, beside the
    mean over random directions in the live coordinates, tr(M_live) / D_live."""
    H, G = split.hessian.matrix, split.ggn
    out = {}
    for name, M in (("H", H), ("G", G), ("R", H - G)):
        out[f"random_curvature_{name}"] = float(np.trace(M[np.ix_(live, live)]) / live.sum())
        for target, u in targets.items():
            key = target.replace(" ", "_").replace("^(k+1)", "")
            out[f"curvature_{name}_{key}"] = float(u @ M @ u / (u @ u))
    return out


def _bases(split: GaussNewton, escape: EscapeDirections) -> dict[str, np.ndarray]:
    """The subspaces compared with the targets: the escape directions (checked at second
    order), every eigenvector of a negative eigenvalue, and the descent direction -g."""
    H = split.hessian
    negative = H.eigenvalues < -H.tolerance()
    out = {
        BASES[0]: np.asarray(escape.flat_vectors),
        BASES[1]: H.eigenvectors[:, negative].T,
        BASES[2]: -np.asarray(H.gradient.vector)[None, :],
    }
    return {name: rows for name, rows in out.items() if rows.size}


def overlap_rows(
    targets: dict[str, np.ndarray],
    bases: dict[str, np.ndarray],
    live: np.ndarray,
    key: jax.Array,
    num: int,
    ids: dict[str, Any],
) -> list[dict[str, Any]]:
    """One row per (target, basis): the overlap, the chance level sqrt(k / D_live) with its
    exact mean (`chance_overlap_mean`), and random directions in the live coordinates (mean,
    std)."""
    rows = []
    dim = int(live.sum())
    for b, (basis_name, basis) in enumerate(bases.items()):
        chance = random_overlaps(basis, jax.random.fold_in(key, b), num, live)
        k = int(basis.shape[0])
        for target_name, vector in targets.items():
            found = overlap(vector, basis)
            rows.append(
                dict(
                    ids,
                    target=target_name,
                    basis=basis_name,
                    k=k,
                    dim_live=dim,
                    max_cos=found["max_cos"],
                    span=found["span"],
                    chance_sqrt_k_over_d=math.sqrt(min(k, dim) / dim),
                    chance_exact=chance_overlap_mean(min(k, dim), dim),
                    random_span_mean=chance["span_mean"],
                    random_span_std=chance["span_std"],
                    random_max_cos_mean=chance["max_cos_mean"],
                    random_max_cos_std=chance["max_cos_std"],
                    span_over_chance=found["span"] / chance["span_mean"],
                )
            )
    return rows


def _at_step(steps: np.ndarray, values: np.ndarray, step: int) -> Any:
    """values at the entry of `steps` nearest to `step`."""
    return values[int(np.argmin(np.abs(np.asarray(steps) - step)))]


def probe(
    cfg: ConfigDict,
    workdir: records.Workdir,
    result: RunResult,
    where: dict[str, Any],
    progress: Progress = print,
) -> dict[str, Any]:
    """Everything measured at one kept step of one run (`where`: run, step, plateau, after):
    the trained point's Hessian and Gauss-Newton split, escape directions, overlaps with the
    next stage and with θ_*^(k+1) against chance, block shares and λ against the population."""
    s, run, step = cfg.curvature, where["run"], where["step"]
    point = trained.trained_point(
        workdir.path, run, step, num_sequences=s.num_sequences, seed=s.population_seed
    )
    split = gauss_newton.ggn_at(point, progress=progress)
    escape = escape_lib.escape_directions(point, k=s.num_directions, progress=progress)
    # the heads' roles after the drop (else at the point): the construction training reaches
    roles = step if where["after"] is None else where["after"]
    offsets = _at_step(result.snapshot_steps, result.snapshots["head_offsets"][run], roles)
    k_next = min(where["plateau"]["k"] + 1, cfg.task.order_n)
    star = next_construction(point, k_next, s.c, np.asarray(offsets))
    targets, live = _directions(point, result, run, where["after"], star)
    bases = _bases(split, escape)
    ids = dict(run=run, seed=int(result.seeds[run]), step=step)
    key = jax.random.fold_in(jax.random.key(s.random_seed), run * 100_000 + step)
    overlaps = overlap_rows(targets, bases, live, key, s.random_directions, ids)
    unravel = ravel_pytree(point.params)[1]
    model = point.meta["model"]
    shares = [
        dict(ids, vectors=name, **block_shares(span_basis(rows), unravel, model.num_heads))
        for name, rows in {**bases, **{t: v[None, :] for t, v in targets.items()}}.items()
    ]
    tracked = {
        f"tracked_{name}": float(_at_step(result.tracked_steps, result.metrics[name][run], step))
        for name in ("lambda_min", "lambda_max")
        if result.tracked_steps is not None
    }
    plateau = where["plateau"]
    row = dict(
        ids,
        plateau_start=plateau["start"],
        plateau_end=plateau["end"],
        plateau_level=plateau["level"],
        k=plateau["k"],
        k_next=k_next,
        after=where["after"],
        dim_live=int(live.sum()),
        num_sequences=s.num_sequences,
        **_curvature_row(split, escape, tracked),
        **rayleigh_rows(split, targets, live),
    )
    if progress:
        progress(f"λ against the population size at run {run}, step {step}:")
    lanczos = _lanczos_rows(workdir, run, step, s, progress)
    text = "\n\n".join(
        [split.hessian.describe(), split.describe(), escape.describe()]
        + [_overlap_line(r) for r in overlaps]
    )
    return dict(row=row, overlaps=overlaps, shares=shares, lanczos=lanczos, text=text)


def _point_line(r: dict[str, Any]) -> str:
    """A probed point in one line: its spectrum, kind, split and the curvature along targets."""
    along = ", ".join(
        f"{key.removeprefix('curvature_H_').replace('_', ' ')} {value:+.4f}"
        for key, value in r.items()
        if key.startswith("curvature_H_")
    )
    return (
        f"run {r['run']} step {r['step']} ({r['num_sequences']} sequences): loss "
        f"{r['loss']:.4f}, |g| {r['grad_norm']:.4f}, λ in [{r['lambda_min']:.4f}, "
        f"{r['lambda_max']:.4f}] with {r['num_negative']} negative (spectrum: "
        f"{r['spectrum_kind']}); kind {r['kind']}; G in [{r['ggn_min']:.2g}, {r['ggn_max']:.4f}], "
        f"min eig(H - G) {r['remainder_min']:.4f}; curvature uᵀHu/uᵀu along: {along} (random "
        f"directions {r['random_curvature_H']:+.4f})"
    )


def _overlap_line(r: dict[str, Any]) -> str:
    return (
        f"run {r['run']} step {r['step']}: {r['target']} against the {r['basis']} (k = {r['k']}, "
        f"D_live = {r['dim_live']}): projection {r['span']:.4f} against chance "
        f"{r['random_span_mean']:.4f} ± {r['random_span_std']:.4f} ({r['span_over_chance']:.2f}x; "
        f"sqrt(k/D) {r['chance_sqrt_k_over_d']:.4f}); max |cos| {r['max_cos']:.4f} against "
        f"{r['random_max_cos_mean']:.4f} ± {r['random_max_cos_std']:.4f}"
    )


# ----------------------------------------------------------------------------- claims


def claims_of(
    row: dict[str, Any], lanczos: list[dict], s: ConfigDict, tol: float
) -> list[records.Claim]:
    """The theory's predictions at a plateau point (notes/ngrams.md §4.5, §4.6.4-5), the
    identities of the split (notes/landscape_geometry.md §7) and checks of the measurement."""
    where = f"run {row['run']} (seed {row['seed']}), step {row['step']}"
    ratios = np.asarray(row["escape_ratios"], float)
    near = dict(
        kind=row["kind"],
        stationary=row["stationary"],
        grad_norm=row["grad_norm"],
        reason=row.get("near_reason", ""),
        critical_distance=row["critical_distance"],
    )
    out = [
        records.claim(
            f"{where}: the sub-n-gram plateau is a near-stationary point of the population loss",
            near,
            "stationary 'exact' or 'near' (the quadratic model's critical point trusted)",
            row["stationary"] in ("exact", "near"),
            "Thm 4.2, notes/ngrams.md §4.5; rule: notes/landscape_geometry.md §9",
        ),
        records.claim(
            f"{where}: the plateau point has negative curvature (a saddle, not a minimum), "
            "each escape direction confirmed at second order",
            dict(
                lambda_min=row["lambda_min"],
                num_negative=row["num_negative"],
                ratios=[round(r, 4) for r in ratios],
            ),
            "lambda_min < -tol and |ratio - 1| <= 0.1 at the smallest epsilon",
            row["num_negative"] > 0 and ratios.size > 0 and bool(np.all(np.abs(ratios - 1) <= 0.1)),
            "notes/ngrams.md §4.6.4-§4.6.5; check: notes/landscape_geometry.md §9",
        ),
        records.sanity(
            f"{where}: G is positive semi-definite, so all the negative curvature is in H - G",
            dict(
                ggn_min=row["ggn_min"],
                remainder_min=row["remainder_min"],
                lambda_min=row["lambda_min"],
            ),
            "no eigenvalue of G below -tol, min eig(H - G) <= lambda_min(H)",
            row["ggn_negative"] == 0 and row["remainder_min"] <= row["lambda_min"] + row["tol"],
            "notes/landscape_geometry.md §7",
        ),
        records.sanity(
            f"{where}: the trained point's population loss sits at the plateau's test loss",
            dict(loss=row["loss"], plateau=row["plateau_level"]),
            f"within {tol} (the two sets' Monte-Carlo error)",
            abs(row["loss"] - row["plateau_level"]) <= tol,
        ),
    ]
    same = [r for r in lanczos if r["num_sequences"] == s.num_sequences]
    if same:
        out.append(
            records.sanity(
                f"{where}: Lanczos ({s.lanczos_iters} steps) finds the dense λ_min",
                dict(lanczos=same[0]["lambda_min"], dense=row["lambda_min"]),
                "within 10% (Ritz values lie inside the spectrum)",
                abs(same[0]["lambda_min"] - row["lambda_min"]) <= 0.1 * abs(row["lambda_min"]),
            )
        )
    return out


# ----------------------------------------------------------------------------- the study


def validate(cfg: ConfigDict) -> None:
    """The fields of experiment = 'curvature' (one ConfigError for the first mistake)."""
    r = config_lib.require_number
    config_lib.require_empty_sweep(cfg, "experiment = 'curvature'")
    config_lib.require(
        cfg.claims == "", "claims", cfg.claims, "'' for experiment = 'curvature' (always checked)"
    )
    study_lib.require_every(cfg, "curvature", "the study probes kept and tracked steps")
    config_lib.require_numbers(cfg, "curvature.fractions", low=0, high=1)
    r(cfg, "curvature.num_sequences", low=2, integer=True)
    r(cfg, "curvature.population_seed", low=0, high=2**31 - 1, integer=True)
    r(cfg, "curvature.num_directions", low=1, integer=True)
    r(cfg, "curvature.c", low=0, low_open=True)
    r(cfg, "curvature.random_directions", low=2, integer=True)
    r(cfg, "curvature.random_seed", low=0, high=2**31 - 1, integer=True)
    config_lib.require_numbers(cfg, "curvature.lanczos_sizes", low=2, integer=True, nonempty=False)
    r(cfg, "curvature.lanczos_iters", low=2, integer=True)


def _where(cfg: ConfigDict, result: RunResult, rows: list[dict]) -> tuple[list[dict], list[str]]:
    """(what to probe: run, step, plateau, after; notes on runs with nothing to probe)."""
    kept = [int(s) for s in np.asarray(result.params_steps)]  # validate: params_every > 0
    chosen, notes = [], []
    for run, row in enumerate(rows):
        plateau = plateau_of(row, cfg.task.order_n)
        steps = probe_steps(kept, plateau, cfg.curvature.fractions) if plateau else []
        if plateau is None or not steps:
            notes.append(f"run {run}: no kept step inside a sub-n-gram plateau ({row['plateaus']})")
            continue
        after = after_step(row, plateau, kept, cfg.analysis.line_tol)
        if after is None:
            notes.append(f"run {run}: no drop after the plateau: no next stage to compare with")
        chosen += [dict(run=run, step=s, plateau=plateau, after=after) for s in steps]
    return chosen, notes


def run(
    cfg: ConfigDict,
    group: dict[str, Any],
    lines: claims_lib.Lines,
    workdir: records.Workdir,
    progress: Progress = print,
) -> dict[str, Any]:
    """The study of a trained, tracked program whose arrays are saved in `workdir`: the plateaus,
    `probe` at the chosen kept steps, the tables (curvature_points.csv, overlaps.csv,
    block_shares.csv, lambda_vs_population.csv), curvature.txt, the figure and the claims."""
    view = claims_lib.measured_view(group, *claims_lib.measures(group["cfg"])[0])
    rows = claims_lib.run_analysis(view, lines)
    chosen, notes = _where(cfg, group["result"], rows)
    probed = study_lib.probe_each(
        chosen,
        lambda where: probe(cfg, workdir, group["result"], where, progress),
        progress,
        lambda where: f"probing run {where['run']} at step {where['step']}",
    )
    tables = {
        name: [r for p in probed for r in (p[key] if key != "row" else [p["row"]])]
        for name, key in (
            ("curvature_points", "row"),
            ("overlaps", "overlaps"),
            ("block_shares", "shares"),
            ("lambda_vs_population", "lanczos"),
        )
    }
    study_lib.write(
        workdir,
        {name: table for name, table in tables.items() if table},
        [p["text"] for p in probed] + notes,
    )
    claims: list[records.Claim] = []
    for p in probed:
        check = functools.partial(
            claims_of, p["row"], p["lanczos"], cfg.curvature, cfg.analysis.line_tol
        )
        claims += records.evaluated("curvature", check)
    if not probed:
        claims.append(records.claim("a plateau point to probe", notes, "one", False))
    path = figures.plot_curvature_study(view, rows, tables, workdir.figure_path("curvature_study"))
    findings = [_point_line(r) for r in tables["curvature_points"]]
    findings += [_overlap_line(r) for r in tables["overlaps"]] + notes
    if progress:
        progress("\n".join(findings))
    return workdir.finish(
        claims,
        progress,
        figures=[str(path)],
        lines=lines.base,
        runs=[{k: v for k, v in row.items() if k != "grad_norm_per_snapshot"} for row in rows],
        points=tables["curvature_points"],
        findings=findings,
    )
