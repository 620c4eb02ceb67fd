"""The atlas: the probes applied to theta_pi across a (p, q) grid, tied and untied (Thms 2-3),
and the exact Hessians of the constructed points against the closed forms (run_landscape).

Per grid cell: the exact Hessian (one vmapped call per tying), its verdict against the theorems'
boundary p + q = 1, the escape directions of the saddles, the Gauss-Newton split, the straight
path from theta_pi to theta_star, and one spectral density. See docs/papers/markov.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from landscape.engine import plotting, records
from landscape.markov import model as model_lib
from landscape.markov import points
from landscape.probes import (
    curvature,
    escape,
    estimates,
    gauss_newton,
    geometry,
    gradient,
    results,
    spectra,
)
from landscape.probes import figures as probe_figures
from landscape.typing import Progress

_SECOND_ORDER_RTOL = 0.01  # |[L(θ+εv) + L(θ-εv) - 2L(θ)] / (ε² λ) - 1| at the smallest ε
BOUNDARY_GAP = 1e-9  # cells this close to p + q = 1 are degenerate (zero alpha curvature)
# SLQ counts the trained points' eigenvalues below -1e-4 λ_max: a run is not exactly stationary,
# and the dense tolerance (~1e-9 λ_max) also counts dozens of eigenvalues in (-1e-5, 0) that 40
# Lanczos steps cannot tell from the ~150 zero modes beside them
SLQ_RESOLUTION = 1e-4


def expected_kind(p: float, q: float, tied: bool) -> results.Curvature:
    """Thm 2: tied and p + q > 1, a local minimum; Thm 3 and p + q < 1: a saddle."""
    return results.Curvature.MINIMUM if tied and p + q > 1 else results.Curvature.SADDLE


def _cells(cfg: ml_collections.ConfigDict) -> list[tuple[float, float]]:
    return [
        (float(p), float(q))
        for p in cfg.atlas.p
        for q in cfg.atlas.q
        if abs(p + q - 1) > BOUNDARY_GAP
    ]


def _theta_pi(cfg: ml_collections.ConfigDict, p: float, q: float, tied: bool) -> Any:
    return points.theta_pi(p, q, d=cfg.atlas.d, seq_len=cfg.atlas.seq_len, tied=tied)


def _hessian_rows(cfg: ml_collections.ConfigDict, tied: bool, progress: Progress) -> list[dict]:
    """One row per cell: verdicts and alpha-block eigenvalues against the closed forms."""
    cells = _cells(cfg)
    pts = [_theta_pi(cfg, p, q, tied) for p, q in cells]
    if progress:
        progress(f"atlas: {len(pts)} {'tied' if tied else 'untied'} Hessians in one call")
    hessians = curvature.hessian_at(pts, progress=None)
    gauss = gauss_newton.ggn_at(pts)
    rows = []
    for (p, q), pt, h, g in zip(cells, pts, hessians, gauss, strict=True):
        focus = h.focus_report()
        assert focus is not None  # theta_pi names its focus blocks
        tol = h.tolerance()
        rows.append(
            {
                "tied": tied,
                "p": p,
                "q": q,
                "kind": h.kind().value,
                "expected": expected_kind(p, q, tied).value,
                "smallest_eigenvalue": float(h.eigenvalues[0]),
                "alpha_smallest": float(focus.lambda_min),
                "num_negative": int(np.sum(h.eigenvalues < -tol)),
                "alpha_error": float(
                    np.max(np.abs(focus.eigenvalues - np.sort(pt.meta["focus_prediction"])))
                ),
                "ggn_negative": int(np.sum(g.ggn_eigenvalues < -tol)),
                "remainder_smallest": float(g.remainder_eigenvalues[0]),
            }
        )
    return rows


def _escape_rows(cfg: ml_collections.ConfigDict, saddles: list[dict]) -> list[dict]:
    """The second-order check along each escape direction of every saddle of the grid."""
    rows = []
    for tied in (True, False):
        cells = [(r["p"], r["q"]) for r in saddles if r["tied"] == tied]
        if not cells:
            continue
        found = escape.escape_directions([_theta_pi(cfg, p, q, tied) for p, q in cells])
        for (p, q), esc in zip(cells, found, strict=True):
            ratios = esc.ratios[:, 0] if esc.num_negative() else np.array([np.nan])
            rows.append(
                {
                    "tied": tied,
                    "p": p,
                    "q": q,
                    "directions": esc.num_negative(),
                    "worst_ratio_error": float(np.max(np.abs(ratios - 1))),
                }
            )
    return rows


def _path_rows(cfg: ml_collections.ConfigDict) -> tuple[list[dict], list[geometry.PathResult]]:
    """The straight path from theta_pi to theta_star (same tying) in every cell."""
    rows, results = [], []
    ts = np.linspace(0.0, 1.0, cfg.atlas.path_ts)
    for tied in (True, False):
        for p, q in _cells(cfg):
            star = points.theta_star(p, q, d=cfg.atlas.d, seq_len=cfg.atlas.seq_len, tied=tied)
            result = geometry.path(_theta_pi(cfg, p, q, tied), star, ts)
            rows.append(
                {
                    "tied": tied,
                    "p": p,
                    "q": q,
                    "barrier": result.barrier,
                    "argmax_t": result.argmax_t,
                    "loss_pi": result.loss_a,
                    "loss_star": result.loss_b,
                }
            )
            results.append(result)
    return rows, results


def _density(cfg: ml_collections.ConfigDict) -> tuple[estimates.SpectralDensity, int, tuple]:
    """SLQ at the untied theta_pi of the grid's first cell, and its exact negative count."""
    p, q = _cells(cfg)[0]
    point = _theta_pi(cfg, p, q, tied=False)
    density = spectra.spectral_density(
        point, cfg.atlas.num_probes, cfg.atlas.num_iters, jax.random.key(cfg.seed)
    )
    h = curvature.hessian_at(point, progress=None)
    return density, int(np.sum(h.eigenvalues < -h.tolerance())), (p, q)


