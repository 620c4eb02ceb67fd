"""Closed forms of "Attention with Markov" (Makkuva, Bondaschi et al.), written with jnp.

Losses, the constructed points' logits, the alpha block and its spectrum, the multi-state
thresholds and App. D (workshop version's equation numbers; errata in notes/markov.md §6.9).
Jitted with p, q traced, so sweeps vmap them; nats. Contents by section: docs/design/markov.md.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import xlogy

from landscape.markov import task
from landscape.probes.results import Curvature
from landscape.typing import ArrayLike

# --------------------------------------------------------------------------------------------------
# Losses (notes §1, §2.2, §4)
# --------------------------------------------------------------------------------------------------


def _as_float(value: ArrayLike) -> jax.Array:
    """value as a jnp array of a float dtype (keeps float32/float64, promotes integers)."""
    value = jnp.asarray(value)
    return value if jnp.issubdtype(value.dtype, jnp.floating) else value.astype(float)


@jax.jit
def binary_entropy(x: ArrayLike) -> jax.Array:
    """h(x) = -x log x - (1-x) log(1-x) in nats, h(0) = h(1) = 0 (notes §1)."""
    x = _as_float(x)
    return -(xlogy(x, x) + xlogy(1.0 - x, 1.0 - x))


def _entropy(probs_S: jax.Array, axis: int = -1) -> jax.Array:
    return -jnp.sum(xlogy(probs_S, probs_S), axis=axis)


@jax.jit
def stationary_binary(p: jax.Array, q: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(pi_0, pi_1) = (q, p) / (p + q) (notes §2.1)."""
    return q / (p + q), p / (p + q)


@jax.jit
def unigram_loss(p: ArrayLike, q: ArrayLike) -> jax.Array:
    """H(pi) = h(p / (p + q)): the loss of the constant predictor pi_1, L(theta_pi) (§4)."""
    return binary_entropy(p / (p + q))


@jax.jit
def entropy_rate(p: ArrayLike, q: ArrayLike) -> jax.Array:
    """L_star = (q h(p) + p h(q)) / (p + q): the bigram (optimal) loss (notes §4)."""
    return (q * binary_entropy(p) + p * binary_entropy(q)) / (p + q)


@jax.jit
def mutual_information(p: ArrayLike, q: ArrayLike) -> jax.Array:
    """I(x_n; x_{n+1}) from its definition (notes §4 Remark 2; = H(pi) - L_star, check C17)."""
    return mutual_information_kernel(task.binary_kernel(p, q))


@jax.jit
def unigram_loss_kernel(kernel: ArrayLike) -> jax.Array:
    """H(pi) for any irreducible kernel (notes §4)."""
    return _entropy(task.stationary(kernel))


@jax.jit
def entropy_rate_kernel(kernel: ArrayLike) -> jax.Array:
    """sum_i pi_i H(P[i, :]) for any irreducible kernel (notes §4)."""
    kernel = jnp.asarray(kernel)
    return jnp.sum(task.stationary(kernel) * _entropy(kernel))


@jax.jit
def mutual_information_kernel(kernel: ArrayLike) -> jax.Array:
    """sum_ij pi_i P_ij log(P_ij / pi_j), the KL of the pair law from pi x pi (notes §4)."""
    kernel = jnp.asarray(kernel)
    pi_S = task.stationary(kernel)
    joint_SS = pi_S[:, None] * kernel
    return jnp.sum(xlogy(joint_SS, kernel) - xlogy(joint_SS, pi_S[None, :]))


@functools.partial(jax.jit, static_argnames=("num_states",))
def symmetric_unigram_loss(num_states: int) -> jax.Array:
    """log S: the uniform stationary law of the symmetric chain (notes §2.2)."""
    return jnp.log(jnp.asarray(num_states, dtype=float))


@functools.partial(jax.jit, static_argnames=("num_states",))
def symmetric_entropy_rate(num_states: int, p: ArrayLike) -> jax.Array:
    """h(p) + p log(S - 1): the symmetric chain's bigram loss (notes §2.2)."""
    return binary_entropy(p) + p * jnp.log(jnp.asarray(num_states - 1, dtype=float))


def _cross_entropy(t: ArrayLike, f: ArrayLike) -> jax.Array:
    return -(xlogy(t, f) + xlogy(1.0 - t, 1.0 - f))


