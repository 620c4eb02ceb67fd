"""In-context n-gram task: Dirichlet tasks, samplers, lifted chain, plateau levels (notes §2)."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from landscape.markov import task as markov_task
from landscape.ngrams import task

Z = 4.0  # sigmas for every Monte-Carlo tolerance


def _one_task(num_states, order_n, alpha, seed):
    """(S^(n-1), S) Dirichlet rows from NumPy (no per-shape compile of the JAX sampler)."""
    rng = np.random.default_rng(seed)
    return jnp.asarray(rng.dirichlet(np.full(num_states, alpha), num_states ** (order_n - 1)))


def _contexts(x_BT, num_states, order_n):
    """(B, T-n+2) base-S index of every window of n-1 tokens, oldest most significant (§2.2)."""
    order = order_n - 1
    x = np.asarray(x_BT, dtype=np.int64)
    windows = np.stack([x[:, i : x.shape[1] - order + 1 + i] for i in range(order)], axis=-1)
    return windows @ (num_states ** np.arange(order - 1, -1, -1))


def test_dirichlet_rows_moments_and_beta_marginal():
    """Dir(alpha 1_S) rows: sum 1, mean 1/S, var (1/S)(1-1/S)/(S alpha+1), Beta marginals (§2.2)."""
    S, n, alpha, B = 5, 3, 0.5, 800
    P = np.asarray(task.sample_tasks(jax.random.key(0), S, n, alpha, B, jnp.float64))
    assert P.shape == (B, S ** (n - 1), S) and P.dtype == np.float64
    np.testing.assert_allclose(P.sum(-1), 1.0, rtol=0, atol=1e-13)
    assert np.all(P >= 0)
    rows = P.reshape(-1, S)
    num = rows.shape[0]
    mean, var = 1.0 / S, (1.0 / S) * (1.0 - 1.0 / S) / (S * alpha + 1.0)
    assert np.all(np.abs(rows.mean(0) - mean) < Z * np.sqrt(var / num))
    dev2 = (rows - rows.mean(0)) ** 2
    assert np.all(np.abs(dev2.mean(0) - var) < Z * dev2.std(0) / np.sqrt(num))
    # each coordinate is Beta(alpha, (S-1) alpha): a KS test checks the whole law, not 2 moments
    for j in range(S):
        assert stats.kstest(rows[:, j], stats.beta(alpha, (S - 1) * alpha).cdf).pvalue > 1e-4
    # contexts are independent: correlation of two contexts' rows across tasks ~ 0
    r = np.corrcoef(P[:, 0, 0], P[:, 1, 0])[0, 1]
    assert abs(r) < Z / np.sqrt(B)


def test_transition_frequencies_match_P_for_one_task():
    """One fixed task over many sequences: empirical P(next | window) = P within 4 sigma (§2.2)."""
    S, n, T, B = 3, 3, 32, 4000
    P = _one_task(S, n, 1.0, seed=3)
    x, target = task.sample_sequences(
        jax.random.key(4), jnp.broadcast_to(P, (B,) + P.shape), S, n, T
    )
    ctx = _contexts(x, S, n)[:, :-1].ravel()  # windows with a next token
    nxt = np.asarray(x)[:, n - 1 :].ravel()
    counts = np.zeros((S ** (n - 1), S))
    np.add.at(counts, (ctx, nxt), 1)
    n_c = counts.sum(1, keepdims=True)
    assert np.all(n_c > 1000)
    freq, P = counts / n_c, np.asarray(P)
    assert np.all(np.abs(freq - P) < Z * np.sqrt(P * (1 - P) / n_c))
    # the check can fail: the transposed axis order (newest most significant) is far off
    P_swapped = P.reshape(S, S, S).transpose(1, 0, 2).reshape(S * S, S)
    assert np.max(np.abs(freq - P_swapped) / np.sqrt(P * (1 - P) / n_c)) > 10


def test_sample_transitions_follow_each_sequences_own_task():
    """sample(): sum_t (1{x_{t+1} = j} - P_b[window_t, j]) has mean 0 over sequences (§2.2)."""
    S, n, T, B = 5, 3, 32, 4000
    x, _, P = task.sample(jax.random.key(5), S, n, T, 0.5, B)
    ctx = _contexts(x, S, n)[:, :-1]
    onehot = np.eye(S)[np.asarray(x)[:, n - 1 :]]
    pred = np.take_along_axis(np.asarray(P), ctx[:, :, None], axis=1)
    resid_BS = (onehot - pred).sum(1)  # independent across sequences
    se = resid_BS.std(0) / np.sqrt(B)
    assert np.all(np.abs(resid_BS.mean(0)) < Z * se)
    # martingale: E[resid^2] = E[sum_t p (1 - p)] (fails if tokens ignore their own task)
    second = resid_BS**2 - (pred * (1 - pred)).sum(1)
    assert np.all(np.abs(second.mean(0)) < Z * second.std(0) / np.sqrt(B))
    wrong = np.take_along_axis(np.roll(np.asarray(P), 1, axis=0), ctx[:, :, None], axis=1)
    second = ((onehot - wrong).sum(1)) ** 2 - (wrong * (1 - wrong)).sum(1)
    assert np.all(second.mean(0) > Z * second.std(0) / np.sqrt(B))


def test_target_is_P_of_last_window_and_shapes():
    """target = P[b, (x_{T-n+2}, ..., x_T)] exactly; int32 tokens in [0, S) (§2.2 step 4)."""
    S, n, T, B = 5, 3, 32, 4000
    for init in task.INITS:
        x, target, P = task.sample(jax.random.key(6), S, n, T, 0.7, B, init=init)
        assert x.shape == (B, T) and x.dtype == jnp.int32 and target.shape == (B, S)
        assert P.shape == (B, S ** (n - 1), S)
        assert int(x.min()) >= 0 and int(x.max()) < S
        last = _contexts(x, S, n)[:, -1]
        np.testing.assert_array_equal(target, np.asarray(P)[np.arange(B), last])


def test_stationary_init_window_marginals_equal_pi():
    """init="stationary": every window of n-1 tokens has law pi (Lemma H.3); uniform does not."""
    S, n, T, B = 3, 3, 8, 20000
    P = _one_task(S, n, 0.5, seed=7)
    pi = np.asarray(task.lifted_stationary(P, S, n))
    P_B = jnp.broadcast_to(P, (B,) + P.shape)
    sigma = np.sqrt(pi * (1 - pi) / B)
    x, _ = task.sample_sequences(jax.random.key(8), P_B, S, n, T, init="stationary")
    ctx = _contexts(x, S, n)
    for t in range(ctx.shape[1]):
        freq = np.bincount(ctx[:, t], minlength=S ** (n - 1)) / B
        assert np.all(np.abs(freq - pi) < Z * sigma), t
    x, _ = task.sample_sequences(jax.random.key(8), P_B, S, n, T, init="uniform")
    freq0 = np.bincount(_contexts(x, S, n)[:, 0], minlength=S ** (n - 1)) / B
    uniform = 1.0 / S ** (n - 1)
    assert np.all(np.abs(freq0 - uniform) < Z * np.sqrt(uniform * (1 - uniform) / B))
    assert np.max(np.abs(freq0 - pi) / sigma) > 10  # pi is far from uniform here


def _lifted_by_loops(P, S, n):
    """(C, C) lifted kernel built digit by digit (App. H): (i_1..i_o) -> (i_2..i_o, j)."""
    order, P = n - 1, np.asarray(P)
    index = {w: i for i, w in enumerate(itertools.product(range(S), repeat=order))}
    trans = np.zeros((len(index), len(index)))
    for w, i in index.items():
        for j in range(S):
            trans[i, index[w[1:] + (j,)]] = P[i, j]
    return trans


@pytest.mark.parametrize("S, n, alpha", [(5, 3, 0.5), (4, 2, 1.0), (2, 5, 0.3)])
def test_lifted_stationary_is_invariant(S, n, alpha):
    """pi T = pi, sum pi = 1, pi > 0 to ~1e-14 in float64 (notes §2.3, Eq. 37)."""
    P = _one_task(S, n, alpha, seed=9)
    trans = _lifted_by_loops(P, S, n)
    np.testing.assert_array_equal(task.lifted_transition(P, S, n), trans)
    pi = np.asarray(task.lifted_stationary(P, S, n))
    assert pi.shape == (S ** (n - 1),) and np.all(pi > 0)
    np.testing.assert_allclose(pi @ trans, pi, rtol=0, atol=1e-14)
    np.testing.assert_allclose(pi.sum(), 1.0, rtol=0, atol=1e-14)
    if n == 2:  # the lifted chain is the chain itself
        np.testing.assert_allclose(pi, markov_task.stationary(P), rtol=0, atol=1e-14)


@pytest.mark.parametrize("S, n", [(3, 4), (5, 3)])
def test_lower_order_conditionals_lemma_h5(S, n):
    """k = n gives P; k = 1 the stationary unigram; every q is the pi-joint's conditional (H.5)."""
    P = _one_task(S, n, 0.5, seed=11)
    pi = task.lifted_stationary(P, S, n)
    np.testing.assert_allclose(task.lower_order_conditional(P, pi, S, n, n), P, atol=1e-13)
    unigram = task.lower_order_conditional(P, pi, S, n, 1)
    assert unigram.shape == (1, S)
    np.testing.assert_allclose(unigram[0], np.asarray(pi) @ np.asarray(P), atol=1e-14)
    # stationarity: the next-token unigram is the law of the newest token of the window
    newest = np.asarray(pi).reshape(-1, S).sum(0)
    np.testing.assert_allclose(unigram[0], newest, atol=1e-14)
    # brute force: joint of (x_{t-o+1}, ..., x_t, x_{t+1}) = pi P, marginalise the oldest tokens
    joint = (np.asarray(pi)[:, None] * np.asarray(P)).reshape((S,) * n)
    for k in range(1, n + 1):
        q = np.asarray(task.lower_order_conditional(P, pi, S, n, k))
        assert q.shape == (S ** (k - 1), S)
        np.testing.assert_allclose(q.sum(1), 1.0, atol=1e-14)
        marg = joint.sum(axis=tuple(range(n - k))).reshape(S ** (k - 1), S)
        np.testing.assert_allclose(q, marg / marg.sum(1, keepdims=True), atol=1e-13)
    with pytest.raises(ValueError, match="k = 0"):
        task.lower_order_conditional(P, pi, S, n, 0)


