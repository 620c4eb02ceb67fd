"""Checks of landscape.scan_snap.theory against the numbers in notes/scan_snap.md §4.1–4.5, §5.3,
§5.8, §5.9."""

import numpy as np
import pytest

from landscape.scan_snap import theory as T

M_BIG, K_BIG = 1000, 10


# ------------------------------------------------------------------------------------------ decoder


@pytest.mark.parametrize("M, expected", [(30, 0.4615), (34, 0.4553), (100, 0.4030), (1000, 0.3198)])
def test_omega1_values(M, expected):
    w = T.omega1(M)
    assert round(w, 4) == expected
    # it is the second zero of exp(Mh) - (M-1) M h at h = (1+w) ln M / M (Lemma 8)
    u = (1 + w) * np.log(M)
    assert np.exp(u) == pytest.approx((M - 1) * u, rel=1e-12)


def test_h_star_first_step():
    # Lemma 5: h*(1) = eta_y / ((M-1) + exp(0)) = eta_y / M
    for M, eta in [(34, 0.5), (1000, 1.0), (1000, 0.1)]:
        h = T.h_star(M, eta, 3)
        assert h[0] == 0.0
        assert h[1] == pytest.approx(eta / M, rel=1e-15)
        assert h[2] == pytest.approx(eta / M + eta / ((M - 1) + np.exp(eta)), rel=1e-15)


@pytest.mark.parametrize("M, eta", [(34, 0.5), (1000, 0.1), (1000, 1.0), (1000, 2.0)])
def test_h_cont_solves_eq45(M, eta):
    t = np.concatenate([[0.0], np.logspace(-10, 9, 400)])
    h = T.h_cont(M, eta, t)
    u = M * h
    lhs = np.expm1(u) + (M - 1) * u  # = M eta t  (Eq. 45 minus 1)
    rhs = M * eta * t
    assert h[0] == 0.0
    np.testing.assert_allclose(lhs[1:], rhs[1:], rtol=1e-14, atol=0)
    # Eq. 45 as printed
    np.testing.assert_allclose(np.exp(u) + (M - 1) * u, M * eta * t + 1, rtol=1e-14, atol=0)
    # scalar in, scalar out; monotone; depends on eta t only
    assert isinstance(T.h_cont(M, eta, 3.0), float)
    assert np.all(np.diff(h) > 0)
    np.testing.assert_allclose(T.h_cont(M, 2 * eta, t / 2), h, rtol=1e-14)


def test_h_cont_satisfies_lemma6_ode():
    # dh/dt = eta / ((M-1) + exp(Mh)), checked by a central difference (independent of Eq. 45)
    M, eta, dt = 1000, 0.5, 1e-3
    t = np.array([0.5, 3.0, 20.0, 200.0, 5000.0])
    dh = (T.h_cont(M, eta, t + dt) - T.h_cont(M, eta, t - dt)) / (2 * dt)
    expect = eta / ((M - 1) + np.exp(M * T.h_cont(M, eta, t)))
    np.testing.assert_allclose(dh, expect, rtol=1e-6)


@pytest.mark.parametrize("eta, max_gap", [(0.1, 1.85e-5), (0.5, 9.45e-5), (1.0, 1.95e-4)])
def test_lemma7_h_star_vs_h(eta, max_gap):
    # T4 / Fig. 8: 0 <= h* - h <= 2 eta / M for s <= 20000, gap -> 0
    M, S = M_BIG, 20000
    gap = T.h_star(M, eta, S) - T.h_cont(M, eta, np.arange(S + 1))
    assert gap.min() >= 0.0
    assert gap.max() <= 2 * eta / M
    assert gap.max() == pytest.approx(max_gap, rel=5e-3)
    assert 0.0 < gap[-1] < 1e-6
    assert gap[-1] == pytest.approx(2e-7, rel=0.3)


@pytest.mark.parametrize("eta, t_exact, t_formula", [(1.0, 182.1, 182.3), (0.5, 364.3, 364.7)])
def test_transition_time(eta, t_exact, t_formula):
    # T5: second crossing exp(M h(t/K)) = (M-1) M h(t/K) vs t0 = 2 (1+omega1) K ln M / eta_y
    te = T.transition_time_exact(M_BIG, K_BIG, eta)
    tf = T.t0(M_BIG, K_BIG, eta)
    assert round(te, 1) == t_exact
    assert round(tf, 1) == t_formula
    assert abs(te - tf) / tf < 0.01
    u = M_BIG * T.h_cont(M_BIG, eta, te / K_BIG)
    assert np.exp(u) == pytest.approx((M_BIG - 1) * u, rel=1e-9)
    assert u > np.log(M_BIG - 1)  # the second (large-h) zero, not the first


def test_crossing_M_minus_1():
    # exp(Mh) = M-1 at t = K (M-2 + (M-1) ln(M-1)) / (M eta_y): 79.0 vs t0' = 69.1
    M, K, eta = M_BIG, K_BIG, 1.0
    tc = K * (M - 2 + (M - 1) * np.log(M - 1)) / (M * eta)
    assert round(tc, 1) == 79.0
    assert np.exp(M * T.h_cont(M, eta, tc / K)) == pytest.approx(M - 1, rel=1e-12)
    assert round(T.t0_prime(M, K, eta), 1) == 69.1


