"""n-gram claim functions on hand-made analysis rows and results: each claim fails on input that
violates it (no claim passes vacuously) and passes on input that satisfies it. No training."""

import math
import types

import numpy as np
import pytest

from landscape.engine import training
from landscape.ngrams import claims, experiment, stationarity_claims

BAYES = 1.4392
STEPS = np.arange(0, 2049, 64)


def cfg():
    c = experiment.default_config()  # S = 5, n = 3
    return c


def group(test_loss=None, test_grad=None, R=1):
    S = len(STEPS)
    test_loss = np.tile(np.linspace(1.7, 1.45, S), (R, 1)) if test_loss is None else test_loss
    test_grad = np.full((R, S), 0.05) if test_grad is None else test_grad
    result = training.RunResult(
        hparams={"optim.lr": np.full(R, 0.01)},
        seeds=np.arange(R),
        losses=np.ones((R, 10)),
        metrics={},
        snapshot_steps=STEPS,
        snapshots={"test_loss": test_loss, "test_grad_norm": test_grad},
        final_params={},
        first_nonfinite_step=-np.ones(R, np.int64),
        compile_seconds=0.0,
        run_seconds=0.0,
    )
    return dict(cfg=cfg(), fields={}, result=result)


LINES = types.SimpleNamespace(
    base={"bayes": BAYES, "1-gram +alpha": 1.6271, "1-gram opt": 1.5929, "2-gram opt": 1.5488}
)


def plateau(start, end, level, k, distance=0.005):
    return dict(
        start=start,
        end=end,
        level=level,
        lags=list(range(1, k)),
        k=k,
        line="x",
        line_value=level - distance,
        distance=distance,
        lines={},
    )


def row(seed=0, plateaus=(), final=1.45, lag1=512, lag2=1344, grad=None):
    return dict(
        seed=seed,
        lr=0.01,
        final_loss=final,
        plateaus=list(plateaus),
        head_formed={"lag1": lag1, "lag2": lag2},
        grad_norm_per_snapshot=np.full(len(STEPS) - 1, 0.3) if grad is None else grad,
    )


STAIRS = (plateau(128, 512, 1.62, 1), plateau(640, 1280, 1.55, 2))


# ----------------------------------------------------------------------------- staircase


def test_staircase_passes_and_bayes_is_a_sanity_check():
    found = claims.claims_staircase(cfg(), group(), LINES, [row(plateaus=STAIRS)])
    assert [c.kind for c in found] == ["paper", "sanity"] and all(c.passed for c in found)


@pytest.mark.parametrize(
    "plateaus",
    [
        (),  # no plateau at all
        (plateau(128, 512, 1.62, 1, distance=0.05),),  # off the estimator's line
        (plateau(128, 512, 1.55, 2), plateau(640, 1280, 1.62, 1)),  # histories shrink
    ],
)
def test_staircase_fails_on_violating_plateaus(plateaus):
    claim, bayes = claims.claims_staircase(cfg(), group(), LINES, [row(plateaus=plateaus)])
    assert not claim.passed and bayes.passed


@pytest.mark.parametrize("final", [BAYES - 0.05, math.nan])
def test_a_final_loss_below_bayes_or_nan_fails_the_sanity_check(final):
    _, bayes = claims.claims_staircase(cfg(), group(), LINES, [row(plateaus=STAIRS, final=final)])
    assert bayes.kind == "sanity" and not bayes.passed


# ----------------------------------------------------------------------------- heads


def test_heads_order():
    rows = [row(seed=s) for s in range(5)]
    (claim,) = claims.claims_heads(cfg(), group(), LINES, rows)
    assert claim.passed and claim.kind == "paper"
    rows[0]["head_formed"] = {"lag1": 1344, "lag2": 512}  # -2 first in one seed of 5: 4/5
    assert claims.claims_heads(cfg(), group(), LINES, rows)[0].passed
    rows[1]["head_formed"] = {"lag1": 512, "lag2": 512}  # same snapshot: not in order
    assert not claims.claims_heads(cfg(), group(), LINES, rows)[0].passed


