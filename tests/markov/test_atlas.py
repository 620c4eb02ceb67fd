"""The atlas (configs/markov.py:atlas): the probes over a (p, q) grid against Thms 2-3."""

import numpy as np
import pandas as pd
import pytest

from configs import markov
from landscape import config as config_lib
from landscape import records
from landscape.markov import atlas, experiment


def _tiny():
    cfg = markov.get_config("atlas")
    cfg.atlas.update(p=[0.3, 0.8], q=[0.4], d=2, seq_len=4, path_ts=11, num_iters=20)
    return cfg


def test_atlas_end_to_end_reproduces_thms_2_and_3(tmp_path):
    summary = experiment.run(_tiny(), records.Workdir(tmp_path), progress=None)
    claims = summary["claims"] + summary["sanity_checks"]
    failed = [c for c in claims if c["verdict"] != "reproduced"]
    assert not failed and summary["total"] == 3 and summary["sanity_passed"] == 3, failed
    hessians = pd.read_csv(tmp_path / "hessians.csv")
    assert len(hessians) == 4  # 2 cells, tied and untied
    tied = hessians[hessians.tied].set_index("p")
    # Thm 2: tied, p + q > 1: a local minimum, smallest alpha eigenvalue 2 pi0 pi1 (p + q - 1);
    # p + q < 1: a saddle, the same formula now negative
    pi0pi1 = {p: p * 0.4 / (p + 0.4) ** 2 for p in (0.3, 0.8)}
    assert list(tied.verdict) == ["saddle", "local minimum"]
    for p in (0.3, 0.8):
        np.testing.assert_allclose(tied.alpha_smallest[p], 2 * pi0pi1[p] * (p + 0.4 - 1), rtol=1e-9)
    untied = hessians[~hessians.tied]
    assert set(untied.verdict) == {"saddle"} and (untied.ggn_negative == 0).all()
    paths = pd.read_csv(tmp_path / "paths.csv")
    assert (paths[paths.tied & (paths.p + paths.q > 1)].barrier > 0).all()
    assert {"atlas.png", "density.png"} <= {p.name for p in (tmp_path / "figures").iterdir()}


def test_a_wrong_verdict_fails_the_claim():
    row = {"tied": True, "p": 0.8, "q": 0.8, "verdict": "saddle", "expected": "local minimum"}
    row.update(alpha_error=0.0, ggn_negative=0, remainder_smallest=0.0)
    slq = type("SLQ", (), {"dim": 10, "mass": lambda self, lo, hi: (0.4, 0.01)})()
    claims = atlas._claims([row], [], [], (slq, 4, (0.8, 0.8)))
    verdicts = {c.claim.split(":")[0]: c.passed for c in claims}
    assert not verdicts["theta_pi over the grid (1 cells, tied and untied)"]


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("atlas.p", [1.2], r"config.atlas.p = \[1.2\]"),
        ("atlas.seq_len", 20, r"config.atlas.seq_len = 20: must be an integer"),
    ],
)
def test_bad_atlas_configs(field, value, message):
    cfg = _tiny()
    cfg.atlas[field.split(".")[1]] = value
    with pytest.raises(config_lib.ConfigError, match=message):
        experiment.validate(cfg)


def test_expected_verdict_follows_the_theorems():
    assert atlas.expected_verdict(0.5, 0.8, tied=True) == "local minimum"
    assert atlas.expected_verdict(0.2, 0.3, tied=True) == "saddle"
    assert atlas.expected_verdict(0.5, 0.8, tied=False) == "saddle"