@jax.jit
def kernel_predictor_loss(p: ArrayLike, q: ArrayLike, f0: ArrayLike, f1: ArrayLike) -> jax.Array:
    """pi_0 CE(p, f0) + pi_1 CE(1 - q, f1): a predictor with f = f0 after 0, f1 after 1 (§4)."""
    pi0, pi1 = stationary_binary(p, q)
    return pi0 * _cross_entropy(p, f0) + pi1 * _cross_entropy(1.0 - q, f1)


@jax.jit
def stuck(
    final_loss: jax.Array, p: ArrayLike, q: ArrayLike, f0: jax.Array, f1: jax.Array
) -> jax.Array:
    """Stuck at the unigram: |L - H(pi)| < I / 4 and |f0 - f1| < 0.02 (notes §12.7).

    f0, f1 are the mean predicted P(x_{n+1} = 1 | x_n = 0), (... | x_n = 1). A jnp bool.
    """
    near_unigram = jnp.abs(final_loss - unigram_loss(p, q)) < mutual_information(p, q) / 4.0
    return jnp.logical_and(near_unigram, jnp.abs(f0 - f1) < 0.02)


# --------------------------------------------------------------------------------------------------
# Constructed points (notes §6.1, §6.2)
# --------------------------------------------------------------------------------------------------


@jax.jit
def theta_pi_logit(p: ArrayLike, q: ArrayLike) -> jax.Array:
    """b = log(p / q) = log(pi_1 / pi_0), so sigma(b) = pi_1 (Eq. 11, notes §6.2)."""
    return jnp.log(p / q)


@jax.jit
def bigram_slope(p: ArrayLike, q: ArrayLike) -> jax.Array:
    """log((1-p)(1-q) / (pq)): the x_n-coefficient of the bigram logit (Eq. 6); < 0 iff p+q > 1."""
    return jnp.log((1.0 - p) * (1.0 - q) / (p * q))


@jax.jit
def theta_star_b1(p: ArrayLike, q: ArrayLike, d: int) -> tuple[jax.Array, jax.Array]:
    """(e_i, b) of B.1 (Eq. 7, p + q <= 1): e = a = e_i 1_d, e_i = sqrt(slope / d), p_n = 0,
    W_O = W_2 = 0, b = log(p / (1-p)) (notes §6.1). NaN for p + q > 1 (use B.2).
    """
    return jnp.sqrt(bigram_slope(p, q) / d), jnp.log(p / (1.0 - p))


@functools.partial(jax.jit, static_argnames=("paper",))
def theta_star_b2(
    p: ArrayLike, q: ArrayLike, d: int, r: int, paper: bool = False
) -> tuple[jax.Array, jax.Array]:
    """(w_star, b_star) of B.2 (Eq. 10, p + q > 1; notes §6.1).

    e = a = 1_d, p_n = -1_d / 2, W_O = 0, W_1 = w 1_r 1_d^T, W_2 = -W_1^T, b = b_star with
    w_star = sqrt(2 / (d r) (1 - slope / d)), b_star = log(p / (1-p)) + d / 2. `paper=True` gives
    the printed sqrt(2 / d^2 (...)), right only when r = d (erratum, notes §6.9, check C12).
    """
    width = d * d if paper else d * r
    w_star = jnp.sqrt(2.0 / width * (1.0 - bigram_slope(p, q) / d))
    return w_star, jnp.log(p / (1.0 - p)) + d / 2.0


@jax.jit
def b2_logits(w: jax.Array, b: jax.Array, d: int, r: int) -> tuple[jax.Array, jax.Array]:
    """(logit at x_n = 1, logit at x_n = 0) of the B.2 construction with weight w (notes §6.1).

    y_n = (x_n - 1/2) 1; the FF adds beta_1 = -w^2 d r / 2 for x_n = 1 and 0 for x_n = 0;
    logit = d (alpha_n + beta_n) + b.
    """
    return d * (0.5 - w**2 * d * r / 2.0) + b, -d / 2.0 + b


# --------------------------------------------------------------------------------------------------
# Hessian at theta_pi (notes §6.2, §6.3, §6.5)
# --------------------------------------------------------------------------------------------------


def _position_moments(d: int, pos: ArrayLike | None) -> tuple[jax.Array, jax.Array]:
    """(u_D, V0_DD) = (mean p_n, mean p_n p_n^T) of the (N, d) positional vectors (Eq. 12)."""
    if pos is None:
        return jnp.zeros(d), jnp.zeros((d, d))
    pos_ND = _as_float(pos)
    return pos_ND.mean(axis=0), pos_ND.T @ pos_ND / pos_ND.shape[0]


