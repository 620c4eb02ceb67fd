"""Checks of landscape.recall.theory against the numbers in notes/assoc_recall.md §3, §4.1-4.8."""

import math

import numpy as np
import pytest

from landscape.recall import theory as T


def _rk4(rhs, y, t0, t1, num_steps):
    """Fixed-step RK4 for y' = rhs(t, y) on [t0, t1]; returns y(t1)."""
    dt = (t1 - t0) / num_steps
    t = t0
    for _ in range(num_steps):
        k1 = rhs(t, y)
        k2 = rhs(t + dt / 2, y + dt / 2 * k1)
        k3 = rhs(t + dt / 2, y + dt / 2 * k2)
        k4 = rhs(t + dt, y + dt * k3)
        y = y + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        t += dt
    return y


def _ode(k, n_r, c=1.0):
    return lambda t, y: np.array(T.first_jump_ode(y[0], y[1], k, n_r, c))


def _f_wrong_sign(alpha, k):
    # Thm 3.1(d) as printed in the main text (l. 131), with the "-" typo (notes §4.1 item 4)
    return 2 * (k - 1) / k**2 * (np.sinh(alpha) - alpha) - (k - 1) / k * (
        np.exp(-alpha) + alpha - 1
    )


@pytest.fixture(scope="module")
def first_jump_trajectory():
    """I_1 from alpha = 0, beta = eps = 0.05 (k = n_R = 4): states at t = 0, 1000, ..., 4000.

    Fixed-step RK4, dt = 1."""
    k, n_r = 4, 4
    ys = [np.array([0.0, 0.05])]
    for _ in range(4):
        ys.append(_rk4(_ode(k, n_r), ys[-1], 0.0, 1000.0, 1000))
    return np.array(ys)


# ----------------------------------------------------------------------------------------- plateaus


def test_loss_scale():
    assert T.loss_scale(4) == 0.75
    assert T.loss_scale(2) == 0.5


@pytest.mark.parametrize(
    "k, n_r, levels",
    [
        (3, 2, [0.41667, 0.25, 0.0]),
        (3, 3, [0.55556, 0.33333, 0.0]),
        (4, 2, [0.47917, 0.41667, 0.25, 0.0]),
        (4, 4, [0.71875, 0.625, 0.375, 0.0]),
        (5, 5, [0.79333, 0.76667, 0.66667, 0.4, 0.0]),
    ],
)
def test_plateau_levels_table(k, n_r, levels):
    # notes §3 table
    got = T.plateau_levels(k, n_r)
    assert got.shape == (k,)
    np.testing.assert_allclose(got, levels, atol=5e-6, rtol=0)


# ----------------------------------------------------------------------------------------- f(alpha)