def test_heads_fails_when_no_minus2_head_forms():
    """The -1 head formed, the -2 head never did: no order is shown (it used to pass)."""
    rows = [row(seed=s, lag2=None) for s in range(3)]
    (claim,) = claims.claims_heads(cfg(), group(), LINES, rows)
    assert not claim.passed
    assert (
        claim.measured["seeds_with_a_minus2_head"] == 0 and "never formed" in claim.measured["note"]
    )
    rows = [row(seed=s, lag1=None, lag2=None) for s in range(3)]
    assert not claims.claims_heads(cfg(), group(), LINES, rows)[0].passed


def test_heads_is_not_claimed_for_bigrams():
    c = cfg()
    c.task.order_n = 2
    assert claims.claims_heads(c, group(), LINES, [row()]) == []


# ----------------------------------------------------------------------------- grad_norm


def _jump_run():
    """Test loss on a plateau at 1.55 (steps 640-1280), a jump at 1344; the test gradient norm
    0.01 on the plateau, 0.2 at the jump."""
    loss = np.where(STEPS < 640, 1.62, np.where(STEPS <= 1280, 1.55, 1.45))[None].astype(float)
    grad = np.where(STEPS == 1344, 0.2, 0.01)[None]
    return loss, grad


def test_grad_norm_spike_passes():
    loss, grad = _jump_run()
    (claim,) = claims.claims_grad_norm(cfg(), group(loss, grad), LINES, [row(plateaus=STAIRS)])
    assert claim.passed, claim.measured
    # the plateau's median (0.01) is below a tenth of the peak (0.02): the ratio is capped, said
    assert claim.measured["ratio"] == 10 and "uncapped 20.0" in claim.measured["plateau_floored"]


@pytest.mark.parametrize(
    "grad",
    [
        np.full((1, len(STEPS)), 0.05),  # no spike
        np.zeros((1, len(STEPS))),  # 0 / 0 (raised before)
        np.full((1, len(STEPS)), np.nan),
    ],
)
def test_grad_norm_fails_without_a_spike(grad):
    loss, _ = _jump_run()
    (claim,) = claims.claims_grad_norm(cfg(), group(loss, grad), LINES, [row(plateaus=STAIRS)])
    assert not claim.passed, claim.measured


def test_grad_norm_fails_without_a_plateau():
    loss, grad = _jump_run()
    (claim,) = claims.claims_grad_norm(cfg(), group(loss, grad), LINES, [row()])
    assert not claim.passed


def test_grad_norm_fails_when_the_estimates_are_negative():
    """The unbiased estimate can be negative near 0: a negative peak over a negative plateau is
    no spike (the ratio of two negatives was 10 and passed)."""
    loss, grad = _jump_run()
    (claim,) = claims.claims_grad_norm(cfg(), group(loss, -grad), LINES, [row(plateaus=STAIRS)])
    assert not claim.passed and claim.measured["ratio"] == 0.0


def test_grad_norm_fails_when_the_run_ends_on_the_plateau():
    """A plateau that lasts to the last snapshot has no jump: the largest late wiggle is not a
    spike, whatever its ratio."""
    loss, grad = _jump_run()
    to_the_end = (plateau(128, 512, 1.62, 1), plateau(640, int(STEPS[-1]), 1.55, 2))
    (claim,) = claims.claims_grad_norm(cfg(), group(loss, grad), LINES, [row(plateaus=to_the_end)])
    assert not claim.passed and claim.measured.startswith("no jump")
    (claim,) = claims.claims_spike_by_measure(
        cfg(),
        group(loss, grad),
        [row(plateaus=to_the_end)],
        group(loss, grad * 0.1),
        [row(plateaus=STAIRS)],
    )
    assert not claim.passed


