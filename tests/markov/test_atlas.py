"""The atlas (configs/markov.py:atlas): the probes over a (p, q) grid against Thms 2-3."""

import numpy as np
import pandas as pd
import pytest

import landscape
from configs import markov
from landscape.engine import config as config_lib
from landscape.engine import records
from landscape.markov import atlas, experiment


def _tiny():
    cfg = markov.get_config("atlas")
    cfg.atlas.update(p=[0.3, 0.8], q=[0.4], d=2, seq_len=4, path_ts=11, num_iters=40)
    # two seeds, as the grid has two cells: the trained points reuse the grid's Hessian program.
    # num_iters = 40 (the default) of D = 61: with 20 the untied points' count below -1e-4 λ_max
    # missed eigh's by 4.5 standard errors (8.2 ± 0.85 vs 12), a quadrature bias (the threshold
    # cuts a continuum of small negative eigenvalues) that the probes' standard error omits
    cfg.atlas.update(train_cell=[0.6, 0.8], train_seeds=2, train_steps=3000)
    return cfg


@pytest.fixture(scope="module")
def atlas_run(tmp_path_factory):
    """The tiny atlas, trained points included (~1 min on 2 cores, most of it compiling)."""
    path = tmp_path_factory.mktemp("atlas")
    return experiment.run(_tiny(), records.Workdir(path), progress=None), path


@pytest.mark.slow
def test_atlas_end_to_end_reproduces_thms_2_and_3(atlas_run):
    summary, tmp_path = atlas_run
    claims = summary["claims"] + summary["sanity_checks"]
    failed = [c for c in claims if c["verdict"] != "reproduced"]
    assert not failed and summary["total"] == 4 and summary["sanity_passed"] == 4, failed
    hessians = pd.read_csv(tmp_path / "hessians.csv")
    assert len(hessians) == 4  # 2 cells, tied and untied
    tied = hessians[hessians.tied].set_index("p")
    # Thm 2: tied, p + q > 1: a local minimum, smallest alpha eigenvalue 2 pi0 pi1 (p + q - 1);
    # p + q < 1: a saddle, the same formula now negative
    pi0pi1 = {p: p * 0.4 / (p + 0.4) ** 2 for p in (0.3, 0.8)}
    assert list(tied.kind) == ["saddle", "minimum"]
    for p in (0.3, 0.8):
        np.testing.assert_allclose(tied.alpha_smallest[p], 2 * pi0pi1[p] * (p + 0.4 - 1), rtol=1e-9)
    untied = hessians[~hessians.tied]
    assert set(untied.kind) == {"saddle"} and (untied.ggn_negative == 0).all()
    paths = pd.read_csv(tmp_path / "paths.csv")
    assert (paths[paths.tied & (paths.p + paths.q > 1)].barrier > 0).all()
    figures = {p.name for p in (tmp_path / "figures").iterdir()}
    assert {"atlas.png", "density.png", "density_trained.png"} <= figures


@pytest.mark.slow
def test_trained_points_show_the_trap(atlas_run):
    """(p, q) = (0.6, 0.8), d = 2, N = 4, 3000 steps: tied runs stop at the unigram loss, untied
    ones reach the bigram (Thm 2; notes/markov.md §11.4)."""
    _, tmp_path = atlas_run
    trained = pd.read_csv(tmp_path / "trained.csv")
    assert len(trained) == 4 and list(trained.seed) == [0, 1, 0, 1]
    # L(theta_pi) = H(pi) and L(theta_star) = the entropy rate, exactly (all 2^4 sequences)
    pi1 = 0.6 / 1.4
    h_pi = -(pi1 * np.log(pi1) + (1 - pi1) * np.log(1 - pi1))
    h_rate = (0.8 * _h2(0.6) + 0.6 * _h2(0.8)) / 1.4
    np.testing.assert_allclose(trained.loss_pi, h_pi, rtol=1e-12)
    np.testing.assert_allclose(trained.loss_star, h_rate, rtol=1e-12)
    gap = h_pi - h_rate  # 0.0839
    tied, untied = trained[trained.tied], trained[~trained.tied]
    assert (abs(tied.loss - h_pi) < 1e-3 * gap).all(), tied.loss  # measured: 1e-6 above
    assert (abs(untied.loss - h_rate) < 0.01 * gap).all(), untied.loss  # measured: 2e-4 above
    assert list(trained.reached) == ["unigram"] * 2 + ["bigram"] * 2
    assert (trained.negative_slq - trained.negative_eigh_resolved).abs().max() <= max(
        3 * trained.negative_slq_stderr.max(), 0.05
    )


def _h2(x):
    return -(x * np.log(x) + (1 - x) * np.log(1 - x))


def test_no_training_steps_no_trained_points():
    cfg = _tiny()
    cfg.atlas.train_steps = 0
    assert atlas._trained(cfg, progress=None, train=None) == ([], [])


def test_reached_uses_a_quarter_of_the_gap():
    # L(theta_pi) = 0.68, L(theta_star) = 0.60: a quarter of the gap is 0.02
    assert atlas.reached(0.695, 0.68, 0.60) == "unigram"
    assert atlas.reached(0.615, 0.68, 0.60) == "bigram"
    assert atlas.reached(0.64, 0.68, 0.60) == "neither"
    assert atlas.expected_basin(0.6, 0.8, tied=True) == "unigram"
    assert atlas.expected_basin(0.2, 0.3, tied=True) == "bigram"
    assert atlas.expected_basin(0.6, 0.8, tied=False) == "bigram"


def test_a_wrong_verdict_fails_the_claim():
    row = {"tied": True, "p": 0.8, "q": 0.8, "kind": "saddle", "expected": "minimum"}
    row.update(alpha_error=0.0, ggn_negative=0, remainder_smallest=0.0)
    slq = type("SLQ", (), {"dim": 10, "mass": lambda self, lo, hi: (0.4, 0.01)})()
    claims = atlas._claims([row], [], [], (slq, 4, (0.8, 0.8)))
    (grid_claim,) = [c for c in claims if "theta_pi over the grid" in c.claim]
    assert not grid_claim.passed


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("atlas.p", [1.2], r"config.atlas.p = \[1.2\]"),
        ("atlas.seq_len", 20, r"config.atlas.seq_len = 20: must be an integer"),
        ("atlas.train_cell", [0.6], r"config.atlas.train_cell = \[0.6\]: must be a list of 2"),
        ("atlas.train_cell", [0.4, 0.6], r"config.atlas.train_cell = \[0.4, 0.6\]: .* p \+ q = 1"),
        ("atlas.train_seeds", 0, r"config.atlas.train_seeds = 0: must be an integer >= 1"),
        ("atlas.train_steps", -5, r"config.atlas.train_steps = -5: must be an integer >= 0"),
    ],
)
def test_bad_atlas_configs(field, value, message):
    cfg = _tiny()
    cfg.atlas[field.split(".")[1]] = value
    with pytest.raises(config_lib.ConfigError, match=message):
        experiment.validate(cfg)


def test_expected_kind_follows_the_theorems():
    assert atlas.expected_kind(0.5, 0.8, tied=True) is landscape.Curvature.MINIMUM
    assert atlas.expected_kind(0.2, 0.3, tied=True) is landscape.Curvature.SADDLE
    assert atlas.expected_kind(0.5, 0.8, tied=False) is landscape.Curvature.SADDLE
