"""Markov-chain task: kernels, samplers, population measures (notes/markov.md §2, §4, §7)."""

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from landscape.markov import task, theory


def _random_kernel(num_states, seed):
    """A dense irreducible kernel (rows normalised uniforms) as a jnp array."""
    raw = np.random.default_rng(seed).uniform(0.1, 1.0, (num_states, num_states))
    return jnp.asarray(raw / raw.sum(axis=1, keepdims=True))


def test_kernels_and_stationary_closed_forms():
    """P(p, q) rows = current state; pi = (q, p)/(p+q); symmetric: uniform (notes §2.1, §2.2)."""
    np.testing.assert_array_equal(task.binary_kernel(0.2, 0.3), [[0.8, 0.2], [0.3, 0.7]])
    for p, q in [(0.5, 0.8), (0.2, 0.3), (0.01, 0.97), (0.9, 0.9)]:
        pi = task.stationary(task.binary_kernel(p, q))
        np.testing.assert_allclose(pi, [q / (p + q), p / (p + q)], rtol=0, atol=1e-15)
    P = task.symmetric_kernel(5, 0.3)
    np.testing.assert_allclose(np.diag(P), 0.7, atol=1e-15)
    np.testing.assert_allclose(P[0, 1:], 0.075, atol=1e-15)
    np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-15)
    np.testing.assert_allclose(task.stationary(P), 0.2, atol=1e-15)
    np.testing.assert_allclose(task.symmetric_kernel(2, 0.3), task.binary_kernel(0.3, 0.3))
    kernel = _random_kernel(4, seed=0)
    pi = task.stationary(kernel)
    np.testing.assert_allclose(pi @ kernel, pi, atol=1e-15)
    np.testing.assert_allclose(pi.sum(), 1.0, atol=1e-15)


def test_stationary_is_differentiable_and_vmaps_over_traced_pq():
    """d pi_1 / dp = q/(p+q)^2; the whole population engine runs vmapped over a (p, q) grid."""

    def pi1(p, q):
        return task.stationary(task.binary_kernel(p, q))[1]

    p, q = 0.5, 0.8
    grads = jax.jit(jax.grad(pi1, argnums=(0, 1)))(p, q)
    np.testing.assert_allclose(grads, [q / (p + q) ** 2, -p / (p + q) ** 2], rtol=1e-13)

    @jax.jit
    def bigram_loss(p, q):
        kernel = task.binary_kernel(p, q)
        x, w, t = task.exact_population(2, 6, kernel, task.stationary(kernel))
        return task.population_cross_entropy(jnp.log(t), w, t)

    grid_p, grid_q = jnp.meshgrid(jnp.linspace(0.1, 0.9, 5), jnp.linspace(0.15, 0.95, 4))
    losses = jax.vmap(bigram_loss)(grid_p.ravel(), grid_q.ravel())
    np.testing.assert_allclose(
        losses, theory.entropy_rate(grid_p.ravel(), grid_q.ravel()), atol=1e-14
    )
    keys = jax.random.split(jax.random.key(0), grid_p.size)

    def sample_one(key, p, q):
        return task.sample(key, task.binary_kernel(p, q), None, 2, 8)

    x = jax.vmap(sample_one)(keys, grid_p.ravel(), grid_q.ravel())
    assert x.shape == (grid_p.size, 2, 8) and x.dtype == jnp.int32


def _transition_counts(x_BN, num_states):
    pairs = x_BN[:, :-1] * num_states + x_BN[:, 1:]
    return np.bincount(pairs.ravel(), minlength=num_states**2).reshape(num_states, num_states)


C1_BATCH, C1_LENGTH = 2**16, 17  # 1,048,576 transitions


@functools.cache
def _c1_chain(chain):
    """(kernel, pi, x) for the C1 sample; one compiled sampler shape per number of states."""
    if chain == "binary":
        kernel = task.binary_kernel(0.5, 0.8)
    else:
        kernel = task.symmetric_kernel(5, 0.3)
    pi = task.stationary(kernel)
    x = task.sample(jax.random.key(1), kernel, pi, batch_size=C1_BATCH, length=C1_LENGTH)
    return kernel, pi, x


