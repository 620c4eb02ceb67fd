"""Markov claim functions on hand-made results: each claim fails on a result that violates it (no
claim passes vacuously) and passes on one that satisfies it. No training."""

import math

import numpy as np
import pytest

from landscape.engine import training
from landscape.markov import claims as claims_lib
from landscape.markov import experiment

SNAPS = 10


def group(runs, tied=True, num_layers=1, num_states=2, params=None):
    """runs: [(p, q, outcome)] with outcome "stuck" (the unigram, f0 = f1 = pi_1), "escaped"
    (the bigram, f0 = p, f1 = 1 - q; after a plateau at the unigram), or a final loss."""
    cfg = experiment.default_config()
    cfg.model.update(tied=tied, num_layers=num_layers)
    cfg.chain.num_states = num_states
    R = len(runs)
    test_loss, f0, f1 = np.zeros((R, SNAPS)), np.zeros((R, SNAPS)), np.zeros((R, SNAPS))
    for r, (p, q, outcome) in enumerate(runs):
        unigram, bigram = claims_lib.references(cfg, p, q)
        pi1 = p / (p + q)
        final = {"stuck": unigram, "escaped": bigram}.get(outcome, outcome)
        test_loss[r] = np.r_[np.full(3, unigram), np.full(SNAPS - 3, final)]
        f0[r, -1], f1[r, -1] = (pi1, pi1) if outcome == "stuck" else (p, 1 - q)
    snapshots = {"test_loss": test_loss}
    if num_states == 2:
        snapshots.update(f0=f0, f1=f1)
    result = training.RunResult(
        hparams={
            "chain.p": np.array([r[0] for r in runs]),
            "chain.q": np.array([r[1] for r in runs]),
            "optim.lr": np.full(R, 1e-3),
        },
        seeds=np.arange(R),
        losses=np.ones((R, 5)),
        metrics={},
        snapshot_steps=np.arange(SNAPS) * 10,
        snapshots=snapshots,
        final_params=params or {},
        first_nonfinite_step=-np.ones(R, np.int64),
        compile_seconds=0.0,
        run_seconds=0.0,
    )
    return dict(fields={"model.tied": tied}, cfg=cfg, result=result)


def failed(claims):
    return [c.claim for c in claims if not c.passed]


# ----------------------------------------------------------------------------- Fig. 3


FIG3_OK = [
    group([(0.5, 0.8, "stuck"), (0.2, 0.3, "escaped")], tied=True),
    group([(0.5, 0.8, "escaped"), (0.2, 0.3, "escaped")], tied=False),
]


def test_fig3_passes_on_the_paper_outcome():
    claims = claims_lib.claims_fig3(None, FIG3_OK)
    assert len(claims) == 4 and not failed(claims) and {c.kind for c in claims} == {"paper"}


@pytest.mark.parametrize(
    "tied, outcomes",
    [
        (True, ["escaped", "escaped"]),  # the tied model is not trapped at (0.5, 0.8)
        (True, ["stuck", "stuck"]),  # the tied model is trapped at (0.2, 0.3)
        (False, ["stuck", "escaped"]),  # the untied model is trapped
        (False, [math.nan, "escaped"]),  # a diverged run
    ],
)
def test_fig3_fails_on_violating_outcomes(tied, outcomes):
    g = group([(0.5, 0.8, outcomes[0]), (0.2, 0.3, outcomes[1])], tied=tied)
    assert len(failed(claims_lib.claims_fig3(None, [g]))) == 1


def test_fig3_a_missing_point_is_not_reproduced():
    claims = claims_lib.claims_fig3(None, [group([(0.2, 0.3, "escaped")], tied=True)])
    assert failed(claims) and "not measured" in claims[0].measured


# ----------------------------------------------------------------------------- Fig. 4


GRID = [(p, q) for p in (0.2, 0.8) for q in (0.2, 0.8)]  # p + q < 1, = 1, = 1, > 1


def fig4_tied(above="stuck", below="escaped"):
    return group([(p, q, above if p + q > 1 + 1e-9 else below) for p, q in GRID], tied=True)


def test_fig4_passes_on_the_demarcation():
    claims = claims_lib.claims_fig4(
        None, [fig4_tied(), group([(p, q, "escaped") for p, q in GRID], tied=False)]
    )
    assert len(claims) == 3 and not failed(claims)


def test_fig4_fails_on_violations():
    assert len(failed(claims_lib.claims_fig4(None, [fig4_tied(below="stuck")]))) == 1
    assert len(failed(claims_lib.claims_fig4(None, [fig4_tied(above="escaped")]))) == 1
    untied = group([(0.2, 0.2, "stuck"), (0.8, 0.8, "escaped")], tied=False)
    assert len(failed(claims_lib.claims_fig4(None, [untied]))) == 1


