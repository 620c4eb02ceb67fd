"""The tutorials in docs/tutorials/ run in-process at their tiny size (LANDSCAPE_TUTORIAL_TINY=1)
and compute the numbers their text promises: the closed forms of notes/markov.md §6.2-6.5 for
the probing tutorial, one row per run and logged step (the CLI's rows, number for number) for
the sweep tutorial, the kept parameters and the second-order check of the escape directions for
the training-run tutorial. own_task.py has its test in tests/engine/test_own_task.py."""

import json
import math
import pathlib
import runpy

import numpy as np
import pandas as pd
import pytest

import landscape
from experiments import cli
from landscape.scan_snap import experiment as scan_snap
from tests.arrays import load_npz

ROOT = pathlib.Path(__file__).resolve().parents[2]
TUTORIALS = ROOT / "docs" / "tutorials"


def _run_tiny(name, workdir, monkeypatch):
    monkeypatch.chdir(ROOT)  # the tutorials name configs/ relative to the repository root
    monkeypatch.setenv("LANDSCAPE_TUTORIAL_TINY", "1")
    monkeypatch.setenv("LANDSCAPE_TUTORIAL_WORKDIR", str(workdir))
    return runpy.run_path(str(TUTORIALS / name), run_name="__main__")


@pytest.mark.slow  # ~80 s of CPU on 2 cores, nearly all compiling: 9 programs, whatever the size
def test_probing_markov_matches_the_closed_forms(tmp_path, monkeypatch):
    space = _run_tiny("probing_markov.py", tmp_path, monkeypatch)
    p, q, d = 0.5, 0.8, 4
    pi0pi1 = p * q / (p + q) ** 2  # 0.236686 (notes §6.5)
    tied = 2 * pi0pi1 * (p + q - 1)  # 0.142012, d times
    untied = pi0pi1 * (p + q - 1)  # ±0.071006, d times each
    np.testing.assert_allclose(space["tied_alpha"], [tied] * d + [pi0pi1], rtol=1e-10)
    np.testing.assert_allclose(
        space["untied_alpha"], [-untied] * d + [untied] * d + [pi0pi1], rtol=1e-10
    )
    assert space["H"].kind() is landscape.Curvature.MINIMUM
    assert space["H_untied"].verdict() == "saddle (4 negative eigenvalues)"

    # the grid: the smallest tied α eigenvalue is min(π₀π₁, 2π₀π₁(p + q - 1)) at every chain
    expected = [min(a * b, 2 * a * b * (a + b - 1)) / (a + b) ** 2 for a, b in space["chains"]]
    assert len(expected) == 9
    np.testing.assert_allclose(space["smallest"], expected, atol=1e-12)

    # Lanczos finds the 4-fold eigenvalue with its multiplicity, each pair certified
    (top, once), (value, times) = space["top"].multiplicities()
    assert (once, times) == (1, 4)
    assert top == pytest.approx(pi0pi1, rel=1e-10) and value == pytest.approx(tied, rel=1e-10)
    assert space["top"].converged and space["top"].residuals.max() < 1e-12

    # escape directions: λ = -π₀π₁|p + q - 1| four times, along a = -e, exact at second order
    escape = space["escape"]
    np.testing.assert_allclose(escape.values, [-untied] * d, rtol=1e-10)
    np.testing.assert_allclose(escape.ratios, 1.0, atol=1e-3)
    for v in escape.vectors:
        np.testing.assert_allclose(v["a"], -v["e"], atol=1e-12)

    # Gauss-Newton is PSD and sees only the bias: the negative curvature is all remainder
    split = space["split"]
    assert split.ggn_eigenvalues[0] > -1e-12
    assert split.ggn_eigenvalues[-1] == pytest.approx(pi0pi1, rel=1e-10)
    assert split.remainder_eigenvalues[0] == pytest.approx(-untied, rel=1e-10)

    # the path climbs from H(π) before falling to the entropy rate
    pi0, pi1 = q / (p + q), p / (p + q)
    entropy = -(pi0 * math.log(pi0) + pi1 * math.log(pi1))
    rate = -(pi0 * (p * math.log(p) + (1 - p) * math.log(1 - p))) - pi1 * (
        q * math.log(q) + (1 - q) * math.log(1 - q)
    )
    line = space["line"]
    assert line.loss_a == pytest.approx(entropy, rel=1e-12)
    assert line.loss_b == pytest.approx(rate, rel=1e-12)
    assert line.barrier > 0.1 and 0 < line.argmax_t < 1

    # filter normalisation keeps the directions where θ_π is zero, rescales only b
    plane = space["plane"]
    assert plane.center_loss == pytest.approx(entropy, rel=1e-12)
    weights = {f"block_0/W_{w}" for w in ("1", "2", "K", "O", "Q", "V")}
    assert set(plane.kept_blocks) == {"e", "pos"} | weights
    assert abs(float(plane.u["b"])) == pytest.approx(abs(math.log(p / q)), rel=1e-12)
    assert space["off_plane"] > 1.0

    # SLQ against the exact spectrum of θ*: 7 non-zero eigenvalues out of 221
    assert int(np.sum(~space["zero"])) == 7 and space["exact"].size == 221
    fraction, stderr = space["density"].mass(1e-6, np.inf)  # expected 7 / 221 per probe
    assert abs(fraction - 7 / 221) < 4 * stderr and stderr < 0.01
    for name in ("alpha_min_over_pq", "path", "slice", "spectral_density"):
        assert (tmp_path / f"{name}.png").stat().st_size > 5_000


