"""In-context n-gram task: Dirichlet priors, samplers, k-gram plateau levels (notes/ngrams.md §2).

Each sequence has its own order-(n-1) chain with rows P[u, :] ~ Dir(alpha 1_S) (notes §2.2); a
context is stored as a base-S integer, oldest token most significant. Everything is jit/vmap-able
with alpha traced. The context encoding and the contents: docs/design/ngrams.md.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import xlogy
from jax.typing import DTypeLike

from landscape import _checks
from landscape.typing import ArrayLike

INITS = ("uniform", "stationary")


# --------------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------------


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def validate_task(
    num_states: int, order_n: int, seq_len: int | None = None, alpha: ArrayLike | None = None
) -> None:
    """One ValueError sentence naming the bad field: S >= 2, n >= 2, T > n, alpha > 0 (notes §2.2).

    seq_len / alpha None skip their checks; a traced alpha (a vmapped sweep) is not checked.
    A wrong type (a float or bool count, a string alpha) is a TypeError (also a ValueError, for
    callers that catch those).
    """
    _checks.check_int("num_states", num_states, meaning="the vocabulary size S")
    if num_states < 2:
        raise ValueError(
            f"num_states = {num_states!r}: must be an integer >= 2 (the vocabulary size S)."
        )
    _checks.check_int("order_n", order_n, meaning="the n-gram order n")
    if order_n < 2:
        raise ValueError(
            f"order_n = {order_n!r}: must be >= 2 (an n-gram task needs at least a bigram)."
        )
    if seq_len is not None:
        _checks.check_int("seq_len", seq_len, meaning="the sequence length T")
        if seq_len <= order_n:
            raise ValueError(
                f"seq_len = {seq_len!r}: must be an integer > order_n = {order_n} "
                "(the first n-1 tokens are the initial context)."
            )
    if alpha is not None and not isinstance(alpha, jax.core.Tracer):
        _checks.real_array("alpha", alpha, scalar=False)
        arr = np.asarray(alpha, dtype=np.float64)
        bad = ~(arr > 0.0)
        if np.any(bad):
            shown = arr[bad].flat[0] if arr.ndim else arr.item()
            raise ValueError(
                f"alpha = {shown:g}: must be > 0 (the Dirichlet concentration of every row)."
            )


def _validate_init(init: str) -> None:
    if init not in INITS:
        raise ValueError(
            f"init = {init!r}: must be one of {INITS} (how the first n-1 tokens are drawn)."
        )


# --------------------------------------------------------------------------------------------------
# Tasks and the lifted chain (notes §2.2 step 1, §2.3)
# --------------------------------------------------------------------------------------------------


def sample_tasks(
    key: jax.Array,
    num_states: int,
    order_n: int,
    alpha: ArrayLike,
    batch_size: int,
    dtype: DTypeLike = jnp.float32,
) -> jax.Array:
    """P (B, S^(n-1), S): every context row ~ Dir(alpha 1_S), i.i.d. (notes §2.2 step 1), drawn
    and computed in `dtype` (float32 unless asked: never the dtype x64 would pick)."""
    if alpha is None:
        raise _checks.ArgumentTypeError(
            "alpha = None: sample_tasks needs the Dirichlet concentration alpha > 0."
        )
    validate_task(num_states, order_n, alpha=alpha)
    _checks.check_int("batch_size", batch_size, 1, "the number of tasks")
    return _sample_tasks(key, num_states, order_n, alpha, batch_size, _floating(dtype))


def _floating(dtype: DTypeLike) -> jnp.dtype:
    """`dtype` as a floating jnp.dtype; one sentence naming it otherwise."""
    return _checks.floating_dtype("dtype", dtype, "the samples' dtype")


@functools.partial(jax.jit, static_argnums=(1, 2, 4, 5))
def _sample_tasks(key, num_states, order_n, alpha, batch_size, dtype):
    shape = (batch_size, num_states ** (order_n - 1), num_states)
    return jax.nn.softmax(_log_gamma(key, alpha, shape, dtype), axis=-1)


def _log_gamma(
    key: jax.Array, alpha: ArrayLike, shape: tuple[int, ...], dtype: jnp.dtype
) -> jax.Array:
    """log G, G ~ Gamma(alpha, 1) i.i.d. of `shape`: exact, vectorised Marsaglia-Tsang.

    G(alpha) = G(alpha + 1) U^(1/alpha), so any alpha > 0 works, and in log space a small alpha
    cannot underflow. Gamma(alpha + 1 >= 1) by Marsaglia-Tsang (acceptance >= 95%): one full-size
    round, then rounds of N/8 candidates that fill the (about 5%) rejected entries until none is
    left. jax.random.dirichlet's per-entry rejection loop is several times slower on CPU.
    """
    alpha = jnp.asarray(alpha, dtype)
    d = alpha + 1.0 - 1.0 / 3.0
    c = 1.0 / jnp.sqrt(9.0 * d)
    size = int(np.prod(shape))
    refill = max(size // 8, 1)

    def propose(key: jax.Array, count: int) -> tuple[jax.Array, jax.Array]:
        key_z, key_u = jax.random.split(key)
        z = jax.random.normal(key_z, (count,), dtype)
        u = jax.random.uniform(key_u, (count,), dtype)
        v = (1.0 + c * z) ** 3
        safe_v = jnp.where(v > 0, v, 1.0)
        ok = (v > 0) & (jnp.log(u) < 0.5 * z**2 + d - d * safe_v + d * jnp.log(safe_v))
        return jnp.log(d) + jnp.log(safe_v), ok

    def body(
        state: tuple[jax.Array, jax.Array, jax.Array],
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        key, log_g_N, done_N = state
        key, key_round = jax.random.split(key)
        idx_R = jnp.nonzero(~done_N, size=refill, fill_value=size)[0]  # size: out of range
        cand_R, ok_R = propose(key_round, refill)
        old_R = log_g_N.at[idx_R].get(mode="fill", fill_value=0.0)
        log_g_N = log_g_N.at[idx_R].set(jnp.where(ok_R, cand_R, old_R), mode="drop")
        return key, log_g_N, done_N.at[idx_R].set(ok_R, mode="drop")

    key_first, key_loop, key_boost = jax.random.split(key, 3)
    log_g_N, done_N = propose(key_first, size)
    state = jax.lax.while_loop(lambda state: ~jnp.all(state[2]), body, (key_loop, log_g_N, done_N))
    u = jax.random.uniform(key_boost, shape, dtype, minval=jnp.finfo(dtype).tiny)
    return state[1].reshape(shape) + jnp.log(u) / alpha


@functools.partial(jax.jit, static_argnums=(1, 2))
def lifted_transition(P_CS: jax.Array, num_states: int, order_n: int) -> jax.Array:
    """(C, C) T[c, (c S mod C) + j] = P[c, j], C = S^(n-1): the lifted order-1 chain (§2.3)."""
    num_contexts = num_states ** (order_n - 1)
    rows_C1 = jnp.arange(num_contexts)[:, None]
    cols_CS = (rows_C1 * num_states) % num_contexts + jnp.arange(num_states)
    return jnp.zeros((num_contexts, num_contexts), P_CS.dtype).at[rows_C1, cols_CS].set(P_CS)


@functools.partial(jax.jit, static_argnums=(1, 2))
def lifted_stationary(P_CS: jax.Array, num_states: int, order_n: int) -> jax.Array:
    """(C,) pi over contexts with pi T = pi, sum pi = 1, for one task (notes §2.3, Eq. 37).

    Dirichlet rows have full support, so T is irreducible and I - T + 1 1^T is nonsingular:
    pi (I - T + 1 1^T) = 1^T is one exact, differentiable linear solve. vmap for a batch.
    """
    trans_CC = lifted_transition(P_CS, num_states, order_n)
    num_contexts = trans_CC.shape[0]
    system_CC = (jnp.eye(num_contexts, dtype=P_CS.dtype) - trans_CC + 1.0).T
    return jnp.linalg.solve(system_CC, jnp.ones(num_contexts, P_CS.dtype))


# --------------------------------------------------------------------------------------------------
# Samplers (notes §2.2)
# --------------------------------------------------------------------------------------------------


def _digits(c_B: jax.Array, num_states: int, order_n: int) -> jax.Array:
    """(B, n-1) tokens oldest..newest of base-S context indices c_B."""
    powers_O = num_states ** jnp.arange(order_n - 2, -1, -1)
    return (c_B[:, None] // powers_O) % num_states


def _encode(tokens_BO: jax.Array, num_states: int) -> jax.Array:
    """(B,) base-S context index of (B, o) tokens oldest..newest (oldest most significant)."""
    order = tokens_BO.shape[1]
    powers_O = num_states ** jnp.arange(order - 1, -1, -1)
    return jnp.sum(tokens_BO * powers_O, axis=1).astype(jnp.int32)


def sample_sequences(
    key: jax.Array,
    P_BCS: jax.Array,
    num_states: int,
    order_n: int,
    seq_len: int,
    init: str = "uniform",
) -> tuple[jax.Array, jax.Array]:
    """(x_BT int32, target_BS) for given tasks P_BCS (notes §2.2 steps 2-4).

    init "uniform": x_1..x_{n-1} i.i.d. uniform (the authors' code); "stationary": the first window
    jointly from the lifted stationary law (App. H.1, theory checks).
    """
    validate_task(num_states, order_n, seq_len)
    _validate_init(init)
    if np.ndim(P_BCS) != 3 or np.shape(P_BCS)[1:] != (num_states ** (order_n - 1), num_states):
        raise ValueError(
            f"P_BCS has shape {np.shape(P_BCS)}: must be (batch, S^(n-1), S) = "
            f"(batch, {num_states ** (order_n - 1)}, {num_states})."
        )
    return _sample_sequences(key, P_BCS, num_states, order_n, seq_len, init)


@functools.partial(jax.jit, static_argnums=(2, 3, 4, 5))
def _sample_sequences(key, P_BCS, num_states, order_n, seq_len, init):
    order = order_n - 1
    num_contexts = num_states**order
    batch_size = P_BCS.shape[0]
    key_init, key_roll = jax.random.split(key)
    if init == "uniform":
        first_BO = jax.random.randint(key_init, (batch_size, order), 0, num_states, jnp.int32)
        c_B = _encode(first_BO, num_states)
    else:
        pi_BC = jax.vmap(lifted_stationary, (0, None, None))(P_BCS, num_states, order_n)
        c_B = jax.random.categorical(key_init, jnp.log(pi_BC), axis=-1).astype(jnp.int32)
        first_BO = _digits(c_B, num_states, order_n).astype(jnp.int32)
    # inverse CDF against the current context's row; the last cut (~1) is never needed
    cuts_BCS = jnp.cumsum(P_BCS, axis=-1)[:, :, : num_states - 1]
    u_RB = jax.random.uniform(key_roll, (seq_len - order, batch_size), P_BCS.dtype)
    batch_B = jnp.arange(batch_size)

    def step(c_B: jax.Array, u_B: jax.Array) -> tuple[jax.Array, jax.Array]:
        x_B = jnp.sum(u_B[:, None] >= cuts_BCS[batch_B, c_B], axis=-1).astype(jnp.int32)
        return (c_B * num_states) % num_contexts + x_B, x_B

    c_B, rest_RB = jax.lax.scan(step, c_B, u_RB)
    x_BT = jnp.concatenate([first_BO, rest_RB.T], axis=1)
    return x_BT, P_BCS[batch_B, c_B]


def sample(
    key: jax.Array,
    num_states: int,
    order_n: int,
    seq_len: int,
    alpha: ArrayLike,
    batch_size: int,
    init: str = "uniform",
    dtype: DTypeLike = jnp.float32,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(x_BT int32, target_BS, P_BCS): the per-sequence n-gram sampler (notes §2.2).

    Per sequence: P ~ Dirichlet rows, the first n-1 tokens from `init` (see `sample_sequences`),
    x_t ~ P[window of the last n-1 tokens], and target = P[last window, :] (the soft label
    p_tau(x_{T+1} = . | x^T)). Drawn in `dtype` (float32 unless asked), so x64 on or off gives
    the same sequences.
    """
    if alpha is None:
        raise _checks.ArgumentTypeError(
            "alpha = None: sample needs the Dirichlet concentration alpha > 0."
        )
    validate_task(num_states, order_n, seq_len, alpha)
    _validate_init(init)
    _checks.check_int("batch_size", batch_size, 1, "the number of sequences")
    return _sample(key, num_states, order_n, seq_len, alpha, batch_size, init, _floating(dtype))


@functools.partial(jax.jit, static_argnums=(1, 2, 3, 5, 6, 7))
def _sample(key, num_states, order_n, seq_len, alpha, batch_size, init, dtype):
    key_task, key_seq = jax.random.split(key)
    P_BCS = _sample_tasks(key_task, num_states, order_n, alpha, batch_size, dtype)
    x_BT, target_BS = _sample_sequences(key_seq, P_BCS, num_states, order_n, seq_len, init)
    return x_BT, target_BS, P_BCS


# --------------------------------------------------------------------------------------------------
# Lower-order conditionals and plateau levels (notes §2.3)
# --------------------------------------------------------------------------------------------------


@functools.partial(jax.jit, static_argnums=(2, 3, 4))
def lower_order_conditional(
    P_CS: jax.Array, pi_C: jax.Array, num_states: int, order_n: int, k: int
) -> jax.Array:
    """(S^(k-1), S) q[u, j] = p(x_{t+1} = j | last k-1 tokens = u) under pi (Lemma H.5).

    u is indexed base-S oldest..newest like contexts. k = n gives P; k = 1 the (1, S) stationary
    unigram sum_c pi_c P[c, :].
    """
    if not 1 <= k <= order_n:
        raise ValueError(f"k = {k!r}: must be in 1..order_n = {order_n} (the k-gram order).")
    suffixes = num_states ** (k - 1)
    prefixes = num_states ** (order_n - k)  # the marginalised oldest o - l tokens w
    pi_WU = pi_C.reshape(prefixes, suffixes)
    joint_US = jnp.sum((pi_C[:, None] * P_CS).reshape(prefixes, suffixes, num_states), axis=0)
    return joint_US / jnp.sum(pi_WU, axis=0)[:, None]


@functools.partial(jax.jit, static_argnums=(1, 2))
def kgram_losses(P_CS: jax.Array, num_states: int, order_n: int) -> jax.Array:
    """(n,) for one task: L_k = sum_c pi_c sum_j P[c, j] (-log q_{u(c)}(j)), k = 1..n (§2.3).

    u(c) = c mod S^(k-1) is the newest k-1 tokens; L_k is the stationary conditional entropy
    H(x_{t+1} | last k-1 tokens), hence nonincreasing in k.
    """
    pi_C = lifted_stationary(P_CS, num_states, order_n)
    context_C = jnp.arange(P_CS.shape[0])
    losses = []
    for k in range(1, order_n + 1):
        q_US = lower_order_conditional(P_CS, pi_C, num_states, order_n, k)
        q_CS = q_US[context_C % num_states ** (k - 1)]
        losses.append(-jnp.sum(pi_C[:, None] * xlogy(P_CS, q_CS)))
    return jnp.stack(losses)


def plateau_levels(
    key: jax.Array,
    num_states: int,
    order_n: int,
    alpha: ArrayLike,
    num_tasks: int,
    dtype: DTypeLike = jnp.float32,
) -> jax.Array:
    """(n,) Monte-Carlo T -> inf k-gram losses L_k^inf = E_tau[kgram_losses] (notes §2.3 table),
    over tasks drawn in `dtype`."""
    _checks.check_int("num_tasks", num_tasks, 1, "the Monte-Carlo sample of tasks")
    P_BCS = sample_tasks(key, num_states, order_n, alpha, num_tasks, dtype)
    return jnp.mean(jax.vmap(kgram_losses, (0, None, None))(P_BCS, num_states, order_n), axis=0)