@functools.partial(jax.jit, static_argnames=("d", "tied"))
def alpha_block(
    p: ArrayLike, q: ArrayLike, d: int, pos: ArrayLike | None = None, tied: bool = True
) -> jax.Array:
    """The alpha block of the Hessian at theta_pi (notes §6.2 Eq. 12; §6.3 B.5).

    Tied, order (b, e), (d+1, d+1): pi0 pi1 [[1, u^T], [u, V0 + 2(p+q-1) I]].
    Untied, order (b, a, e), (2d+1, 2d+1): pi0 pi1 [[1, u^T, 0], [u, V0, (p+q-1) I],
    [0, (p+q-1) I, 0]]. pos is the (N, d) array of p_n (None: p_n = 0); u = mean p_n,
    V0 = mean p_n p_n^T. The positions enter through the head vector a (= e when tied).
    """
    pi0, pi1 = stationary_binary(p, q)
    u_D, v0_DD = _position_moments(d, pos)
    switch = p + q - 1.0
    eye_DD = jnp.eye(d)
    one = jnp.ones((1, 1))
    if tied:
        top = jnp.concatenate([one, u_D[None, :]], axis=1)
        rest = jnp.concatenate([u_D[:, None], v0_DD + 2.0 * switch * eye_DD], axis=1)
        return pi0 * pi1 * jnp.concatenate([top, rest], axis=0)
    zero_D, zero_DD = jnp.zeros((1, d)), jnp.zeros((d, d))
    top = jnp.concatenate([one, u_D[None, :], zero_D], axis=1)
    row_a = jnp.concatenate([u_D[:, None], v0_DD, switch * eye_DD], axis=1)
    row_e = jnp.concatenate([zero_D.T, switch * eye_DD, zero_DD], axis=1)
    return pi0 * pi1 * jnp.concatenate([top, row_a, row_e], axis=0)


@functools.partial(jax.jit, static_argnames=("d", "tied"))
def alpha_spectrum(p: ArrayLike, q: ArrayLike, d: int, tied: bool = True) -> jax.Array:
    """Ascending eigenvalues of the alpha block at the canonical theta_pi, p_n = 0 (notes §6.5).

    Tied: pi0 pi1 once and 2 pi0 pi1 (p+q-1) d times. Untied: pi0 pi1 once and
    +- pi0 pi1 |p+q-1| d times each. Every other Hessian eigenvalue is 0.
    """
    pi0, pi1 = stationary_binary(p, q)
    c = pi0 * pi1
    switch = jnp.abs(p + q - 1.0)
    if tied:
        values = [c * jnp.ones(1), 2.0 * c * (p + q - 1.0) * jnp.ones(d)]
    else:
        values = [c * jnp.ones(1), c * switch * jnp.ones(d), -c * switch * jnp.ones(d)]
    return jnp.sort(jnp.concatenate(values))


def _schur_smallest(p: float, q: float, pos: ArrayLike | None) -> float:
    """The smallest eigenvalue of 2(p+q-1) I + Cov(p_n), the Schur criterion of Thm 2 (§6.2)."""
    cov_DD = np.zeros((1, 1))
    if pos is not None:
        pos_ND = np.asarray(pos, dtype=np.float64)
        centred_ND = pos_ND - pos_ND.mean(axis=0)
        cov_DD = centred_ND.T @ centred_ND / pos_ND.shape[0]
    return float(np.linalg.eigvalsh(2.0 * (p + q - 1.0) * np.eye(len(cov_DD)) + cov_DD)[0])


def theta_pi_kind(p: float, q: float, pos: ArrayLike | None = None, tied: bool = True) -> Curvature:
    """What theta_pi is (Thm 2 / Schur criterion, notes §6.2; Thm 3, §6.3): tied, a MINIMUM iff
    2(p+q-1) I + Cov(p_n) is PD, a SADDLE if it has a negative eigenvalue, else INCONCLUSIVE;
    untied, a SADDLE whenever p + q != 1; at p + q = 1 a (global) MINIMUM."""
    p, q = float(p), float(q)
    if abs(p + q - 1.0) <= 1e-12:
        return Curvature.MINIMUM
    if not tied:
        return Curvature.SADDLE
    smallest = _schur_smallest(p, q, pos)
    if smallest > 1e-12:
        return Curvature.MINIMUM
    return Curvature.SADDLE if smallest < -1e-12 else Curvature.INCONCLUSIVE


