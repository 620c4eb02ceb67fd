"""Sequence classes (notes/scan_snap.md §2): the data of Tian et al.'s synthetic experiments.

A class n fixes its last token m = psi(n) and its next token (the label); the T-1 contextual
tokens are i.i.d. from P(l | n). The generator reproduces the authors' `Dataset2` token layout
exactly (notes §2.2): [global common | local common | distinct, per class | last | next].
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from landscape import _checks


@dataclasses.dataclass(frozen=True, eq=False)
class SequenceClasses:
    """K sequence classes over a vocabulary of M token ids.

    class_probs[n, l] = P(l | n); support[n] lists the tokens with P > 0 and support_cdf[n] their
    cumulative probabilities (sampling is an inverse CDF over the support, notes §3.2 tip).
    """

    class_probs: np.ndarray  # (K, M)
    last_token: np.ndarray  # (K,) psi(n), the query token of class n
    next_token: np.ndarray  # (K,) the label of class n
    seq_len: int  # L: L-1 contextual tokens + the last token; label outside
    support: np.ndarray  # (K, S)
    support_cdf: np.ndarray  # (K, S)

    @property
    def num_classes(self) -> int:
        return self.class_probs.shape[0]

    @property
    def num_tokens(self) -> int:
        return self.class_probs.shape[1]

    @property
    def is_distinct(self) -> np.ndarray:
        """(K, M): token l is distinct to class n (it occurs in n only)."""
        in_support = self.class_probs > 0
        return in_support & (in_support.sum(axis=0) == 1)

    @property
    def is_common(self) -> np.ndarray:
        """(M,): token l occurs in several classes."""
        return (self.class_probs > 0).sum(axis=0) > 1

    def sample(
        self, key: jax.Array, batch_size: int
    ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
        """(context_BT int32 with T = L-1, query_B, label_B, class_B); classes uniform. Drawn
        in fixed dtypes (int32 classes, float32 uniforms against float32 cut points), so x64
        on or off gives the same sequences."""
        _checks.check_key("key", key)
        _checks.check_int("batch_size", batch_size, 1, "the number of sequences")
        return sample_classes(key, batch_size, self.seq_len, self.num_classes, *self._arrays())

    def _arrays(self) -> tuple[jax.Array, ...]:
        return tuple(
            jnp.asarray(a)
            for a in (self.support, self.support_cdf, self.last_token, self.next_token)
        )


def sample_classes(
    key: jax.Array,
    batch_size: int,
    seq_len: int,
    num_classes: int | jax.Array,
    support: jax.Array,
    support_cdf: jax.Array,
    last_token: jax.Array,
    next_token: jax.Array,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """`SequenceClasses.sample` from its arrays; num_classes may be traced (classes uniform in
    [0, num_classes): the rows past it, padding, are never drawn; the same draws)."""
    class_key, token_key = jax.random.split(key)
    class_B = jax.random.randint(class_key, (batch_size,), 0, num_classes, jnp.int32)
    # Drawn flat, then reshaped: the same numbers (threefry counts the flat index either
    # way), and XLA's CPU backend compiles the flat hash loop in about half the time.
    T = seq_len - 1
    u_BT = jax.random.uniform(token_key, (batch_size * T,), jnp.float32).reshape(batch_size, T)
    cdf_BS = jnp.asarray(support_cdf, jnp.float32)[class_B]
    slot_BT = (u_BT[:, :, None] >= cdf_BS[:, None, :-1]).sum(-1)  # S is small: compare all
    context_BT = jnp.take_along_axis(support[class_B], slot_BT, axis=1)
    return (
        context_BT.astype(jnp.int32),
        jnp.asarray(last_token, jnp.int32)[class_B],
        jnp.asarray(next_token, jnp.int32)[class_B],
        class_B,
    )


# Syn-Small's sequence classes (notes §2.3, §7.4; Fig. 4): K = 2 classes, M = 34 ids (10 common,
# 2 x 10 distinct, 2 last, 2 next), L = 128; `sequence_classes(**SYN_SMALL)`.
SYN_SMALL: dict[str, Any] = dict(
    num_last=2,
    num_next_per_last=1,
    num_common=10,
    num_common_per_last=0,
    num_distinct_per_next=10,
    common_unnormalized_prob=1.0,
    distinct_unnormalized_min=0.1,
    distinct_unnormalized_max=1.0,
    seq_len=128,
)


def sequence_classes(
    *,
    num_last: int,
    num_next_per_last: int,
    num_common: int,
    num_common_per_last: int,
    num_distinct_per_next: int,
    common_unnormalized_prob: float,
    distinct_unnormalized_min: float,
    distinct_unnormalized_max: float,
    seq_len: int,
) -> SequenceClasses:
    """The authors' Dataset2 (notes §2.2); Syn-Small is num_last=2, num_next_per_last=1 (M = 34).

    Counts are integers (num_last, num_next_per_last, num_distinct_per_next >= 1; num_common,
    num_common_per_last >= 0; seq_len >= 2) and the unnormalised probabilities positive with
    distinct_unnormalized_min <= distinct_unnormalized_max: one sentence otherwise.
    """
    for name, value, low, meaning in (
        ("num_last", num_last, 1, "the number of last tokens"),
        ("num_next_per_last", num_next_per_last, 1, "classes per last token"),
        ("num_common", num_common, 0, "globally common tokens"),
        ("num_common_per_last", num_common_per_last, 0, "common tokens per last token"),
        ("num_distinct_per_next", num_distinct_per_next, 1, "distinct tokens per class"),
        ("seq_len", seq_len, 2, "L - 1 contextual tokens and the last token"),
    ):
        _checks.check_int(name, value, low, meaning)
    for name, prob in (
        ("common_unnormalized_prob", common_unnormalized_prob),
        ("distinct_unnormalized_min", distinct_unnormalized_min),
        ("distinct_unnormalized_max", distinct_unnormalized_max),
    ):
        _checks.check_real(name, prob, low=0, low_open=True, meaning="an unnormalised probability")
    if distinct_unnormalized_max < distinct_unnormalized_min:
        raise ValueError(
            f"distinct_unnormalized_max = {distinct_unnormalized_max:g}: must be >= "
            f"distinct_unnormalized_min = {distinct_unnormalized_min:g}."
        )
    K = num_last * num_next_per_last
    local_offset = num_common
    distinct_offset = local_offset + num_last * num_common_per_last
    last_offset = distinct_offset + K * num_distinct_per_next
    next_offset = last_offset + num_last
    M = next_offset + K
    distinct_weights = np.linspace(
        distinct_unnormalized_min, distinct_unnormalized_max, num_distinct_per_next
    )
    probs = np.zeros((K, M))
    supports = []
    for n in range(K):
        m = n // num_next_per_last
        common = list(range(num_common))
        local = list(
            range(
                local_offset + m * num_common_per_last, local_offset + (m + 1) * num_common_per_last
            )
        )
        distinct = list(
            range(
                distinct_offset + n * num_distinct_per_next,
                distinct_offset + (n + 1) * num_distinct_per_next,
            )
        )
        probs[n, common + local] = common_unnormalized_prob
        probs[n, distinct] = distinct_weights
        supports.append(common + local + distinct)
    probs /= probs.sum(axis=1, keepdims=True)
    support = np.asarray(supports)
    cdf = np.cumsum(np.take_along_axis(probs, support, axis=1), axis=1)
    cdf[:, -1] = 1.0
    return SequenceClasses(
        class_probs=probs,
        last_token=last_offset + np.arange(K) // num_next_per_last,
        next_token=next_offset + np.arange(K),
        seq_len=seq_len,
        support=support,
        support_cdf=cdf,
    )


class Population(NamedTuple):
    """What the long-sequence loss reads of a task, as arrays: the inputs of the compiled
    programs, so that tasks of one (K, M) share them (a pytree; attributes as SequenceClasses)."""

    class_probs: jax.Array  # (K, M) P(l | n)
    last_token: jax.Array  # (K,) psi(n)
    next_token: jax.Array  # (K,) the label of class n

    @property
    def num_tokens(self) -> int:
        return self.class_probs.shape[1]

    @classmethod
    def of(cls, task: SequenceClasses, dtype: Any) -> Population:
        return cls(
            jnp.asarray(task.class_probs, dtype),
            jnp.asarray(task.last_token),
            jnp.asarray(task.next_token),
        )


def attention_weights(Z: jax.Array, task: SequenceClasses | Population) -> jax.Array:
    """c_n (K, M), Eq. (5): the long-sequence attention of class n from row psi(n) of Z.

    c_{l|n} = P(l|n) exp(z_{psi(n) l}) / sum_l' P(l'|n) exp(z_{psi(n) l'}). This is what Figs. 4-6
    plot.
    """
    probs = jnp.asarray(task.class_probs, Z.dtype)
    logits = jnp.where(
        probs > 0, jnp.log(jnp.where(probs > 0, probs, 1.0)) + Z[task.last_token], -jnp.inf
    )
    return jax.nn.softmax(logits, axis=-1)


def distinct_entropy(c_KM: jax.Array, task: SequenceClasses) -> jax.Array:
    """(K,) entropy in nats of c_n restricted to n's distinct tokens and renormalised (notes
    §5.6)."""
    return masked_entropy(c_KM, jnp.asarray(task.is_distinct))


def masked_entropy(c_KM: jax.Array, mask: jax.Array) -> jax.Array:
    """(K,) entropy in nats of each row of c_KM restricted to `mask` and renormalised."""
    mass = jnp.where(mask, c_KM, 0.0)
    p = mass / mass.sum(axis=-1, keepdims=True)
    return -jnp.sum(jnp.where(mask & (p > 0), p * jnp.log(jnp.where(p > 0, p, 1.0)), 0.0), axis=-1)