# ----------------------------------------------------------------------------- trained points


Train = Callable[[bool], tuple[ml_collections.ConfigDict, Any]]  # tied -> (config, RunResult)


def _trained_points(
    cfg: ml_collections.ConfigDict, pi: Any, tied: bool, progress: Progress, train: Train
) -> list:
    """Train `train_seeds` runs of one tying (`train`, the experiment's training); each run's
    final parameters as a float64 Point of theta_pi's (`pi`) exact population loss: its model
    and inputs (all 2^N sequences, notes §4)."""
    cell, result = train(tied)
    p, q = cell.chain.p, cell.chain.q
    model = pi.meta["model"]
    trained = model_lib.from_config(cell).clone(dtype=None, param_dtype=model.param_dtype)
    assert trained == model, (trained, model)  # the trained family is theta_pi's
    if progress:
        which = "tied" if tied else "untied"
        progress(f"atlas: training {cell.num_seeds} {which} runs at (p, q) = ({p:g}, {q:g})")
    found = []
    for run in range(result.num_runs):
        params = jax.tree.map(
            lambda x: jnp.asarray(x, model.param_dtype), result.params("final", run)
        )
        seed = int(result.seeds[run])
        name = f"trained ({'tied' if tied else 'untied'}, p={p:g}, q={q:g}, seed {seed})"
        meta = {"model": model, "p": p, "q": q, "seed": seed, "tied": tied}
        found.append(points.population_point(model, params, pi.inputs, name, meta))
    return found


def reached(loss: float, loss_pi: float, loss_star: float) -> str:
    """Which basin a final loss sits in: within a quarter of the gap L(theta_pi) - L(theta_star)
    (the mutual information of x_n and x_{n+1}) of either end, the notes' "stuck" rule
    (notes/markov.md §12.7, on the loss alone)."""
    margin = abs(loss_pi - loss_star) / 4
    if abs(loss - loss_pi) < margin:
        return "unigram"
    return "bigram" if abs(loss - loss_star) < margin else "neither"


def expected_basin(p: float, q: float, tied: bool) -> str:
    """Thm 2 and the notes' pilot: tied runs with p + q > 1 stay at the unigram point, the rest
    reach the bigram (notes/markov.md §11.4)."""
    return "unigram" if tied and p + q > 1 else "bigram"


