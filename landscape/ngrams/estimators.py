"""In-context k-gram estimators of the next token and their cross-entropy (notes/ngrams.md §4.1).

kgram_counts, kgram_estimate (Def. 2.1), padded_kgram_estimate, smoothed_estimate,
bayes_estimate and cross_entropy; jit/vmap-able in x_BT and alpha. Position and lag conventions:
docs/design/ngrams.md.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from landscape.typing import ArrayLike

# --------------------------------------------------------------------------------------------------
# Checks
# --------------------------------------------------------------------------------------------------


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _resolve(
    x_BT: ArrayLike,
    num_states: int,
    k: int,
    lags: Sequence[int] | None,
    min_position: int | None,
    padded: bool,
) -> tuple[tuple[int, ...], int]:
    """Validated (lags, min_position) for sequences of length T = x_BT.shape[-1] (notes §4.1)."""
    seq_len = int(np.shape(x_BT)[-1]) if np.ndim(x_BT) else 0
    if seq_len < 1:
        raise ValueError(
            f"x_BT has shape {np.shape(x_BT)}: needs a last (time) axis of length >= 1."
        )
    if not _is_int(num_states) or num_states < 1:
        raise ValueError(
            f"num_states = {num_states!r}: must be an integer >= 1 (the vocabulary S)."
        )
    if not _is_int(k) or k < 1 or k > seq_len:
        raise ValueError(
            f"k = {k!r}: must be an integer in [1, T] = [1, {seq_len}] "
            "(the estimator conditions on k - 1 past tokens)."
        )
    if lags is None:
        lags = tuple(range(1, k))
    else:
        lags = tuple(lags)
        ok = all(_is_int(h) and 1 <= h <= seq_len - 1 for h in lags)
        if not ok or len(lags) != k - 1 or len(set(lags)) != len(lags):
            raise ValueError(
                f"lags = {lags!r}: must be k - 1 = {k - 1} distinct integers in "
                f"[1, T - 1] = [1, {seq_len - 1}] (the history offsets)."
            )
        lags = tuple(int(h) for h in lags)
    lowest = 1 if padded else max(lags, default=0) + 1
    if min_position is None:
        min_position = lowest
    elif not _is_int(min_position) or not lowest <= min_position <= seq_len:
        raise ValueError(
            f"min_position = {min_position!r}: must be an integer in "
            f"[{lowest}, T = {seq_len}] (the first counted 1-based position; "
            "below max(lags) + 1 a key has no full history)."
        )
    if not isinstance(x_BT, jax.core.Tracer):
        x = np.asarray(x_BT)
        if not np.issubdtype(x.dtype, np.integer) or (
            x.size and (x.min() < 0 or x.max() >= num_states)
        ):
            raise ValueError(
                f"x_BT: tokens must be integers in [0, S - 1] = [0, {num_states - 1}]."
            )
    return lags, int(min_position)


def _check_alpha(alpha: ArrayLike) -> None:
    if isinstance(alpha, jax.core.Tracer):
        return
    arr = np.asarray(alpha, dtype=np.float64)
    if np.any(~(arr >= 0.0)):
        shown = arr[~(arr >= 0.0)].flat[0] if arr.ndim else arr.item()
        raise ValueError(f"alpha = {shown:g}: must be >= 0 (the add-alpha pseudo-count).")


# --------------------------------------------------------------------------------------------------
# Counting (notes §4.1 matching set, §4.4 padded histories)
# --------------------------------------------------------------------------------------------------


@functools.partial(jax.jit, static_argnums=(1, 2, 3, 4))
def _counts(x_BT, num_states, lags, min_position, padded):
    seq_len = x_BT.shape[-1]
    pos_T = jnp.arange(seq_len)  # 0-based l - 1
    match_BT = jnp.broadcast_to(pos_T >= min_position - 1, x_BT.shape)
    for h in lags:
        # key l's (-h)-token; padded keys l <= h read the first token (notes §4.4)
        hist_BT = jnp.take(x_BT, jnp.maximum(pos_T - h, 0), axis=-1)
        query_B1 = x_BT[..., seq_len - h, None]  # x_{T+1-h}, 1-based
        match_BT = match_BT & (hist_BT == query_B1)
    onehot_BTS = jax.nn.one_hot(x_BT, num_states, dtype=jnp.int32)
    counts_BS = jnp.sum(match_BT[..., None] * onehot_BTS, axis=-2)
    return counts_BS, jnp.sum(match_BT, axis=-1, dtype=jnp.int32)


def kgram_counts(
    x_BT: ArrayLike,
    num_states: int,
    k: int,
    lags: Sequence[int] | None = None,
    min_position: int | None = None,
    padded: bool = False,
) -> tuple[jax.Array, jax.Array]:
    """(counts_BS, matches_B): next-token counts over the matching set M_T^k (Def. 2.1, §4.1).

    Key l counts when l >= min_position and x_{l-h} = x_{T+1-h} for every h in lags (default
    1..k-1); l = T is included. min_position defaults to max(lags) + 1 (= k for contiguous lags,
    Def. 2.1); the code's lower-order lines use min_position = n. k = 1: unigram counts of all T
    tokens. padded=True counts every key l >= min_position (default 1) with the history token
    x_{max(l-h, 1)} (notes §4.4 [ours]). matches_B = |M| = counts_BS.sum(-1).
    """
    lags, min_position = _resolve(x_BT, num_states, k, lags, min_position, padded)
    return _counts(jnp.asarray(x_BT), num_states, lags, min_position, bool(padded))


# --------------------------------------------------------------------------------------------------
# Estimators (notes §4.1, §4.4)
# --------------------------------------------------------------------------------------------------


def _normalise(counts_BS, matches_B, alpha, num_states):
    """(counts + alpha)/(|M| + S alpha); uniform 1/S where that is 0/0 (|M| = 0, alpha = 0)."""
    alpha = jnp.asarray(alpha, dtype=float)
    num_BS = counts_BS + alpha[..., None]
    den_B1 = matches_B[..., None] + num_states * alpha[..., None]
    safe_B1 = jnp.where(den_B1 > 0, den_B1, 1.0)
    return jnp.where(den_B1 > 0, num_BS / safe_B1, 1.0 / num_states)


def kgram_estimate(
    x_BT: ArrayLike,
    num_states: int,
    k: int,
    lags: Sequence[int] | None = None,
    min_position: int | None = None,
) -> jax.Array:
    """probs_BS: the k-gram MLE p_k(x_{T+1} | x^T) = counts/|M| of Def. 2.1 (notes §4.1).

    Fallback: uniform 1/S when |M| = 0 (undefined in the paper). Arguments as in kgram_counts.
    """
    counts_BS, matches_B = kgram_counts(x_BT, num_states, k, lags, min_position)
    return _normalise(counts_BS, matches_B, 0.0, num_states)


def padded_kgram_estimate(
    x_BT: ArrayLike, num_states: int, k: int, lags: Sequence[int] | None = None
) -> jax.Array:
    """probs_BS: the c -> inf limit of the construction theta_*^k (notes §4.4 [ours], §4.7 C3).

    The k-gram MLE over all keys l in [1, T], key l's (-h)-token being x_{max(l-h, 1)} (head h
    sends rows l <= h to the first token). It differs from Def. 2.1 only through the extra keys
    l < k, an O(1/T) effect. Fallback: uniform when |M| = 0 (the construction then attends to
    the best partial matches instead; notes §4.7 compares only sequences with |M| > 0).
    """
    counts_BS, matches_B = kgram_counts(x_BT, num_states, k, lags, None, padded=True)
    return _normalise(counts_BS, matches_B, 0.0, num_states)


def smoothed_estimate(
    x_BT: ArrayLike,
    num_states: int,
    k: int,
    alpha: ArrayLike,
    lags: Sequence[int] | None = None,
    min_position: int | None = None,
) -> jax.Array:
    """probs_BS = (counts + alpha)/(|M| + S alpha): add-alpha smoothing (notes §4.1 [code]).

    alpha = 0 is the MLE (uniform fallback at |M| = 0). alpha may be traced (vmap over a grid).
    """
    _check_alpha(alpha)
    counts_BS, matches_B = kgram_counts(x_BT, num_states, k, lags, min_position)
    return _normalise(counts_BS, matches_B, alpha, num_states)


def bayes_estimate(x_BT: ArrayLike, num_states: int, order_n: int, alpha: ArrayLike) -> jax.Array:
    """probs_BS: the posterior predictive under the Dir(alpha) n-gram prior (notes §2.2, §4.1).

    Rows P[u] are i.i.d. Dir(alpha 1_S), so given x^T the row of the last n - 1 tokens is
    Dir(alpha + transition counts from it), and its mean is add-alpha at k = n.
    """
    return smoothed_estimate(x_BT, num_states, order_n, alpha)


# --------------------------------------------------------------------------------------------------
# Loss (notes §2.1)
# --------------------------------------------------------------------------------------------------


@jax.jit
def cross_entropy(probs_BS: ArrayLike, target_BS: ArrayLike, floor: float = 1e-8) -> jax.Array:
    """(B,) -sum_s target[s] log(probs[s] + floor): the code's soft-target loss (notes §2.1)."""
    return -jnp.sum(target_BS * jnp.log(probs_BS + floor), axis=-1)
