"""In-context associative recall over permutations (notes/assoc_recall.md §1).

A sequence lists all k! permutations of [k] = {0..k-1}, each followed by its response f(pi), and
ends with a query permutation q; the target is f(q). Token ids: symbol i -> i, response r_j ->
k + j. Samplers are pure functions of a jax key; the layout helpers are plain numpy.
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from landscape import _checks
from landscape.typing import NDArray


def check_order(k: int, num_responses: int | None = None) -> None:
    """One sentence naming the bad field (k > 1, |R| > 1; notes §1): a ValueError for a bad value,
    a TypeError (also a ValueError) for a non-integer."""
    _checks.check_int("k", k, meaning="the task order")
    if k < 2:
        raise ValueError(f"k = {k!r}: the task order must be an integer >= 2.")
    if num_responses is not None:
        _checks.check_int("num_responses", num_responses, meaning="the number of responses |R|")
        if num_responses < 2:
            raise ValueError(
                f"num_responses = {num_responses!r}: there must be at least 2 responses."
            )


def permutations(k: int) -> NDArray:
    """(k!, k) int32: all permutations of [k] in lexicographic order, identity first (notes §1)."""
    check_order(k)
    return np.asarray(list(itertools.permutations(range(k))), np.int32)


def sequence_length(k: int) -> int:
    """l = k!(k+1) + k = (k+1)! + k: k! blocks of k symbols + a response, then the query (§1)."""
    check_order(k)
    return math.factorial(k + 1) + k


def response_positions(k: int) -> NDArray:
    """(k!,) int: p_t = t(k+1) + k, the response of block t (notes §1, index conventions)."""
    check_order(k)
    return np.arange(math.factorial(k)) * (k + 1) + k


def match_tensor(k: int, num_heads: int | None = None) -> NDArray:
    """(k!, H, k) float: M_pi[h-1, i-1] = 1{pi_{k-i} = q_{k-h}} with q = identity (notes §3).

    Head h = 1..H reads query symbol q_{k-h}; offset i = 1..k reads pi_{k-i}. For H = k each slice
    is the permutation matrix of pi relative to q with flipped indexing; M_q = I.
    """
    check_order(k)
    num_heads = k if num_heads is None else num_heads
    _checks.check_int("num_heads", num_heads, meaning="the number of heads H")
    if not 1 <= num_heads <= k:
        raise ValueError(f"num_heads = {num_heads!r}: must be between 1 and k = {k}.")
    reversed_PI = permutations(k)[:, ::-1]  # column i-1 = pi_{k-i}
    query_H = k - np.arange(1, num_heads + 1)  # q_{k-h} = k - h
    return (reversed_PI[:, None, :] == query_H[None, :, None]).astype(np.float64)


@functools.partial(jax.jit, static_argnums=0)
def build_tokens(
    k: int, responses_BP: jax.Array, query_B: jax.Array, order_BP: jax.Array | None = None
) -> jax.Array:
    """(B, l) int32 token sequences from f (response index per permutation) and q (notes §1).

    responses_BP[b, j] in [0, |R|) is f(pi_j) for the j-th lexicographic permutation, query_B[b]
    the index of q; block t holds permutation order_BP[b, t] (default: lexicographic).
    """
    perms_Pk = jnp.asarray(permutations(k))
    num_perms = perms_Pk.shape[0]
    batch = query_B.shape[0]
    if order_BP is None:
        order_BP = jnp.broadcast_to(jnp.arange(num_perms), (batch, num_perms))
    symbols_BPk = perms_Pk[order_BP]
    responses_BP1 = k + jnp.take_along_axis(responses_BP, order_BP, axis=1)[:, :, None]
    blocks_BPK = jnp.concatenate([symbols_BPk, responses_BP1.astype(symbols_BPk.dtype)], axis=2)
    tokens_BL = jnp.concatenate([blocks_BPK.reshape(batch, -1), perms_Pk[query_B]], axis=1)
    return tokens_BL.astype(jnp.int32)


@functools.partial(jax.jit, static_argnums=(1, 2, 3, 4))
def sample_tokens(
    key: jax.Array, k: int, num_responses: int, batch_size: int, shuffle_blocks: bool = False
) -> tuple[jax.Array, jax.Array]:
    """(tokens_BL int32, target_B int32): the exact token-level process of notes §1.

    Per sequence: fresh f with i.i.d. uniform responses, uniform query q, blocks in lexicographic
    order unless `shuffle_blocks` (then a uniform block order per sequence). target = k + f(q).
    f and q do not depend on `shuffle_blocks` for a given key. Drawn in int32 and float32 (fixed
    dtypes), so x64 on or off gives the same sequences.
    """
    check_order(k, num_responses)  # static arguments: checked once, while tracing
    _checks.check_int("batch_size", batch_size, 1, "the number of sequences")
    num_perms = math.factorial(k)
    draw_key, order_key = jax.random.split(key)
    maxval_P1 = np.append(np.full(num_perms, num_responses), num_perms)  # f(pi_1..pi_k!), q
    draws_BP1 = jax.random.randint(
        draw_key, (batch_size, num_perms + 1), 0, maxval_P1.astype(np.int32), jnp.int32
    )
    responses_BP, query_B = draws_BP1[:, :num_perms], draws_BP1[:, num_perms]
    order_BP = None
    if shuffle_blocks:
        u_BP = jax.random.uniform(order_key, (batch_size, num_perms), jnp.float32)
        order_BP = jnp.argsort(u_BP, axis=1)
    tokens_BL = build_tokens(k, responses_BP, query_B, order_BP)
    target_B = k + jnp.take_along_axis(responses_BP, query_B[:, None], axis=1)[:, 0]
    return tokens_BL, target_B.astype(jnp.int32)


@functools.partial(jax.jit, static_argnums=(1, 2, 3, 4))
def sample_collisions(
    key: jax.Array, k: int, num_responses: int, batch_size: int, dtype: Any = None
) -> jax.Array:
    """y_BP (float): the fast exact sampler of notes §1, relative to q = identity.

    y_pi = 1{f(pi) = f(q)}: y[:, 0] = 1 (the identity is permutation 0), the others i.i.d.
    Bernoulli(1/|R|). Equal in distribution to collisions_of(sample_tokens(...)). Drawn from
    float32 uniforms whatever `dtype` (float32 unless given) and the x64 switch.
    """
    check_order(k, num_responses)  # static arguments: checked once, while tracing
    _checks.check_int("batch_size", batch_size, 1, "the number of sequences")
    dtype = dtype or jnp.float32
    num_perms = math.factorial(k)
    chance = jnp.float32(1.0 / num_responses)  # float32 draws with x64 on too
    others_BP = jax.random.bernoulli(key, chance, (batch_size, num_perms - 1))
    ones_B1 = jnp.ones((batch_size, 1), bool)
    return jnp.concatenate([ones_B1, others_BP], axis=1).astype(dtype)


def permutation_index(perms_BPk: jax.Array) -> jax.Array:
    """Lexicographic rank of each permutation (Lehmer code), so rank(identity) = 0."""
    k = perms_BPk.shape[-1]
    later_kk = np.arange(k)[None, :] > np.arange(k)[:, None]  # [j, m] = m > j
    smaller_BPkk = perms_BPk[..., None, :] < perms_BPk[..., :, None]  # [j, m] = pi_m < pi_j
    lehmer_BPk = jnp.sum(smaller_BPkk & later_kk, axis=-1)
    weights_k = np.asarray([math.factorial(k - 1 - j) for j in range(k)])
    return lehmer_BPk @ weights_k


@functools.partial(jax.jit, static_argnums=(1, 2))
def collisions_of(tokens_BL: jax.Array, k: int, dtype: Any = None) -> jax.Array:
    """y_BP: the collision vector of token sequences, relabelled so that q = identity (notes §1).

    Symbols are renamed by sigma = q^{-1} (q_j -> j); y[b, rank(sigma o pi_t)] = 1{r_t = f(q)}.
    Assumes each permutation occurs once in the context (as in every sampled sequence).
    """
    check_order(k)
    dtype = dtype or (jnp.float64 if jax.config.read("jax_enable_x64") else jnp.float32)
    num_perms = math.factorial(k)
    batch = tokens_BL.shape[0]
    blocks_BPK = tokens_BL[:, : num_perms * (k + 1)].reshape(batch, num_perms, k + 1)
    relabel_Bk = jnp.argsort(tokens_BL[:, -k:], axis=1)  # sigma[q_j] = j
    relabelled_BPk = jnp.take_along_axis(relabel_Bk[:, None, :], blocks_BPK[:, :, :k], axis=2)
    index_BP = permutation_index(relabelled_BPk)
    response_BP = blocks_BPK[:, :, k]
    is_query_BP = index_BP == 0
    query_response_B = jnp.sum(jnp.where(is_query_BP, response_BP, 0), axis=1)
    collide_BP = (response_BP == query_response_B[:, None]).astype(dtype)
    rows_B1 = jnp.arange(batch)[:, None]
    return jnp.zeros((batch, num_perms), dtype).at[rows_B1, index_BP].set(collide_BP)
