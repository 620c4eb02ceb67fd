"""The edge-of-stability study's measurements and claims (landscape/engine/edge_of_stability.py)
on synthetic records whose answers are known (docs/notes/edge_of_stability.md)."""

import numpy as np
import pytest

from landscape.engine import edge_of_stability as eos

STEPS = np.arange(0, 110, 10)


def test_thresholds_are_cohen_et_al_s():
    assert eos.threshold("gd", 0.5) == 4.0
    assert eos.threshold("adam", 0.01, b1=0.9) == pytest.approx(3800.0)  # 38 / η
    assert eos.threshold("adam", 0.1, b1=0.0) == pytest.approx(20.0)  # no momentum: 2 / η


def test_reach_step_is_the_first_tracked_step_within_rtol():
    ratio = np.array([np.nan, 0.5, 0.7, 0.89, 0.91, 1.02, 0.98, 1.0, 1.01, 0.99, 1.0])
    assert eos.reach_step(STEPS, ratio, 0.1) == 40
    assert eos.reach_step(STEPS, ratio, 0.05) == 50
    assert eos.reach_step(STEPS, ratio * 0.5, 0.1) is None


def test_increases_count_the_loss_rises_above_rounding():
    losses = np.array([1.0, 0.9, 0.8, 0.85, 0.7, 0.7 * (1 + 1e-8), 0.75, 0.6])
    assert eos.increases(losses, 0, 8) == 2  # 0.8 -> 0.85 and 0.7 -> 0.75, not the 1e-8 rise
    assert eos.increases(losses, 0, 3) == 0
    assert eos.increases(losses, 3, 8) == 1


def synthetic_run(lr=0.5, level=1.0, diverge=None):
    """λ_max rising linearly to `level` x 2/η by step 50, then held; the loss falling
    monotonically to step 50, then falling while it oscillates (a rise every other step)."""
    sharpness = (2 / lr) * level * np.minimum(STEPS / 50, 1.0)
    t = np.arange(101, dtype=float)
    losses = np.where(t < 50, 2.0 - 0.01 * t, 1.5 - 0.005 * (t - 50) + 0.02 * (t % 2))
    if diverge is not None:
        losses[diverge:] = np.nan
    return STEPS, sharpness, losses


def test_a_run_at_the_edge_has_its_row():
    row = eos.run_row("gd", 0.5, 3, *synthetic_run(), rtol=0.1)
    assert row["threshold"] == 4.0
    assert row["reach_step"] == 50  # 0.9 x 2/η is first met at step 50 (0.8 at 40)
    assert row["max_ratio"] == pytest.approx(1.0)
    assert row["hover_ratio"] == pytest.approx(1.0)
    assert row["initial_ratio"] == 0.0
    assert row["rises_before"] == 0
    assert row["rises_after"] == 25  # the steps 51 -> 52, 53 -> 54, ..., 99 -> 100
    assert row["loss_at_reach"] == pytest.approx(1.5)
    assert row["final_loss"] == pytest.approx(1.5 - 0.25)
    assert row["nonfinite_step"] is None


def test_a_diverged_run_keeps_its_losses_to_the_first_nonfinite_step():
    row = eos.run_row("gd", 0.5, 0, *synthetic_run(diverge=80), rtol=0.1)
    assert row["nonfinite_step"] == 80
    assert row["final_loss"] == pytest.approx(1.5 - 0.005 * 29 + 0.02)  # step 79
    assert row["rises_after"] == 15  # 51 -> 52, ..., 77 -> 78 (and 79 is the last finite)


def rows(levels, phase_steps, optimizer="gd"):
    out = []
    for seed, (level, phase) in enumerate(zip(levels, phase_steps, strict=True)):
        row = eos.run_row(optimizer, 0.5, seed, *synthetic_run(level=level), rtol=0.1)
        row["phase snap"] = phase
        out.append(row)
    return out


def test_claims_of_runs_at_the_edge_are_reproduced():
    claims = eos.claims(rows([1.0, 1.0, 1.05], [60, 70, None]), 0.1, ["snap"])
    assert [c.passed for c in claims if c.kind == "paper"] == [True, True, True, True]
    assert claims[0].measured == {0.5: "3/3"}
    assert claims[3].measured == {0.5: {"after": 2, "no phase": 1}}
    assert claims[-1].kind == "sanity" and claims[-1].passed


def test_claims_of_runs_below_the_edge_are_not_reproduced():
    """Sharpening to 0.5 x 2/η in one seed: the threshold is not reached in every run; a phase
    before the reach step is not at the edge."""
    claims = eos.claims(rows([1.0, 0.5, 1.0], [60, 60, 20]), 0.1, ["snap"])
    reach, hover, monotone, phase = (c for c in claims if c.kind == "paper")
    assert not reach.passed and reach.measured == {0.5: "2/3"}
    assert hover.passed  # the two that reach it hover at it
    assert monotone.passed
    assert not phase.passed and phase.measured == {0.5: {"after": 1, "no edge": 1, "before": 1}}
    never = eos.claims(rows([0.3], [None], optimizer="adam"), 0.1, [])
    assert [c.passed for c in never] == [False, False, False, True]
    assert never[1].measured == {0.5: "never reached"}
