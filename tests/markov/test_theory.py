"""Closed forms of Attention with Markov against the numbers in notes/markov.md (§2.2, §4, §6, §7).

The Hessian predictions are also checked against jax.hessian of the exact population loss of the
reduced model at W_O = W_2 = 0 (logit = x_n <a, e> + <a, p_n> + b; notes §6.4), which is what
the alpha block of the full theory model reduces to.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from landscape.markov import task, theory
from landscape.probes.results import Curvature

# notes §4 reference table: p, q, pi_1, H(pi), entropy rate, gap I, pi0 pi1, tied b / e, untied +-
TABLE = [
    (0.2, 0.3, 0.4000, 0.6730, 0.5446, 0.1284, 0.2400, 0.2400, -0.2400, 0.1200),
    (0.5, 0.8, 0.3846, 0.6663, 0.6190, 0.0473, 0.2367, 0.2367, +0.1420, 0.0710),
    (0.8, 0.5, 0.6154, 0.6663, 0.6190, 0.0473, 0.2367, 0.2367, +0.1420, 0.0710),
    (0.9, 0.9, 0.5000, 0.6931, 0.3251, 0.3681, 0.2500, 0.2500, +0.4000, 0.2000),
    (0.6, 0.6, 0.5000, 0.6931, 0.6730, 0.0201, 0.2500, 0.2500, +0.1000, 0.0500),
    (0.3, 0.6, 0.3333, 0.6365, 0.6316, 0.0049, 0.2222, 0.2222, -0.0444, 0.0222),
    (0.7, 0.9, 0.4375, 0.6853, 0.4858, 0.1995, 0.2461, 0.2461, +0.2953, 0.1477),
    (0.5, 0.5, 0.5000, 0.6931, 0.6931, 0.0000, 0.2500, 0.2500, 0.0000, 0.0000),
]
ROUNDED = 5e-5 + 1e-12  # 4-decimal table entries


@pytest.mark.parametrize("row", TABLE, ids=[f"p={r[0]},q={r[1]}" for r in TABLE])
def test_c2_reference_table(row):
    """C2 / notes §4: every column of the 8-row table, eigenvalues from §6.5 (d = 3)."""
    p, q, pi1, h_pi, rate, gap, pi0pi1, tied_b, tied_e, untied = row
    pi0_, pi1_ = theory.stationary_binary(p, q)
    assert abs(pi1_ - pi1) < ROUNDED
    assert abs(theory.unigram_loss(p, q) - h_pi) < ROUNDED
    assert abs(theory.entropy_rate(p, q) - rate) < ROUNDED
    assert abs(theory.mutual_information(p, q) - gap) < ROUNDED
    assert abs(pi0_ * pi1_ - pi0pi1) < ROUNDED
    d = 3
    expected_tied = np.sort([tied_b] + [tied_e] * d)
    assert np.all(np.abs(theory.alpha_spectrum(p, q, d, tied=True) - expected_tied) < ROUNDED)
    expected_untied = np.sort([tied_b] + [untied] * d + [-untied] * d)
    assert np.all(np.abs(theory.alpha_spectrum(p, q, d, tied=False) - expected_untied) < ROUNDED)


def test_c2_c11_six_digit_values():
    """C2: (0.5, 0.8) H(pi) = 0.666278, L_star = 0.619015; C11: L_star at (0.2,0.3), (0.9,0.6)."""
    assert abs(theory.unigram_loss(0.5, 0.8) - 0.666278) < 5e-7
    assert abs(theory.entropy_rate(0.5, 0.8) - 0.619015) < 5e-7
    assert abs(theory.entropy_rate(0.2, 0.3) - 0.544587) < 5e-7
    assert abs(theory.entropy_rate(0.9, 0.6) - 0.533840) < 5e-7
    assert abs(theory.binary_entropy(0.5) - np.log(2)) < 1e-15
    assert theory.binary_entropy(0.0) == 0.0 and theory.binary_entropy(1.0) == 0.0


def test_c17_gap_identity_and_kernel_versions():
    """C17: H(pi) - L_star = I(x_n; x_{n+1}) (I from its definition), 0 iff p + q = 1."""
    p_G, q_G = [
        g.ravel() for g in np.meshgrid(np.linspace(0.05, 0.95, 7), np.linspace(0.1, 0.9, 6))
    ]
    gap_G = theory.unigram_loss(p_G, q_G) - theory.entropy_rate(p_G, q_G)
    info_G = jax.jit(jax.vmap(theory.mutual_information))(p_G, q_G)
    np.testing.assert_allclose(info_G, gap_G, atol=1e-14)
    assert np.all(info_G > 1e-6)  # no p + q = 1 on this grid
    for p in (0.1, 0.37, 0.5, 0.8):
        assert abs(theory.mutual_information(p, 1 - p)) < 1e-15
    raw = np.random.default_rng(0).uniform(0.1, 1.0, (4, 4))
    kernel = jnp.asarray(raw / raw.sum(axis=1, keepdims=True))
    np.testing.assert_allclose(
        theory.unigram_loss_kernel(kernel) - theory.entropy_rate_kernel(kernel),
        theory.mutual_information_kernel(kernel),
        atol=1e-14,
    )
    binary = task.binary_kernel(0.5, 0.8)
    np.testing.assert_allclose(theory.unigram_loss_kernel(binary), 0.6662785, atol=1e-7)
    np.testing.assert_allclose(
        theory.entropy_rate_kernel(binary), theory.entropy_rate(0.5, 0.8), atol=1e-15
    )


def test_multistate_closed_forms():
    """notes §2.2, S = 5: log 5 = 1.6094; bigram h(p) + p log 4 = 0.4637, 1.0268, 1.5048, 1.5727."""
    assert abs(theory.symmetric_unigram_loss(5) - 1.6094) < ROUNDED
    for p, bigram in [(0.1, 0.4637), (0.3, 1.0268), (0.6, 1.5048), (0.9, 1.5727)]:
        assert abs(theory.symmetric_entropy_rate(5, p) - bigram) < ROUNDED
        kernel = task.symmetric_kernel(5, p)
        np.testing.assert_allclose(
            theory.entropy_rate_kernel(kernel), theory.symmetric_entropy_rate(5, p), atol=1e-14
        )
        np.testing.assert_allclose(theory.unigram_loss_kernel(kernel), np.log(5), atol=1e-14)


def test_theta_star_constants_b1_b2():
    """notes §6.1: B.1 at (0.2, 0.3, d=4); B.2 at (0.5, 0.8, d=4) with r = d and r = 16."""
    assert abs(theory.bigram_slope(0.2, 0.3) - 2.2336) < ROUNDED
    e_i, b = theory.theta_star_b1(0.2, 0.3, 4)
    assert abs(e_i - 0.7473) < ROUNDED and abs(b - (-1.3863)) < ROUNDED
    assert abs(theory.bigram_slope(0.5, 0.8) - (-1.3863)) < ROUNDED
    w4, b4 = theory.theta_star_b2(0.5, 0.8, 4, 4)
    w16, b16 = theory.theta_star_b2(0.5, 0.8, 4, 16)
    assert abs(w4 - 0.4103) < ROUNDED and abs(w16 - 0.2051) < ROUNDED
    assert abs(b4 - 2.0) < 1e-14 and abs(b16 - 2.0) < 1e-14
    assert abs(theory.theta_pi_logit(0.5, 0.8) - (-0.4700)) < ROUNDED


@pytest.mark.parametrize("p, q", [(0.5, 0.8), (0.9, 0.6), (0.7, 0.9)])
def test_c11_c12_b2_outputs_the_kernel_only_with_the_corrected_w(p, q):
    """C11: B.2 with the d r-corrected w_star outputs p, 1 - q; C12: the paper's w (r != d) not."""
    sigmoid = jax.nn.sigmoid
    d = 4
    for r in (d, 4 * d):
        w, b = theory.theta_star_b2(p, q, d, r)
        logit1, logit0 = theory.b2_logits(w, b, d, r)
        np.testing.assert_allclose([sigmoid(logit0), sigmoid(logit1)], [p, 1 - q], atol=1e-14)
    w_paper, b = theory.theta_star_b2(p, q, d, 4 * d, paper=True)
    logit1, _ = theory.b2_logits(w_paper, b, d, 4 * d)
    assert abs(sigmoid(logit1) - (1 - q)) > 0.05
    w_paper_square, _ = theory.theta_star_b2(p, q, d, d, paper=True)
    np.testing.assert_allclose(w_paper_square, theory.theta_star_b2(p, q, d, d)[0], rtol=1e-15)