@pytest.mark.parametrize("chain", ["binary", "symmetric"])
def test_c1_empirical_kernel_and_marginals(chain):
    """C1: P-hat from ~1e6 transitions within 4 sigma; P(x_n = s) = pi_s at n = 1 and n = N."""
    kernel, pi, x = _c1_chain(chain)
    num_states, pi, x = kernel.shape[0], np.asarray(pi), np.asarray(x)
    assert x.shape == (C1_BATCH, C1_LENGTH) and x.dtype == np.int32
    counts_SS = _transition_counts(x, num_states)
    assert counts_SS.sum() == C1_BATCH * (C1_LENGTH - 1)
    rows_S1 = counts_SS.sum(axis=1, keepdims=True)
    P = np.asarray(kernel)
    sigma_SS = np.sqrt(P * (1 - P) / rows_S1)
    assert np.all(np.abs(counts_SS / rows_S1 - P) < 4 * sigma_SS)
    for n in (0, C1_LENGTH - 1):
        freq_S = np.bincount(x[:, n], minlength=num_states) / C1_BATCH
        assert np.all(np.abs(freq_S - pi) < 4 * np.sqrt(pi * (1 - pi) / C1_BATCH)), (n, freq_S)
    slow = task.sample(
        jax.random.key(1), kernel, pi, batch_size=C1_BATCH, length=C1_LENGTH, sequential=True
    )
    np.testing.assert_array_equal(x, slow)


def test_uniform_start_is_just_another_init():
    """init = uniform: P(x_1 = 1) = 1/2, not pi_1 = 0.3846 (the notes §2.1 'steady' bug)."""
    kernel = task.binary_kernel(0.5, 0.8)
    x = task.sample(
        jax.random.key(2), kernel, jnp.array([0.5, 0.5]), batch_size=C1_BATCH, length=C1_LENGTH
    )
    assert abs(np.asarray(x[:, 0]).mean() - 0.5) < 4 * np.sqrt(0.25 / C1_BATCH)


def test_samplers_identical():
    """B = 16, N = 1024: the associative-scan and the sequential sampler give the same chain."""
    kernel = task.binary_kernel(0.5, 0.8)
    for seed, init in [
        (0, task.stationary(kernel)),
        (1, jnp.array([0.5, 0.5])),
        (2, jnp.array([1.0, 0.0])),
    ]:
        key = jax.random.key(seed)
        fast = task.sample(key, kernel, init, batch_size=16, length=1024)
        slow = task.sample(key, kernel, init, batch_size=16, length=1024, sequential=True)
        assert fast.dtype == slow.dtype == jnp.int32 and fast.shape == (16, 1024)
        np.testing.assert_array_equal(fast, slow)
        assert 0.3 < fast.mean() < 0.47  # pi_1 = 0.3846
    np.testing.assert_array_equal(fast[:, 0], 0)  # init (1, 0): x_1 = 0


def test_enumerate_sequences():
    """All S^N sequences in lexicographic order; the limit names the Monte-Carlo fallback."""
    x = task.enumerate_sequences(3, 4)
    assert x.shape == (81, 4) and x.dtype == np.int32
    np.testing.assert_array_equal(x, list(itertools.product(range(3), repeat=4)))
    assert task.enumerate_sequences(2, 16).shape == (2**16, 16)
    with pytest.raises(ValueError) as err:
        task.enumerate_sequences(2, 20)
    assert str(err.value) == (
        "N = 20 with S = 2 gives 1048576 sequences, above the exact-enumeration limit of 65536; "
        "use the Monte-Carlo population loss (markov.task.monte_carlo_population)."
    )


@functools.cache
def _kernels():
    return {
        "binary (0.5, 0.8)": task.binary_kernel(0.5, 0.8),
        "binary (0.2, 0.3)": task.binary_kernel(0.2, 0.3),
        "symmetric S=3": task.symmetric_kernel(3, 0.7),
        "random S=3": _random_kernel(3, seed=3),
    }


