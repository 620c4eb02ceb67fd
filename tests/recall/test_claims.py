"""Recall claim functions on hand-made flows and SGD results: each claim fails on input that
violates it (no claim passes vacuously, none raises on it) and, where cheap to build, passes on
input that satisfies it. No training, no gradient flow."""

import numpy as np
import pytest

from landscape.engine import training
from landscape.recall import claims as claims_lib
from landscape.recall import experiment, theory

K, NR = 4, 4
L = theory.plateau_levels(K, NR)


def flow_cfg(kind="first_jump"):
    cfg = experiment.default_config()
    cfg.experiment = "flow"
    cfg.init.kind = kind
    return cfg


def flow_group(eps, times, loss, w=None, beta=None, grid=None):
    R, S = loss.shape
    w = np.zeros((R, S, K, K)) if w is None else w
    beta = np.zeros((R, S, K)) if beta is None else beta
    return dict(
        eps=np.asarray(eps, float),
        times=times,
        loss=loss,
        grid=grid or [{"init.eps": e} for e in eps],
        params={"w": w, "beta": beta},
    )


def step_loss(times, T, levels=L[:2]):
    """L_0 until T, then L_1 (slightly above): a first jump at T."""
    return np.where(times < T, levels[0], levels[1] + 1e-3)


def by_claim(claims, start):
    found = [c for c in claims if c.claim.startswith(start)]
    assert len(found) == 1, [c.claim for c in claims]
    return found[0]


# ----------------------------------------------------------------------------- E1 first jump


def test_first_jump_one_eps_does_not_show_a_rise():
    """One eps: the 'eps*T rises as eps -> 0' check had an empty diff (vacuously increasing)."""
    eps = 0.001
    T = theory.jump_time(K, NR, eps)
    times = np.linspace(0, 2 * T, 2001)[None]
    claims = claims_lib.claims_first_jump(
        flow_cfg(), [flow_group([eps], times, step_loss(times, T))]
    )
    assert not by_claim(claims, "eps*T_mid rises").passed


def test_first_jump_nan_weights_leave_the_manifold():
    eps, T = 0.01, theory.jump_time(K, NR, 0.01)
    times = np.linspace(0, 2 * T, 501)[None]
    w = np.zeros((1, 501, K, K))
    good = claims_lib.claims_first_jump(
        flow_cfg(), [flow_group([eps], times, step_loss(times, T), w=w)]
    )
    assert by_claim(good, "the flow stays on M_1").passed
    w[0, 100, 0, 2] = np.nan  # python's max(0, nan, nan) was 0
    claims = claims_lib.claims_first_jump(
        flow_cfg(), [flow_group([eps], times, step_loss(times, T), w=w)]
    )
    assert not by_claim(claims, "the flow stays on M_1").passed
    assert not by_claim(claims, "f(alpha_1) - beta_1^2/4 is conserved").passed


def test_first_jump_without_a_jump_fails():
    times = np.linspace(0, 1e5, 501)[None]
    claims = claims_lib.claims_first_jump(
        flow_cfg(), [flow_group([0.01], times, np.full((1, 501), L[0]))]
    )
    for start in ("eps*T_mid rises", "the jump (10% -> 90%", "plateaus: L(0)"):
        assert not by_claim(claims, start).passed


# ----------------------------------------------------------------------------- E1 tail


def test_ei_tail_without_late_saves_is_not_reproduced():
    times = np.linspace(0, 1e4, 100)[None]  # used to raise in polyfit
    claims = claims_lib.claims_ei_tail(
        flow_cfg(), [flow_group([0.01], times, np.full((1, 100), L[1]))]
    )
    assert len(claims) == 2 and not any(c.passed for c in claims)
    assert all("not measured" in c.measured for c in claims)


def test_ei_tail_on_the_predicted_tail():
    """e^alpha = s ln t with the predicted slope and L - L_1 = 0.24 / (t ln t): both pass; a
    flat alpha and a loss above 1/4 fail both."""
    t = np.logspace(5, 8, 200)
    slope = K**2 / (4 * (K - 1))
    alpha = np.log(slope * np.log(t))
    w = np.zeros((1, len(t), K, K))
    w[0, :, 0, 0] = alpha * (1 - 1 / K)
    w[0, :, 0, 1:] = (-alpha / K)[:, None]  # focus logit alpha_1 = alpha
    good = flow_group([0.01], t[None], (L[1] + 0.24 / (t * np.log(t)))[None], w=w)
    assert all(c.passed for c in claims_lib.claims_ei_tail(flow_cfg(), [good]))
    bad = flow_group([0.01], t[None], (L[1] + 0.3 / (t * np.log(t)))[None])
    assert not any(c.passed for c in claims_lib.claims_ei_tail(flow_cfg(), [bad]))


# ----------------------------------------------------------------------------- E2 later jumps


def test_later_jumps_without_a_jump_fail_instead_of_raising():
    cfg = flow_cfg("later_jump")
    times = np.linspace(0, 1e5, 301)[None]
    beta = np.zeros((1, 301, K))
    beta[0, :, 0] = cfg.init.big
    g = flow_group(
        [0.01],
        times,
        np.full((1, 301), L[1]),
        beta=beta,
        grid=[{"init.eps": 0.01, "init.stage": 2}],
    )
    claims = claims_lib.claims_later_jumps(cfg, [g])
    assert len(claims) == 2 and not any(c.passed for c in claims)
    assert "no jump found" in claims[1].measured