def test_c15_appendix_d():
    """C15: (0.3618, -0.1539, 0.3264, -0.1229, 5, 4, 16) -> logits 0.8191 / -1.3897 (§6.6)."""
    logit1, logit0 = theory.appendix_d_logits(0.3618, -0.1539, 0.3264, -0.1229, 5, 4, 16)
    assert abs(logit1 - 0.8191) < ROUNDED and abs(logit0 - (-1.3897)) < ROUNDED
    assert abs(jax.nn.sigmoid(logit1) - 0.694) < 5e-4
    assert abs(jax.nn.sigmoid(logit0) - 0.1995) < ROUNDED


def test_stuck_criterion():
    """notes §12.7: |L - H(pi)| < I/4 and |f0 - f1| < 0.02, at (0.5, 0.8) (I = 0.0473)."""
    assert theory.stuck(0.6656, 0.5, 0.8, 0.384, 0.387)  # §11.4 tied pilot
    assert not theory.stuck(0.6195, 0.5, 0.8, 0.50, 0.20)  # untied pilot: the bigram
    assert not theory.stuck(0.6656, 0.5, 0.8, 0.40, 0.36)  # flat loss, distinct outputs
    assert not theory.stuck(0.6663 - 0.0473 / 3, 0.5, 0.8, 0.385, 0.385)


