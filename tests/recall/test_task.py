"""Associative-recall task: layout, samplers, collision vectors (notes/assoc_recall.md §1, §3)."""

import functools
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from landscape.recall import task


def test_sequence_length_and_permutations():
    """l = (k+1)! + k = 8, 27, 124, 725 (notes §1); permutations lexicographic, identity first."""
    assert [task.sequence_length(k) for k in (2, 3, 4, 5)] == [8, 27, 124, 725]
    for k in (2, 3, 4):
        perms = task.permutations(k)
        assert perms.shape == (math.factorial(k), k) and perms.dtype == np.int32
        assert [tuple(p) for p in perms] == sorted(itertools.permutations(range(k)))
        np.testing.assert_array_equal(perms[0], np.arange(k))
    np.testing.assert_array_equal(task.response_positions(3), [3, 7, 11, 15, 19, 23])


def test_k2_layout_is_figure_2():
    """notes §1 Fig. 2: `0 1 A 1 0 B 0 1 ?` with A = r_0 (id 2), B = r_1 (id 3), target f(01)."""
    tokens = task.build_tokens(2, jnp.asarray([[0, 1]]), jnp.asarray([0]))
    np.testing.assert_array_equal(tokens, [[0, 1, 2, 1, 0, 3, 0, 1]])
    tokens_BL, target_B = task.sample_tokens(jax.random.key(0), 2, 2, 64)
    tokens_BL, target_B = np.asarray(tokens_BL), np.asarray(target_B)
    assert tokens_BL.shape == (64, 8) and tokens_BL.dtype == np.int32
    np.testing.assert_array_equal(tokens_BL[:, [0, 1, 3, 4]], np.tile([0, 1, 1, 0], (64, 1)))
    assert set(tokens_BL[:, [2, 5]].ravel()) <= {2, 3} and set(target_B) <= {2, 3}
    query_is_01 = tokens_BL[:, 6] == 0
    assert set(map(tuple, tokens_BL[:, 6:])) == {(0, 1), (1, 0)}
    np.testing.assert_array_equal(target_B, np.where(query_is_01, tokens_BL[:, 2], tokens_BL[:, 5]))


@pytest.mark.parametrize("num_heads", [3, 4])
def test_match_tensor_slices_are_permutation_matrices(num_heads):
    """M_pi[h-1, i-1] = 1{pi_{k-i} = q_{k-h}}, q = identity (notes §3): one 1 per row/column."""
    k = 4
    M = task.match_tensor(k, num_heads)
    assert M.shape == (24, num_heads, k)
    np.testing.assert_array_equal(M.sum(axis=2), 1.0)
    if num_heads == k:
        np.testing.assert_array_equal(M.sum(axis=1), 1.0)
    np.testing.assert_array_equal(M[0], np.eye(num_heads, k))  # M_q = I
    perms = task.permutations(k)
    for p in (5, 17):
        for h in range(1, num_heads + 1):
            for i in range(1, k + 1):
                assert M[p, h - 1, i - 1] == float(perms[p][k - i] == k - h)


@functools.cache
def sample(k, n_r, batch, shuffle, seed=1):
    """One shared numpy sample per setting (a sampler compiles once per shape)."""
    tokens, target = task.sample_tokens(jax.random.key(seed), k, n_r, batch, shuffle)
    return np.asarray(tokens), np.asarray(target)


def _blocks(tokens_BL, k):
    n = math.factorial(k)
    return tokens_BL[:, : n * (k + 1)].reshape(len(tokens_BL), n, k + 1)