def _trained_rows(
    cfg: ml_collections.ConfigDict, tied: bool, progress: Progress, train: Train
) -> tuple[list[dict], list[estimates.SpectralDensity]]:
    """The probes at one tying's trained points (one vmapped call each): gradient norm, dense
    Hessian, SLQ density, and the loss against L(theta_pi) and L(theta_star)."""
    p, q = (float(x) for x in cfg.atlas.train_cell)
    pi = _theta_pi(cfg, p, q, tied)
    pts = _trained_points(cfg, pi, tied, progress, train)
    star = points.theta_star(p, q, d=cfg.atlas.d, seq_len=cfg.atlas.seq_len, tied=tied)
    loss_pi, loss_star = pi.loss(), star.loss()
    gradients = gradient.gradient_at(pts)
    hessians = curvature.hessian_at(pts, progress=None)
    key = jax.random.key(cfg.seed)
    densities = spectra.spectral_density(pts, cfg.atlas.num_probes, cfg.atlas.num_iters, key)
    rows = []
    for pt, g, h, slq in zip(pts, gradients, hessians, densities, strict=True):
        tol, resolved = h.tolerance(), SLQ_RESOLUTION * float(h.eigenvalues[-1])
        mass, stderr = slq.mass(-np.inf, -resolved)
        low, high = slq.mass_interval(-np.inf, -resolved)
        rows.append(
            {
                "tied": tied,
                "p": p,
                "q": q,
                "seed": pt.meta["seed"],
                "loss": g.loss,
                "loss_pi": loss_pi,
                "loss_star": loss_star,
                "reached": reached(g.loss, loss_pi, loss_star),
                "expected": expected_basin(p, q, tied),
                "grad_norm": g.norm,
                "negative_eigh": int(np.sum(h.eigenvalues < -tol)),
                "tolerance": tol,
                "resolved": resolved,
                "negative_eigh_resolved": int(np.sum(h.eigenvalues < -resolved)),
                "negative_slq": mass * slq.dim,
                "negative_slq_stderr": stderr * slq.dim,
                "negative_slq_low": low * slq.dim,  # with the quadrature's error (2 s.e.)
                "negative_slq_high": high * slq.dim,
                "smallest_eigenvalue": float(h.eigenvalues[0]),
                "largest_eigenvalue": float(h.eigenvalues[-1]),
            }
        )
    return rows, densities


def _trained(
    cfg: ml_collections.ConfigDict, progress: Progress, train: Train | None
) -> tuple[list[dict], list[estimates.SpectralDensity]]:
    """The trained points of both tyings (none when atlas.train_steps = 0 or without `train`)."""
    if not cfg.atlas.train_steps or train is None:
        return [], []
    tied_rows, tied_densities = _trained_rows(cfg, True, progress, train)
    untied_rows, untied_densities = _trained_rows(cfg, False, progress, train)
    return tied_rows + untied_rows, tied_densities + untied_densities


def _trained_claims(trained: list[dict]) -> list[records.Claim]:
    """Where training ends (the trap of Thm 2, notes §11.4) and SLQ against eigh there."""
    wrong = [r for r in trained if r["reached"] != r["expected"]]
    far = max(
        abs(r["loss"] - (r["loss_pi"] if r["expected"] == "unigram" else r["loss_star"]))
        / abs(r["loss_pi"] - r["loss_star"])
        for r in trained
    )
    slq_off = [
        r
        for r in trained
        if abs(r["negative_slq"] - r["negative_eigh_resolved"])
        > max(3 * r["negative_slq_stderr"], 0.05)
    ]
    p, q = trained[0]["p"], trained[0]["q"]
    ends = {
        tied: "L(theta_pi)" if expected_basin(p, q, tied) == "unigram" else "L(theta_star)"
        for tied in (True, False)
    }
    return [
        records.claim(
            f"the theory model trained at (p={p:g}, q={q:g}), {len(trained)} runs: tied ends at "
            f"{ends[True]}, untied at {ends[False]}",
            {
                "reached": [f"{_cell(r)} seed {r['seed']}: {r['reached']}" for r in trained],
                "largest |L - L(expected)| / (L(theta_pi) - L(theta_star))": far,
            },
            "every run within a quarter of the gap L(theta_pi) - L(theta_star) of its end",
            not wrong,
            "Thm 2, notes/markov.md §11.4, §12.7",
        ),
        records.claim(
            f"SLQ at the trained points: number of eigenvalues below -{SLQ_RESOLUTION:g} λ_max",
            [
                f"{r['negative_slq']:.2f} ± {r['negative_slq_stderr']:.2f} vs "
                f"{r['negative_eigh_resolved']} (below -tol: {r['negative_eigh']})"
                for r in trained
            ],
            "dense eigh's count, within 3 standard errors (or 0.05)",
            not slq_off,
            "notes/landscape_geometry.md §6",
            kind="sanity",
        ),
    ]