@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_f_zero_and_two_written_forms(k):
    assert T.f_conserved(0.0, k) == 0.0
    alpha = np.linspace(-5, 5, 41)
    sinh_form = 2 * (k - 1) / k**2 * (np.sinh(alpha) - alpha) + (k - 1) / k * (
        np.exp(-alpha) + alpha - 1
    )
    np.testing.assert_allclose(T.f_conserved(alpha, k), sinh_form, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("k", [3, 4, 5])
def test_f_derivative_formula(k):
    # notes §4.1: f'(a) = (k-1)/k^2 (e^a - 1)(e^a + k - 1)/e^a, by central differences
    alpha = np.array([-3.0, -0.7, -0.05, 0.02, 0.4, 1.5, 4.0])
    h = 1e-5
    fd = (T.f_conserved(alpha + h, k) - T.f_conserved(alpha - h, k)) / (2 * h)
    formula = (k - 1) / k**2 * np.expm1(alpha) * (np.exp(alpha) + k - 1) / np.exp(alpha)
    np.testing.assert_allclose(fd, formula, rtol=1e-7, atol=1e-12)


@pytest.mark.parametrize("k", [3, 4, 5])
def test_f_asymptotics(k):
    # small alpha: f ~ (k-1)/(2k) alpha^2; large alpha: f ~ (k-1)/k^2 e^alpha (notes §4.1)
    for a in [1e-3, -1e-3, 1e-5]:
        assert T.f_conserved(a, k) == pytest.approx((k - 1) / (2 * k) * a**2, rel=5 * abs(a))
    for a in [30.0, 40.0]:
        assert T.f_conserved(a, k) == pytest.approx((k - 1) / k**2 * np.exp(a), rel=1e-10)


def test_conserved_quantity_definition():
    alpha, beta = np.array([0.3, -1.0]), np.array([0.2, 2.0])
    np.testing.assert_allclose(
        T.conserved_quantity(alpha, beta, 4), T.f_conserved(alpha, 4) - beta**2 / 4, rtol=1e-15
    )


# ---------------------------------------------------------------------------------------------- ODE


@pytest.mark.parametrize("k, n_r, c", [(4, 4, 1.0), (3, 2, 1.0), (5, 3, 2.5)])
def test_ode_is_gradient_flow_on_manifold(k, n_r, c):
    """On M_1, w^1 = alpha (e_1 - 1/k), so alpha' = -k/(k-1) dL/dalpha and beta' = -dL/dbeta, with
    L = loss_one_head(gamma_one(alpha, beta)) (notes §3, §4.3; checks Xi has no factor 2)."""

    def loss(a, b):
        return T.loss_one_head(T.gamma_one(a, b, k, c), k, n_r)

    h = 1e-5
    for a, b in [(0.1, 0.3), (-0.4, 1.2), (1.5, 2.0), (3.0, 0.7)]:
        dL_da = (loss(a + h, b) - loss(a - h, b)) / (2 * h)
        dL_db = (loss(a, b + h) - loss(a, b - h)) / (2 * h)
        da, db = T.first_jump_ode(a, b, k, n_r, c)
        assert da == pytest.approx(-k / (k - 1) * dL_da, rel=2e-6)
        assert db == pytest.approx(-dL_db, rel=2e-6)


def test_ode_conserves_f_minus_beta_sq(first_jump_trajectory):
    # notes §4.1 item 4 / C5: RK4 dt = 1 from alpha = 0, beta = 0.05 over t in [0, 4000]
    ys = first_jump_trajectory
    q = T.conserved_quantity(ys[:, 0], ys[:, 1], 4)
    assert q[0] == pytest.approx(-(0.05**2) / 4, rel=1e-15)
    assert np.max(np.abs(q - q[0])) < 1e-8
    # the jump happened (eps T_1 ~ 156 at eps = 0.05, notes §4.4), so the check is not vacuous
    assert ys[-1, 0] > 1.0 and ys[-1, 1] > 1.5
    # the main text's "-" sign is not conserved: O(1) drift
    q_wrong = _f_wrong_sign(ys[:, 0], 4) - ys[:, 1] ** 2 / 4
    assert np.max(np.abs(q_wrong - q_wrong[0])) > 0.5


def test_loss_one_head_limits():
    for k, n_r in [(3, 3), (4, 4), (5, 2)]:
        levels = T.plateau_levels(k, n_r)
        assert T.loss_one_head(0.0, k, n_r) == pytest.approx(levels[0], rel=1e-15)
        assert T.loss_one_head(60.0, k, n_r) == pytest.approx(levels[1], rel=1e-14)
        assert T.loss_one_head(1e4, k, n_r) == pytest.approx(levels[1], rel=1e-15)
        g = np.linspace(0, 30, 61)
        assert np.all(np.diff(T.loss_one_head(g, k, n_r)) < 0)


def test_gamma_one_and_xi_stable():
    alpha = np.array([-800.0, -1.0, 0.0, 1.0, 800.0])
    g = T.gamma_one(alpha, 2.0, 4)
    assert np.all(np.isfinite(g))
    np.testing.assert_allclose(g[[0, 2, 4]], [4 * -1 / 3, 0.0, 4.0], rtol=1e-15)
    assert g[3] == pytest.approx(4 * (np.e - 1) / (np.e + 3), rel=1e-15)
    x = T.xi(np.array([-800.0, 0.0, 800.0]), 4, 4)
    assert x[1] == pytest.approx(0.75 / 2 / 16, rel=1e-15)
    assert np.all(np.isfinite(x)) and x[0] >= 0 and x[2] >= 0


# --------------------------------------------------------------------------------------- timescales


@pytest.mark.parametrize(
    "k, n_r, eps_t1, tol",
    [
        (3, 2, 48.97, 0.005),
        (3, 3, 36.73, 0.005),
        (4, 2, 246.25, 0.005),
        (4, 4, 164.17, 0.005),
        (5, 3, 1117.6, 0.05),
        (5, 5, 931.4, 0.05),
    ],
)
def test_first_jump_time(k, n_r, eps_t1, tol):
    # notes §4.4: eps T_1 = pi k k! / (2 c A sqrt(2(k-1)/k)), to the digits the notes give
    assert T.jump_time(k, n_r, 1.0) == pytest.approx(eps_t1, abs=tol)
    assert T.jump_time(k, n_r, 0.01) == pytest.approx(100 * T.jump_time(k, n_r, 1.0), rel=1e-14)
    assert T.jump_time(k, n_r, 1.0, c=2.0) == pytest.approx(T.jump_time(k, n_r, 1.0) / 2, rel=1e-14)


def test_subsequent_jump_times():
    # notes §4.5: k = n_R = 4, eps T_2 -> 43.53, eps T_3 -> 16.76; stage k has no jump
    assert T.jump_time(4, 4, 1.0, stage=2) == pytest.approx(43.53, abs=0.005)
    assert T.jump_time(4, 4, 1.0, stage=3) == pytest.approx(16.76, abs=0.005)
    assert T.jump_time(4, 4, 1.0, stage=4) == math.inf
    with pytest.raises(ValueError):
        T.stage_constants(4, 4, 5)


def test_stage_constants():
    # stage 1 kappa is the first-jump kappa = c A / (k^2 (k-1)!) of notes §4.4
    for k, n_r in [(3, 3), (4, 4), (5, 2)]:
        kappa, lam = T.stage_constants(k, n_r, 1, c=1.5)
        expected = 1.5 * (1 - 1 / n_r) / (k**2 * math.factorial(k - 1))
        assert kappa == pytest.approx(expected, rel=1e-15)
        assert lam == pytest.approx(2 * (k - 1) / k, rel=1e-15)
    assert T.stage_constants(4, 4, 2) == pytest.approx((0.75 / 24, 4 / 3), rel=1e-15)
    assert T.stage_constants(4, 4, 3) == pytest.approx((0.75 / 8, 1.0), rel=1e-15)


def test_ei_tail_predictions(first_jump_trajectory):
    """notes §4.4 regime 2 (C10): continue the I_1 run in s = ln t to t = 1e12 and compare."""
    k, n_r = 4, 4
    rhs_t = _ode(k, n_r)

    def rhs_s(s, y):
        return np.exp(s) * rhs_t(0.0, y)

    y4000 = first_jump_trajectory[-1]
    y8 = _rk4(rhs_s, y4000, np.log(4000.0), np.log(1e8), 1500)
    y12 = _rk4(rhs_s, y8, np.log(1e8), np.log(1e12), 1000)
    pred = T.ei_tail(np.array([1e8, 1e12]), k, n_r)
    assert pred["exp_alpha_slope"] == pytest.approx(4 / 3, rel=1e-15)
    slope = (np.exp(y12[0]) - np.exp(y8[0])) / (pred["log_t"][1] - pred["log_t"][0])
    assert slope == pytest.approx(pred["exp_alpha_slope"], rel=0.03)
    beta_slope = (y12[1] ** 2 - y8[1] ** 2) / (pred["log_t"][1] - pred["log_t"][0])
    assert beta_slope == pytest.approx(pred["beta_sq_slope"], rel=0.08)
    # t ln t (L - L_1) = 0.221-0.228 measured in the notes, tending to 1/(4c) = 0.25
    excess = T.loss_one_head(T.gamma_one(y12[0], y12[1], k), k, n_r) - T.plateau_levels(k, n_r)[1]
    assert 0.2 < 1e12 * np.log(1e12) * excess < 0.25
    assert pred["excess_loss"][1] == pytest.approx(0.25 / (1e12 * np.log(1e12)), rel=1e-14)
    assert pred["loss"][1] == pytest.approx(0.625 + pred["excess_loss"][1], rel=1e-15)


# --------------------------------------------------------------------------------------- 2-D system


def test_blow_up_time_branches():
    kappa, lam = T.stage_constants(4, 4, 1)
    # E > 0 from a = 0: the first-jump time
    assert T.blow_up_time(0.0, 1.0, kappa, lam) == pytest.approx(164.17, abs=0.005)
    # E = 0 (b^2 = lam a^2) and its continuity from both sides
    a = 0.4
    exact = 1 / (kappa * lam * a)
    b_sep = math.sqrt(lam) * a
    assert T.blow_up_time(a, b_sep, kappa, lam) == pytest.approx(exact, rel=1e-12)
    assert T.blow_up_time(a, b_sep * (1 + 1e-9), kappa, lam) == pytest.approx(exact, rel=1e-7)
    assert T.blow_up_time(a, b_sep * (1 - 1e-9), kappa, lam) == pytest.approx(exact, rel=1e-7)
    # E < 0, a > r: formula of notes §4.8
    a, b = 0.5, 0.3
    r = math.sqrt(-(b**2 - lam * a**2) / lam)
    assert T.blow_up_time(a, b, kappa, lam) == pytest.approx(
        math.log((a + r) / (a - r)) / (2 * kappa * lam * r), rel=1e-12
    )
    # dead heads and frozen heads never blow up
    assert T.blow_up_time(-0.5, 0.3, kappa, lam) == math.inf
    assert T.blow_up_time(-0.4, b_sep, kappa, lam) == math.inf
    assert T.blow_up_time(0.7, 0.0, kappa, lam) == math.inf
    assert T.blow_up_time(math.inf, math.inf, kappa, lam) == 0.0


@pytest.mark.parametrize("a, b", [(0.0, 1.0), (-0.3, 0.8), (0.5, 0.3), (-0.5, 0.3), (0.4, -0.3)])
def test_advance_conserves_energy_and_composes(a, b):
    kappa, lam = T.stage_constants(4, 4, 2)
    energy = b * b - lam * a * a
    T_blow = T.blow_up_time(a, b, kappa, lam)
    t = 20.0 if T_blow == math.inf else 0.6 * T_blow
    a1, b1 = T.advance(a, b, kappa, lam, t)
    assert b1 * b1 - lam * a1 * a1 == pytest.approx(energy, rel=1e-9, abs=1e-14)
    assert math.copysign(1, b1) == math.copysign(1, b)
    a2, b2 = T.advance(*T.advance(a, b, kappa, lam, t / 2), kappa, lam, t / 2)
    assert (a2, b2) == pytest.approx((a1, b1), rel=1e-10)
    # the remaining blow-up time shrinks by t
    assert T.blow_up_time(a1, b1, kappa, lam) == pytest.approx(T_blow - t, rel=1e-9)
    # and it agrees with integrating a' = kappa b^2, b' = kappa lam a b directly

    def rhs(_, y):
        return np.array([kappa * y[1] ** 2, kappa * lam * y[0] * y[1]])

    np.testing.assert_allclose(_rk4(rhs, np.array([a, b]), 0.0, t, 400), [a1, b1], rtol=1e-8)
    assert T.advance(a, b, kappa, lam, T_blow * 1.01)[0] == math.inf or T_blow == math.inf


# ---------------------------------------------------------------------------------------- recursion


@pytest.mark.parametrize(
    "b0, taus, order, tol",
    [
        ((1, 0.8, 0.6, 0.4), [164.17, 175.26, 182.67], [0, 1, 2], 0.005),
        ((1, 0.5, 0.25, 0.1), [164.17, 208.39, 243.44], [0, 1, 2], 0.005),
        ((0.7, 1, 0.3, 0.5), [164.17, 183.16, 193.30], [1, 0, 3], 0.005),
        ((1, 0.9, 0.2, 0.15), [164.17, 169.10, 236.25], [0, 1, 2], 0.005),
        ((1, 0.3, 0.1, 0.03), [164.2, 266.9, 382.3], [0, 1, 2], 0.05),
    ],
)
def test_vanishing_init_table(b0, taus, order, tol):
    # notes §4.8 table, k = n_R = 4, w(0) = 0
    res = T.vanishing_init_jumps(b0, 4, 4)
    np.testing.assert_allclose(res["taus"], taus, atol=tol)
    assert res["order"] == order
    assert res["dead"] == []
    assert res["unused"] == sorted(set(range(4)) - set(order))


def test_vanishing_init_k3():
    res = T.vanishing_init_jumps((1, 0.5, 0.2), 3, 3)
    np.testing.assert_allclose(res["taus"], [36.73, 51.41], atol=0.005)
    assert res["order"] == [0, 1] and res["unused"] == [2]


def test_vanishing_init_ties_and_permutations():
    # equal b0: one simultaneous drop at 164.17 (notes §4.7); ties go to the lowest index
    res = T.vanishing_init_jumps((1, 1, 1, 1), 4, 4)
    np.testing.assert_allclose(res["taus"], [164.1664] * 3, atol=1e-4)
    assert res["order"] == [0, 1, 2] and res["unused"] == [3]
    # permuting b0 permutes the heads and keeps the times (notes §4.7, C12)
    base = T.vanishing_init_jumps((1, 0.8, 0.6, 0.4), 4, 4)
    perm = [2, 0, 3, 1]  # new head j has old head perm[j]'s b0
    res = T.vanishing_init_jumps(np.array([1, 0.8, 0.6, 0.4])[perm], 4, 4)
    np.testing.assert_allclose(res["taus"], base["taus"], rtol=1e-14)
    assert [perm[h] for h in res["order"]] == base["order"]


def test_vanishing_init_k_minus_1_heads():
    # heads are independent at leading order: dropping the never-used head changes nothing
    res = T.vanishing_init_jumps((1, 0.5, 0.25), 4, 4)
    np.testing.assert_allclose(res["taus"], [164.17, 208.39, 243.44], atol=0.005)
    assert res["order"] == [0, 1, 2] and res["unused"] == [] and res["dead"] == []
    with pytest.raises(ValueError):
        T.vanishing_init_jumps((1, 0.5), 4, 4)


def test_vanishing_init_w0_shift():
    b0 = np.array([1, 0.5, 0.25, 0.1])
    # a constant per head changes nothing (softmax shift symmetry, notes §2.2)
    res = T.vanishing_init_jumps(b0, 4, 4, w0=np.arange(4.0)[:, None] * np.ones((1, 4)))
    np.testing.assert_allclose(res["taus"], [164.17, 208.39, 243.44], atol=0.005)
    # a0 derived from w0 = (focus - mean of the other offsets), same stage-1 time as a0 directly
    w0 = np.array(
        [[0.3, 0.1, -0.2, 0.4], [0.0, -0.5, 0.2, 0.9], [1.0, 0.2, 0.0, -1.0], [0.0, 0.0, 0.0, 0.3]]
    )
    a0 = [w0[h, h] - np.delete(w0[h], h).mean() for h in range(4)]
    with_w0 = T.vanishing_init_jumps(b0, 4, 4, w0=w0)
    with_a0 = T.vanishing_init_jumps(b0, 4, 4, a0=a0)
    assert with_w0["taus"][0] == with_a0["taus"][0]
    with pytest.raises(ValueError):
        T.vanishing_init_jumps(b0, 4, 4, a0=a0, w0=w0)


@pytest.mark.parametrize(
    "w0, b0, taus_gf, order, dead",
    [
        (
            [
                [-0.8019, -1.3244, -0.2484, 0.4204],
                [1.136, 0.1097, -0.5526, -0.7848],
                [0.7487, 1.6348, 0.2728, -1.2333],
                [-0.9583, 1.6, 0.2029, -1.7321],
            ],
            [0.0837, 1.1632, 0.6293, 0.488],
            [126.489, 160.131],
            [1, 2],
            [0, 3],
        ),
        (
            [
                [-0.7133, 0.5534, -0.0631, -0.5894],
                [0.4096, 0.8299, -1.643, -0.2567],
                [-0.9807, -0.1732, -1.2894, 0.0207],
                [-0.0379, -0.3043, -1.0479, -0.3962],
            ],
            [1.0913, 1.3552, 0.2248, 1.1093],
            [72.350, 90.561, 106.975],
            [1, 3, 0],
            [2],
        ),
    ],
)
def test_vanishing_init_random_w0_matches_gradient_flow(w0, b0, taus_gf, order, dead):
    """Reference eps T_m: loss crossing (L_{m-1} + L_m)/2 in an LSODA (rtol 1e-10) gradient flow
    of the closed-form population loss (notes §3) at eps = 1e-4, run once by this module's author.
    The notes report <= 0.03 tau-units agreement (§4.8); without step 3's shift the 2nd jump is
    off by > 0.3."""
    res = T.vanishing_init_jumps(b0, 4, 4, w0=w0)
    np.testing.assert_allclose(res["taus"], taus_gf, atol=0.04)
    assert res["order"] == order and res["dead"] == dead
    a0 = [np.array(w0)[h, h] - np.delete(np.array(w0)[h], h).mean() for h in range(4)]
    no_shift = T.vanishing_init_jumps(b0, 4, 4, a0=a0)
    assert abs(no_shift["taus"][1] - taus_gf[1]) > 0.3


# --------------------------------------------------------------------------------------- head death


def test_head_death_example():
    # notes §4.7: k = n_R = 4, alpha0 = -0.05, beta0 = 0.01 -> predicted final alpha -0.0495
    dies, final_alpha = T.head_death(-0.05, 0.01, 4)
    assert dies
    assert round(final_alpha, 4) == -0.0495
    # exact inversion of f (beta = 0 on the conservation law) gives the measured -0.0493
    dies, final_exact = T.head_death(-0.05, 0.01, 4, exact=True)
    assert dies and round(final_exact, 4) == -0.0493
    C = T.f_conserved(-0.05, 4) - 0.01**2 / 4
    assert T.f_conserved(final_exact, 4) == pytest.approx(C, rel=1e-12)


def test_head_death_criterion():
    assert T.head_death(0.01, 0.01, 4) == (False, math.inf)  # alpha0 >= 0 activates
    assert T.head_death(-0.05, 0.2, 4) == (False, math.inf)  # f(alpha0) < beta0^2/4
    assert T.head_death(-0.05, 0.0, 4) == (True, -0.05)  # frozen head
    # agrees with the blow-up time of the stage-1 2-D system (E < 0, a < 0 <=> dead)
    kappa, lam = T.stage_constants(4, 4, 1)
    for a, b in [(-0.05, 0.01), (-0.05, 0.2), (-0.3, 0.3), (-0.3, 0.45)]:
        dies, _ = T.head_death(a, b, 4)
        assert dies == (T.blow_up_time(a, b, kappa, lam) == math.inf)
