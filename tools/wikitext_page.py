"""The WikiText curvature page's tables (docs/studies/wikitext_curvature.md), written by
`python -m tools.pages wikitext_curvature WORKDIR` from the records of
`python -m experiments.scan_snap --config=configs/wikitext.py:curvature`."""

from __future__ import annotations

import json
import pathlib
from typing import Any

from tools.page_parts import Data, caption, ran_on, read_csv, tex

_WIKITEXT_BLOCKS = {  # curvature_study.BLOCKS, each with the parameters it holds
    "embedding": "the token embedding",
    "attention Q/K": "the query and key columns of the in-projection, weights and biases",
    "attention V/O": "its value columns and the output projection",
    "FFN": "both linear layers",
    "LayerNorm": "both LayerNorms' scales and biases",
    "decoder": "the untied output layer",
}
_WIKITEXT_PHASE = (
    "phase",
    "step",
    "entropy_layer0",
    "loss",
    "grad_norm",
    "tracked_lambda_max",
    "tracked_lambda_min",
    "top",
    "top_residuals",
    "top_scale",
    "top_hvps",
    "top_converged",
    "bottom",
    "bottom_residuals",
    "bottom_scale",
    "bottom_hvps",
    "bottom_converged",
    "lambda_max",
    "lambda_min",
    "negative_over_max",
    "num_negative",
)
_WIKITEXT_LISTS = ("top", "top_residuals", "bottom", "bottom_residuals")
_WIKITEXT_SHARES = ("top", "first", "negative")  # whose shares per block curvature_phases.csv has


def wikitext_extract(workdir: pathlib.Path) -> Data:
    """The blocks' sizes and the claims (summary.json); along training, every tracked step's
    tracked loss, gradient norm and λ (arrays.npz) with layer 0's entropy there and, at the kept
    steps, the gradient per block and the top Ritz values (curvature_along.csv); at each phase
    step its certified eigenpairs and their shares per block (curvature_phases.csv)."""
    import numpy as np  # only here: the other pages' data is CSV and JSON

    summary = json.loads((workdir / "summary.json").read_text())
    sizes = summary["findings"]["blocks' share of the parameters (a random direction's shares)"]
    kept = {r["step"]: r for r in read_csv(workdir / "curvature_along.csv")}
    with np.load(workdir / "arrays.npz") as arrays:
        tracked = arrays["tracked_steps"].tolist()
        metric = {k: arrays[f"metric_{k}"][0].tolist() for k in ("track_loss", "track_grad_norm")}
        metric.update({k: arrays[f"metric_{k}"][0].tolist() for k in ("lambda_max", "lambda_min")})
        entropy = dict(
            zip(
                arrays["snapshot_steps"].tolist(),
                arrays["snapshot_entropy_layer0"][0].tolist(),
                strict=True,
            )
        )
    along = []
    for step in sorted(set(tracked) | set(kept)):
        row: Data = {"step": step, "entropy": entropy.get(step)}
        at = tracked.index(step) if step in tracked else None
        for key, name in (
            ("loss", "track_loss"),
            ("grad_norm", "track_grad_norm"),
            ("lambda_max", "lambda_max"),
            ("lambda_min", "lambda_min"),
        ):
            row[key] = None if at is None else metric[name][at]
        k = kept.get(step, {})
        row["grad_qk"], row["grad_decoder"] = k.get("grad attention Q/K"), k.get("grad decoder")
        ritz = [k[f"ritz_{i}"] for i in range(1, 10) if k.get(f"ritz_{i}") is not None]
        row["ritz"], row["ritz_min"] = ritz or None, k.get("ritz_min")
        row["kept_loss"] = k.get("loss")  # the loss at a kept step, outside the run
        along.append(row)
    phases = []
    for r in read_csv(workdir / "curvature_phases.csv"):
        phase = {k: json.loads(r[k]) if k in _WIKITEXT_LISTS else r[k] for k in _WIKITEXT_PHASE}
        phase["shares"] = {
            which: {b: r[f"{which} {b}"] for b in _WIKITEXT_BLOCKS}
            for which in _WIKITEXT_SHARES
            if r.get(f"{which} decoder") is not None
        }
        phases.append(phase)
    claims = [
        {
            "claim": c["claim"],
            # a measurement's parts as [name, value] pairs, in the run's order (the data's
            # JSON sorts a dict's keys)
            "measured": [list(kv) for kv in c["measured"].items()]
            if isinstance(c["measured"], dict)
            else c["measured"],
            "named": isinstance(c["measured"], dict),
            "expected": c["expected"],
            "passed": c["passed"],
            "kind": c["kind"],
        }
        for c in summary["claims"] + summary["sanity_checks"]
    ]
    return {
        "blocks": sizes,
        "along": along,
        "phases": phases,
        "claims": claims,
        "ran_on": ran_on(workdir),
    }


