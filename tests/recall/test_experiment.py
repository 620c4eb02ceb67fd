"""Recall experiments E1-E6 end to end, as `python -m experiments.recall` runs them."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from configs import recall
from landscape.engine import records
from landscape.recall import experiment
from tests.arrays import load_npz
from tests.refusals import assert_refused

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(cfg, tmp_path):
    summary = experiment.run(cfg, records.Workdir(tmp_path), progress=None)
    failed = [c for c in summary["claims"] if c["verdict"] != "reproduced"]
    return summary, failed


@pytest.mark.parametrize(
    "variant, num_claims",
    [
        ("first_jump", 6),
        ("ei_tail", 2),
        ("later_jumps", 6),
        pytest.param("stages", 16, marks=pytest.mark.slow),  # 20 s each: the CI budget
        pytest.param("dp_vs_ce", 6, marks=pytest.mark.slow),
        pytest.param("ablations", 4, marks=pytest.mark.slow),
    ],
)
def test_every_claim_of_each_experiment(variant, num_claims, tmp_path):
    summary, failed = run(recall.get_config(variant), tmp_path)
    assert not failed, failed
    assert summary["total"] == num_claims
    # the run's own checks (1^T w^h conserved under SGD: one per SGD program) are counted apart
    assert summary["sanity_passed"] == len(summary["sanity_checks"]), summary["sanity_checks"]


def test_fig1_records_and_numbers(tmp_path):
    cfg = recall.get_config("fig1")
    cfg.num_seeds = 2
    summary, failed = run(cfg, tmp_path)
    assert not failed and summary["total"] == 3, failed
    assert summary["sanity_passed"] == len(summary["sanity_checks"]) == 1
    arrays = load_npz(tmp_path / "arrays.npz")
    beta = arrays["snapshot_beta"][:, -1]  # (seeds, heads)
    assert np.all(beta[:, :3] > 4.0) and np.all(
        np.abs(beta[:, 3]) < 0.01
    )  # notes: (5.1, 7.1, 8.1, .003)
    attention = arrays["snapshot_attention"][0, -1]
    assert np.all(np.diag(attention)[:3] > 0.95)  # heads 1-3 on their own offset
    np.testing.assert_allclose(attention[3], 0.25, atol=1e-3)  # head 4 unused: uniform
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * 301 and "eval_loss" in rows[-1]
    for name in ("fig1_loss_beta0", "fig1_attention0"):
        assert (tmp_path / "figures" / f"{name}.png").exists()


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("task.k", 1, r"config.task.k = 1: must be an integer in \[2, 6\]"),
        ("task.num_responses", 1, r"config.task.num_responses = 1: must be an integer >= 2"),
        ("init.eps", 0.0, r"config.init.eps = 0.0: must be a number > 0"),
        ("model.num_heads", 2, r"config.model.num_heads = 2: must be k - 1 or k \(task.k = 4\)"),
        ("optim.lr", -1.0, r"config.optim.lr = -1.0: must be a number > 0"),
        (
            "model.dtype",
            "half",
            r"config.model.dtype = 'half': must be one of '', 'float32', "
            r"'float64', 'bfloat16', 'float16'",
        ),
    ],
)
def test_bad_input_gets_one_clear_sentence(field, value, message):
    assert_refused(experiment.validate, recall.get_config("fig1"), {field: value}, message)


def test_bad_sweeps_and_model_choices():
    for variant, changes, message in [
        (
            "stages",
            {"sweep": {"init": {"beta_shape": [[1.0, 0.5]]}}},
            "must be a list of 4 numbers",
        ),
        ("first_jump", {"model.window": False}, "gradient flow runs on the closed-form"),
        ("fig1", {"variants": [{"model": {"num_heads": 5}}]}, "model.num_heads = 5"),
    ]:
        assert_refused(experiment.validate, recall.get_config(variant), changes, message)


@pytest.mark.slow
def test_cli(tmp_path):
    cli = [sys.executable, "-m", "experiments.recall", "--config=configs/recall.py:later_jumps"]
    ok = subprocess.run(cli + [f"--workdir={tmp_path}"], cwd=ROOT, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert "6/6 claims reproduced" in ok.stdout
    assert "model: RecallModel, float64" in ok.stdout and "beta" in ok.stdout  # params table
    bad = subprocess.run(
        cli + ["--config.init.eps=-1", f"--workdir={tmp_path}/bad"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert bad.returncode != 0 and "config.init.eps = -1.0: must be a number > 0" in bad.stderr