# --------------------------------------------------------------------------------------------------
# Hessian predictions against jax.hessian of the exact population loss (notes §6.2-6.5, §6.8)
# --------------------------------------------------------------------------------------------------


SEQ_LEN, D = 6, 3
X_MN = task.enumerate_sequences(2, SEQ_LEN)


def _reduced_loss(flat, p, q, pos_ND, tied):
    """Exact population loss of logit_n = <a, x_n e + p_n> + b, flat = (b, a[, e]) (§6.4)."""
    kernel = task.binary_kernel(p, q)
    w, t = task.sequence_probs(X_MN, kernel), task.soft_targets(X_MN, kernel)
    b, a = flat[0], flat[1 : 1 + D]
    e = a if tied else flat[1 + D :]
    logits = jnp.einsum("mnd,d->mn", X_MN[:, :, None] * e + pos_ND, a) + b
    return task.population_cross_entropy(task.binary_log_probs(logits), w, t)


@functools.partial(jax.jit, static_argnums=4)
def _reduced_grad_hess(flat, p, q, pos_ND, tied):
    return (
        jax.grad(_reduced_loss)(flat, p, q, pos_ND, tied),
        jax.hessian(_reduced_loss)(flat, p, q, pos_ND, tied),
    )


def _reduced_hessian(p, q, pos_ND, tied):
    """Exact Hessian at theta_pi (e = a = 0, b = log(p/q)) in the order (b, a, e)."""
    point = jnp.zeros(1 + D * (1 if tied else 2)).at[0].set(theory.theta_pi_logit(p, q))
    grad, hessian = _reduced_grad_hess(point, p, q, pos_ND, tied)
    assert abs(grad).max() < 1e-15  # C3: a stationary point
    return hessian


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize(
    "p, q, pos",
    [(0.5, 0.8, "zero"), (0.2, 0.3, "zero"), (0.5, 0.8, "random"), (0.3, 0.6, "random")],
)
def test_alpha_block_matches_exact_hessian(p, q, pos, tied):
    """C4-C8: Eq. 12 (tied) and B.5 (untied, order (b, a, e)) equal the exact Hessian block."""
    d = D
    pos_ND = jnp.zeros((SEQ_LEN, d))
    if pos == "random":
        pos_ND = jnp.asarray(0.7 * np.random.default_rng(7).normal(size=(SEQ_LEN, d)))
    hessian = _reduced_hessian(p, q, pos_ND, tied)
    block = theory.alpha_block(p, q, d, pos=None if pos == "zero" else pos_ND, tied=tied)
    np.testing.assert_allclose(block, hessian, atol=1e-14)
    if pos == "zero":
        np.testing.assert_allclose(
            np.linalg.eigvalsh(hessian), theory.alpha_spectrum(p, q, d, tied=tied), atol=1e-14
        )


