"""Sequence classes: the authors' Dataset2 layout (notes §2.2-2.4), sampler, c_n and entropy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from landscape.scan_snap import task as task_lib
from tests.scan_snap.common import syn_medium, syn_small


def test_syn_small_layout_is_the_authors():
    t = syn_small()
    assert (t.num_tokens, t.num_classes) == (34, 2)
    np.testing.assert_array_equal(t.last_token, [30, 31])
    np.testing.assert_array_equal(t.next_token, [32, 33])
    np.testing.assert_allclose(t.class_probs[0, :10], 1 / 15.5)
    np.testing.assert_allclose(t.class_probs[0, 10:20], np.arange(1, 11) / 155)
    np.testing.assert_allclose(t.class_probs[1, 20:30], np.arange(1, 11) / 155)
    assert t.class_probs[0, 20:].sum() == 0 and t.class_probs[1, 10:20].sum() == 0
    assert t.is_common[:10].all() and not t.is_common[10:].any()
    np.testing.assert_array_equal(np.flatnonzero(t.is_distinct[1]), np.arange(20, 30))


@pytest.mark.parametrize("num_last, M", [(1, 33), (3, 79), (5, 125), (10, 240)])
def test_syn_medium_vocabulary(num_last, M):
    t = syn_medium(num_last)
    assert t.num_tokens == M and t.num_classes == 2 * num_last
    # two next tokens share each last token: psi is 2-to-1 (notes §2.4)
    np.testing.assert_array_equal(np.bincount(t.last_token - t.last_token.min()), [2] * num_last)


def test_sampler_matches_class_distributions():
    t = syn_small()
    context, query, label, cls = map(np.asarray, t.sample(jax.random.key(0), 4096))
    assert context.shape == (4096, 127) and context.dtype == np.int32
    np.testing.assert_array_equal(query, t.last_token[cls])
    np.testing.assert_array_equal(label, t.next_token[cls])
    assert abs(cls.mean() - 0.5) < 4 * 0.5 / np.sqrt(4096)  # classes uniform
    for n in range(2):
        tokens = context[cls == n].ravel()
        freq = np.bincount(tokens, minlength=34) / tokens.size
        sigma = np.sqrt(t.class_probs[n] * (1 - t.class_probs[n]) / tokens.size)
        assert np.all(np.abs(freq - t.class_probs[n]) <= 5 * sigma + 1e-12)


def test_attention_weights_eq5():
    t = syn_small()
    np.testing.assert_allclose(
        task_lib.attention_weights(jnp.zeros((34, 34)), t), t.class_probs, atol=1e-15
    )
    Z = jnp.asarray(np.random.default_rng(0).normal(size=(34, 34)))
    c = np.asarray(task_lib.attention_weights(Z, t))
    tilde = t.class_probs * np.exp(np.asarray(Z)[t.last_token])
    np.testing.assert_allclose(c, tilde / tilde.sum(1, keepdims=True), rtol=1e-12)


def test_distinct_entropy_at_zero_is_the_notes_reference():
    """notes §5.6: renormalised distinct entropy at Z = 0 is 2.1513 (max ln 10 = 2.3026)."""
    t = syn_medium(3)
    h = task_lib.distinct_entropy(task_lib.attention_weights(jnp.zeros((79, 79)), t), t)
    np.testing.assert_allclose(h, 2.1513, atol=5e-5)
    one_hot = jnp.zeros((6, 79)).at[:, t.support[:, -1]].set(1.0)  # all mass on one token
    np.testing.assert_allclose(task_lib.distinct_entropy(one_hot, t), 0.0, atol=1e-12)


def test_theory_c_n_agrees_with_the_jax_attention_weights():
    from landscape.scan_snap import theory

    t = syn_medium(3)
    Z = np.random.default_rng(1).normal(size=(79, 79))
    np.testing.assert_allclose(
        theory.c_n(Z, t.class_probs, t.last_token),
        task_lib.attention_weights(jnp.asarray(Z), t),
        rtol=1e-12,
    )