@pytest.mark.parametrize(
    "S, n, alpha, table",
    [
        (5, 3, 0.5, [1.5700, 1.4475, 1.0549]),
        (3, 3, 1.0, [1.0502, 0.9800, 0.8202]),
        (3, 4, 0.5, [1.0498, 0.9916, 0.8693, 0.6382]),
    ],
)
def test_plateau_levels_reproduce_notes_table(S, n, alpha, table):
    """L_k^inf over 4000 tasks vs the notes' §2.3 table (itself 4000 tasks): Z sigma of the diff."""
    num_tasks, key = 4000, jax.random.key(12)
    P_B = task.sample_tasks(key, S, n, alpha, num_tasks, jnp.float64)
    per_task = np.asarray(jax.vmap(task.kgram_losses, (0, None, None))(P_B, S, n))
    levels = np.asarray(task.plateau_levels(key, S, n, alpha, num_tasks, jnp.float64))
    np.testing.assert_allclose(levels, per_task.mean(0), rtol=0, atol=1e-12)
    # conditional entropies: nonincreasing in k for every task
    assert np.all(np.diff(per_task, axis=1) <= 1e-12)
    se = per_task.std(0) / np.sqrt(num_tasks)
    se_diff = np.sqrt(2.0) * se  # the table is an independent 4000-task estimate
    assert np.all(np.abs(levels - np.asarray(table)) < Z * se_diff), (levels, table, se_diff)