def test_alpha_spectrum_examples():
    """§6.5: (0.5, 0.8) pi0 pi1 = 0.236686, tied 0.142012, untied +-0.071006; (0.2, 0.3)."""
    np.testing.assert_allclose(
        theory.alpha_spectrum(0.5, 0.8, 2), [0.142012, 0.142012, 0.236686], atol=5e-7
    )
    np.testing.assert_allclose(
        theory.alpha_spectrum(0.5, 0.8, 1, tied=False), [-0.071006, 0.071006, 0.236686], atol=5e-7
    )
    np.testing.assert_allclose(theory.alpha_spectrum(0.2, 0.3, 2), [-0.24, -0.24, 0.24], atol=1e-15)
    np.testing.assert_allclose(
        theory.alpha_spectrum(0.2, 0.3, 1, tied=False), [-0.12, 0.12, 0.24], atol=1e-15
    )


def test_constant_positions_two_by_two_block():
    """§6.5: p_n = c: d - 1 eigenvalues 2 pi0 pi1 (p+q-1) and pi0 pi1 [[1, |c|], [|c|, ...]]."""
    p, q, d = 0.5, 0.8, 3
    c_D = jnp.array([0.3, -1.2, 0.5])
    eig = np.linalg.eigvalsh(theory.alpha_block(p, q, d, pos=jnp.tile(c_D, (5, 1))))
    c2, k = float(c_D @ c_D), 2 * (p + q - 1)
    pair = np.linalg.eigvalsh(np.array([[1, np.sqrt(c2)], [np.sqrt(c2), c2 + k]]))
    expected = np.sort(np.concatenate([[k] * (d - 1), pair])) * float(
        np.prod(theory.stationary_binary(p, q))
    )
    np.testing.assert_allclose(eig, expected, atol=1e-14)


