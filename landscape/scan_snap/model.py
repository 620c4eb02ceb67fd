"""The Y/Z model of Tian et al. (notes/scan_snap.md §3.2) and its long-sequence limit (§3.5).

Parameters are two M x M matrices, {"Y": decoder, "Z": attention logits}, trained directly:
Z[m, l] is the logit with which query (last token) m attends to contextual token l (row = query,
notes §1), and the logits are Y^T LN(X^T b). Plain functions: the model is two matrices.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from landscape import _checks
from landscape.point import Point
from landscape.scan_snap.task import SequenceClasses, attention_weights

INITS = ("zeros", "uniform")


def init_params(key: jax.Array, num_tokens: int, init: str = "zeros", dtype=jnp.float32):
    """Y(0) = Z(0) = 0, or both i.i.d. U(-1/sqrt(M), 1/sqrt(M)) (PyTorch nn.Linear default, §3.2)."""
    shape = (num_tokens, num_tokens)
    if init == "zeros":
        return {"Y": jnp.zeros(shape, dtype), "Z": jnp.zeros(shape, dtype)}
    if init == "uniform":
        bound = 1.0 / jnp.sqrt(num_tokens)
        y_key, z_key = jax.random.split(key)
        return {"Y": jax.random.uniform(y_key, shape, dtype, -bound, bound),
                        "Z": jax.random.uniform(z_key, shape, dtype, -bound, bound)}
    raise ValueError(f"init = {init!r}: must be one of {INITS}.")


def forward(params, context_BT: jax.Array, query_B: jax.Array, *, attend_to_query: bool = False,
                        residual: bool = False, normalize: bool = True):
    """(logits_BM, attention_BT) for a batch of sequences; Eq. (1) in the Y/Z form of §3.2.

    The query does not attend to itself unless `attend_to_query`. `residual` adds e_{x_T} to
    X^T b before the normalisation (the authors' `residual=true`, §3.6).
    """
    Y, Z = params["Y"], params["Z"]
    B, M = query_B.shape[0], Y.shape[0]
    if attend_to_query:
        context_BT = jnp.concatenate([context_BT, query_B[:, None]], axis=1)
    z_BT = jnp.take_along_axis(Z[query_B], context_BT, axis=1)
    b_BT = jax.nn.softmax(z_BT, axis=-1)
    # c = X^T b as a scatter-add (a one-hot einsum is ~50x slower on CPU, notes §3.2).
    c_BM = jnp.zeros((B, M), Y.dtype).at[jnp.arange(B)[:, None], context_BT].add(b_BT)
    if residual:
        c_BM = c_BM.at[jnp.arange(B), query_B].add(1.0)
    f_BM = c_BM / jnp.linalg.norm(c_BM, axis=-1, keepdims=True) if normalize else c_BM
    return f_BM @ Y, b_BT


def cross_entropy(logits_BM: jax.Array, label_B: jax.Array) -> jax.Array:
    """Mean next-token cross-entropy with the softmax over all M ids (= -J of Eq. 2)."""
    log_probs = jax.nn.log_softmax(logits_BM, axis=-1)
    return -jnp.take_along_axis(log_probs, label_B[:, None], axis=1).mean()


def loss(params, context_BT, query_B, label_B, **model_kwargs) -> jax.Array:
    logits_BM, _ = forward(params, context_BT, query_B, **model_kwargs)
    return cross_entropy(logits_BM, label_B)


def population_features(params, task: SequenceClasses, *, residual: bool = False) -> jax.Array:
    """f_n (K, M) = LN(c_n), the T -> infinity limit of LN(X^T b) (Eqs. 5-6)."""
    c_KM = attention_weights(params["Z"], task)
    if residual:
        c_KM = c_KM + jax.nn.one_hot(task.last_token, task.num_tokens, dtype=c_KM.dtype)
    return c_KM / jnp.linalg.norm(c_KM, axis=-1, keepdims=True)


def population_loss(params, task: SequenceClasses, *, residual: bool = False) -> jax.Array:
    """-J_pop(Y, Z) = -(1/K) sum_n log softmax(Y^T f_n)_n (§3.5): classes uniform, T -> infinity."""
    f_KM = population_features(params, task, residual=residual)
    return cross_entropy(f_KM @ params["Y"], jnp.asarray(task.next_token))


def population_point(task: SequenceClasses, params=None, *, residual: bool = False,
                     name: str = "") -> Point:
    """The population loss (§3.5) at (Y, Z) as a Point; default Y = Z = 0, where the loss is ln M."""
    if not isinstance(task, SequenceClasses):
        raise TypeError(f"population_point expects a SequenceClasses task (e.g. "
                        f"landscape.scan_snap.sequence_classes(...)); got {type(task).__name__}.")
    _checks.check_bool("residual", residual, "add the last token's one-hot to c_n")
    if params is not None:
        shape = (task.num_tokens, task.num_tokens)
        if not isinstance(params, dict) or set(params) != {"Y", "Z"}:
            raise ValueError(f"params = {type(params).__name__}: must be a dict with keys 'Y' and "
                             f"'Z', both {shape} (or None for Y = Z = 0).")
        for key in ("Y", "Z"):
            if jnp.shape(params[key]) != shape:
                raise ValueError(f"params['{key}'] has shape {jnp.shape(params[key])}: must be "
                                 f"{shape} (M = {task.num_tokens} tokens).")
    if params is None:
        params = init_params(jax.random.key(0), task.num_tokens, "zeros",
                             jnp.float64 if jax.config.jax_enable_x64 else jnp.float32)
    return Point(params, lambda p: population_loss(p, task, residual=residual),
                 name=name or f"Y/Z population loss (K={task.num_classes}, M={task.num_tokens})")
