"""The causal attention of the Markov models (docs/design/markov.md, "The causal attention").

Up to N = 32 positions, or off the CPU, the scores are held whole; longer sequences on the CPU go
through a block-causal tiled attention with a hand-written backward pass that keeps each row's
log-sum-exp only, looping over chunks of the batch so that a chunk's scores stay in cache.
"""

# Shape suffixes (q_BNHM has shape (B, N, H, M)): as in landscape/markov/model.py
#   B  sequences in a batch
#   N  positions of a sequence (its length)
#   I  key positions (scores_BHNI)
#   H  attention heads
#   M  a head's width m
#   K  tiles of the tiled attention (N padded to K T)
#   T  positions in a query tile
#   U  positions in a key tile
#   P  lower-triangular (query tile, key tile) pairs
#   W  the values' width with their column of ones (m + 1, padded)

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from landscape.engine import backend
from landscape.typing import NDArray, PyTree


def reduce_last(
    x_BND: jax.Array, op: Callable[[jax.Array, jax.Array], jax.Array] = jnp.add
) -> jax.Array:
    """op (add or maximum) over a short last axis, keepdims: a chain of its slices, which XLA
    fuses into the surrounding elementwise loop. XLA's CPU reduce over a minor axis of 2-16 is
    many times slower (docs/performance.md)."""
    D = x_BND.shape[-1]
    if D > 32 or not backend.cpu_tuned():
        return (jnp.sum if op is jnp.add else jnp.max)(x_BND, axis=-1, keepdims=True)
    return functools.reduce(op, [x_BND[..., i : i + 1] for i in range(D)])


def _tile(N: int) -> int:
    """Tile of the block-causal attention: N itself up to 32, then 64 up to N = 256, else 128
    (the fastest on the 2-core CPU for N = 128 and N = 1024)."""
    return N if N <= 32 else (64 if N <= 256 else 128)


# Above this many tile-pair scores, `causal_mix` loops over chunks of the batch with at most
# this many scores each (or one sequence), so that a chunk's scores stay in cache (2 MiB).
_SCORES_IN_CACHE = 2**19


def causal_softmax(q_BNHM: jax.Array, k_BNHM: jax.Array) -> jax.Array:
    """(B, H, N, N) att_{n,i} = softmax_{i<=n}(<q_n, k_i> / sqrt(m)), the full matrix."""
    N, m = q_BNHM.shape[1], q_BNHM.shape[-1]
    scores_BHNI = jnp.einsum("bnhm,bihm->bhni", q_BNHM, k_BNHM) / math.sqrt(m)
    scores_BHNI = jnp.where(np.tri(N, dtype=bool), scores_BHNI, -jnp.inf)
    return jax.nn.softmax(scores_BHNI, axis=-1)