def _claims(
    hessians: list[dict],
    escapes: list[dict],
    paths: list[dict],
    density: tuple,
    trained: list[dict] | None = None,
) -> list[records.Claim]:
    """Thms 2-3 cell by cell, the closed-form alpha eigenvalues, the escape directions' second
    order, the Gauss-Newton split, the tied minima's barriers and SLQ's negative mass; and, with
    `trained` rows, where training ends and SLQ at the trained points."""
    wrong = [r for r in hessians if r["kind"] != r["expected"]]
    worst_alpha = max(r["alpha_error"] for r in hessians)
    worst_ratio = max((r["worst_ratio_error"] for r in escapes), default=0.0)
    saddles = [r for r in hessians if r["expected"] == results.Curvature.SADDLE.value]
    minima = [r for r in paths if r["tied"] and r["p"] + r["q"] > 1]
    slq, exact_negative, (p, q) = density
    mass, stderr = slq.mass(-np.inf, -1e-6)
    return [
        records.claim(
            f"theta_pi over the grid ({len(hessians)} cells, tied and untied): verdict",
            f"{len(hessians) - len(wrong)}/{len(hessians)} cells agree"
            + "".join(f"; {_cell(r)}: {r['kind']}" for r in wrong[:3]),
            "minimum where tied and p + q > 1, saddle elsewhere",
            not wrong,
            "Thms 2-3, notes/markov.md §6.5",
        ),
        records.claim(
            "theta_pi alpha-block eigenvalues at every cell",
            {"largest |error|": worst_alpha},
            "the closed forms, to 1e-10",
            worst_alpha < 1e-10,
            "notes/markov.md §6.5",
        ),
        records.claim(
            "escape directions at every saddle: L(θ + εv) - L(θ) = ε²λ/2 (ε = 1e-3)",
            {"largest |ratio - 1|": worst_ratio, "saddles": len(escapes)},
            f"every ratio within {_SECOND_ORDER_RTOL:g} of 1",
            len(escapes) == len(saddles) and worst_ratio < _SECOND_ORDER_RTOL,
            "notes/markov.md §6.5",
            kind="sanity",
        ),
        records.claim(
            "Gauss-Newton G at every cell: no negative eigenvalue; the saddles' lie in H - G",
            {
                "cells with G not PSD": sum(r["ggn_negative"] > 0 for r in hessians),
                "saddles with a negative eigenvalue of H - G": sum(
                    r["remainder_smallest"] < 0 for r in saddles
                ),
            },
            f"0 and {len(saddles)}",
            all(r["ggn_negative"] == 0 for r in hessians)
            and all(r["remainder_smallest"] < 0 for r in saddles),
            "notes/landscape_geometry.md §7",
            kind="sanity",
        ),
        records.claim(
            "straight path theta_pi -> theta_star at the tied minima: a barrier (the loss rises "
            "before it falls)",
            {"smallest barrier": min((r["barrier"] for r in minima), default=np.nan)},
            "> 0 at every tied cell with p + q > 1",
            bool(minima) and all(r["barrier"] > 0 for r in minima),
            "Thm 2, notes/landscape_geometry.md §1",
        ),
        records.claim(
            f"SLQ at untied theta_pi (p={p:g}, q={q:g}): number of negative eigenvalues",
            f"{mass * slq.dim:.3f} ± {stderr * slq.dim:.3f}",
            f"{exact_negative} (dense eigh)",
            abs(mass * slq.dim - exact_negative) <= max(3 * stderr * slq.dim, 0.05),
            "notes/landscape_geometry.md §6",
            kind="sanity",
        ),
    ] + (_trained_claims(trained) if trained else [])