def _minus(text: str) -> str:
    """A number's sign as a minus sign (−), as the page's prose writes it."""
    return text.replace("-", "\N{MINUS SIGN}")


def _fixed(value: float | None, digits: int) -> str:
    return "" if value is None else _minus(f"{value:.{digits}f}")


def _percent(share: float) -> str:
    """A share as a percentage: whole above 1%, one significant digit below it."""
    if share >= 0.01 or share == 0:
        return f"{100 * share:.0f}%"
    return f"{100 * share:.1g}%"


def wikitext_phases(data: Data) -> str:
    """Step 0 (its top Ritz values) and each phase step's certified eigenvalues."""
    lines = [
        "| step | phase | entropy | loss | $\\lambda_1, \\lambda_2, \\lambda_3$ | "
        "$\\lambda_{\\min}$ | $\\lambda_{\\min}/\\lambda_{\\max}$ |",
        "|---|---|---|---|---|---|---|",
    ]
    start = data["along"][0]
    if start["ritz"]:
        ritz = ", ".join(_fixed(v, 2) for v in start["ritz"])
        lines.append(
            f"| {start['step']} | | {_fixed(start['entropy'], 3)} | "
            f"{_fixed(start['kept_loss'], 3)} | {ritz} (Ritz) | "
            f"{_fixed(start['ritz_min'], 2)} (Ritz) | |"
        )
    for p in data["phases"]:
        lines.append(
            f"| {p['step']} | {p['phase']} | {_fixed(p['entropy_layer0'], 3)} | "
            f"{_fixed(p['loss'], 3)} | {', '.join(_fixed(v, 3) for v in p['top'])} | "
            f"{_fixed(p['lambda_min'], 3)} | {_fixed(p['negative_over_max'], 2)} |"
        )
    return "\n".join(lines)


