"""The n-gram curvature page's tables (docs/studies/ngrams_curvature.md), written by
`python -m tools.pages ngrams_curvature WORKDIR` from the records of
`python -m experiments.ngrams --config=configs/ngrams.py:curvature`."""

from __future__ import annotations

import json
import pathlib
from typing import Any

from tools.page_parts import Data, caption, ran_on, read_csv, tex

_NGRAMS_POINT = (
    "step",
    "k_next",
    "kind",
    "critical_distance",
    "grad_norm",
    "near_trusted",
    "near_flat_gradient",
    "near_cut",
    "lambda_min",
    "num_negative",
    "escape_ratios",
    "escape_epsilon",
    "ggn_min",
    "remainder_min",
    "loss",
    "plateau_level",
)
# summary.json's claims and checks of a point, by the words that name them
_NGRAMS_CHECKS = {
    "near_stationary": "near-stationary point",
    "saddle": "negative curvature",
    "ggn": "G is positive semi-definite",
    "loss": "population loss sits",
    "lanczos": "finds the dense",
}


def ngrams_extract(workdir: pathlib.Path) -> Data:
    """curvature_points.csv's columns the claims table shows, with summary.json's verdict of each
    claim and check at that point; overlaps.csv's projections and their chance levels."""
    summary = json.loads((workdir / "summary.json").read_text())
    checks = summary["claims"] + summary["sanity_checks"]
    points = []
    for row in read_csv(workdir / "curvature_points.csv"):
        point = {k: row[k] for k in _NGRAMS_POINT}
        point["escape_ratios"] = json.loads(row["escape_ratios"])
        at = [c for c in checks if f"step {row['step']}:" in c["claim"]]
        point["passed"] = {
            name: all(c["passed"] for c in at if words in c["claim"])
            for name, words in _NGRAMS_CHECKS.items()
        }
        lanczos = [c["measured"] for c in at if _NGRAMS_CHECKS["lanczos"] in c["claim"]]
        point["lanczos_lambda_min"] = lanczos[0]["lanczos"] if lanczos else None
        points.append(point)
    keep = ("step", "target", "basis", "k", "span", "random_span_mean", "random_span_std")
    overlaps = [{k: r[k] for k in keep} for r in read_csv(workdir / "overlaps.csv")]
    return {"points": points, "overlaps": overlaps, "ran_on": ran_on(workdir)}


def _verdict(passed: list[bool], yes: str, no: str) -> str:
    return yes if all(passed) else no if not any(passed) else "partly"


def _near(p: dict[str, Any]) -> str:
    if p["near_trusted"]:
        return (
            f"step {p['step']}: {p['kind']}, its critical point {p['critical_distance']:.3f} away"
        )
    share = p["near_flat_gradient"] / p["grad_norm"]
    return (
        f"step {p['step']}: the Newton step leaves {share:.0%} of $\\lVert g\\rVert$ in directions "
        f"flatter than the curvature changes over the step ($\\lvert\\lambda\\rvert \\le "
        f"{p['near_cut']:.2g}$)"
    )


def _saddle(p: dict[str, Any]) -> str:
    off = max(abs(r - 1) for r in p["escape_ratios"])
    return (
        f"step {p['step']}: $\\lambda_\\text{{min}} = {p['lambda_min']:.4f}$ ({p['num_negative']} "
        f"negative eigenvalues), every escape direction's ratio within ${tex(off, 1)}$ of 1 at "
        f"$\\varepsilon = {p['escape_epsilon']:g}$"
    )


def _lanczos(p: dict[str, Any]) -> str | None:
    if p["lanczos_lambda_min"] is None:
        return None
    return f"step {p['step']}: ${p['lanczos_lambda_min']:.6f}$ against ${p['lambda_min']:.6f}$"


# (claim, its key in a point's "passed", what each point measured, its verdicts: all, none)
_CLAIMS = (
    (
        "The plateau point is near-stationary (Thm 4.2; rule: notes/landscape_geometry.md §9)",
        "near_stationary",
        _near,
        ("reproduced", "not reproduced"),
    ),
    (
        "It is a saddle: negative curvature, confirmed at second order (notes/ngrams.md §4.6.4-5)",
        "saddle",
        _saddle,
        ("reproduced", "not reproduced"),
    ),
    (
        "$G \\succeq 0$, so all the negative curvature is in $R = H - G$ "
        "(notes/landscape_geometry.md §7; a check)",
        "ggn",
        lambda p: (
            f"step {p['step']}: $\\min \\mathrm{{eig}}\\, G = {tex(p['ggn_min'], 1)}$, "
            f"$\\min\\mathrm{{eig}}\\, R = {p['remainder_min']:.3f}$"
        ),
        ("holds", "fails"),
    ),
    (
        "The trained point's loss is the plateau's (a check)",
        "loss",
        lambda p: (
            f"step {p['step']}: {p['loss']:.3f} on the population against "
            f"{p['plateau_level']:.3f} on the test set"
        ),
        ("holds", "fails"),
    ),
    (
        "Lanczos finds the dense $\\lambda_\\text{min}$ (a check)",
        "lanczos",
        _lanczos,
        ("holds", "fails"),
    ),
)


def ngrams_claims(points: list[dict[str, Any]]) -> str:
    """The claims at the probed points: what was measured, and summary.json's verdict."""
    lines = ["| claim | measured | verdict |", "|---|---|---|"]
    for claim, key, measured, (yes, no) in _CLAIMS:
        shown = "; ".join(text for p in points if (text := measured(p)) is not None)
        verdict = _verdict([p["passed"][key] for p in points], yes, no)
        lines.append(f"| {claim} | {shown} | {verdict} |")
    return "\n".join(lines)


_TARGETS = {"next stage": "next stage", "to theta_star^(k+1)": "to $\\theta_*^{{{k}}}$"}
_BASES = {
    "escape directions": "escape directions",
    "negative eigenspace": "negative eigenspace",
    "gradient": "$-g$",
}


def ngrams_overlaps(data: Data) -> str:
    """Each target's projection on each subspace at each probed step, against random
    directions' (mean ± standard deviation, per step where they differ)."""
    steps = [p["step"] for p in data["points"]]
    k_next = data["points"][0]["k_next"]
    found = {(r["target"], r["basis"], r["step"]): r for r in data["overlaps"]}
    lines = [
        "| target | subspace ($k$) | " + " | ".join(f"step {s}" for s in steps) + " | chance |",
        "|---|---|" + "---|" * (len(steps) + 1),
    ]
    for target, label in _TARGETS.items():
        for basis, name in _BASES.items():
            rows = [found[(target, basis, s)] for s in steps if (target, basis, s) in found]
            if len(rows) < len(steps):  # a target the run did not reach (no step after the drop)
                continue
            ks = " / ".join(dict.fromkeys(str(r["k"]) for r in rows))
            chance = " / ".join(
                dict.fromkeys(
                    f"{r['random_span_mean']:.3f} ± {r['random_span_std']:.3f}" for r in rows
                )
            )
            lines.append(
                f"| {label.format(k=k_next)} | {name} ({ks}) | "
                + " | ".join(f"{r['span']:.3f}" for r in rows)
                + f" | {chance} |"
            )
    return "\n".join(lines)


def ngrams_tables(data: Data) -> dict[str, str]:
    return {
        "ngrams claims": ngrams_claims(data["points"])
        + caption(data, "curvature_points.csv` and `summary.json"),
        "ngrams overlaps": ngrams_overlaps(data) + caption(data, "overlaps.csv"),
    }
