"""Markov experiments end to end at CI size (notes §11.3): the theorems' claims on the theory
model; the GPT-2 model's outcomes are recorded, not asserted (they differ from the paper)."""

import json
import os
import subprocess
import sys

import pytest

from configs import markov
from landscape.engine import records
from landscape.markov import experiment
from tests.refusals import assert_refused

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(cfg, tmp_path):
    summary = experiment.run(cfg, records.Workdir(tmp_path), progress=None)
    return summary, [c for c in summary["claims"] if c["verdict"] != "reproduced"]


@pytest.mark.slow
def test_fig3_theory_model_tied_trap_and_untied_bigram(tmp_path):
    cfg = markov.get_config("fig3")
    cfg.num_seeds = 1  # both (p, q) points, tied and untied: Fig. 3's four claims
    summary, failed = run(cfg, tmp_path)
    assert not failed and summary["total"] == 4, failed
    runs = {(r["program"], r["p"]): r for r in summary["runs"]}
    tied = runs[("model.tied=True", 0.5)]
    assert tied["stuck"] and abs(tied["f0"] - 0.3846) < 0.01 and abs(tied["loss"] - 0.6663) < 0.005
    untied = runs[("model.tied=False", 0.5)]
    assert untied["escaped"] and abs(untied["f0"] - 0.5) < 0.02 and abs(untied["f1"] - 0.2) < 0.02
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert {"test_loss", "f0", "f1", "chain.p", "chain.q", "model.tied"} <= set(rows[-1])


@pytest.mark.slow  # ~20 s; the S-state unigram point itself: test_points.py C16
def test_fig5_multistate_threshold(tmp_path):
    cfg = markov.get_config("fig5")
    cfg.num_seeds = 1
    cfg.sweep = {"chain": {"p": [0.6, 0.9]}}
    cfg.train.update(num_steps=1000, log_every=100)
    summary, failed = run(cfg, tmp_path)
    assert not failed and summary["total"] == 4, failed


@pytest.mark.slow
def test_landscape_experiment(tmp_path):
    cfg = markov.get_config("landscape")
    cfg.landscape.points = [[0.5, 0.8]]
    cfg.landscape.multistate_p = [0.85]
    summary, failed = run(cfg, tmp_path)
    assert not failed and summary["total"] == 4, failed
    assert "local minimum (PSD" in (tmp_path / "hessians.txt").read_text()


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("chain.p", 1.0, r"config.chain.p = 1.0: must be a number in \(0, 1\)"),
        ("chain.num_states", 1, r"config.chain.num_states = 1: must be an integer >= 2"),
        ("model.layer_norm", True, r"config.model.layer_norm = True: must be False for the theory"),
        ("train.batch_size", 0, r"config.train.batch_size = 0: must be an integer >= 1"),
    ],
)
def test_bad_configs(field, value, message):
    assert_refused(experiment.validate, markov.get_config("fig3"), {field: value}, message)


def test_sweep_values_are_checked():
    sweep = {"sweep": {"chain": {"p": [0.2, 1.5]}}}
    message = r"sweep.chain.p = 1.5: must be a number in"
    assert_refused(experiment.validate, markov.get_config("fig4"), sweep, message)


def test_cli_rejects_bad_p(tmp_path):
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "experiments.markov",
            "--config=configs/markov.py",
            "--config.chain.p=0",
            f"--workdir={tmp_path}/bad",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert bad.returncode != 0 and "config.chain.p = 0" in bad.stderr
    assert not (tmp_path / "bad").exists()