@pytest.mark.parametrize(
    "name", ["binary (0.5, 0.8)", "binary (0.2, 0.3)", "symmetric S=3", "random S=3"]
)
def test_exact_population_reference_predictors(name):
    """Probabilities sum to 1; CE of the true kernel = entropy rate, of constant pi = H(pi) (§4)."""
    kernel = _kernels()[name]
    num_states, length = kernel.shape[0], 8 if kernel.shape[0] == 2 else 6
    x, w, t, bigram, unigram, first, last = _reference_losses(kernel, length)
    x, w, t, pi = np.asarray(x), np.asarray(w), np.asarray(t), np.asarray(task.stationary(kernel))
    assert x.shape == (num_states**length, length) and t.shape == x.shape + (num_states,)
    np.testing.assert_allclose(w.sum(), 1.0, atol=1e-14)
    i = 1234 % len(x)
    manual = pi[x[i, 0]] * np.prod([kernel[a, b] for a, b in zip(x[i, :-1], x[i, 1:], strict=True)])
    np.testing.assert_allclose(w[i], manual, rtol=1e-13)
    np.testing.assert_array_equal(t[i, 2], kernel[x[i, 2]])
    np.testing.assert_allclose(bigram, theory.entropy_rate_kernel(kernel), atol=1e-14)
    np.testing.assert_allclose(unigram, theory.unigram_loss_kernel(kernel), atol=1e-14)
    np.testing.assert_allclose(first, pi, atol=1e-14)  # stationary marginals at n = 1
    np.testing.assert_allclose(last, pi, atol=1e-14)  # and at n = N


@functools.partial(jax.jit, static_argnums=1)
def _reference_losses(kernel, length):
    """Exact population; CE of the true kernel and of the constant pi; marginals of x_1, x_N."""
    num_states = kernel.shape[0]
    pi = task.stationary(kernel)
    x, w, t = task.exact_population(num_states, length, kernel, pi)
    bigram = task.population_cross_entropy(jnp.log(t), w, t)
    unigram = task.population_cross_entropy(jnp.broadcast_to(jnp.log(pi), t.shape), w, t)
    first, last = (jax.ops.segment_sum(w, x[:, n], num_states) for n in (0, length - 1))
    return x, w, t, bigram, unigram, first, last


def test_binary_head_and_kernel_predictor_loss():
    """sigma-head log-probs: b = log(p/q) gives H(pi); f0/f1 predictor = pi0 CE + pi1 CE (§4)."""
    p, q = 0.5, 0.8
    kernel = task.binary_kernel(p, q)
    x, w, t = task.exact_population(2, 8, kernel, task.stationary(kernel))
    logits = jnp.full(x.shape, theory.theta_pi_logit(p, q))
    np.testing.assert_allclose(
        task.population_cross_entropy(task.binary_log_probs(logits), w, t),
        theory.unigram_loss(p, q),
        atol=1e-14,
    )
    f0, f1 = 0.45, 0.3
    logits = jnp.where(x == 1, jnp.log(f1 / (1 - f1)), jnp.log(f0 / (1 - f0)))
    np.testing.assert_allclose(
        task.population_cross_entropy(task.binary_log_probs(logits), w, t),
        theory.kernel_predictor_loss(p, q, f0, f1),
        atol=1e-14,
    )


def test_c13_soft_targets_equal_hard_targets_and_lemma_1():
    """§4: soft targets have the hard-target expectation; C13: L - L_star = mean E[KL] >= 0."""
    kernel = task.symmetric_kernel(3, 0.4)
    soft, hard, mean_kl = _soft_hard_kl(kernel)
    np.testing.assert_allclose(soft, hard, atol=1e-14)
    assert mean_kl > 0.01
    np.testing.assert_allclose(soft - theory.entropy_rate_kernel(kernel), mean_kl, atol=1e-14)