def causal_mix(q_BNHM: jax.Array, k_BNHM: jax.Array, v_BNHM: jax.Array) -> jax.Array:
    """(B, N, H, m) sum_{i<=n} att_{n,i} v_i with att_{n,.} = softmax_i(<q_n, k_i> / sqrt(m)).

    Exactly the causal attention of notes §3.1 (scale inside the softmax, §6.9). Up to one tile
    it is the plain masked softmax (differentiated by JAX: cheap to compile and to Hessian).
    Longer sequences go through `_tiled_attention`: the K (K+1) / 2 lower-triangular (query tile,
    key tile) pairs only, about half of the N x N work, with a hand-written backward pass. Off
    the CPU (`landscape.engine.backend`) every length takes the plain masked softmax.
    """
    B, N, H, m = q_BNHM.shape
    T = _tile(N)
    K = -(-N // T)
    if K == 1 or not backend.cpu_tuned():
        return jnp.einsum("bhni,bihm->bnhm", causal_softmax(q_BNHM, k_BNHM), v_BNHM)
    if K * T > N:  # padded keys lie after every real query, so the causal mask hides them
        pad = ((0, 0), (0, K * T - N), (0, 0), (0, 0))
        q_BNHM, k_BNHM, v_BNHM = (jnp.pad(t, pad) for t in (q_BNHM, k_BNHM, v_BNHM))
    # (B, H, K, T, m): heads before tiles, so every product below is a plain batched matmul.
    q_BHKTM, k_BHKTM, v_BHKTM = (
        jnp.moveaxis(t.reshape(B, K, T, H, m), 3, 1)
        for t in (q_BNHM / math.sqrt(m), k_BNHM, v_BNHM)
    )
    mixed_BHKTM = _tiled_attention(q_BHKTM, k_BHKTM, v_BHKTM)
    return jnp.moveaxis(mixed_BHKTM, 1, 3).reshape(B, K * T, H, m)[:, :N]


def _in_chunks(fn: Callable[..., PyTree], *arrays_B: jax.Array) -> PyTree:
    """fn over the batch, in one go or (when its scores overflow `_SCORES_IN_CACHE`) as a loop
    over chunks of C sequences, C the largest divisor of B that fits (at least 1)."""
    B, H, K, T, _ = arrays_B[0].shape
    scores_per_sequence = H * K * (K + 1) // 2 * T * T
    if B * scores_per_sequence <= _SCORES_IN_CACHE or not backend.cpu_tuned():
        return fn(*arrays_B)
    C = max(
        c
        for c in range(1, B + 1)
        if B % c == 0 and (c == 1 or c * scores_per_sequence <= _SCORES_IN_CACHE)
    )

    def split(t: jax.Array) -> jax.Array:
        return t.reshape((B // C, C) + t.shape[1:])

    out = jax.lax.map(lambda chunk: fn(*chunk), tuple(split(t) for t in arrays_B))
    return jax.tree.map(lambda t: t.reshape((B,) + t.shape[2:]), out)


def scores_held_whole(N: int) -> bool:
    """Whether attention over N positions forms the whole (N, N) score matrix (up to one tile)
    or goes through `_tiled_attention`, which keeps each row's log-sum-exp only: on the CPU,
    which the host-memory estimate is for (an accelerator holds them whole; XLA's memory
    analysis checks its programs against the device memory)."""
    return _tile(N) >= N


def chunk_scores(N: int, heads: int) -> int:
    """Scores alive at once per run in the tiled attention (`_in_chunks`): a chunk of at most
    _SCORES_IN_CACHE, or one sequence's tile pairs; zero when the scores are held whole."""
    if scores_held_whole(N):
        return 0
    T = _tile(N)
    K = -(-N // T)
    return max(_SCORES_IN_CACHE, heads * K * (K + 1) // 2 * T * T)


def _tile_pairs(K: int, T: int) -> tuple[NDArray, NDArray, NDArray, NDArray, NDArray]:
    """Lower-triangular tile pairs P: query tile row_P, key tile col_P, causal mask (P, T, T)
    inside each pair, and one-hot (P, K) maps that sum pairs into query / key tiles."""
    row_P, col_P = np.tril_indices(K)
    causal_PTU = np.where((row_P == col_P)[:, None, None], np.tri(T, dtype=bool), True)
    return row_P, col_P, causal_PTU, np.eye(K)[row_P], np.eye(K)[col_P]


def _tile_scores(q_BHKTM, k_BHKTM):
    """Unmasked scores (B, H, P, T, U) of every tile pair (q already scaled by 1/sqrt(m)).
    Callers mask inside their own expression, so that XLA fuses the mask into each consumer
    instead of writing a masked copy."""
    K, T = q_BHKTM.shape[2:4]
    row_P, col_P, _, _, _ = _tile_pairs(K, T)
    return jnp.einsum("bhptm,bhpum->bhptu", q_BHKTM[:, :, row_P], k_BHKTM[:, :, col_P])


def _tiled_forward(q_BHKTM, k_BHKTM, v_BHKTM):
    """(mixed (B, H, K, T, m), log-sum-exp of every row's scores (B, H, K, T))."""
    B, H, K, T, m = q_BHKTM.shape
    row_P, col_P, causal_PTU, to_row_PK, _ = _tile_pairs(K, T)
    scores_BHPTU = _tile_scores(q_BHKTM, k_BHKTM)
    # Masked once, before the exp (exp(-inf) = 0), so one elementwise pass applies both. The row
    # max is exact over all key tiles of the row (gathered through a dense (K, K) layout).
    masked_BHPTU = jnp.where(causal_PTU, scores_BHPTU, -jnp.inf)
    rowmax_BHKKT = jnp.full((B, H, K, K, T), -jnp.inf, scores_BHPTU.dtype)
    rowmax_BHKT = jnp.max(
        rowmax_BHKKT.at[:, :, row_P, col_P].set(jnp.max(masked_BHPTU, -1)), axis=3
    )
    weights_BHPTU = jnp.exp(masked_BHPTU - rowmax_BHKT[:, :, row_P, :, None])
    # Values with a column of ones: one product gives the mixed values and the row totals.
    # Zero columns pad it to a multiple of 8 (the CPU matmul is ~30% faster at 8 than at 5).
    width = -(-(m + 1) // 8) * 8 if backend.cpu_tuned() else m + 1
    ones_BHKTW = jnp.concatenate(
        [
            jnp.ones((B, H, K, T, 1), v_BHKTM.dtype),
            jnp.zeros((B, H, K, T, width - m - 1), v_BHKTM.dtype),
        ],
        -1,
    )
    v1_BHPUM = jnp.concatenate([v_BHKTM, ones_BHKTW], axis=-1)[:, :, col_P]
    mixed_BHPTM = jnp.einsum("bhptu,bhpum->bhptm", weights_BHPTU, v1_BHPUM)
    mixed_BHKTM = jnp.einsum(
        "bhptm,pk->bhktm", mixed_BHPTM, jnp.asarray(to_row_PK, weights_BHPTU.dtype)
    )
    total_BHKT = mixed_BHKTM[..., m]
    return mixed_BHKTM[..., :m] / total_BHKT[..., None], rowmax_BHKT + jnp.log(total_BHKT)


def _tiled_backward(q_BHKTM, k_BHKTM, v_BHKTM, mixed_BHKTM, lse_BHKT, dmixed_BHKTM):
    """(dq, dk, dv) of `_tiled_forward`'s mixed output: att = exp(scores - lse) recomputed per
    pair; d scores = att (d att - <dmixed_n, mixed_n>). Every product contracts the minor axis
    of the (T, U) tile (dk and dv are formed transposed): XLA's CPU matmuls are 5-10x slower
    when a (T, U) operand is contracted over T."""
    K, T = q_BHKTM.shape[2:4]
    row_P, col_P, causal_PTU, to_row_PK, to_col_PK = _tile_pairs(K, T)
    q_BHPTM, k_BHPUM, v_BHPUM = q_BHKTM[:, :, row_P], k_BHKTM[:, :, col_P], v_BHKTM[:, :, col_P]
    dmixed_BHPTM = dmixed_BHKTM[:, :, row_P]
    att_BHPTU = jnp.exp(
        jnp.where(
            causal_PTU, _tile_scores(q_BHKTM, k_BHKTM) - lse_BHKT[:, :, row_P, :, None], -jnp.inf
        )
    )
    datt_BHPTU = jnp.einsum("bhptm,bhpum->bhptu", dmixed_BHPTM, v_BHPUM)
    delta_BHKT = reduce_last(dmixed_BHKTM * mixed_BHKTM)[..., 0]
    dscores_BHPTU = att_BHPTU * (datt_BHPTU - delta_BHKT[:, :, row_P, :, None])

    def transposed(t_BHPTM: jax.Array) -> jax.Array:
        return jnp.swapaxes(t_BHPTM, -1, -2)

    dq_BHPTM = jnp.einsum("bhptu,bhpum->bhptm", dscores_BHPTU, k_BHPUM)
    dk_BHPMU = jnp.einsum("bhpmt,bhptu->bhpmu", transposed(q_BHPTM), dscores_BHPTU)
    dv_BHPMU = jnp.einsum("bhpmt,bhptu->bhpmu", transposed(dmixed_BHPTM), att_BHPTU)
    to_row_PK, to_col_PK = (jnp.asarray(t, att_BHPTU.dtype) for t in (to_row_PK, to_col_PK))

    def to_key_tiles(d_BHPMU: jax.Array) -> jax.Array:
        return transposed(jnp.einsum("bhpmu,pk->bhkmu", d_BHPMU, to_col_PK))

    return (
        jnp.einsum("bhptm,pk->bhktm", dq_BHPTM, to_row_PK),
        to_key_tiles(dk_BHPMU),
        to_key_tiles(dv_BHPMU),
    )


@jax.custom_vjp
def _tiled_attention(q_BHKTM, k_BHKTM, v_BHKTM):
    """Causal attention on (B, H, K, T, m) tiles, q pre-scaled (flash-style: the backward pass
    keeps only the output and each row's log-sum-exp, and recomputes the weights)."""
    return _in_chunks(_tiled_forward, q_BHKTM, k_BHKTM, v_BHKTM)[0]


def _tiled_attention_fwd(q_BHKTM, k_BHKTM, v_BHKTM):
    mixed_BHKTM, lse_BHKT = _in_chunks(_tiled_forward, q_BHKTM, k_BHKTM, v_BHKTM)
    return mixed_BHKTM, (q_BHKTM, k_BHKTM, v_BHKTM, mixed_BHKTM, lse_BHKT)


def _tiled_attention_bwd(saved, dmixed_BHKTM):
    return _in_chunks(_tiled_backward, *saved, dmixed_BHKTM)


_tiled_attention.defvjp(_tiled_attention_fwd, _tiled_attention_bwd)
