"""The Markov curvature study (configs/markov.py:curvature, notes/markov.md §14): the plateau
points it picks, its config checks, and the study end to end at a tiny size."""

import csv
import json
import types

import numpy as np
import pytest

from configs import markov
from landscape.engine import records
from landscape.markov import curvature_study, experiment
from tests.refusals import assert_refused
from tools import markov_page


def _tiny():
    cfg = markov.get_config("curvature")
    cfg.num_seeds = 3
    cfg.model.update(seq_len=32, d=4)  # 2 of 3 GPT-2 seeds escape at 180-200 steps
    cfg.train.update(num_steps=200, eval_sequences=16, track_sequences=8)
    cfg.curvature.update(lead=20, random_directions=1, random_frames=20)
    cfg.variants[1]["curvature"] = {"probed_seeds": 1}
    return cfg


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """Both programs (GPT-2 under float16 autocast, the theory model), 3 seeds, N = 32, 200
    steps (~1 min on 2 cores, most of it compiling)."""
    path = tmp_path_factory.mktemp("markov_curvature")
    return experiment.run(_tiny(), records.Workdir(path), progress=None), path


@pytest.mark.slow
def test_the_study_writes_its_records_claims_and_findings(tiny_run):
    summary, path = tiny_run
    claims = {c["claim"] for c in summary["claims"]}
    assert claims == {
        "theory tied, float32: every seed stays at H(pi) (Thm 2's trap)",
        "theory tied, float32: the (b, e) block is positive definite at every plateau point",
        "theory tied, float32: no plateau point's near-stationary verdict is a saddle",
    }  # Thm 2 covers the tied theory model only: the GPT-2 program has findings, no claims
    assert len(summary["sanity_checks"]) == 3
    assert set(summary["findings"]) <= {"GPT-2 tied, float16 autocast", "theory tied, float32"}
    with open(path / "curvature_seeds.csv") as f:
        seeds = list(csv.DictReader(f))
    with open(path / "curvature_radii.csv") as f:
        radii = list(csv.DictReader(f))
    assert seeds and radii and (path / "figures" / "curvature_study.png").stat().st_size > 0
    for row in seeds:
        for key in ("loss", "grad_norm", "lambda_min", "lambda_max", "tracked_lambda_min"):
            assert np.isfinite(float(row[key])), (key, row)
        assert float(row["lambda_min"]) <= float(row["lambda_max"])
        assert row["status"] in ("trapped", "escaped", "leaving")
    for row in radii:  # a radius is positive, or empty (inf) where the line never falls by it
        values = [float(row[k] or "inf") for k in row if k.startswith("radius_")]
        assert all(v > 0 for v in values) and np.isfinite(float(row["drop"]))
    with open(path / "summary.json") as f:
        assert json.load(f)["seconds"]["total"] > 0


def _cells(line):
    return [c.strip().strip("$") for c in line.strip().strip("|").split("|")]


@pytest.mark.slow
def test_the_page_tables_are_the_records_numbers(tiny_run):
    """tools.pages from the tiny run's records: each row of the page's tables, read back
    from the Markdown, is a seed of curvature_seeds.csv to the digits the table prints."""
    _, path = tiny_run
    with open(path / "curvature_seeds.csv") as f:
        seeds = {(row["cell"], int(row["seed"])): row for row in csv.DictReader(f)}
    tables = markov_page.markov_tables(markov_page.markov_extract(path))
    for name, cell in (
        ("markov seeds", "GPT-2 tied, float16 autocast"),
        ("markov theory", "theory tied, float32"),
    ):
        lines = _rows(tables[name])
        assert tables[name].splitlines()[-1] == "*From the run's `curvature_seeds.csv`.*"
        assert len(lines) == sum(c == cell for c, _ in seeds), name
        for line in lines:
            cells = _cells(line)
            row = seeds[(cell, int(cells[0]))]
            escaped = f"escapes at {row['escape_step']}"
            assert cells[1] == (escaped if row["status"] == "escaped" else row["status"])
            assert int(cells[2]) == int(row["plateau_step"]) and cells[-1] == row["kind"]
            assert abs(float(cells[3]) - float(row["lambda_min"])) <= 0.5e-4
            assert abs(float(cells[-2]) - float(row["grad_norm"])) <= 0.5e-3
            if name == "markov seeds":
                assert abs(float(cells[4]) - float(row["tracked_lambda_min"])) <= 0.5e-4
                assert int(cells[5]) == int(row["resolved_negative"])
            else:
                assert abs(float(cells[4]) - float(row["alpha_lambda_min"])) <= 0.5e-4


def _group(test_loss, escape_steps, kept):
    """A stand-in for experiment.train_group's result: snapshots every 10 steps."""
    steps = np.arange(0, 10 * len(test_loss[0]), 10)
    result = types.SimpleNamespace(
        snapshot_steps=steps,
        snapshots={"test_loss": np.asarray(test_loss)},
        params_steps=np.asarray(kept),
        hparams={"chain.p": np.array([0.5, 0.5]), "chain.q": np.array([0.8, 0.8])},
    )
    rows = [{"escape_step": s} for s in escape_steps]
    return {"result": result}, rows


def test_plateau_steps_lead_the_escape_and_pair_the_trapped_with_the_escaped():
    """H(0.5, 0.8) = 0.6663: an escaped seed's latest kept plateau step at least `lead` before
    its escape; a trapped seed's kept plateau step nearest the escaped seeds' median."""
    h = 0.6663
    escaped = [0.70] + [h] * 9 + [0.64, 0.62]  # escapes at 100
    trapped = [0.70] + [h] * 11
    group, rows = _group([escaped, trapped], [100, None], kept=range(0, 120, 20))
    assert curvature_study.plateau_steps(group, rows, lead=50) == [40, 40]
    # an escape too early for the lead: its latest plateau step before the escape
    assert curvature_study.plateau_steps(group, rows, lead=95) == [80, 80]


def test_the_study_needs_kept_parameters_and_tracking():
    cfg = markov.get_config("curvature")
    assert_refused(experiment.validate, cfg, {"train.params_every": 0}, "train.params_every")
    assert_refused(experiment.validate, cfg, {"claims": "fig3"}, "claims")


def _rows(table):
    """A generated table's rows: past its header, before the caption under it."""
    return [line for line in table.splitlines()[2:] if line.startswith("|")]