def test_gamma_peak():
    # gamma depends on t only through eta_y t / K; for M = 1000 it peaks at 4.42 at
    # eta_y t / K = 5.64
    x = np.linspace(0.0, 30.0, 300001)
    g = T.gamma(M_BIG, 1, 1.0, x)
    i = np.argmax(g)
    assert round(g[i], 2) == 4.42
    assert round(x[i], 2) == 5.64
    np.testing.assert_allclose(
        T.gamma(M_BIG, K_BIG, 0.5, 2 * K_BIG * x[::1000]), g[::1000], rtol=1e-13
    )


def test_gamma_discrete_flag():
    M, K, eta = M_BIG, K_BIG, 1.0
    t = np.array([0.5, 9.5, 10.0, 10.5, 20.0])
    gd = T.gamma(M, K, eta, t, discrete=True)
    gc = T.gamma(M, K, eta, np.array([10.0, 10.0, 10.0, 20.0, 20.0]))
    np.testing.assert_allclose(gd, gc, rtol=1e-15)
    assert T.gamma(M, K, eta, 0.0) == 0.0


# ----------------------------------------------------------------------------------------- snapping


def _simpson(y, dx):
    assert (len(y) - 1) % 2 == 0
    return dx / 3 * (y[0] + y[-1] + 4 * y[1:-1:2].sum() + 2 * y[2:-1:2].sum())


@pytest.mark.parametrize(
    "eta_y, eta_z, t",
    [(1.0, 0.5, 50.0), (1.0, 0.1, 182.3), (0.2, 0.5, 2000.0), (2.0, 1.0, 20000.0)],
)
def test_Gamma_closed_form_vs_quadrature(eta_y, eta_z, t):
    # T6: eta_z int_0^t gamma (continuous h) = (eta_z/eta_y) K (M-1)^2 h(t/K)^2 / 2
    n = 200000
    grid = np.linspace(0.0, t, n + 1)
    quad = eta_z * _simpson(T.gamma(M_BIG, K_BIG, eta_y, grid), t / n)
    closed = T.Gamma(M_BIG, K_BIG, eta_y, eta_z, t)
    assert abs(quad - closed) / closed < 1e-4


@pytest.mark.parametrize(
    "ratio, b_exact, b_paper", [(1, 2.4293, 1.8536), (2, 2.2560, 1.6803), (5, 2.0270, 1.4513)]
)
def test_B_at_t0_independent_of_eta_z(ratio, b_exact, b_paper):
    # T7 / Fig. 9: B_n(t0) depends on K, M, eta_y/eta_z only
    be, bp = [], []
    for eta_z in (0.1, 0.5, 1.0):
        eta_y = ratio * eta_z
        t0 = T.t0(M_BIG, K_BIG, eta_y)
        be.append(float(T.B_exact(M_BIG, K_BIG, eta_y, eta_z, t0, rho0=1.0)))
        bp.append(float(T.B_paper(M_BIG, K_BIG, eta_y, eta_z, t0, rho0=1.0)))
    assert max(be) - min(be) < 1e-12
    assert max(bp) - min(bp) < 1e-12
    assert round(be[0], 4) == b_exact
    assert round(bp[0], 4) == b_paper
    # the two forms differ by the constant 0.25 ln(K / rho0^4)
    assert be[0] - bp[0] == pytest.approx(0.25 * np.log(K_BIG), rel=1e-6)


@pytest.mark.parametrize(
    "t, expected", [(1e5, [436, 324, 218, 161, 119]), (100.0, [31.6, 44.6, 68.9, 77.2, 65.6])]
)
def test_fig3_chi_upper(t, expected):
    # T8 / Fig. 3: chi_up = exp(2 B_exact), eta_z = 0.5, K = 10, M = 1000
    etas = [0.1, 0.2, 0.5, 1.0, 2.0]
    chi = np.array([T.chi_bounds(T.B_exact(M_BIG, K_BIG, e, 0.5, t), 0.5)[1] for e in etas])
    np.testing.assert_allclose(chi, expected, rtol=5e-3)
    if t == 1e5:
        assert np.all(np.diff(chi) < 0)  # decreasing in eta_y in the snapping phase
    else:
        assert not np.all(np.diff(chi) < 0)  # non-monotone early on (curves cross)


def test_chi_bounds():
    lo, up = T.chi_bounds(np.array([0.0, 1.0, 2.5]), 0.2)
    np.testing.assert_allclose(lo, np.exp([0.0, 0.4, 1.0]))
    np.testing.assert_allclose(up, np.exp([0.0, 2.0, 5.0]))


