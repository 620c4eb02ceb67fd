"""Closed-form predictions of "Incremental learning in transformers for in-context associative
recall", in NumPy float64.

Plateaus, the first jump, the timescales and vanishing initialisation (notes/assoc_recall.md §3,
§4; errata in §8). Notation and contents by section: docs/design/recall.md.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from landscape.typing import ArrayLike, NDArray

# --------------------------------------------------------------------------------------------------
# Plateaus (notes §3, §4.6)
# --------------------------------------------------------------------------------------------------


def loss_scale(num_responses: int) -> float:
    """A = 1 - 1/n_R, the prefactor of the closed-form population loss (notes §3)."""
    return 1.0 - 1.0 / num_responses


def plateau_levels(k: int, num_responses: int) -> NDArray:
    """Plateau losses L_m = A (1 - 1/(k-m)!), m = 0..k-1, shape (k,) (notes §3, §4.6).

    L_m is the loss with m heads fully active; L_{k-1} = 0, so only k-1 jumps happen.
    """
    A = loss_scale(num_responses)
    return np.array([A * (1.0 - 1.0 / math.factorial(k - m)) for m in range(k)])


# --------------------------------------------------------------------------------------------------
# First jump on the manifold M_1 (Thm 3.1, notes §4.1-4.3)
# --------------------------------------------------------------------------------------------------


def f_conserved(alpha: ArrayLike, k: int) -> float | NDArray:
    """f(alpha) = (k-1)/k^2 (e^a + (k-1) e^-a + (k-2) a - k): Thm 3.1(d), "+" sign (notes §4.1).

    Written with expm1 so that small alpha (f ~ (k-1)/(2k) alpha^2) keeps its digits. Vectorised.
    """
    alpha = np.asarray(alpha, dtype=np.float64)
    f = (k - 1) / k**2 * (np.expm1(alpha) + (k - 1) * np.expm1(-alpha) + (k - 2) * alpha)
    return float(f) if f.ndim == 0 else f


def conserved_quantity(alpha: ArrayLike, beta: ArrayLike, k: int) -> float | NDArray:
    """f(alpha) - beta^2/4, constant along gradient flow on M_1 (Thm 3.1(d), notes §4.1 item 4)."""
    q = np.asarray(f_conserved(alpha, k)) - np.asarray(beta, dtype=np.float64) ** 2 / 4.0
    return float(q) if q.ndim == 0 else q


def _focus_fraction(alpha: ArrayLike, k: int) -> NDArray:
    # u = (e^a - 1)/(e^a + k - 1) (notes §4 notation), overflow-free for large |alpha|
    alpha = np.asarray(alpha, dtype=np.float64)
    x = np.exp(-np.abs(alpha))  # in (0, 1]
    em1 = np.expm1(-np.abs(alpha))  # e^-|a| - 1
    pos = -em1 / (1.0 + (k - 1) * x)  # alpha >= 0, divided through by e^a
    neg = em1 / (x + k - 1)  # alpha < 0
    return np.where(alpha >= 0, pos, neg)


def _softmax_weight(gamma1: ArrayLike, k: int) -> NDArray:
    # e^g / (e^g + k - 1)^2, overflow-free
    g = np.asarray(gamma1, dtype=np.float64)
    x = np.exp(-np.abs(g))
    pos = x / (1.0 + (k - 1) * x) ** 2  # g >= 0
    neg = x / (x + k - 1) ** 2  # g < 0
    return np.where(g >= 0, pos, neg)


def gamma_one(alpha: ArrayLike, beta: ArrayLike, k: int, c: float = 1.0) -> float | NDArray:
    """gamma_1 = c beta^2 (e^alpha - 1)/(e^alpha + k - 1): eq. (13), notes §3."""
    g = c * np.asarray(beta, dtype=np.float64) ** 2 * _focus_fraction(alpha, k)
    return float(g) if g.ndim == 0 else g


def xi(gamma1: ArrayLike, k: int, num_responses: int, c: float = 1.0) -> float | NDArray:
    """Xi = -c E[Delta_11] = c A e^g / ((k-2)! (e^g + k - 1)^2), notes §4.3 (no factor 2)."""
    x = c * loss_scale(num_responses) / math.factorial(k - 2) * _softmax_weight(gamma1, k)
    return float(x) if np.ndim(x) == 0 else x


def first_jump_ode(
    alpha: ArrayLike, beta: ArrayLike, k: int, num_responses: int, c: float = 1.0
) -> tuple[float, float] | tuple[NDArray, NDArray]:
    """Right-hand side (dalpha/dt, dbeta/dt) of Thm 3.1(c), corrected as in notes §4.3.

    dalpha/dt = beta^2 e^a / (e^a + k - 1)^2 * k^2/(k-1) * Xi,
    dbeta/dt  = 2 beta (e^a - 1)/(e^a + k - 1) * Xi,   Xi = xi(gamma_one(alpha, beta)).
    """
    alpha = np.asarray(alpha, dtype=np.float64)
    beta = np.asarray(beta, dtype=np.float64)
    Xi = np.asarray(xi(gamma_one(alpha, beta, k, c), k, num_responses, c))
    dalpha = beta**2 * _softmax_weight(alpha, k) * k**2 / (k - 1) * Xi
    dbeta = 2.0 * beta * _focus_fraction(alpha, k) * Xi
    if dalpha.ndim == 0:
        return float(dalpha), float(dbeta)
    return dalpha, dbeta


def loss_one_head(gamma1: ArrayLike, k: int, num_responses: int) -> float | NDArray:
    """L = A (1 - e^g / ((k-1)! (e^g + k - 1))) with only head 1 active (notes §3, §4.3).

    Equals L_0 at gamma_1 = 0 and tends to L_1 as gamma_1 -> infinity.
    """
    g = np.asarray(gamma1, dtype=np.float64)
    x = np.exp(-np.abs(g))
    share = np.where(g >= 0, 1.0 / (1.0 + (k - 1) * x), x / (x + k - 1))  # e^g / (e^g + k - 1)
    L = loss_scale(num_responses) * (1.0 - share / math.factorial(k - 1))
    return float(L) if L.ndim == 0 else L


# --------------------------------------------------------------------------------------------------
# Timescales (notes §4.4, §4.5)
# --------------------------------------------------------------------------------------------------


def stage_constants(k: int, num_responses: int, stage: int, c: float = 1.0) -> tuple[float, float]:
    """(kappa_m, lambda_m) of stage m: kappa = c A / (k k'!), lambda = 2 (k'-1)/k', k' = k - m + 1.

    Notes §4.5 (Prop. A.2 corrected) and §4.8. Stage 1 is the first jump (notes §4.4). Stage k has
    lambda = 0: no jump.
    """
    if not 1 <= stage <= k:
        raise ValueError(f"stage must be in 1..{k}, got {stage}")
    k_reduced = k - stage + 1
    kappa = c * loss_scale(num_responses) / (k * math.factorial(k_reduced))
    lam = 2.0 * (k_reduced - 1) / k_reduced
    return kappa, lam


def jump_time(
    k: int, num_responses: int, eps: float | NDArray, stage: int = 1, c: float = 1.0
) -> float | NDArray:
    """T_h ~ pi / (2 kappa_h sqrt(lambda_h) eps), leading order in eps (notes §4.4 regime 1, §4.5).

    For stage 1 this is the first-jump time from I_1 (beta_1(0) = eps, w = 0); for stage h the time
    from I_h. eps * T_1 = 164.17 for k = n_R = 4. Returns inf for stage = k (no jump, notes §4.5).
    """
    kappa, lam = stage_constants(k, num_responses, stage, c)
    if lam == 0.0:
        return math.inf
    return math.pi / (2.0 * kappa * math.sqrt(lam) * eps)


def ei_tail(t: ArrayLike, k: int, num_responses: int, c: float = 1.0) -> dict[str, Any]:
    """Regime-2 ('exponential integral') predictions after the first jump, notes §4.4.

    For t >> T_1, gamma_1 = z solves Ei(z) ~ 4 c A t/(k-2)!, so z ~ ln t and, at leading order,
      beta^2   ~ ln t / c                  (gamma_1 ~ c beta^2),
      e^alpha  ~ k^2/(4 (k-1) c) ln t      (beta^2 ~ 4 (k-1)/k^2 e^alpha, conservation law),
      L - L_1  ~ 1 / (4 c t ln t).
    Only slopes in ln t and the excess loss are predicted; the offsets of beta^2 and e^alpha depend
    on the jump and are not. Draw e^alpha and beta^2 against ln t next to lines of slope
    'exp_alpha_slope' / 'beta_sq_slope', and t ln t (L - L_1) against 't_log_t_excess'. The notes
    (c = 1, k = n_R = 4, eps = 0.05) measure slope 1.333 and t ln t (L - L_1) = 0.221-0.228 for
    t in [1e5, 1e12], creeping up towards 0.25. The 1/c in the slopes is derived here from the same
    chain; the notes state them at c = 1.

    Returns a dict of arrays/floats: log_t, exp_alpha_slope, beta_sq_slope, excess_loss (L - L_1),
    loss (L_1 + excess), t_log_t_excess (the constant 1/(4c)).
    """
    t = np.asarray(t, dtype=np.float64)
    log_t = np.log(t)
    excess = 1.0 / (4.0 * c * t * log_t)
    return {
        "log_t": log_t,
        "exp_alpha_slope": k**2 / (4.0 * (k - 1) * c),
        "beta_sq_slope": 1.0 / c,
        "excess_loss": excess,
        "loss": plateau_levels(k, num_responses)[1] + excess,
        "t_log_t_excess": 1.0 / (4.0 * c),
    }


# --------------------------------------------------------------------------------------------------
# Vanishing-initialization limit (notes §4.7, §4.8)
# --------------------------------------------------------------------------------------------------


def _arccoth_of_ratio(a: float, b: float, r: float, lam: float) -> float:
    # arccoth(|a|/r) = ln((|a| + r)/(|a| - r))/2 for E < 0; atanh near the separatrix (r << |a|),
    # else ln((|a| + r) sqrt(lam)/|b|), using |a|^2 - r^2 = b^2/lam to avoid |a| - r
    if r < 0.5 * abs(a):
        return math.atanh(r / abs(a))
    return math.log((abs(a) + r) * math.sqrt(lam) / abs(b))


def blow_up_time(a: float, b: float, kappa: float, lam: float) -> float:
    """Time for a' = kappa b^2, b' = kappa lam a b to blow up from (a, b) (notes §4.8).

    With E = b^2 - lam a^2 (conserved) and r = sqrt(-E/lam):
      E > 0:            T = (pi/2 - arctan(a sqrt(lam/E))) / (kappa sqrt(lam E));
      E < 0, a > r:     T = ln((a + r)/(a - r)) / (2 kappa lam r);
      E < 0, a < -r:    T = inf (dead head: b -> 0, a -> -r);
      E = 0:            T = 1/(kappa lam a) if a > 0 else inf.
    b = 0 (frozen head, notes §2.2) and lam = 0 (stage k) give inf; a = +inf (blown up) gives 0.
    Scalars only.
    """
    a, b = float(a), float(b)
    if a == math.inf:
        return 0.0
    if b == 0.0 or lam == 0.0:
        return math.inf
    E = b * b - lam * a * a
    if E > 0.0:
        # pi/2 - arctan(y/x) = arctan2(x, y): stable as E -> 0+
        return math.atan2(math.sqrt(E), a * math.sqrt(lam)) / (kappa * math.sqrt(lam * E))
    if E < 0.0:
        if a <= 0.0:
            return math.inf
        r = math.sqrt(-E / lam)
        return _arccoth_of_ratio(a, b, r, lam) / (kappa * lam * r)
    return 1.0 / (kappa * lam * a) if a > 0.0 else math.inf


def advance(a: float, b: float, kappa: float, lam: float, t: float) -> tuple[float, float]:
    """State (a(t), b(t)) of a' = kappa b^2, b' = kappa lam a b after time t (notes §4.8).

    E > 0: a = sqrt(E/lam) tan(theta0 + kappa sqrt(lam E) t), b = b0 cos(theta0)/cos(theta);
    E < 0: a = s r coth(phi0 - s kappa lam r t), s = sign(a), b = b0 sinh(phi0)/sinh(phi);
    E = 0: a = a0/(1 - kappa lam a0 t), b = b0 a/a0.
    The b forms equal sign(b) sqrt(E + lam a^2) without its cancellation. Returns (inf, +-inf) once
    t >= blow_up_time(a, b, kappa, lam). Scalars only.
    """
    a, b, t = float(a), float(b), float(t)
    if t >= blow_up_time(a, b, kappa, lam):
        return math.inf, math.copysign(math.inf, b)
    if b == 0.0 or t == 0.0:
        return a, b
    if lam == 0.0:  # a' = kappa b^2, b constant
        return a + kappa * b * b * t, b
    E = b * b - lam * a * a
    if E > 0.0:
        theta0 = math.atan2(a * math.sqrt(lam), math.sqrt(E))
        theta = theta0 + kappa * math.sqrt(lam * E) * t
        return math.sqrt(E / lam) * math.tan(theta), b * math.cos(theta0) / math.cos(theta)
    if E < 0.0:
        r = math.sqrt(-E / lam)
        s = math.copysign(1.0, a)
        phi0 = _arccoth_of_ratio(a, b, r, lam)
        phi = phi0 - s * kappa * lam * r * t
        return s * r / math.tanh(phi), b * math.sinh(phi0) / math.sinh(phi)
    growth = 1.0 - kappa * lam * a * t
    return a / growth, b / growth


def vanishing_init_jumps(
    b0: ArrayLike,
    k: int,
    num_responses: int,
    a0: ArrayLike | None = None,
    w0: ArrayLike | None = None,
    c: float = 1.0,
) -> dict[str, list[Any]]:
    """Jump times tau_m = lim eps T_m in the vanishing-init limit: the recursion of notes §4.8.

    Rescaled variables a = alpha/eps, b = beta/eps, tau = eps t. n_heads = len(b0) (k or k-1);
    head h (0-based) focuses offset h+1. Initial focus logits: a0 (n_heads,), or derived from w0,
    the (n_heads, k) layer-1 logits divided by eps with offsets 1..k along axis 1, as
    a_h = w0[h, h] - mean of the other offsets of head h; default 0. Stages m = 1..k-1: every
    waiting head follows a' = kappa_m b^2, b' = kappa_m lam_m a b; the one with the smallest
    blow-up time activates at tau_m = tau_{m-1} + T_min; the others are advanced by T_min and
    (step 3, only when w0 is given) their a is shifted by mean(w0 over old live offsets) -
    mean(w0 over new live offsets), live = neither the head's own offset nor an active head's.

    Ties: heads whose blow-up time equals T_min blow up together; the lowest index activates at
    tau_m, the others carry a = inf into the next stage (blow-up time 0), so they activate at the
    same tau in index order. Equal b0 thus give k-1 jumps at one tau (one simultaneous drop, notes
    §4.7) and the highest-index head is the one reported unused.

    Returns dict(taus=[tau_1, ...], order=[activating head per jump], dead=[never activates:
    blow-up time infinite when the recursion stopped], unused=[waiting at the end with a finite
    blow-up time: the redundant k-th head]). Fewer than k-1 taus means the loss stalls on a
    plateau (notes §4.7).
    """
    b = np.array(b0, dtype=np.float64).ravel()
    n_heads = b.size
    if n_heads not in (k - 1, k):
        raise ValueError(f"need k or k-1 heads, got {n_heads} for k={k}")
    if w0 is not None:
        if a0 is not None:
            raise ValueError("give a0 or w0, not both")
        w0 = np.asarray(w0, dtype=np.float64)
        if w0.shape != (n_heads, k):
            raise ValueError(f"w0 must have shape {(n_heads, k)}, got {w0.shape}")
        a = np.array([w0[h, h] - np.delete(w0[h], h).mean() for h in range(n_heads)])
    elif a0 is not None:
        a = np.array(a0, dtype=np.float64).ravel()
        if a.size != n_heads:
            raise ValueError(f"a0 must have {n_heads} entries, got {a.size}")
    else:
        a = np.zeros(n_heads)

    waiting = list(range(n_heads))
    taus, order = [], []
    tau = 0.0
    times = {}
    for stage in range(1, k):
        kappa, lam = stage_constants(k, num_responses, stage, c)
        times = {h: blow_up_time(a[h], b[h], kappa, lam) for h in waiting}
        first = min(waiting, key=lambda h: (times[h], h))
        t_min = times[first]
        if t_min == math.inf:
            break
        tau += t_min
        taus.append(tau)
        order.append(first)
        waiting.remove(first)
        for h in waiting:
            if times[h] <= t_min:
                a[h], b[h] = math.inf, math.copysign(math.inf, b[h])
                continue
            a[h], b[h] = advance(a[h], b[h], kappa, lam, t_min)
            if w0 is not None and stage < k - 1:  # step 3 (no later stage to shift for)
                old_live = [i for i in range(k) if i != h and i not in order[:-1]]
                new_live = [i for i in old_live if i != first]
                a[h] += w0[h, old_live].mean() - w0[h, new_live].mean()
    dead = [h for h in waiting if times.get(h, math.inf) == math.inf]
    unused = [h for h in waiting if h not in dead]
    return {"taus": taus, "order": order, "dead": dead, "unused": unused}


def head_death(alpha0: float, beta0: float, k: int, exact: bool = False) -> tuple[bool, float]:
    """Head-death criterion of notes §4.7: (dies, final_alpha) for a head from (alpha0, beta0).

    The head dies iff alpha0 < 0 and C = f(alpha0) - beta0^2/4 > 0 (E = b^2 - lam a^2 < 0, a < 0);
    then beta -> 0 and alpha -> -sqrt(4 C/lam), lam = 2 (k-1)/k (small-amplitude form, the notes'
    prediction). With exact=True, final_alpha solves f(alpha) = C on alpha < 0 instead (the exact
    conservation law on M_1 with beta = 0). C = 0 with alpha0 < 0 also never activates (creeps to
    the origin, final alpha 0). beta0 = 0 is frozen (notes §2.2): (True, alpha0). A head that
    activates returns (False, inf).
    """
    alpha0, beta0 = float(alpha0), float(beta0)
    if beta0 == 0.0:
        return True, alpha0
    C = f_conserved(alpha0, k) - beta0**2 / 4.0
    if not (alpha0 < 0.0 and C >= 0.0):
        return False, math.inf
    lam = 2.0 * (k - 1) / k
    approx = -math.sqrt(4.0 * C / lam)
    if not exact or C == 0.0:
        return True, approx
    # f is decreasing on alpha < 0 with f(0) = 0; bisect f(alpha) = C on [lo, 0]
    lo = min(approx, alpha0)
    while f_conserved(lo, k) < C:
        lo *= 2.0
    hi = 0.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if f_conserved(mid, k) > C:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-15 * abs(lo):
            break
    return True, 0.5 * (lo + hi)


# --------------------------------------------------------------------------------------------------
# The plateaus' saddles: their negative curvature (notes §4.10, ours)
# --------------------------------------------------------------------------------------------------


def plateau_gradient(k: int, num_responses: int, active: int, c: float = 1.0) -> float:
    """|g| = kappa sqrt((k'-1)/k'), k' = k - active: the size of the linear coefficient of the
    loss in an inactive head's w on the plateau with `active` heads on (notes §4.10)."""
    kappa, _ = stage_constants(k, num_responses, active + 1, c)
    reduced = k - active
    return kappa * math.sqrt((reduced - 1) / reduced)


def plateau_eigenvalues(
    beta: ArrayLike,
    w: ArrayLike,
    active: list[int],
    k: int,
    num_responses: int,
    c: float = 1.0,
) -> NDArray:
    """The negative Hessian eigenvalues on the plateau where the heads `active` (0-based) are on,
    to leading order in the other heads (notes §4.10): one per inactive head h with beta_h != 0,
    t_h - sqrt(t_h^2 + 4 beta_h^2 |g|^2), t_h = <w^h, g_h>, g_h = -kappa (e_h - 1_alive / k'),
    the alive offsets those of the inactive heads; none once k' = k - len(active) < 2 (the loss
    is 0: the last plateau is a minimum at infinity). Ascending."""
    beta_H, w_HK = np.asarray(beta, np.float64), np.asarray(w, np.float64)
    reduced = k - len(active)
    if reduced < 2:
        return np.zeros(0)
    kappa, _ = stage_constants(k, num_responses, len(active) + 1, c)
    alive = np.ones(w_HK.shape[-1])
    alive[list(active)] = 0.0
    out = []
    for h in range(beta_H.size):
        if h in active or beta_H[h] == 0:
            continue
        g = -kappa * (np.eye(w_HK.shape[-1])[h] - alive / reduced)
        t = float(w_HK[h] @ g)
        out.append(t - math.sqrt(t * t + 4.0 * beta_H[h] ** 2 * float(g @ g)))
    return np.sort(np.asarray(out))


def plateau_index(beta: ArrayLike, active: list[int], k: int) -> int:
    """The saddle's index on the plateau with the heads `active` on (notes §4.10): the inactive
    heads with beta != 0 while k - len(active) >= 2, else 0."""
    if k - len(active) < 2:
        return 0
    return sum(1 for h, b in enumerate(np.asarray(beta)) if h not in active and b != 0)