def test_sweep_records_one_row_per_run_and_step_as_the_cli(tmp_path, monkeypatch):
    space = _run_tiny("sweep.py", tmp_path / "tutorial", monkeypatch)
    steps, lrs, seeds = 20, [0.25, 0.5, 1.0], [2, 3, 4, 5]
    rows = space["rows"]
    assert len(rows) == len(lrs) * len(seeds) * (steps // 2 + 1)  # logged at 0, 2, ..., 20
    assert sorted(rows["optim.lr_z"].unique()) == lrs
    assert sorted(rows.seed.unique()) == seeds
    assert set(rows["optim.lr_y_over_lr_z"]) == {1.0}  # the override dropped that axis
    assert rows.loss[rows.step == 0].isna().all() and rows.loss[rows.step > 0].notna().all()
    final = space["final"].groupby("optim.lr_z").population_loss.mean()
    assert final[0.25] > final[0.5] > final[1.0]  # a larger η_Z learns faster
    w = tmp_path / "tutorial"
    arrays = load_npz(w / "arrays.npz")
    assert arrays["losses"].shape == (12, steps)
    np.testing.assert_array_equal(arrays["optim_lr_z"], np.repeat(lrs, len(seeds)))
    assert json.loads((w / "summary.json").read_text())["status"] == "complete"
    config = json.loads((w / "config.json").read_text())
    assert config["train"]["batch_size"] == 8 and config["num_seeds"] == 4
    assert (w / "figures" / "loss_by_lr.png").stat().st_size > 5_000

    # the command the tutorial closes with, at the same tiny size, gives the same rows
    status = cli.main(
        scan_snap,
        [
            "experiments/scan_snap.py",
            "--config=configs/syn_small.py",
            "--config.num_seeds=4",
            "--config.train.batch_size=8",
            "--config.optim.lr_y_over_lr_z=1.0",
            "--config.sweep.optim.lr_z=[0.25, 0.5, 1.0]",
            f"--config.train.num_steps={steps}",
            f"--workdir={tmp_path / 'cli'}",
        ],
    )
    assert status == 0
    from_cli = pd.read_json(tmp_path / "cli" / "metrics.jsonl", lines=True)
    pd.testing.assert_frame_equal(from_cli, rows)


@pytest.mark.slow
def test_probing_training_reads_its_run_back_and_checks_its_escape_directions(
    tmp_path, monkeypatch
):
    """512 steps of the small n-gram run: the parameters and tracked steps it kept, the trained
    points equal to the kept parameters, one summary row per kept step, the escape directions
    the plateau Hessian's most negative eigenpairs and exact at second order, the chance level
    the Beta law's mean (curvature_study.chance_overlap_mean) and the block shares whole."""
    from landscape.ngrams import curvature_study

    space = _run_tiny("probing_training.py", tmp_path, monkeypatch)
    result, kept, i = space["result"], space["kept"], space["i"]
    np.testing.assert_array_equal(result.tracked_steps, np.arange(0, 513, 32))
    assert kept == [0, 128, 256, 384, 512] and 0 < i < len(kept) - 1
    assert len(space["table"]) == len(kept)
    assert set(space["table"]["kind"]) <= {c.value for c in landscape.Curvature}
    for step, point in zip(kept, space["trained"], strict=True):
        for name, value in result.params_at(step, run=0).items():
            np.testing.assert_array_equal(point.params[name], value.astype(np.float64))
    H, escape = space["H"], space["escape"]
    k = escape.num_negative()
    assert k == 6 and H.num_negative() >= 6
    np.testing.assert_allclose(escape.values, H.eigenvalues[:k], rtol=1e-9)
    np.testing.assert_allclose(escape.ratios[:, 0], 1.0, atol=1e-3)  # ε = 1e-3: O(ε²) off
    chance, dim = space["chance"], space["dim"]
    assert dim == int(space["live"].sum()) < H.matrix.shape[0]
    expected = curvature_study.chance_overlap_mean(k, dim)
    assert abs(chance["span_mean"] - expected) < 4 * chance["span_std"] / math.sqrt(2000)
    for shares in space["shares"].values():
        assert sum(shares.values()) == pytest.approx(1.0, rel=1e-9)
    assert (tmp_path / "figures" / "tracked.png").stat().st_size > 5_000