def test_B_exact_vs_paper_and_regimes():
    M, K, ez = M_BIG, K_BIG, 0.5
    for ey in (0.1, 1.0):
        assert T.B_exact(M, K, ey, ez, 0.0) == 0.0
        x = np.array([1e-3, 1e-2, 0.1])  # eta_y t / K << ln M: scanning branch of Eq. (14)
        np.testing.assert_allclose(
            T.B_scan_approx(M, K, ey, ez, x * K / ey),
            T.B_paper(M, K, ey, ez, x * K / ey),
            atol=1e-4,
        )
        x = np.array([1e3, 1e4, 1e5])  # eta_y t / K >> ln M: snapping branch
        np.testing.assert_allclose(
            T.B_snap_approx(M, K, ey, ez, x * K / ey),
            T.B_paper(M, K, ey, ez, x * K / ey),
            atol=1e-3,
        )


# ------------------------------------------------------------------------------------ attention ODE


def _syn_small():
    M, K = 34, 2
    w = np.zeros((K, M))
    w[:, :10] = 1.0
    w[0, 10:20] = np.linspace(0.1, 1.0, 10)
    w[1, 20:30] = np.linspace(0.1, 1.0, 10)
    return w / w.sum(axis=1, keepdims=True), np.array([30, 31]), M, K


@pytest.fixture(scope="module")
def ode_run():
    P, last, M, K = _syn_small()
    out = {}
    for n_steps in (300, 600):
        out[n_steps] = T.integrate_attention_ode(
            P, last, np.zeros((M, M)), M, K, eta_y=1.0, eta_z=0.1, t_max=300.0, num_steps=n_steps
        )
    return P, last, M, K, out


def test_ode_theorem2_signs(ode_run):
    P, last, M, K, out = ode_run
    times, Zs = out[600]
    assert times.shape == (601,) and Zs.shape == (601, M, M)
    for n, m in enumerate(last):
        z = Zs[:, m]
        distinct = np.arange(10 + 10 * n, 20 + 10 * n)
        others = np.setdiff1d(np.arange(M), np.concatenate([np.arange(10), distinct]))
        assert np.all(np.diff(z[:, :10], axis=0) < 0)  # common tokens decrease
        assert np.all(np.diff(z[:, distinct], axis=0) > 0)  # distinct tokens increase
        assert np.all(np.diff(z[-1, distinct]) > 0)  # ordered by P(l|n)
        assert z[-1, :10].max() < -0.05 and z[-1, distinct[-1]] > 0.3  # non-trivial motion
        np.testing.assert_array_equal(z[:, others], 0.0)  # zero f_nl, zero velocity
    # rows of queries that are no class's last token never move
    rest = np.setdiff1d(np.arange(M), last)
    np.testing.assert_array_equal(Zs[:, rest], 0.0)


def test_ode_theorem3_identity(ode_run):
    # r(t) = r(0) exp(2 dz_l) holds exactly under Eq. (10); the residual is RK4 error (order 4)
    P, last, M, K, out = ode_run
    errs = {}
    for n_steps, (_, Zs) in out.items():
        err = 0.0
        for n, m in enumerate(last):
            distinct = range(10 + 10 * n, 20 + 10 * n)
            for token in distinct:
                for token2 in distinct:
                    if token != token2:
                        r_t, r_pred = T.relative_gain(Zs[:, m], Zs[0, m], P[n], token, token2)
                        err = max(err, np.max(np.abs(r_t - r_pred) / np.abs(r_pred)))
        errs[n_steps] = err
    assert errs[600] < 1e-8
    assert errs[300] / errs[600] > 8  # ~2^4 for a 4th-order integrator


def test_ode_row_sums_zero(ode_run):
    # f_n^T (f_n f_n^T - I) v = 0 since |f_n| = 1, so each row of dZ/dt sums to 0 (cf. notes §3.3
    # invariant)
    _, _, _, _, out = ode_run
    _, Zs = out[600]
    assert np.abs(Zs.sum(axis=-1)).max() < 1e-13


def test_ode_save_every_and_velocity():
    P, last, M, K = _syn_small()
    Z0 = np.random.default_rng(0).uniform(-0.3, 0.3, (M, M))
    t_full, Z_full = T.integrate_attention_ode(P, last, Z0, M, K, 1.0, 0.1, 50.0, 100)
    t_sub, Z_sub = T.integrate_attention_ode(P, last, Z0, M, K, 1.0, 0.1, 50.0, 100, save_every=30)
    np.testing.assert_allclose(t_sub, t_full[[0, 30, 60, 90, 100]])
    np.testing.assert_allclose(Z_sub, Z_full[[0, 30, 60, 90, 100]], rtol=0, atol=0)
    # the velocity equals the component form Eq. (97) with beta = E' = I - (F^T F)^{-1}
    c = T.c_n(Z0, P, last)
    F = c / np.linalg.norm(c, axis=1, keepdims=True)
    Ep = np.eye(K) - np.linalg.inv(F @ F.T)
    v = T.attention_velocity(Z0, P, last)
    for n, m in enumerate(last):
        n2 = 1 - n
        expect = F[n] * Ep[n, n2] * ((F[n] @ F[n2]) * F[n] - F[n2])
        np.testing.assert_allclose(v[m], expect, rtol=1e-12, atol=1e-15)
    assert Ep[0, 1] > 0 and Ep[0, 0] < 0  # Lemma 16: E'_ii <= 0
