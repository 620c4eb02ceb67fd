"""The study pages' tables, written from their runs' records so that a page cannot go stale:

    python -m experiments.pages markov_curvature runs/markov_curvature   # after the page's run
    python -m experiments.pages                  # every page's tables again, from its stored data
    python -m experiments.pages --check          # exit 1 where a page differs from its data

A page's generated tables sit between `<!-- table NAME: start -->` and `<!-- table NAME: end -->`.
From a run's workdir, a page's `extract` keeps the numbers its tables show in
docs/studies/data/<page>.json (a few KB, committed); its `tables` writes the Markdown from that
data alone (WikiText's: experiments/wikitext_page.py); tests/experiments/test_pages.py checks it.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys
from collections.abc import Callable
from typing import Any

from experiments.page_parts import Data, caption, ran_on, read_csv, tex
from experiments.wikitext_page import wikitext_extract, wikitext_tables

ROOT = pathlib.Path(__file__).resolve().parent.parent
STUDIES = ROOT / "docs" / "studies"


@dataclasses.dataclass(frozen=True)
class Page:
    """A study page: the command of its run, what it keeps of the records, its tables."""

    command: str
    extract: Callable[[pathlib.Path], Data]  # workdir -> the numbers the tables show
    tables: Callable[[Data], dict[str, str]]  # data -> {marker name: Markdown table}

    def path(self, name: str) -> pathlib.Path:
        return STUDIES / f"{name}.md"


def markers(name: str) -> tuple[str, str]:
    return f"<!-- table {name}: start -->", f"<!-- table {name}: end -->"


def between(text: str, name: str) -> str | None:
    """The text between a table's markers (None without them)."""
    start, end = markers(name)
    at, until = text.find(start), text.find(end)
    if at < 0 or until < at:
        return None
    return text[at + len(start) : until].strip("\n")


def replace(text: str, name: str, table: str) -> str:
    """`text` with `table` between its markers; a page without them is one sentence."""
    if between(text, name) is None:
        start, end = markers(name)
        raise ValueError(f"the page has no {start} ... {end} markers around its table {name!r}.")
    start, end = markers(name)
    at, until = text.find(start), text.find(end)
    return text[: at + len(start)] + "\n" + table.strip("\n") + "\n" + text[until:]


def page_text(name: str, data: Data, text: str) -> str:
    """A page's text with every table written from `data`."""
    for table, markdown in PAGES[name].tables(data).items():
        text = replace(text, table, markdown)
    return text


def data_path(name: str) -> pathlib.Path:
    return STUDIES / "data" / f"{name}.json"


def stored(name: str) -> Data:
    data: Data = json.loads(data_path(name).read_text())
    return data


# ----------------------------------------------------------------------------- Markov


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


