"""Closed-form predictions of Tian et al., "Scan and Snap" (NeurIPS 2023), in NumPy float64.

The decoder, snapping, scanning and the attention ODE, by the paper's equation numbers
(notes/scan_snap.md is authoritative where the text is garbled). Time `t` counts batch-1 SGD
steps over all K classes, so class n has been visited about t/K times. Contents by section:
docs/design/scan_snap.md.
"""

from __future__ import annotations

import numpy as np

from landscape.typing import ArrayLike, NDArray

# --------------------------------------------------------------------------------------------------
# Decoder dynamics (Sec. 4, App. B; notes §4.1)
# --------------------------------------------------------------------------------------------------


def h_star(M: int, eta_y: float, num_steps: int) -> NDArray:
    """Exact discrete speed h*(s), s = 0..num_steps, from the recursion Eq. (33), notes §4.1
    (Lemma 5).

    h*(0) = 0,  h*(s) = h*(s-1) + eta_y / ((M-1) + exp(M h*(s-1))).
    """
    h = np.zeros(int(num_steps) + 1)
    x = 0.0
    for s in range(1, int(num_steps) + 1):
        x = x + eta_y / ((M - 1) + np.exp(M * x))
        h[s] = x
    return h


def h_cont(M: int, eta_y: float, t: ArrayLike) -> float | NDArray:
    """Continuous speed h(t) solving exp(Mh) + (M-1) M h = M eta_y t + 1, Eq. (45), notes §4.1
    (Lemma 6).

    Newton on u = Mh for f(u) = expm1(u) + (M-1) u - M eta_y t (the same equation, written so that
    small t loses no digits). f is increasing and convex and f(u0) >= 0 for
    u0 = min(C/(M-1), log C), C = M eta_y t + 1, so the iterates decrease monotonically onto the
    root; we stop when they stop decreasing (converged to rounding). Vectorised over t; returns a
    float for scalar t.
    """
    t = np.asarray(t, dtype=np.float64)
    a = M * eta_y * t  # C - 1
    u = np.minimum((a + 1.0) / (M - 1), np.log1p(a))
    for _ in range(200):
        f = np.expm1(u) + (M - 1) * u - a
        u_new = u - f / (np.exp(u) + (M - 1))
        moved = u_new < u
        if not np.any(moved):
            break
        u = np.where(moved, u_new, u)
    h = u / M
    return float(h) if h.ndim == 0 else h


def omega1(M: int) -> float:
    """Root on (0, 1) of M**w = (1 + w) ln M (M-1)/M, by bisection. Lemma 8, notes §4.1.

    (1 + omega1) ln M / M is the second zero of exp(Mh) - (M-1) M h.
    """
    lnM = np.log(M)

    def g(w: float) -> float:  # convex, g(0) < 0 < g(1) for M >= 4
        return M**w - (1.0 + w) * lnM * (M - 1) / M

    lo, hi = 0.0, 1.0
    if not (g(lo) < 0.0 < g(hi)):
        raise ValueError(f"omega1: no sign change on (0, 1) for M={M}")
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if g(mid) < 0.0:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-16:
            break
    return 0.5 * (lo + hi)


def t0(M: int, K: int, eta_y: float) -> float:
    """Start of the snapping phase, t0 = 2 (1 + omega1) K ln M / eta_y. Lemma 9 / Theorem 4,
    notes §4.3."""
    return 2.0 * (1.0 + omega1(M)) * K * np.log(M) / eta_y


def t0_prime(M: int, K: int, eta_y: float) -> float:
    """End of the scanning phase, t0' = K ln M / eta_y. Lemma 9 / Eq. (14), notes §4.3."""
    return K * np.log(M) / eta_y


def _phi(M: int, K: int, eta_y: float, t: float) -> float | NDArray:
    u = M * h_cont(M, eta_y, t / K)
    return np.exp(u) - (M - 1) * u


def transition_time_exact(M: int, K: int, eta_y: float) -> float:
    """Time t where exp(M h(t/K)) = (M-1) M h(t/K) for the second time (the two terms of Eq. 45
    are equal).

    Lemma 9, notes §4.1: bisection in t on h_cont. The bracket starts at the crossing exp(Mh) = M-1,
    t = K (M-2 + (M-1) ln(M-1)) / (M eta_y), which lies between the two zeros (for M-1 > e).
    """
    lo = K * (M - 2 + (M - 1) * np.log(M - 1)) / (M * eta_y)
    if _phi(M, K, eta_y, lo) >= 0.0:
        raise ValueError(f"transition_time_exact: bracket failed for M={M}")
    hi = 2.0 * lo
    while _phi(M, K, eta_y, hi) <= 0.0:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if _phi(M, K, eta_y, mid) < 0.0:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-13 * hi:
            break
    return 0.5 * (lo + hi)