def wikitext_along(data: Data) -> str:
    """Every tracked step: the entropy, the tracker's loss, gradient norm and λ; at the kept
    steps the query/key and decoder gradients, and the top Ritz values where taken."""
    lines = [
        "| step | entropy | loss | $\\lVert g\\rVert$ | tracked $\\lambda_{\\max}$ | "
        "tracked $\\lambda_{\\min}$ | $\\lVert g\\rVert$ on Q/K | on the decoder | "
        "top Ritz values |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in data["along"]:
        ritz = ", ".join(_fixed(v, 3) for v in r["ritz"]) if r["ritz"] else ""
        lines.append(
            f"| {r['step']} | {_fixed(r['entropy'], 3)} | {_fixed(r['loss'], 3)} | "
            f"{_fixed(r['grad_norm'], 3)} | {_fixed(r['lambda_max'], 3)} | "
            f"{_fixed(r['lambda_min'], 3)} | {_fixed(r['grad_qk'], 4)} | "
            f"{_fixed(r['grad_decoder'], 3)} | {ritz} |"
        )
    return "\n".join(lines)


def _share(size: float) -> str:
    """A block's share of D: 47.5%, 1.6%, 0.02%."""
    return f"{100 * size:.1f}%" if size >= 0.01 else f"{100 * size:.2f}%"


def wikitext_blocks(data: Data) -> str:
    lines = [
        "| block | parameters | share of $D$ (a random direction's share) |",
        "|---|---|---|",
    ]
    for block, holds in _WIKITEXT_BLOCKS.items():
        lines.append(f"| {block} | {holds} | {_share(data['blocks'][block])} |")
    return "\n".join(lines)


_WHICH = {
    "top": "the top {k}",
    "first": "the first",
    "negative": "the certified negative ({n})",
}


def wikitext_shares(data: Data) -> str:
    """Each phase's eigenvectors' shares per block: the top k together, the first, the
    certified negative ones together."""
    blocks = list(_WIKITEXT_BLOCKS)
    lines = [
        "| step | phase | eigenvectors | " + " | ".join(blocks) + " |",
        "|---|---|---|" + "---|" * len(blocks),
    ]
    lines.append(
        "| | | (share of $D$) | " + " | ".join(_share(data["blocks"][b]) for b in blocks) + " |"
    )
    for p in data["phases"]:
        for which in (w for w in _WIKITEXT_SHARES if w in p["shares"]):
            shares = p["shares"][which]
            label = _WHICH[which].format(k=len(p["top"]), n=p["num_negative"])
            lines.append(
                f"| {p['step']} | {p['phase']} | {label} | "
                + " | ".join(_percent(shares[b]) for b in blocks)
                + " |"
            )
    return "\n".join(lines)


def wikitext_certificates(data: Data) -> str:
    """Each eigenpairs call at the phase steps: its eigenvalues, their residuals over the
    spectral scale they were accepted at, the Hessian-vector products it took."""
    lines = [
        "| step | phase | eigenpairs | eigenvalues | $\\max\\lvert\\lambda\\rvert$ | "
        "residuals $/ \\max\\lvert\\lambda\\rvert$ | products | converged |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for p in data["phases"]:
        for which, name in (("top", "largest"), ("bottom", "smallest")):
            scale = p[f"{which}_scale"]
            residuals = ", ".join(f"${tex(v / scale, 2)}$" for v in p[f"{which}_residuals"])
            lines.append(
                f"| {p['step']} | {p['phase']} | {name} {len(p[which])} | "
                f"{', '.join(_fixed(v, 3) for v in p[which])} | {scale:.3f} | {residuals} | "
                f"{p[f'{which}_hvps']} | {'yes' if p[f'{which}_converged'] else 'no'} |"
            )
    return "\n".join(lines)


def _measured(value: Any, named: bool = False) -> str:
    """A claim's measurement in a table cell: numbers to 4 significant digits; `named`, a list
    of [name, value] pairs, each value after its name (a bare number naming a step)."""
    if named:
        return "; ".join(f"{'step ' * str(k).isdigit()}{k}: {_measured(v)}" for k, v in value)
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, (int, float)):
        return _minus(f"{value:.4g}")
    if isinstance(value, list):
        return ", ".join(_measured(v) for v in value)
    return str(value)


def _cell(text: str) -> str:
    """Text in a Markdown table's cell: its bars escaped (||Hv - λv||, max|λ|)."""
    return str(text).replace("|", "\\|")


_VERDICTS = {"paper": ("reproduced", "not reproduced"), "sanity": ("holds", "fails")}


def wikitext_claims(data: Data) -> str:
    """summary.json's claims (the paper's, then the run's checks): measured, expected, verdict."""
    lines = ["| | claim | measured | expected | verdict |", "|---|---|---|---|---|"]
    for c in data["claims"]:
        verdict = _VERDICTS[c["kind"]][0 if c["passed"] else 1]
        cells = (c["claim"], _measured(c["measured"], c["named"]), c["expected"])
        lines.append(
            f"| {'paper' if c['kind'] == 'paper' else 'check'} | "
            + " | ".join(_cell(t) for t in cells)
            + f" | {verdict} |"
        )
    return "\n".join(lines)


def wikitext_tables(data: Data) -> dict[str, str]:
    return {
        "wikitext blocks": wikitext_blocks(data) + caption(data, "summary.json"),
        "wikitext phases": wikitext_phases(data)
        + caption(data, "curvature_along.csv` and `curvature_phases.csv"),
        "wikitext along": wikitext_along(data)
        + caption(data, "arrays.npz` and `curvature_along.csv"),
        "wikitext shares": wikitext_shares(data) + caption(data, "curvature_phases.csv"),
        "wikitext certificates": wikitext_certificates(data)
        + caption(data, "curvature_phases.csv"),
        "wikitext claims": wikitext_claims(data) + caption(data, "summary.json"),
    }