def test_later_jumps_heads_that_move_before_the_jump_fail():
    cfg = flow_cfg("later_jump")
    eps = 0.01
    T = theory.jump_time(K, NR, eps, stage=2)
    times = np.linspace(0, 2 * T, 2001)[None]
    beta = np.zeros((1, 2001, K))
    beta[0, :, 0] = cfg.init.big
    g = flow_group(
        [eps],
        times,
        step_loss(times, T, L[1:3]),
        beta=beta.copy(),
        grid=[{"init.eps": eps, "init.stage": 2}],
    )
    assert all(c.passed for c in claims_lib.claims_later_jumps(cfg, [g]))
    beta[0, 500, 0] += 1e-6
    g["params"]["beta"] = beta
    failed = [c.claim for c in claims_lib.claims_later_jumps(cfg, [g]) if not c.passed]
    assert len(failed) == 1 and "stay put" in failed[0]


# ----------------------------------------------------------------------------- E3 stages


def test_stages_wrong_order_and_no_jumps_fail():
    cfg = flow_cfg("shape")
    times = np.linspace(0, 1e5, 301)[None]
    beta = np.zeros((1, 301, K))
    for h, start in zip((2, 1, 0), (50, 100, 150), strict=True):  # smallest beta(0) first
        beta[0, start:, h] = 2.0
    claims = claims_lib.claims_stages(
        cfg, [flow_group([0.01], times, np.full((1, 301), L[0]), beta=beta)]
    )
    assert len(claims) == 2 and not any(c.passed for c in claims)


# ----------------------------------------------------------------------------- SGD (E4-E6)


def sgd_group(loss_name="ce", order=(0, 1, 2), stages=True, w_drift=0.0, R=2, k=K, **model):
    """Eval loss on L_0, L_1, L_2 for 10 snapshots each then 0 (or straight to 0); heads with
    |beta| > 1 from snapshot 10, 20, 30 in `order`; the last head at 0.01."""
    cfg = experiment.default_config()
    cfg.model.loss = loss_name
    cfg.model.update(model)
    cfg.task.k = k
    levels = theory.plateau_levels(k, NR)
    S = 60
    curve = (
        np.concatenate([np.repeat(levels[:-1], 10), np.zeros(S - 10 * (k - 1))])
        if stages
        else np.r_[levels[0], np.zeros(S - 1)]
    )
    beta = np.full((R, S, cfg.model.num_heads), 0.01)
    for i, h in enumerate(order):
        beta[:, 10 * (i + 1) :, h] = 2.0
    w_sum = np.zeros((R, S, cfg.model.num_heads))
    w_sum[:, -1] += w_drift
    result = training.RunResult(
        hparams={"optim.lr": np.ones(R), "init.eps": np.full(R, 0.02)},
        seeds=np.arange(R),
        losses=np.ones((R, 5)),
        metrics={},
        snapshot_steps=np.arange(S) * 10,
        snapshots={"eval_loss": np.tile(curve, (R, 1)), "beta": beta, "w_sum": w_sum},
        final_params={},
        first_nonfinite_step=-np.ones(R, np.int64),
        compile_seconds=0.0,
        run_seconds=0.0,
    )
    return dict(fields={"model.loss": loss_name}, cfg=cfg, result=result)


def test_fig1_passes_and_conservation_is_a_sanity_check():
    claims = claims_lib.claims_fig1(None, [sgd_group()])
    assert all(c.passed for c in claims) and [c.kind for c in claims] == [
        "paper",
        "paper",
        "sanity",
    ]


@pytest.mark.parametrize(
    "kwargs, failing",
    [
        (dict(stages=False), "rests on"),
        (dict(order=(1, 0, 2)), "heads activate"),
        (dict(order=(0, 1, 2, 3)), "heads activate"),  # the smallest head activates too
        (dict(w_drift=1e-6), "1^T w^h is conserved"),
    ],
)
def test_fig1_each_claim_fails(kwargs, failing):
    failed = [c.claim for c in claims_lib.claims_fig1(None, [sgd_group(**kwargs)]) if not c.passed]
    assert len(failed) == 1 and failing in failed[0], failed


def test_dp_vs_ce():
    def dp(**kw):  # no closed form: no GF map
        return sgd_group("dp", exact_query=False, **kw)

    same = by_claim(claims_lib.claims_dp_vs_ce(None, [dp(), sgd_group("ce")]), "DP and CE")
    assert same.passed
    differ = claims_lib.claims_dp_vs_ce(None, [dp(), sgd_group("ce", order=(1, 0, 2))])
    assert not by_claim(differ, "DP and CE").passed
    # no head activates anywhere: the orders are equal ([] == []) but show nothing
    none = claims_lib.claims_dp_vs_ce(None, [dp(order=()), sgd_group("ce", order=())])
    assert not by_claim(none, "DP and CE").passed
    # one loss only: nothing is compared
    alone = claims_lib.claims_dp_vs_ce(None, [sgd_group("ce"), sgd_group("ce")])
    assert not by_claim(alone, "DP and CE").passed


def test_ablations():
    ok = claims_lib.claims_ablations(
        None, [sgd_group(), sgd_group(response_only=False, stages=False)]
    )
    assert all(c.passed for c in ok)
    bad = claims_lib.claims_ablations(
        None, [sgd_group(stages=False), sgd_group(response_only=False)]
    )
    assert not any(c.passed for c in bad)
    # k = 2: no plateau after L_0, the picture is not testable (used to pass as stage-wise)
    two = sgd_group(k=2, order=(0,), num_heads=2)
    assert not any(c.passed for c in claims_lib.claims_ablations(None, [two]))
