"""The Markov curvature page's tables (docs/studies/markov_curvature.md), written by
`python -m tools.pages markov_curvature WORKDIR` from the records of
`python -m experiments.markov --config=configs/markov.py:curvature`."""

from __future__ import annotations

import pathlib
from typing import Any

from tools.page_parts import Data, caption, ran_on, read_csv

_MARKOV_CELL = "GPT-2 tied, float16 autocast"
_MARKOV_THEORY = "theory tied, float32"
_MARKOV_KEEP = (
    "cell",
    "seed",
    "status",
    "escape_step",
    "plateau_step",
    "kind",
    "lambda_min",
    "tracked_lambda_min",
    "lambda_max",
    "resolved_negative",
    "grad_norm",
    "alpha_lambda_min",
)


def markov_extract(workdir: pathlib.Path) -> Data:
    """curvature_seeds.csv's rows, the columns the tables show."""
    rows = read_csv(workdir / "curvature_seeds.csv")
    seeds = [{k: row.get(k) for k in _MARKOV_KEEP} for row in rows]
    return {"seeds": seeds, "ran_on": ran_on(workdir)}


def _status(row: dict[str, Any]) -> str:
    if row["status"] == "escaped":
        return f"escapes at {row['escape_step']}"
    return str(row["status"])


def _ordered(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The trapped seeds, then the leaving, then the escaped, each by seed."""
    rank = {"trapped": 0, "leaving": 1, "escaped": 2}
    return sorted(rows, key=lambda r: (rank.get(r["status"], 3), r["seed"]))


def _seed_rows(data: Data, cell: str, middle: str) -> list[str]:
    """One table row per seed of `cell`: seed, status, plateau step, λ_min, `middle`'s columns
    (a format of the row), ‖g‖ and the verdict."""
    return [
        f"| {r['seed']} | {_status(r)} | {r['plateau_step']} | ${r['lambda_min']:.4f}$ | "
        + middle.format(**r)
        + f" | {r['grad_norm']:.3f} | {r['kind']} |"
        for r in _ordered([r for r in data["seeds"] if r["cell"] == cell])
    ]


def markov_tables(data: Data) -> dict[str, str]:
    """The GPT-2 seeds at their plateau points, and the theory model's."""
    gpt = [
        "| seed | status | plateau step | $\\lambda_{\\min}$ (dense) | tracked $\\lambda_{\\min}$ "
        "| negative below $10^{-4}\\lambda_{\\max}$ | $\\lVert g\\rVert$ | verdict |",
        "|---|---|---|---|---|---|---|---|",
        *_seed_rows(data, _MARKOV_CELL, "${tracked_lambda_min:.4f}$ | {resolved_negative}"),
    ]
    theory = [
        "| seed | status | plateau step | $\\lambda_{\\min}$ | $(b, e)$ block's smallest "
        "eigenvalue | $\\lVert g\\rVert$ | verdict |",
        "|---|---|---|---|---|---|---|",
        *_seed_rows(data, _MARKOV_THEORY, "${alpha_lambda_min:.4f}$"),
    ]
    source = caption(data, "curvature_seeds.csv")
    return {"markov seeds": "\n".join(gpt) + source, "markov theory": "\n".join(theory) + source}