def markov_tables(data: Data) -> dict[str, str]:
    """The GPT-2 seeds at their plateau points, and the theory model's."""
    gpt = [
        "| seed | status | plateau step | $\\lambda_{\\min}$ (dense) | tracked $\\lambda_{\\min}$ "
        "| negative below $10^{-4}\\lambda_{\\max}$ | $\\lVert g\\rVert$ | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in _ordered([r for r in data["seeds"] if r["cell"] == _MARKOV_CELL]):
        gpt.append(
            f"| {r['seed']} | {_status(r)} | {r['plateau_step']} | ${r['lambda_min']:.4f}$ | "
            f"${r['tracked_lambda_min']:.4f}$ | {r['resolved_negative']} | "
            f"{r['grad_norm']:.3f} | {r['kind']} |"
        )
    theory = [
        "| seed | status | plateau step | $\\lambda_{\\min}$ | $(b, e)$ block's smallest "
        "eigenvalue | $\\lVert g\\rVert$ | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in _ordered([r for r in data["seeds"] if r["cell"] == _MARKOV_THEORY]):
        theory.append(
            f"| {r['seed']} | {_status(r)} | {r['plateau_step']} | ${r['lambda_min']:.4f}$ | "
            f"${r['alpha_lambda_min']:.4f}$ | {r['grad_norm']:.3f} | {r['kind']} |"
        )
    source = caption(data, "curvature_seeds.csv")
    return {"markov seeds": "\n".join(gpt) + source, "markov theory": "\n".join(theory) + source}


# ----------------------------------------------------------------------------- recall


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


# ----------------------------------------------------------------------------- n-grams


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


def ngrams_claims(points: list[dict[str, Any]]) -> str:
    """The claims at the probed points: what was measured, and summary.json's verdict."""
    rows = [
        (
            "The plateau point is near-stationary (Thm 4.2; rule: notes/landscape_geometry.md §9)",
            "; ".join(_near(p) for p in points),
            _verdict(
                [p["passed"]["near_stationary"] for p in points], "reproduced", "not reproduced"
            ),
        ),
        (
            "It is a saddle: negative curvature, confirmed at second order "
            "(notes/ngrams.md §4.6.4-5)",
            "; ".join(_saddle(p) for p in points),
            _verdict([p["passed"]["saddle"] for p in points], "reproduced", "not reproduced"),
        ),
        (
            "$G \\succeq 0$, so all the negative curvature is in $R = H - G$ "
            "(notes/landscape_geometry.md §7; a check)",
            "; ".join(
                f"step {p['step']}: $\\min \\mathrm{{eig}}\\, G = {tex(p['ggn_min'], 1)}$, "
                f"$\\min\\mathrm{{eig}}\\, R = {p['remainder_min']:.3f}$"
                for p in points
            ),
            _verdict([p["passed"]["ggn"] for p in points], "holds", "fails"),
        ),
        (
            "The trained point's loss is the plateau's (a check)",
            "; ".join(
                f"step {p['step']}: {p['loss']:.3f} on the population against "
                f"{p['plateau_level']:.3f} on the test set"
                for p in points
            ),
            _verdict([p["passed"]["loss"] for p in points], "holds", "fails"),
        ),
        (
            "Lanczos finds the dense $\\lambda_\\text{min}$ (a check)",
            "; ".join(
                f"step {p['step']}: ${p['lanczos_lambda_min']:.6f}$ against ${p['lambda_min']:.6f}$"
                for p in points
                if p["lanczos_lambda_min"] is not None
            ),
            _verdict([p["passed"]["lanczos"] for p in points], "holds", "fails"),
        ),
    ]
    lines = ["| claim | measured | verdict |", "|---|---|---|"]
    return "\n".join(lines + [f"| {c} | {m} | {v} |" for c, m, v in rows])


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


PAGES: dict[str, Page] = {
    "markov_curvature": Page(
        "python -m experiments.markov --config=configs/markov.py:curvature",
        markov_extract,
        markov_tables,
    ),
    "ngrams_curvature": Page(
        "python -m experiments.ngrams --config=configs/ngrams.py:curvature",
        ngrams_extract,
        ngrams_tables,
    ),
    "recall_curvature": Page(
        "python -m experiments.recall --config=configs/recall.py:curvature",
        recall_extract,
        recall_tables,
    ),
    "wikitext_curvature": Page(
        "python -m experiments.scan_snap --config=configs/wikitext.py:curvature",
        wikitext_extract,
        wikitext_tables,
    ),
}


# ----------------------------------------------------------------------------- the command


def write(name: str, workdir: pathlib.Path | None = None) -> pathlib.Path:
    """Keep `workdir`'s data for page `name` (None: the stored data), then write its tables."""
    page = PAGES[name]
    if workdir is not None:
        data_path(name).parent.mkdir(parents=True, exist_ok=True)
        data = page.extract(workdir)
        data_path(name).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    path = page.path(name)
    path.write_text(page_text(name, stored(name), path.read_text()))
    return path


def stale() -> list[str]:
    """The pages whose tables are not what their stored data gives."""
    return [
        name
        for name, page in PAGES.items()
        if page_text(name, stored(name), page.path(name).read_text()) != page.path(name).read_text()
    ]


def main(argv: list[str]) -> int:
    args = argv[1:]
    if args == ["--check"]:
        names = stale()
        for name in names:
            print(f"docs/studies/{name}.md: its tables differ from docs/studies/data/{name}.json")
        return 1 if names else 0
    if len(args) not in (0, 2) or (args and args[0] not in PAGES):
        print(
            "usage: python -m experiments.pages [PAGE WORKDIR | --check]; the pages: "
            + ", ".join(PAGES),
            file=sys.stderr,
        )
        return 2
    if args and not (pathlib.Path(args[1]) / "summary.json").is_file():
        print(f"{args[1]} holds no finished run (no summary.json).", file=sys.stderr)
        return 2
    names = [args[0]] if args else list(PAGES)
    for name in names:
        try:
            path = write(name, pathlib.Path(args[1]) if args else None)
        except ValueError as error:
            print(f"docs/studies/{name}.md: {error}", file=sys.stderr)
            return 1
        print(f"docs/studies/{path.name}: tables written")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