def gamma(M: int, K: int, eta_y: float, t: ArrayLike, discrete: bool = False) -> float | NDArray:
    """Speed coefficient gamma(t) = (M-1)^2 h / ((M-1) + exp(M h)), Eq. (85), notes §4.1.

    h = h_cont(t/K) (continuous, default) or h_cont(ceil(t/K)) if ``discrete`` (the paper's
    printed form).
    Depends on t and eta_y only through eta_y t / K.
    """
    s = (
        np.ceil(np.asarray(t, dtype=np.float64) / K)
        if discrete
        else np.asarray(t, dtype=np.float64) / K
    )
    h = np.asarray(h_cont(M, eta_y, s))
    g = (M - 1) ** 2 * h / ((M - 1) + np.exp(M * h))
    return float(g) if g.ndim == 0 else g


# --------------------------------------------------------------------------------------------------
# Snapping (Sec. 6, App. D; notes §4.3)
# --------------------------------------------------------------------------------------------------


def Gamma(M: int, K: int, eta_y: float, eta_z: float, t: ArrayLike) -> float | NDArray:
    """Gamma(t) = eta_z int_0^t gamma = (eta_z/eta_y) K (M-1)^2 h(t/K)^2 / 2, Eqs. (123)-(126),
    notes §4.3.

    Exact for the continuous h (substitute h' = h(t'/K), dt' = K (M-1+exp(Mh')) dh' / eta_y).
    """
    h = np.asarray(h_cont(M, eta_y, np.asarray(t, dtype=np.float64) / K))
    G = eta_z / eta_y * K * (M - 1) ** 2 * h**2 / 2.0
    return float(G) if G.ndim == 0 else G


def B_paper(M: int, K: int, eta_y: float, eta_z: float, t: ArrayLike, rho0: float = 1.0) -> NDArray:
    """B_n(t) as printed, 0.25 ln(rho0^4/K + 4 Gamma(t)), Eq. (127) (= Eq. 122). Notes §4.3."""
    return 0.25 * np.log(rho0**4 / K + 4.0 * np.asarray(Gamma(M, K, eta_y, eta_z, t)))


def B_exact(M: int, K: int, eta_y: float, eta_z: float, t: ArrayLike, rho0: float = 1.0) -> NDArray:
    """B_n(t) = int_0^t dGamma / (rho0^4/K + 4 Gamma) = 0.25 ln(1 + 4 K Gamma / rho0^4), notes
    §4.3 [R].

    Differs from B_paper by the constant 0.25 ln(K / rho0^4); B_exact(0) = 0.
    """
    return 0.25 * np.log1p(4.0 * K * np.asarray(Gamma(M, K, eta_y, eta_z, t)) / rho0**4)


def B_scan_approx(
    M: int, K: int, eta_y: float, eta_z: float, t: ArrayLike, rho0: float = 1.0
) -> NDArray:
    """Eq. (14), first branch (t < t0'): h ~ eta_y t / (M K)."""
    t = np.asarray(t, dtype=np.float64)
    return 0.25 * np.log(rho0**4 / K + 2.0 * (M - 1) ** 2 / (K * M**2) * eta_y * eta_z * t**2)


def B_snap_approx(
    M: int, K: int, eta_y: float, eta_z: float, t: ArrayLike, rho0: float = 1.0
) -> NDArray:
    """Eq. (14), second branch (t >= t0): h ~ ln(M eta_y t / K) / M."""
    t = np.asarray(t, dtype=np.float64)
    L = np.log(M * eta_y * t / K)
    return 0.25 * np.log(rho0**4 / K + 2.0 * K * (M - 1) ** 2 / M**2 * eta_z / eta_y * L**2)


def chi_bounds(B: ArrayLike, f0_sq: float) -> tuple[NDArray, NDArray]:
    """Bounds on the growth factor chi_{l0}(t), Eq. (12): (exp(2 f0_sq B), exp(2 B));
    f0_sq = f_{n l0}(0)^2."""
    B = np.asarray(B, dtype=np.float64)
    return np.exp(2.0 * f0_sq * B), np.exp(2.0 * B)


# --------------------------------------------------------------------------------------------------
# Scanning (Sec. 5, App. C; notes §4.2)
# --------------------------------------------------------------------------------------------------


def c_n(Z: ArrayLike, P: ArrayLike, last_of_class: ArrayLike) -> NDArray:
    """Attention c_n (K, M), Eq. (5): c_n ∝ P(.|n) * exp(Z[psi(n)]), normalised to sum 1."""
    Zq = np.asarray(Z, dtype=np.float64)[np.asarray(last_of_class)]
    ct = np.asarray(P, dtype=np.float64) * np.exp(Zq - Zq.max(axis=-1, keepdims=True))
    return ct / ct.sum(axis=-1, keepdims=True)


def _r_from_z(z: NDArray, p_l: float, p_l2: float, token: int, token2: int) -> NDArray:
    # r = c~_l^2 / c~_l2^2 - 1 with c~ = P exp(z) (Eq. 11), l = token, l2 = token2; z may carry
    # leading (time) axes.
    return (p_l / p_l2) ** 2 * np.exp(2.0 * (z[..., token] - z[..., token2])) - 1.0


def relative_gain_predicted(r0: float | NDArray, dz_l: ArrayLike) -> NDArray:
    """Theorem 3, Eq. (11): r(t) = r(0) exp(2 (z_l(t) - z_l(0)))."""
    return r0 * np.exp(2.0 * np.asarray(dz_l, dtype=np.float64))