@jax.jit
def _soft_hard_kl(kernel, length=5):
    """Soft- and hard-target population CE of a (x_{n-1}, x_n) predictor, and its mean KL."""
    num_states = kernel.shape[0]
    table_SSS = jnp.asarray(np.random.default_rng(4).normal(size=(num_states,) * 3))

    def predictor(x_MN):
        prev_MN = jnp.concatenate([x_MN[:, :1], x_MN[:, :-1]], axis=1)
        return jax.nn.log_softmax(table_SSS[prev_MN, x_MN], axis=-1)

    x, w, t = task.exact_population(num_states, length, kernel)
    soft = task.population_cross_entropy(predictor(x), w, t)
    x_long, w_long, _ = task.exact_population(num_states, length + 1, kernel)
    hard_t = jax.nn.one_hot(x_long[:, 1:], num_states, dtype=w.dtype)
    hard = task.population_cross_entropy(predictor(x_long[:, :-1]), w_long, hard_t)
    kl_MN = jnp.sum(t * (jnp.log(t) - predictor(x)), axis=-1)
    return soft, hard, jnp.sum(w[:, None] * kl_MN) / length


def test_monte_carlo_population_has_the_same_structure():
    """MC measure: weights 1/M, soft targets; true-kernel CE near the entropy rate (notes §7)."""
    p, q = 0.5, 0.8
    kernel = task.binary_kernel(p, q)
    x, w, t = task.monte_carlo_population(
        jax.random.key(5), kernel, task.stationary(kernel), C1_BATCH, C1_LENGTH
    )
    assert x.shape == (C1_BATCH, C1_LENGTH) and w.shape == (C1_BATCH,)
    assert t.shape == (C1_BATCH, C1_LENGTH, 2)
    np.testing.assert_allclose(w, 1 / C1_BATCH)
    np.testing.assert_array_equal(t[:, :, 1], jnp.where(x == 1, 1 - q, p))
    loss = task.population_cross_entropy(jnp.log(t), w, t)
    assert abs(loss - theory.entropy_rate(p, q)) < 5e-4  # ~7 sigma


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda: task.binary_kernel(1.2, 0.5),
            "p = 1.2: must be in (0, 1) (the switching probability 0 -> 1).",
        ),
        (
            lambda: task.binary_kernel(0.5, 0.0),
            "q = 0: must be in (0, 1) (the switching probability 1 -> 0).",
        ),
        (
            lambda: task.symmetric_kernel(5, 1.0),
            "p = 1: must be in (0, 1) (the probability of leaving the current state).",
        ),
        (
            lambda: task.symmetric_kernel(1, 0.5),
            "num_states = 1: must be an integer >= 2 (the number of chain states).",
        ),
        (
            lambda: task.validate_chain(p=np.array([0.2, 0.5, -0.1]), q=0.3),
            "p = -0.1: must be in (0, 1) (the switching probability 0 -> 1).",
        ),
        (
            lambda: task.validate_chain(p=float("nan"), q=0.3),
            "p = nan: must be in (0, 1) (the switching probability 0 -> 1).",
        ),
        (
            lambda: task.enumerate_sequences(2, 0),
            "length = 0: must be an integer >= 1 (the sequence length N).",
        ),
    ],
)
def test_bad_inputs_name_the_field(call, message):
    with pytest.raises(ValueError) as err:
        call()
    assert str(err.value) == message


@pytest.mark.parametrize(
    "bad, message",
    [
        (dict(batch_size=0), "batch_size = 0: must be an integer >= 1"),
        (dict(length=2.0), "length = 2.0: must be an integer"),
        (dict(sequential="yes"), "sequential = 'yes': must be True or False"),
    ],
)
def test_a_sampler_mistake_is_one_sentence(bad, message):
    kernel = task.binary_kernel(0.5, 0.8)
    arguments = dict(batch_size=4, length=8, sequential=False) | bad
    with pytest.raises((TypeError, ValueError), match=message):
        task.sample(jax.random.key(0), kernel, None, **arguments)