def theta_pi_verdict(p: float, q: float, pos: ArrayLike | None = None, tied: bool = True) -> str:
    """`theta_pi_kind` as a sentence, with the reason."""
    p, q = float(p), float(q)
    switch = p + q - 1.0
    kind = theta_pi_kind(p, q, pos, tied)
    if abs(switch) <= 1e-12:
        return (
            "global minimum (p + q = 1: x_{n+1} is independent of x_n, so H(pi) equals the "
            "entropy rate; notes §4 Remark 2)"
        )
    if not tied:
        return (
            f"saddle (Thm 3: the a-e block pi0 pi1 (p+q-1) [[0, I], [I, 0]] has eigenvalues "
            f"+-{abs(switch):.4g} pi0 pi1, indefinite since p + q != 1; notes §6.3)"
        )
    schur = f"2(p+q-1) I + Cov(p_n) has smallest eigenvalue {_schur_smallest(p, q, pos):.4g}"
    if kind is Curvature.MINIMUM:
        return f"local minimum (Thm 2 / Schur criterion: {schur} > 0, notes §6.2)"
    if kind is Curvature.SADDLE:
        return f"saddle (Thm 2 / Schur criterion: {schur} < 0, notes §6.2)"
    return f"degenerate (Schur criterion: {schur}; the second-order test is inconclusive)"


# --------------------------------------------------------------------------------------------------
# Multi-state unigram point (notes §6.8; our derivation, not in the papers)
# --------------------------------------------------------------------------------------------------


@jax.jit
def multistate_e_block(kernel: ArrayLike) -> jax.Array:
    """M = 2(pi pi^T - D_pi P): the tied E block is M (x) I_d at E = 0, p_n = 0 (§6.8).

    Derived for a reversible kernel (every binary and every symmetric kernel is one).
    """
    kernel = jnp.asarray(kernel)
    pi_S = task.stationary(kernel)
    return 2.0 * (jnp.outer(pi_S, pi_S) - pi_S[:, None] * kernel)


@jax.jit
def multistate_e_eigenvalue(num_states: int, p: jax.Array) -> jax.Array:
    """lambda = (2/S)(pS/(S-1) - 1) = -(2/S) lambda_2(P), the tied E eigenvalue on 1-perp (§6.8)."""
    return 2.0 / num_states * (p * num_states / (num_states - 1) - 1.0)


def multistate_threshold(num_states: int) -> float:
    """(S - 1) / S: the tied unigram point is a local-min candidate iff p exceeds it (§6.8)."""
    return (num_states - 1) / num_states


@functools.partial(jax.jit, static_argnames=("num_states", "tied", "d"))
def multistate_unigram_eigenvalues(
    num_states: int, p: ArrayLike, tied: bool = True, d: int = 1
) -> jax.Array:
    """Ascending eigenvalues of the (b, E[, A]) block at the symmetric unigram point (§6.8).

    b block: 1/S (S - 1 times) and 0 on 1. Tied E block: lambda = (2/S)(pS/(S-1) - 1)
    ((S-1) d times) and 0 on the all-ones directions (d times). Untied (A, E):
    +- lambda / 2 ((S-1) d times each) and 0 (2 d times). Length S + S d (tied), S + 2 S d.
    """
    lam = multistate_e_eigenvalue(num_states, p)
    multiplicity = (num_states - 1) * d  # of lambda (tied), of +- lambda / 2 (untied)
    values = [jnp.full(num_states - 1, 1.0 / num_states), jnp.zeros(1)]
    if tied:
        values += [lam * jnp.ones(multiplicity), jnp.zeros(d)]
    else:
        half = 0.5 * lam * jnp.ones(multiplicity)
        values += [half, -half, jnp.zeros(2 * d)]
    return jnp.sort(jnp.concatenate(values))


# --------------------------------------------------------------------------------------------------
# Appendix D: the learned rank-one solution (notes §6.6)
# --------------------------------------------------------------------------------------------------


@jax.jit
def appendix_d_logits(
    e: jax.Array,
    p_scalar: jax.Array,
    w1: jax.Array,
    b: jax.Array,
    beta: jax.Array,
    d: int,
    r: int,
) -> tuple[jax.Array, jax.Array]:
    """(logit at x_n = 1, logit at x_n = 0) of Eq. 26 with the w1 d factors restored (§6.6).

    logit = e d (e x + p)(1 + w1^2 d ((2 beta - r) x + r - beta)) + b; p_scalar is the
    positional scale (p_n = p v), not the switching probability.
    """

    def logit(x: float) -> jax.Array:
        ff = 1.0 + w1**2 * d * ((2.0 * beta - r) * x + r - beta)
        return e * d * (e * x + p_scalar) * ff + b

    return logit(1.0), logit(0.0)