def relative_gain(
    z_t: ArrayLike, z_0: ArrayLike, P: NDArray, token: int, token2: int
) -> tuple[NDArray, NDArray]:
    """Both sides of Eq. (11) for distinct tokens l = token, l2 = token2 of the same class (notes
    §4.2, Theorem 3).

    z_t: attention row z_{psi(n)} at time t, shape (..., M) (leading axes, e.g. time, allowed);
    z_0: that row at t = 0, shape (M,); P: P(.|n), shape (M,).
    Returns (r_t, r_pred): r_t = f_l^2/f_l2^2 - 1 = c~_l^2/c~_l2^2 - 1 from c~ = P exp(z_t), and
    r_pred = r(0) exp(2 (z_t[l] - z_0[l])).
    """
    z_t = np.asarray(z_t, dtype=np.float64)
    z_0 = np.asarray(z_0, dtype=np.float64)
    r_t = _r_from_z(z_t, P[token], P[token2], token, token2)
    r_0 = _r_from_z(z_0, P[token], P[token2], token, token2)
    return r_t, relative_gain_predicted(r_0, z_t[..., token] - z_0[token])


# --------------------------------------------------------------------------------------------------
# Attention ODE (Lemma 4, Eqs. 10 / 97; notes §4.2)
# --------------------------------------------------------------------------------------------------


def attention_velocity(Z: ArrayLike, P: ArrayLike, last_of_class: ArrayLike) -> NDArray:
    """dZ/dt / (eta_z gamma) from Eq. (10), with beta_{nn'} = E'_{nn'} at the current f_n.

    f_n = LN(P(.|n) * exp(Z[psi(n)])); E = F^T F - I; E' = I - (I+E)^{-1} = I - (F^T F)^{-1}
    (notes §4.1, Lemma 3). Row psi(n) gets diag(f_n) sum_{n' != n} beta_{nn'} (f_n f_n^T - I)
    f_{n'}; the inner sum runs over all classes n' != n (a diagonal term would vanish anyway:
    (f_n f_n^T - I) f_n = 0).
    Each row increment has zero sum (f_n^T (f_n f_n^T - I) v = 0 since |f_n| = 1).
    """
    last = np.asarray(last_of_class)
    c = c_n(Z, P, last)  # (K, M), rows ∝ c~_n
    F = c / np.linalg.norm(c, axis=-1, keepdims=True)  # rows f_n
    K = F.shape[0]
    beta = np.eye(K) - np.linalg.inv(F @ F.T)  # E'
    np.fill_diagonal(beta, 0.0)  # n' != n
    V = beta @ F  # v_n = sum_{n'!=n} beta_{nn'} f_{n'}
    fv = np.sum(F * V, axis=-1, keepdims=True)
    rows = F * (fv * F - V)  # diag(f_n)(f_n f_n^T - I) v_n
    dZ = np.zeros_like(np.asarray(Z, dtype=np.float64))
    np.add.at(dZ, last, rows)  # sum over n in psi^{-1}(m)
    return dZ


def integrate_attention_ode(
    P: ArrayLike,
    last_of_class: ArrayLike,
    Z0: ArrayLike,
    M: int,
    K: int,
    eta_y: float,
    eta_z: float,
    t_max: float,
    num_steps: int,
    save_every: int = 1,
) -> tuple[NDArray, NDArray]:
    """Integrate the attention ODE Eq. (10) with fixed-step RK4 on a uniform grid
    t_k = k t_max / num_steps.

    dZ/dt = eta_z gamma(t) attention_velocity(Z), gamma from Eq. (85) with continuous h
    (vocabulary M, K classes). Returns (times, Zs) saved every ``save_every`` steps (and at the
    last step): times (S,), Zs (S, M, M); with save_every=1, S = num_steps + 1.
    """
    P = np.asarray(P, dtype=np.float64)
    Z = np.array(Z0, dtype=np.float64)
    assert P.shape[1] == M and Z.shape == (M, M)
    dt = t_max / num_steps
    grid = dt * np.arange(num_steps + 1)
    g_full = eta_z * np.asarray(gamma(M, K, eta_y, grid))
    g_half = eta_z * np.asarray(gamma(M, K, eta_y, grid[:-1] + 0.5 * dt))

    def rhs(Zc: NDArray, g: float) -> NDArray:
        return g * attention_velocity(Zc, P, last_of_class)

    times, Zs = [0.0], [Z.copy()]
    for k in range(num_steps):
        k1 = rhs(Z, g_full[k])
        k2 = rhs(Z + 0.5 * dt * k1, g_half[k])
        k3 = rhs(Z + 0.5 * dt * k2, g_half[k])
        k4 = rhs(Z + dt * k3, g_full[k + 1])
        Z = Z + dt / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
        if (k + 1) % save_every == 0 or k + 1 == num_steps:
            times.append(grid[k + 1])
            Zs.append(Z.copy())
    return np.asarray(times), np.stack(Zs)