def _cell(row: dict) -> str:
    return f"{'tied' if row['tied'] else 'untied'} (p={row['p']:g}, q={row['q']:g})"


def draw(cfg: ml_collections.ConfigDict, hessians: list[dict], paths: list[tuple]) -> Any:
    """Maps of the alpha block's smallest eigenvalue over (p, q), tied and untied, with the
    theorems' boundary p + q = 1 and each cell's verdict; a few paths to theta_star beside."""
    fig, axes = plotting.subplots(1, 3, width=4.0, height=3.4)
    for ax, tied in zip(axes[0][:2], (True, False), strict=True):
        rows = [r for r in hessians if r["tied"] == tied]
        values = np.array([r["alpha_smallest"] for r in rows])
        scale = float(np.max(np.abs(values))) or 1.0
        image = ax.scatter(
            [r["p"] for r in rows],
            [r["q"] for r in rows],
            c=values,
            cmap="coolwarm_r",
            vmin=-scale,
            vmax=scale,
            s=160,
        )
        for r in rows:
            mark = "o" if r["kind"] == results.Curvature.MINIMUM.value else "x"
            ax.scatter(r["p"], r["q"], marker=mark, color="black", s=30)
        ax.plot([0, 1], [1, 0], "k--", linewidth=1)
        ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="p", ylabel="q")
        ax.set_title(
            f"theta_pi {'tied' if tied else 'untied'}: smallest alpha eigenvalue", fontsize=9
        )
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    ax = axes[0][2]
    for row, result in _shown_paths(paths):
        ax.plot(result.ts, result.losses, label=f"{_cell(row)}, barrier {row['barrier']:.3g}")
    ax.set(xlabel="t (theta_pi -> theta_star)", ylabel="population loss")
    ax.set_title("straight paths", fontsize=9)
    ax.legend(fontsize=7)
    fig.suptitle("o: local minimum, x: saddle (measured); dashed: p + q = 1 (Thms 2-3)", fontsize=9)
    return fig


def _shown_paths(paths: list[tuple]) -> list[tuple]:
    """Two tied minima and two untied saddles (or what the grid has)."""
    minima = [pr for pr in paths if pr[0]["tied"] and pr[0]["p"] + pr[0]["q"] > 1]
    untied = [pr for pr in paths if not pr[0]["tied"]]
    return minima[:2] + untied[:2]


def draw_trained(trained: list[dict], densities: list[estimates.SpectralDensity]) -> Any:
    """The SLQ densities at the trained points, tied and untied side by side, seeds overlaid."""
    fig, axes = plotting.subplots(1, 2, width=4.5, height=3.2)
    for ax, tied in zip(axes[0], (True, False), strict=True):
        shown = [(r, d) for r, d in zip(trained, densities, strict=True) if r["tied"] == tied]
        for row, density in shown:
            probe_figures.density_figure(density, ax=ax)
            ax.lines[-1].set_label(f"seed {row['seed']}: {row['reached']}, L = {row['loss']:.4f}")
        row = shown[0][0]
        ax.set_title(
            f"trained, {'tied' if tied else 'untied'} (p={row['p']:g}, q={row['q']:g}): SLQ",
            fontsize=9,
        )
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def run_atlas(
    cfg: ml_collections.ConfigDict,
    workdir: records.Workdir,
    progress: Progress = print,
    train: Train | None = None,
) -> dict[str, Any]:
    """The atlas of `cfg.atlas`'s grid: tables (hessians, escapes, paths .csv), figures
    (atlas.png, density.png) and claims against Thms 2-3; with atlas.train_steps > 0 and the
    experiment's `train` also the trained points (trained.csv, density_trained.png, §11.4)."""
    hessians = _hessian_rows(cfg, True, progress) + _hessian_rows(cfg, False, progress)
    saddles = [r for r in hessians if r["kind"] == results.Curvature.SADDLE.value]
    escapes = _escape_rows(cfg, saddles)
    if progress:
        progress(f"atlas: escape directions at {len(saddles)} saddles; paths to theta_star")
    paths, path_results = _path_rows(cfg)
    density = _density(cfg)
    trained, trained_densities = _trained(cfg, progress, train)
    for name, rows in (("hessians", hessians), ("escapes", escapes), ("paths", paths)):
        workdir.save_table(name, rows)
    if trained:
        workdir.save_table("trained", trained)
    figures = [
        str(
            plotting.save(
                draw(cfg, hessians, list(zip(paths, path_results, strict=True))),
                workdir.figure_path("atlas"),
            )
        ),
        str(
            plotting.save(probe_figures.density_figure(density[0]), workdir.figure_path("density"))
        ),
    ]
    if trained:
        figure = draw_trained(trained, trained_densities)
        figures.append(str(plotting.save(figure, workdir.figure_path("density_trained"))))
    claims = _claims(hessians, escapes, paths, density, trained)
    return workdir.finish(claims, progress, figures=figures)