def test_spike_by_measure_compares_the_two_ratios():
    """The averaged-parameter ratio (0.2 over a plateau clipped at a tenth of the peak, 0.02: 10)
    against the current one (0.03 / 0.01 = 3):
    passes; swapped, fails; a measure without a plateau fails."""
    loss, grad = _jump_run()
    flat = np.where(grad > 0.1, 0.03, 0.01)
    c = cfg()
    strong, weak = group(loss, grad), group(loss, flat)
    rows = [row(plateaus=STAIRS)]
    (claim,) = claims.claims_spike_by_measure(c, strong, rows, weak, rows)
    assert claim.passed and claim.measured["averaged / current"] == pytest.approx(10 / 3, abs=0.01)
    assert not claims.claims_spike_by_measure(c, weak, rows, strong, rows)[0].passed
    assert not claims.claims_spike_by_measure(c, strong, rows, weak, [row()])[0].passed


def test_paper_levels_within_line_tol():
    c = cfg()
    c.analysis.update(paper_plateau=1.6355, paper_final=1.6068)
    near = (plateau(128, 1024, 1.627, 2),)  # 0.0085 below the paper
    (claim,) = claims.claims_paper_levels(c, group(), LINES, [row(plateaus=near, final=1.60)])
    assert claim.passed and claim.measured["gap"] == {"plateau": -0.0085, "final": -0.0068}
    for plateaus, final in [
        (near, 1.544),  # final 0.06 below
        ((plateau(128, 1024, 1.607, 2),), 1.60),  # plateau 0.03 below
        ((), 1.60),  # no plateau
        ((plateau(128, int(STEPS[-1]), 1.627, 2),), 1.60),
    ]:  # no escape
        (claim,) = claims.claims_paper_levels(
            c, group(), LINES, [row(plateaus=plateaus, final=final)]
        )
        assert not claim.passed, (plateaus, final)


def test_measured_view_splits_the_snapshots_by_measure():
    g = group()
    g["result"].snapshots["current_test_loss"] = g["result"].snapshots["test_loss"] + 1
    g["cfg"].train.metrics_at = "both"
    averaged, current = [claims.measured_view(g, *m) for m in claims.measures(g["cfg"])]
    assert set(averaged["result"].snapshots) == {"test_loss", "test_grad_norm"}
    assert set(current["result"].snapshots) == {"test_loss"}
    np.testing.assert_array_equal(
        current["result"].snapshots["test_loss"], averaged["result"].snapshots["test_loss"] + 1
    )
    assert "parameter EMA (0.999)" in claims.program_label(averaged)
    assert "current parameters" in claims.program_label(current)


# ----------------------------------------------------------------------------- single plateau


def test_single_plateau():
    one = (plateau(128, 1024, 1.61, 1),)
    (claim,) = claims.claims_single_plateau(cfg(), group(), LINES, [row(plateaus=one)])
    assert claim.passed
    # judged by its level: a unigram-level plateau whose heads already read -1 at its end
    # (it slid into the escape, Fig. 7 at lr 1e-3) is still the unigram plateau
    sliding = (plateau(128, 1024, 1.60, 2),)
    assert claims.claims_single_plateau(cfg(), group(), LINES, [row(plateaus=sliding)])[0].passed
    for plateaus in [(), STAIRS, (plateau(128, 1024, 1.55, 2),), (plateau(128, 1024, 1.70, 1),)]:
        (claim,) = claims.claims_single_plateau(cfg(), group(), LINES, [row(plateaus=plateaus)])
        assert not claim.passed, plateaus


def test_single_plateau_fails_on_a_bigram_stage_as_long_as_a_plateau():
    loss = np.where(STEPS < 640, 1.602, np.where(STEPS < 960, 1.5488, 1.45))[None].astype(float)
    (claim,) = claims.claims_single_plateau(
        cfg(), group(test_loss=loss), LINES, [row(plateaus=(plateau(128, 512, 1.602, 1),))]
    )
    assert claim.measured["steps_near_bigram_line"] == 5 * 64  # snapshots 640..896
    assert claim.passed  # shorter than min_plateau
    loss = np.where(STEPS < 640, 1.602, np.where(STEPS < 1280, 1.5488, 1.45))[None].astype(float)
    (claim,) = claims.claims_single_plateau(
        cfg(), group(test_loss=loss), LINES, [row(plateaus=(plateau(128, 512, 1.602, 1),))]
    )
    assert claim.measured["steps_near_bigram_line"] == 10 * 64 and not claim.passed


