"""The edge-of-stability page's tables (docs/studies/edge_of_stability.md), written by
`python -m tools.pages edge_of_stability runs/eos` from the four papers' runs of
`python -m experiments.<paper> --config=configs/<config>.py:eos --workdir=runs/eos/<paper>`."""

from __future__ import annotations

import json
import pathlib
import statistics
from typing import Any

from tools.page_parts import Data, ran_on, read_csv

PAPERS = ("scan_snap", "markov", "ngrams", "recall")
TITLES = {"scan_snap": "Scan & Snap", "markov": "Markov", "ngrams": "n-grams", "recall": "recall"}
_KEEP = (
    *("optimizer", "lr", "seed", "initial_ratio", "reach_step", "max_ratio", "hover_ratio"),
    *("rises_before", "rises_after", "loss_at_reach", "final_loss", "nonfinite_step"),
)


def _complete(run: pathlib.Path) -> bool:
    """Whether `run` holds a complete run (its summary.json says so; a run still going says
    "running")."""
    summary = run / "summary.json"
    return summary.is_file() and json.loads(summary.read_text()).get("status") == "complete"


def eos_finished(workdir: pathlib.Path) -> bool:
    """Whether `workdir` holds at least one paper's complete run (PAPER/summary.json)."""
    return any(_complete(workdir / paper) for paper in PAPERS)


def eos_extract(workdir: pathlib.Path) -> Data:
    """Per paper with a complete run: eos_runs.csv's rows (the columns the tables show, and the
    phases), the claims with their verdicts, the run's seconds and where it ran."""
    out: Data = {}
    for paper in PAPERS:
        run = workdir / paper
        if not _complete(run):
            continue
        summary = json.loads((run / "summary.json").read_text())
        rows = read_csv(run / "eos_runs.csv")
        out[paper] = {
            "rows": [
                {k: v for k, v in r.items() if k in _KEEP or k.startswith("phase ")} for r in rows
            ],
            "claims": [
                {k: c[k] for k in ("claim", "measured", "verdict")} for c in summary["claims"]
            ],
            "seconds": summary.get("seconds", {}),
            "ran_on": ran_on(run),
        }
    return out


def _median(values: list[Any], step: bool = False) -> str:
    """The median of the values given (None left out), a step as a whole number; — if none."""
    present = [v for v in values if v is not None]
    if not present:
        return "—"
    middle = statistics.median(present)
    return f"{middle:.0f}" if step else f"{middle:.3g}"


def _runs_table(data: Data) -> str:
    lines = [
        "| paper | optimizer | η | reach λ_max ≥ 0.9 thr. | step (median) | λ/thr. at 0 "
        "| max λ/thr. | λ/thr. after | loss rises before / after | phases (median step) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for paper, part in _ordered(data):
        groups: dict[tuple[str, float], list[dict[str, Any]]] = {}
        for r in part["rows"]:
            groups.setdefault((r["optimizer"], r["lr"]), []).append(r)
        for (optimizer, lr), rs in groups.items():
            reached = [r for r in rs if r["reach_step"] is not None]
            phases = sorted(k for k in rs[0] if k.startswith("phase "))
            shown = ", ".join(f"{k[len('phase ') :]} {_median([r[k] for r in rs])}" for k in phases)
            rises = (
                f"{_median([r['rises_before'] for r in rs])} / "
                f"{_median([r['rises_after'] for r in rs])}"
            )
            lines.append(
                f"| {TITLES[paper]} | {'GD' if optimizer == 'gd' else 'Adam'} | {lr:g} | "
                f"{len(reached)}/{len(rs)} | {_median([r['reach_step'] for r in rs], step=True)} | "
                f"{_median([r['initial_ratio'] for r in rs])} | "
                f"{_median([r['max_ratio'] for r in rs])} | "
                f"{_median([r['hover_ratio'] for r in rs])} | {rises} | {shown or '—'} |"
            )
    return "\n".join(lines) + _caption(data, "eos_runs.csv")


def _claims_table(data: Data) -> str:
    lines = ["| paper | claim | measured | verdict |", "|---|---|---|---|"]
    for paper, part in _ordered(data):
        for c in part["claims"]:
            measured = json.dumps(c["measured"], ensure_ascii=False).replace("|", "/")
            lines.append(f"| {TITLES[paper]} | {c['claim']} | `{measured}` | {c['verdict']} |")
    return "\n".join(lines) + _caption(data, "summary.json")


def _ordered(data: Data) -> list[tuple[str, Data]]:
    """The papers' data in the order of PAPERS."""
    return [(paper, data[paper]) for paper in PAPERS if paper in data]


def _caption(data: Data, table: str) -> str:
    where = []
    for paper, part in _ordered(data):
        count, backend = part["ran_on"]["device_count"], part["ran_on"]["backend"]
        seconds = sum(part["seconds"].values()) if part["seconds"] else 0
        devices = f", {count} {backend} device{'s' * (count != 1)}" if count else ""
        where.append(f"{TITLES[paper]} ({seconds:.0f} s compile and run{devices})")
    return f"\n\n*From each run's `{table}`: " + "; ".join(where) + ".*"


def eos_tables(data: Data) -> dict[str, str]:
    """The runs by paper, optimizer and step size, and the claims with their verdicts."""
    if not data:
        empty = "*No run recorded yet: the page's command writes these tables.*"
        return {"eos runs": empty, "eos claims": empty}
    return {"eos runs": _runs_table(data), "eos claims": _claims_table(data)}