def test_fig4_nan_runs_and_missing_sides_fail():
    """A diverged run is not 'not stuck'; no p + q < 1 cell used to pass 'no stuck run there'."""
    assert len(failed(claims_lib.claims_fig4(None, [fig4_tied(below=math.nan)]))) == 1
    untied = group([(0.2, 0.2, math.nan), (0.8, 0.8, "escaped")], tied=False)
    assert len(failed(claims_lib.claims_fig4(None, [untied]))) == 1
    only_above = group([(0.8, 0.8, "stuck"), (0.6, 0.8, "stuck")], tied=True)
    claims = claims_lib.claims_fig4(None, [only_above])
    assert failed(claims) == [claims[0].claim] and "not measured" in claims[0].measured
    only_below = group([(0.2, 0.2, "escaped")], tied=True)
    assert len(failed(claims_lib.claims_fig4(None, [only_below]))) == 1


# ----------------------------------------------------------------------------- Fig. 1


def test_fig1():
    one, two = (group([(0.5, 0.8, o)] * 2, num_layers=n) for o, n in (("stuck", 1), ("escaped", 2)))
    assert not failed(claims_lib.claims_fig1(None, [one, two]))
    one, two = (group([(0.5, 0.8, o)] * 2, num_layers=n) for o, n in (("escaped", 1), ("stuck", 2)))
    assert len(failed(claims_lib.claims_fig1(None, [one, two]))) == 2
    # depth 2 escaping with no plateau at H(pi) first
    two = group([(0.5, 0.8, "escaped")], num_layers=2)
    two["result"].snapshots["test_loss"][:] = two["result"].snapshots["test_loss"][:, -1:]
    assert len(failed(claims_lib.claims_fig1(None, [two]))) == 1


def test_fig1_without_the_point_is_not_reproduced():
    """Runs elsewhere than (0.5, 0.8) used to be judged as if they were there."""
    claims = claims_lib.claims_fig1(None, [group([(0.2, 0.3, "stuck")], num_layers=1)])
    assert failed(claims) and "not measured" in claims[0].measured


# ----------------------------------------------------------------------------- Fig. 5


def fig5_cfg():
    cfg = experiment.default_config()
    cfg.chain.num_states = 5
    return cfg


def test_fig5():
    tied = group([(0.3, 0.8, "escaped"), (0.9, 0.8, "stuck")], num_states=5)
    untied = group([(0.3, 0.8, "escaped"), (0.9, 0.8, "escaped")], tied=False, num_states=5)
    assert not failed(claims_lib.claims_fig5(fig5_cfg(), [tied, untied]))
    tied = group([(0.3, 0.8, "stuck"), (0.9, 0.8, "escaped")], num_states=5)
    untied = group([(0.3, 0.8, "escaped"), (0.9, 0.8, "stuck")], tied=False, num_states=5)
    assert len(failed(claims_lib.claims_fig5(fig5_cfg(), [tied, untied]))) == 3


def test_fig5_at_the_iid_point_escaped_is_not_free():
    """p = (S-1)/S: unigram = bigram; a loss far from both used to count as 'escaped'."""
    far = group([(0.8, 0.8, 3.0)], tied=False, num_states=5)
    assert len(failed(claims_lib.claims_fig5(fig5_cfg(), [far]))) == 1
    near = group([(0.8, 0.8, "escaped")], tied=False, num_states=5)
    assert not failed(claims_lib.claims_fig5(fig5_cfg(), [near]))


# ----------------------------------------------------------------------------- App. D


def _appendix_params(rng, d=4, value=None):
    r = 4 * d

    def leaf(*shape):
        return rng.normal(size=(1,) + shape) if value is None else np.full((1,) + shape, value)

    return {
        "e": leaf(d),
        "pos": leaf(8, d),
        "b": leaf(),
        "block_0": {"W_1": leaf(r, d), "W_2": leaf(d, r)},
    }


def test_appendix_d_fails_on_unstructured_and_nan_weights():
    rng = np.random.default_rng(0)
    g = group([(0.2, 0.3, "escaped")], params=_appendix_params(rng))
    (claim,) = claims_lib.claims_appendix_d(None, [g])
    assert not claim.passed
    g = group([(0.2, 0.3, "escaped")], params=_appendix_params(rng, value=np.nan))
    (claim,) = claims_lib.claims_appendix_d(None, [g])  # used to raise in the SVD
    assert not claim.passed and claim.measured == "non-finite weights"
