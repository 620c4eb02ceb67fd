"""The recall curvature page's tables (docs/studies/recall_curvature.md), written by
`python -m tools.pages recall_curvature WORKDIR` from the records of
`python -m experiments.recall --config=configs/recall.py:curvature`."""

from __future__ import annotations

import json
import pathlib
from typing import Any

from tools.page_parts import Data, caption, ran_on, read_csv, tex

_RECALL_KEEP = (
    "plateau",
    "level",
    "time",
    "index",
    "resolved_index",
    "predicted_index",
    "negative",
    "eigen_error",
    "lambda_max",
)


def recall_extract(workdir: pathlib.Path) -> Data:
    """recall_plateaus.csv's gradient-flow rows, the columns the table shows."""
    rows = [
        r for r in read_csv(workdir / "recall_plateaus.csv") if r["trajectory"] == "gradient flow"
    ]
    return {
        "flow": [
            {k: json.loads(r[k]) if k == "negative" else r[k] for k in _RECALL_KEEP} for r in rows
        ],
        "ran_on": ran_on(workdir),
    }


def _recall_negatives(row: dict[str, Any]) -> str:
    """The negative eigenvalues, in units of 10^-4 (3 significant digits) where resolved; an
    unresolved one as a power of ten and its share of max |λ|."""
    values = row["negative"]
    if not values:
        return "none"
    if row["resolved_index"]:
        return "$" + ", ".join(f"{v / 1e-4:.3g}" for v in values) + "\\times10^{-4}$"
    shares = ", ".join(f"${tex(abs(v) / row['lambda_max'], 1)}\\max|\\lambda|$" for v in values)
    return "$" + ", ".join(tex(v) for v in values) + f"$ ({shares})"


def recall_tables(data: Data) -> dict[str, str]:
    """The gradient flow at each plateau's middle: index against the theory's, eigenvalues."""
    lines = [
        "| plateau (gradient flow) | $\\tau$ at its middle | index | theory | negative eigenvalues "
        "| theory's, largest error |",
        "|---|---|---|---|---|---|",
    ]
    for r in data["flow"]:
        index = str(r["index"])
        if r["resolved_index"] != r["index"]:
            index += f" (resolved {r['resolved_index']})"
        error = f"{100 * r['eigen_error']:.2f} %" if r["eigen_error"] is not None else ""
        lines.append(
            f"| $L_{r['plateau']}={r['level']:.3g}$ | {r['time']:.1f} | {index} | "
            f"{r['predicted_index']} | {_recall_negatives(r)} | {error} |"
        )
    return {"recall plateaus": "\n".join(lines) + caption(data, "recall_plateaus.csv")}