def test_theta_pi_verdicts():
    """Tied: local min iff 2(p+q-1) I + Cov(p_n) PD (C4, C6, C7); untied: saddle (Thm 3)."""
    assert theory.theta_pi_kind(0.5, 0.8) is Curvature.MINIMUM
    assert "local minimum (Thm 2" in theory.theta_pi_verdict(0.5, 0.8)
    assert theory.theta_pi_kind(0.2, 0.3) is Curvature.SADDLE
    assert "saddle (Thm 2" in theory.theta_pi_verdict(0.2, 0.3)
    assert theory.theta_pi_kind(0.5, 0.8, tied=False) is Curvature.SADDLE
    assert "saddle (Thm 3" in theory.theta_pi_verdict(0.5, 0.8, tied=False)
    assert theory.theta_pi_kind(0.3, 0.7) is Curvature.MINIMUM
    assert "global minimum" in theory.theta_pi_verdict(0.3, 0.7)
    wide = 2.0 * jax.random.normal(jax.random.key(8), (256, 3))  # C7: Cov ~ 4 I > 0.2
    assert theory.theta_pi_kind(0.3, 0.6, pos=wide) is Curvature.MINIMUM
    narrow = 0.5 * jax.random.normal(jax.random.key(9), (8, 3))  # C7: N(0, 0.25)
    pos = np.asarray(narrow)
    cov_eig = np.linalg.eigvalsh(np.cov(pos.T, bias=True))
    negatives = int(np.sum(cov_eig < 2 * (1 - 0.9)))
    assert negatives >= 1
    block_eig = np.linalg.eigvalsh(theory.alpha_block(0.3, 0.6, 3, pos=pos))
    assert int(np.sum(block_eig < 0)) == negatives  # Schur inertia (Haynsworth)
    assert theory.theta_pi_kind(0.3, 0.6, pos=pos) is Curvature.SADDLE


@pytest.mark.parametrize(
    "p, eigenvalue", [(0.5, -0.15), (0.7, -0.05), (0.85, 0.025), (0.95, 0.075)]
)
def test_multistate_e_eigenvalue(p, eigenvalue):
    """§6.8 / C16, S = 5: tied E-block eigenvalue (2/S)(pS/(S-1) - 1); threshold 0.8."""
    assert abs(theory.multistate_e_eigenvalue(5, p) - eigenvalue) < 1e-14
    m_eig = np.linalg.eigvalsh(theory.multistate_e_block(task.symmetric_kernel(5, p)))
    np.testing.assert_allclose(np.sort(m_eig), np.sort([0.0] + [eigenvalue] * 4), atol=1e-14)
    assert theory.multistate_threshold(5) == 0.8
    assert (eigenvalue > 0) == (p > theory.multistate_threshold(5))


MS_STATES, MS_D, MS_LEN = 5, 2, 3
MS_X = task.enumerate_sequences(MS_STATES, MS_LEN)


def _multistate_loss(flat, p, tied):
    """Exact population loss of logits_n = A E[x_n] + b (A = E if tied), flat = (b, E[, A])."""
    kernel = task.symmetric_kernel(MS_STATES, p)
    w, t = task.sequence_probs(MS_X, kernel), task.soft_targets(MS_X, kernel)
    sizes = [MS_STATES, MS_STATES * MS_D] + ([] if tied else [MS_STATES * MS_D])
    parts = jnp.split(flat, np.cumsum(sizes)[:-1])
    b, E = parts[0], parts[1].reshape(MS_STATES, MS_D)
    A = E if tied else parts[2].reshape(MS_STATES, MS_D)
    return task.population_cross_entropy(jax.nn.log_softmax(E[MS_X] @ A.T + b), w, t)


_multistate_hess = jax.jit(jax.hessian(_multistate_loss), static_argnums=2)


@pytest.mark.parametrize("tied, p", [(True, 0.5), (True, 0.85), (False, 0.9)])
def test_multistate_eigenvalues_match_exact_hessian(tied, p):
    """C16: jax.hessian of (b, E[, A]) at E = 0, b = log pi (S = 5, d = 2, p_n = 0) vs §6.8."""
    size = MS_STATES + MS_STATES * MS_D * (1 if tied else 2)
    point = jnp.zeros(size).at[:MS_STATES].set(-jnp.log(MS_STATES))
    eig = np.linalg.eigvalsh(_multistate_hess(point, p, tied))
    expected = theory.multistate_unigram_eigenvalues(MS_STATES, p, tied=tied, d=MS_D)
    assert len(expected) == len(eig)
    np.testing.assert_allclose(eig, expected, atol=1e-14)
    if not tied:  # untied: +-0.025 at p = 0.9
        for value in (0.025, -0.025):
            assert np.sum(np.abs(eig - value) < 1e-14) == (MS_STATES - 1) * MS_D