@pytest.mark.parametrize("shuffle", [False, True])
def test_sampler_statistics(shuffle):
    """notes §1: responses i.i.d. uniform, q uniform, target = response of q's block."""
    k, n_r, batch = 3, 4, 6000
    tokens_BL, target_B = sample(k, n_r, batch, shuffle)
    blocks = _blocks(tokens_BL, k)
    perms = [tuple(p) for p in task.permutations(k)]
    for b in range(batch):  # every permutation once; order as asked
        seen = [tuple(s) for s in blocks[b, :, :k]]
        assert sorted(seen) == perms and (shuffle or seen == perms)
    responses = blocks[:, :, k].ravel()
    freq = np.bincount(responses - k, minlength=n_r) / responses.size
    sigma = np.sqrt((1 / n_r) * (1 - 1 / n_r) / responses.size)
    assert np.all(np.abs(freq - 1 / n_r) < 4 * sigma), freq
    query_index = np.asarray([perms.index(tuple(q)) for q in tokens_BL[:, -k:]])
    freq_q = np.bincount(query_index, minlength=6) / batch  # n_r = 4 responses, k! = 6
    assert np.all(np.abs(freq_q - 1 / 6) < 4 * np.sqrt((1 / 6) * (5 / 6) / batch)), freq_q
    query_block = np.all(blocks[:, :, :k] == tokens_BL[:, None, -k:], axis=2)
    assert np.all(query_block.sum(axis=1) == 1)
    np.testing.assert_array_equal(target_B, blocks[:, :, k][query_block])
    if shuffle:  # first block's permutation is uniform
        first = np.asarray([perms.index(tuple(s)) for s in blocks[:, 0, :k]])
        freq_first = np.bincount(first, minlength=6) / batch
        assert np.all(np.abs(freq_first - 1 / 6) < 4 * np.sqrt((5 / 36) / batch)), freq_first


def test_shuffle_keeps_f_and_q():
    """For one key, shuffle_blocks only reorders the blocks: same f, same q, same target."""
    plain, target = sample(3, 4, 6000, False)
    shuffled, target_s = sample(3, 4, 6000, True)
    np.testing.assert_array_equal(target, target_s)
    np.testing.assert_array_equal(plain[:, -3:], shuffled[:, -3:])
    blocks, blocks_s = _blocks(plain, 3), _blocks(shuffled, 3)
    assert not np.array_equal(blocks, blocks_s)
    for b in range(200):
        assert sorted(map(tuple, blocks[b])) == sorted(map(tuple, blocks_s[b]))


def test_collisions_of_by_hand():
    """y[rank(sigma o pi)] = 1{f(pi) = f(q)} with sigma = q^{-1} (notes §1), q = (2, 0, 1)."""
    k = 3
    perms = [tuple(p) for p in task.permutations(k)]
    f = np.asarray([[0, 1, 1, 2, 0, 1]])
    q = perms.index((2, 0, 1))
    order = np.asarray([[3, 0, 5, 1, 4, 2]])
    tokens = task.build_tokens(k, jnp.asarray(f), jnp.asarray([q]), jnp.asarray(order))
    y = np.asarray(task.collisions_of(tokens, k))[0]
    sigma = np.argsort((2, 0, 1))
    expected = np.zeros(6)
    for j, pi in enumerate(perms):
        expected[perms.index(tuple(sigma[list(pi)]))] = float(f[0, j] == f[0, q])
    np.testing.assert_array_equal(y, expected)
    assert y[0] == 1.0


def test_fast_sampler_matches_token_collisions_in_distribution():
    """notes §1: y_q = 1, y_pi ~ Bernoulli(1/|R|) i.i.d.; same law as collisions_of(tokens)."""
    k, n_r, batch = 3, 4, 6000
    y_fast = np.asarray(task.sample_collisions(jax.random.key(3), k, n_r, batch))
    y_tok = np.asarray(task.collisions_of(jnp.asarray(sample(k, n_r, batch, True)[0]), k))
    sigma = np.sqrt((1 / n_r) * (1 - 1 / n_r) / batch)
    for y in (y_fast, y_tok):
        assert y.shape == (batch, 6) and set(np.unique(y)) <= {0.0, 1.0}
        np.testing.assert_array_equal(y[:, 0], 1.0)
        assert np.all(np.abs(y[:, 1:].mean(axis=0) - 1 / n_r) < 4 * sigma), y.mean(axis=0)
        pair = (y[:, 1] * y[:, 2]).mean()  # independence of two entries
        assert abs(pair - 1 / n_r**2) < 4 * np.sqrt(1 / n_r**2 / batch)


@pytest.mark.parametrize(
    "call, field",
    [
        (lambda: task.sequence_length(1), "k"),
        (lambda: task.permutations(0), "k"),
        (lambda: task.sample_tokens(jax.random.key(0), 3, 1, 4), "num_responses"),
        (lambda: task.sample_collisions(jax.random.key(0), 1, 3, 4), "k"),
    ],
)
def test_bad_task_input(call, field):
    with pytest.raises(ValueError, match=f"^{field} = "):
        call()
