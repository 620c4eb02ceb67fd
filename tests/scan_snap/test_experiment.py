"""Scan & Snap experiments end to end: notes §7.4 acceptance, Figs. 5, 6 structure, theory
figures."""

import json
import os

import pytest

from configs import scan_snap_theory, syn_medium, syn_small
from experiments import cli
from landscape.engine import config as config_lib
from landscape.engine import records
from landscape.scan_snap import experiment
from tests.arrays import load_npz
from tests.refusals import assert_refused

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(cfg, tmp_path):
    summary = experiment.run(cfg, records.Workdir(tmp_path), progress=None)
    failed = [c for c in summary["claims"] if c["verdict"] != "reproduced"]
    return summary, failed


def test_syn_small_acceptance_over_ten_seeds(tmp_path):
    """notes §7.4: every acceptance check, Fig. 4 left and right, seeds 2..11 (seed-robust)."""
    cfg = syn_small.get_config()
    cfg.num_seeds = 10
    summary, failed = run(cfg, tmp_path)
    assert not failed, failed
    assert summary["total"] == 7  # every check of §7.4 and T12 was made
    # the run's own checks (initial loss ln M, the T2 row-sum invariant) are counted apart
    assert summary["sanity_passed"] == len(summary["sanity_checks"]) == 2, summary["sanity_checks"]
    measured = {c["claim"][:12]: c["measured"] for c in summary["claims"]}
    entropy = measured["eta_Y = 10: "]
    assert (
        1.90 < entropy["eta_Y=1"] < 1.97 and 2.05 < entropy["eta_Y=10"] < 2.12
    )  # notes 1.93, 2.08

    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 20 * 51  # 20 runs x snapshots at 0, 2, ..., 100
    assert {
        "step",
        "run",
        "seed",
        "optim.lr_z",
        "optim.lr_y_over_lr_z",
        "loss",
        "distinct_entropy",
        "population_loss",
    } <= set(rows[-1])
    arrays = load_npz(tmp_path / "arrays.npz")
    assert arrays["losses"].shape == (20, 100)
    assert arrays["snapshot_attention"].shape == (20, 51, 2, 34)
    assert (tmp_path / "figures" / "attention.png").stat().st_size > 10_000
    assert json.loads((tmp_path / "config.json").read_text())["data"]["seq_len"] == 128


def test_fig5_adam_steers_attention(tmp_path):
    """notes §5.5: at Adam lr 0.5 the argmax distinct token is 14-16, not the top one."""
    cfg = syn_small.get_config("fig5_adam")
    cfg.num_seeds = 3
    summary, failed = run(cfg, tmp_path)
    assert not failed and summary["total"] == 2, failed
    assert summary["sanity_passed"] == len(summary["sanity_checks"]) == 1  # T2 fails under Adam


@pytest.mark.slow
def test_fig6_structure_on_the_ci_grid(tmp_path):
    """notes §7.3 CI grid: K in {2, 6}, eta_Z in {0.5, 3}, ratio in {1, 2, 10}, 3 seeds."""
    summary, failed = run(syn_medium.get_config("quick"), tmp_path)
    assert not failed, failed
    assert summary["total"] == 3 and summary["timing"]["runs"] == 2 * 2 * 3 * 3
    assert (tmp_path / "figures" / "entropy_vs_ratio.png").exists()


@pytest.mark.slow
def test_fig6_structure_on_the_paper_grid(tmp_path):
    """The full 640-run sweep (about 35 s on 2 cores): all of Fig. 6's structure."""
    summary, failed = run(syn_medium.get_config(), tmp_path)
    assert not failed and summary["total"] == 7, failed


def test_theory_figures(tmp_path):
    summary, failed = run(scan_snap_theory.get_config(), tmp_path)
    assert not failed and summary["total"] == 4, failed
    for name in ("fig3_growth_factor", "fig8_h_star_vs_h", "fig9_B_fixed_ratio"):
        assert (tmp_path / "figures" / f"{name}.png").exists()


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("optim.lr_z", -1.0, r"config.optim.lr_z = -1.0: must be a number > 0"),
        ("train.batch_size", 0, r"config.train.batch_size = 0: must be an integer >= 1"),
        (
            "data.num_distinct_per_next",
            0,
            r"config.data.num_distinct_per_next = 0: must be an integer >= 1",
        ),
        ("optim.momentum", 1.0, r"config.optim.momentum = 1.0: must be a number in \[0, 1\)"),
        (
            "train.log_every",
            3,
            r"config.train.log_every = 3: must be a divisor of train.num_steps = 100",
        ),
        (
            "model.init",
            "normal",
            r"config.model.init = 'normal': must be one of 'zeros', 'uniform'",
        ),
        ("data.seq_len", 1, r"config.data.seq_len = 1: must be an integer >= 2"),
        (
            "model.dtype",
            "float8",
            r"config.model.dtype = 'float8': must be one of '', 'float32', "
            r"'float64', 'bfloat16', 'float16'",
        ),
    ],
)
def test_bad_configs_get_one_clear_sentence(field, value, message):
    assert_refused(experiment.validate, syn_small.get_config(), {field: value}, message)


def test_unknown_fields_and_bad_sweeps():
    cfg = syn_small.get_config()
    cfg.optim.lr_y = 3.0
    with pytest.raises(
        config_lib.ConfigError,
        match=r"config.optim.lr_y is not a known field. "
        r"Did you mean config.optim.lr_z\?",
    ):
        experiment.validate(cfg)
    for sweep, message in [
        ({"optim": {"lr_z": [1.0, -2.0]}}, r"sweep.optim.lr_z = -2.0: must be a number > 0"),
        ({"optim": {"momentum": [0.0, 0.9]}}, r"must be a sweepable field: one of"),
        ({"optim": {"lr_z": []}}, r"must be a non-empty list"),
    ]:
        assert_refused(experiment.validate, syn_small.get_config(), {"sweep": sweep}, message)


def test_cli_runs_and_rejects_bad_overrides(tmp_path, capsys, monkeypatch):
    """In-process through `cli.main`, as `python -m experiments.scan_snap` runs it."""
    monkeypatch.chdir(ROOT)
    argv = ["experiments/scan_snap.py", "--config=configs/syn_small.py:fig4_left"]
    assert cli.main(experiment, argv + [f"--workdir={tmp_path}"]) == 0
    out = capsys.readouterr().out
    assert "claims reproduced" in out and (tmp_path / "summary.json").exists()
    assert "model: YZModel, float32" in out and "2,312" in out  # the params table
    bad = cli.main(experiment, argv + ["--config.optim.lr_z=-0.5", f"--workdir={tmp_path}/bad"])
    assert bad == cli.EXIT_USAGE
    assert "config.optim.lr_z = -0.5: must be a number > 0" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()
