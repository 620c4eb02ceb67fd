"""The Markov page's trap table at 50 seeds a cell (docs/papers/markov.md), written by
`python -m tools.pages markov_trap WORKDIR` from the records of
`python -m experiments.markov --config=configs/markov.py:trap_gpu` (trap_cells.csv, trap_runs.csv
and the claims in summary.json; landscape/markov/trap_study.py)."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import numpy as np
import scipy.stats  # type: ignore[import-untyped]  # no stubs installed

from tools.page_parts import Data, caption, ran_on, read_csv


def trap_extract(workdir: pathlib.Path) -> Data:
    """Per (depth, precision) cell: the trapped count, its Wilson interval and the escape steps;
    the run's paper claims with their verdicts."""
    runs = read_csv(workdir / "trap_runs.csv")
    cells = []
    for cell in read_csv(workdir / "trap_cells.csv"):
        steps = [
            r["escape_step"]
            for r in runs
            if (r["layers"], r["precision"]) == (cell["layers"], cell["precision"])
            and r["escape_step"] is not None
        ]
        cells.append({**cell, "escape_steps": sorted(steps)})
    summary = json.loads((workdir / "summary.json").read_text())
    claims = [
        {"claim": c["claim"], "expected": c["expected"], "verdict": c["verdict"]}
        for c in summary.get("claims", [])
    ]
    return {"cells": cells, "claims": claims, "ran_on": ran_on(workdir)}


def _cell(cell: dict[str, Any]) -> str:
    low, high = cell["wilson_low"], cell["wilson_high"]
    trapped = f"{cell['trapped']}/{cell['runs']} trapped [{low:.2f}, {high:.2f}]"
    steps = cell["escape_steps"]
    if not steps:
        return f"{trapped}; none escape"
    q25, q50, q75 = np.percentile(steps, [25, 50, 75])
    return (
        f"{trapped}; {len(steps)} escape, step {q50:.0f} "
        f"(quartiles {q25:.0f}-{q75:.0f}, range {steps[0]}-{steps[-1]})"
    )


def _contrast(shallow: dict[str, Any] | None, deep: dict[str, Any] | None) -> str:
    """Whether the shallower model is trapped more often than the deeper, as a p-value."""
    if shallow is None or deep is None:
        return ""
    table = [[c["trapped"], c["runs"] - c["trapped"]] for c in (shallow, deep)]
    return f"p = {scipy.stats.fisher_exact(table).pvalue:.2g}"


def trap_tables(data: Data) -> dict[str, str]:
    """The cells (depth x precision) and the claims against the paper's Fig. 1."""
    by = {(c["layers"], c["precision"]): c for c in data["cells"]}
    depths = sorted({layers for layers, _ in by})
    present = list(dict.fromkeys(c["precision"] for c in data["cells"]))
    header = "| depth | " + " | ".join(present) + " |\n|---|" + "---|" * len(present)
    lines = [
        f"| {d} layer{'s' * (d > 1)} | "
        + " | ".join(_cell(by[d, p]) if (d, p) in by else "" for p in present)
        + " |"
        for d in depths
    ]
    if len(depths) > 1:
        lines.append(
            f"| {depths[0]} against {depths[1]} layers: Fisher's exact test, two-sided | "
            + " | ".join(_contrast(by.get((depths[0], p)), by.get((depths[1], p))) for p in present)
            + " |"
        )
    cells = header + "\n" + "\n".join(lines) + caption(data, "trap_cells.csv, trap_runs.csv")
    claims = "| claim | expected | verdict |\n|---|---|---|\n" + "\n".join(
        f"| {c['claim']} | {c['expected']} | **{c['verdict']}** |" for c in data["claims"]
    )
    return {"trap_cells": cells, "trap_claims": claims + caption(data, "summary.json")}