# ----------------------------------------------------------------------------- stationarity


def stationarity_rows(seq_lens=(32, 128, 512), cs=(4.0, 8.0), n=3, grad=None):
    """theta_* rows (k = 1, 2; fixed c and c = c0 + log T) and random rows satisfying C5-C7:
    k = 1 and inactive heads exactly 0; c >= 8 falls 1/T; c = 4 levels off at 0.1."""
    grad = grad or (
        lambda k, c, T, rule: (
            0.0 if k == 1 else (0.1 + 10.0 / T if c < 8 and rule == "fixed" else 10.0 / T)
        )
    )

    def row(point, rule, k, c, T, value):
        return dict(point=point, rule=rule, k=k, c=c, T=T, n=n, grad_plain=value,
                    grad_unbiased=value, grad_noise=1e-4)  # fmt: skip

    rows = []
    for T in seq_lens:
        for k in (1, 2):
            for rule, c in [("fixed", c) for c in cs] + [("log", 4.0 + math.log(T))]:
                r = row("theta_star", rule, k, c, T, grad(k, c, T, rule))
                r.update({f"grad_plain/{b}/head{h}": 0.0 for b in ("A1", "V1") for h in range(n)})
                rows.append(r)
        rows.append(row("random", "init", None, math.nan, T, 1.0))
    return rows


def test_stationarity_passes_on_satisfying_rows():
    found = stationarity_claims.study_claims(stationarity_rows())
    assert len(found) == 6 and all(c.passed for c in found), [
        (c.claim, c.measured) for c in found if not c.passed
    ]
    assert all(c.kind == "paper" for c in found)


def _failed(rows):
    return [c.claim for c in stationarity_claims.study_claims(rows) if not c.passed]


def test_stationarity_each_claim_fails_on_violating_rows():
    rows = stationarity_rows()
    rows[0]["grad_plain"] = 1e-9  # k = 1 not exactly stationary
    rows[3]["grad_plain/A1/head2"] = 1e-9  # an inactive head moves
    assert _failed(rows) == [
        "theta_*^1 (Q2 = K2 = 0) is exactly stationary for every T and c",
        "the inactive heads' blocks (h >= k) have exactly zero gradient",
    ]

    def flat(k, c, T, rule):  # no fall; above the random init
        return 0.0 if k == 1 else 2.0

    failed = _failed(stationarity_rows(grad=flat))
    assert (
        len(failed) == 3
        and "falls with T" in failed[0]
        and "decreases along T" in failed[1]
        and "flatter than a random" in failed[2]
    )

    def falling(k, c, T, rule):  # c = 4 keeps falling
        return 0.0 if k == 1 else 10.0 / T

    assert _failed(stationarity_rows(grad=falling)) == [
        "theta_*^2(c = 4): at fixed small c the norm levels off in T"
    ]


def test_stationarity_nan_gradients_fail():
    """Python's max() skips a NaN after a number; the claims must not."""
    rows = stationarity_rows()
    rows[3]["grad_plain"] = math.nan  # T = 32, k = 1, log rule: after the zeros
    rows[4]["grad_plain/V1/head2"] = math.nan
    for r in rows:
        if r["point"] == "theta_star" and r["k"] == 2 and r["T"] == 512 and r["c"] == 8.0:
            r["grad_unbiased"] = math.nan
    assert len(_failed(rows)) == 3


def test_stationarity_missing_inputs_are_not_reproduced():
    """No c >= 8 (the theorem's check had silently gone) and two sequence lengths (the small-c
    check compared the longest T with itself)."""
    failed = _failed(stationarity_rows(seq_lens=(32, 512), cs=(4.0,)))
    assert any("c >= 8" in f for f in failed) and any("levels off" in f for f in failed)