def run_landscape(
    cfg: ml_collections.ConfigDict, workdir: records.Workdir, progress: Progress = print
) -> dict[str, Any]:
    """Exact Hessians at theta_pi (tied and untied) and theta_star for each (p, q), against
    §6.5 (binary) and §6.8 (multi-state); the describe() reports go to hessians.txt."""
    ls = cfg.landscape
    claims, reports = [], []
    for p, q in ls.points:
        for tied in (True, False):
            point = points.theta_pi(p, q, d=ls.d, seq_len=ls.seq_len, tied=tied)
            H = curvature.hessian_at(point)
            reports.append(H.describe())
            focus = H.focus_report()
            assert focus is not None  # theta_pi names its focus blocks
            predicted = np.sort(point.meta["focus_prediction"])
            ok = np.allclose(focus.eigenvalues, predicted, atol=1e-10) and focus.outside < 1e-10
            kind, expected = H.kind(), expected_kind(p, q, tied)
            claims.append(
                records.claim(
                    f"theta_pi ({'tied' if tied else 'untied'}, p={p:g}, q={q:g}): alpha-block "
                    f"eigenvalues and verdict",
                    {
                        "alpha eigenvalues": np.round(focus.eigenvalues, 6).tolist(),
                        "verdict": kind.value,
                    },
                    {
                        "alpha eigenvalues": np.round(predicted, 6).tolist(),
                        "verdict": expected.value,
                    },
                    ok and kind is expected,
                    "Thms 2-3, notes §6.5",
                )
            )
        star = points.theta_star(p, q, d=ls.d, seq_len=ls.seq_len)
        g = gradient.gradient_at(star)
        claims.append(
            records.claim(
                f"theta_star (p={p:g}, q={q:g}): loss = entropy rate, gradient 0",
                {"loss - L*": star.loss() - star.meta["expected_loss"], "gradient norm": g.norm},
                "both < 1e-10",
                abs(star.loss() - star.meta["expected_loss"]) < 1e-10 and g.norm < 1e-10,
                "Thm 1, notes §6.1",
            )
        )
    for p in ls.multistate_p:
        point = points.theta_pi(
            p, d=2, seq_len=ls.multistate_seq_len, num_states=ls.multistate_states
        )
        H = curvature.hessian_at(point)
        reports.append(H.describe())
        focus = H.focus_report()
        assert focus is not None  # theta_pi names its focus blocks
        predicted = np.sort(point.meta["focus_prediction"])
        claims.append(
            records.claim(
                f"multi-state unigram point (S={ls.multistate_states}, p={p:g}): "
                "(b, E) eigenvalues (the notes' derivation)",
                np.round(focus.eigenvalues, 6).tolist(),
                np.round(predicted, 6).tolist(),
                np.allclose(focus.eigenvalues, predicted, atol=1e-10),
                "notes §6.8",
            )
        )
    workdir.write_text("hessians.txt", "\n\n".join(reports))
    return workdir.finish(claims, progress, where=" (Hessian reports in hessians.txt)")