def test_top_order_level_is_weighted_dirichlet_entropy_when_pi_uniform():
    """n = 2, S = 2 with P symmetric: pi uniform and L_2 = mean row entropy, L_1 = log 2 (§2.3)."""
    P = jnp.asarray([[0.7, 0.3], [0.3, 0.7]])
    losses = task.kgram_losses(P, 2, 2)
    h = -(0.7 * np.log(0.7) + 0.3 * np.log(0.3))
    np.testing.assert_allclose(losses, [np.log(2.0), h], atol=1e-14)


def test_jit_vmap_over_alpha_and_keys():
    """sample vmaps over traced alpha and keys (sweeps); alpha = 0.01 stays finite (log space)."""
    alphas = jnp.asarray([0.01, 1.0, 3.0])
    keys = jax.random.split(jax.random.key(13), 3)

    def one(key, a):
        return task._sample(key, 3, 3, 8, a, 2, "uniform", jnp.dtype(jnp.float64))

    x, target, P = jax.jit(jax.vmap(one))(keys, alphas)
    assert x.shape == (3, 2, 8) and target.shape == (3, 2, 3) and P.shape == (3, 2, 9, 3)
    assert np.all(np.isfinite(P)) and np.allclose(P.sum(-1), 1.0, atol=1e-13)
    assert int(x.min()) >= 0 and int(x.max()) < 3


@pytest.mark.parametrize(
    "args, match",
    [
        ((5, 1, 32, 0.5), r"order_n = 1: must be >= 2 \(an n-gram task needs at least a bigram\)"),
        ((5, 3, 3, 0.5), r"seq_len = 3: must be an integer > order_n = 3"),
        ((5, 3, 32, 0.0), r"alpha = 0: must be > 0"),
        ((5, 3, 32, -1.0), r"alpha = -1: must be > 0"),
        ((1, 3, 32, 0.5), r"num_states = 1: must be an integer >= 2"),
    ],
)
def test_bad_inputs_raise_one_sentence(args, match):
    with pytest.raises(ValueError, match=match):
        task.validate_task(*args)
    with pytest.raises(ValueError, match=match):
        task.sample(jax.random.key(0), *args, batch_size=2)


def test_bad_init_raises():
    with pytest.raises(ValueError, match="init = 'gaussian'"):
        task.sample(jax.random.key(0), 3, 3, 8, 1.0, 2, init="gaussian")
