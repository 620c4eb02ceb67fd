"""Two-layer attention-only model for associative recall (notes/assoc_recall.md §2, §3).

`RecallModel` (flax.linen) holds the static switches of notes §7.1: all on gives the simplified
model of Eqs. (9a-e), off the original model of §2.1. The inner params dict (keys = Hessian block
names) is what points and initialisations are built as. Parameter tree: docs/design/recall.md;
precision: docs/design/precision.md.
"""

# Shape suffixes (tokens_BL has shape (B, L)):
#   B  sequences in a batch
#   L  positions of a sequence (its length)
#   V  the vocabulary
#   D  the layer-2 stream's width (query and key vectors)
#   H  heads of layer 1
#   G  blocks of the layer-2 stream: the input and the H heads (H + 1)
#   I  positions of layer 1's attention window (a_HI)
#   W  positions of layer 1's attention window
#   P  key positions queried by layer 2; in match_PHI and scores, the k! permutations

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from ml_collections import ConfigDict

from landscape import _checks
from landscape.engine import precision
from landscape.recall import task as task_lib
from landscape.typing import ArrayLike, NDArray, PyTree

LOSSES = ("dp", "ce")
QKS = ("beta", "full")
_jit = functools.partial(jax.jit, static_argnames="model")  # model is static (hashable)


class RecallModel(nn.Module):
    """Static switches (notes §7.1); hashable, so it can be a static jit argument.

    window         (A0) layer-1 logits on offsets 1..k only; False: causal offsets 0..l-1.
    exact_query    (A2) query block g is e_{x_{l-1-g}}; False: the learned R^g_{l-1} (R^0 = X).
    response_only  (A3) layer-2 softmax over the k! response positions; False: over all positions,
                   p = X^T s over the full vocabulary (the 'naive V' of §2.4, as in §2.1).
    gamma          I~_k = top-left block I_k - gamma 11^T (zero on responses), notes §2.1-2.2.
    qk             "beta": super-diagonal beta^2 coupling (§2.1 erratum); "full": trainable Q^T K.
    scale          the score scale c of notes §2.2 (multiplies the beta coupling only).
    num_heads      k or k-1 (default k).
    dtype          computation dtype (None = the parameters' dtype); half = autocast.
    param_dtype    dtype of the parameters `init` makes.
    """

    k: int
    num_responses: int
    num_heads: int | None = None
    window: bool = True
    exact_query: bool = True
    response_only: bool = True
    gamma: float = 0.0
    loss: str = "dp"
    qk: str = "beta"
    scale: float = 1.0
    dtype: Any = None
    param_dtype: Any = jnp.float32

    def __post_init__(self) -> None:
        task_lib.check_order(self.k, self.num_responses)
        if self.num_heads is None:
            object.__setattr__(self, "num_heads", self.k)
        _checks.check_int("num_heads", self.num_heads, meaning="k or k - 1")
        for field in ("window", "exact_query", "response_only"):
            _checks.check_bool(field, getattr(self, field))
        _checks.check_real(
            "gamma", self.gamma, meaning="the matching offset of I~_k = I_k - gamma 11^T"
        )
        _checks.check_real(
            "scale",
            self.scale,
            low=0,
            low_open=True,
            meaning="the score scale c of the beta coupling",
        )
        if self.num_heads not in (self.k - 1, self.k):
            raise ValueError(
                f"num_heads = {self.num_heads!r}: must be k = {self.k} or k - 1 = {self.k - 1}."
            )
        if self.loss not in LOSSES:
            raise ValueError(f"loss = {self.loss!r}: must be one of {LOSSES}.")
        if self.qk not in QKS:
            raise ValueError(f"qk = {self.qk!r}: must be one of {QKS}.")
        super().__post_init__()

    @property
    def seq_len(self) -> int:
        return task_lib.sequence_length(self.k)

    @property
    def num_perms(self) -> int:
        return math.factorial(self.k)

    @property
    def vocab_size(self) -> int:
        """|S| = k + |R|."""
        return self.k + self.num_responses

    @property
    def window_len(self) -> int:
        return self.k if self.window else self.seq_len

    @property
    def qk_dim(self) -> int:
        """D = (H+1)|S|: the width of R = [R^0 R^1 ... R^H] (notes §2.1)."""
        assert self.num_heads is not None  # __post_init__ turns None into k
        return (self.num_heads + 1) * self.vocab_size

    @property
    def response_weight(self) -> float:
        """A = 1 - 1/|R| (notes §3)."""
        return 1.0 - 1.0 / self.num_responses

    @property
    def simplified(self) -> bool:
        """All of (A0), (A2), (A3) and the beta coupling: the model of notes §2.2 / §3."""
        return self.window and self.exact_query and self.response_only and self.qk == "beta"

    # ------------------------------------------------------------------------- Flax
    def setup(self) -> None:
        """w = 0 and beta = 0 (or Q^T K = 0): the plateau L_0; the theory's inits are built
        directly as the inner params dict (`init_params`, `flow.init_*`)."""
        zeros = nn.initializers.zeros
        self.w = self.param("w", zeros, (self.num_heads, self.window_len), self.param_dtype)
        if self.qk == "beta":
            self.beta = self.param("beta", zeros, (self.num_heads,), self.param_dtype)
        else:
            self.qk_DD = self.param("qk", zeros, (self.qk_dim, self.qk_dim), self.param_dtype)

    def _params(self) -> dict:
        return (
            {"w": self.w, "beta": self.beta}
            if self.qk == "beta"
            else {"w": self.w, "qk": self.qk_DD}
        )

    def _dtypes(self) -> tuple[Any, Any]:
        """(computation dtype, accumulation dtype): dtype or the parameters' own."""
        dtype = jnp.dtype(self.dtype) if self.dtype is not None else self.w.dtype
        return dtype, precision.accum_dtype(dtype)

    def __call__(self, tokens_BL: jax.Array) -> jax.Array:
        """p_BV, the output distribution over the full vocabulary (Eqs. 9c-d; §2.1 p = X^T s).

        With response_only, p is supported on the response ids k..k+|R|-1 (zeros on symbols).
        """
        dtype, accum = self._dtypes()
        logits_BP, keys_P = _logits_and_keys(self._params(), tokens_BL, self, dtype)
        s_BP = jax.nn.softmax(logits_BP.astype(accum), axis=-1)
        onehot_BPV = jax.nn.one_hot(tokens_BL[:, keys_P], self.vocab_size, dtype=s_BP.dtype)
        return jnp.einsum("bp,bpv->bv", s_BP, onehot_BPV)

    def loss_tokens(self, tokens_BL: jax.Array, target_B: jax.Array) -> jax.Array:
        """Mean token-level loss (DP or CE per self.loss) of a batch, Eq. (9e) / notes §3."""
        dtype, accum = self._dtypes()
        logits_BP, keys_P = _logits_and_keys(self._params(), tokens_BL, self, dtype)
        hit_BP = (tokens_BL[:, keys_P] == target_B[:, None]).astype(accum)
        return _loss_from_logits(logits_BP.astype(accum), hit_BP, self)

    def layer1_attention(self) -> jax.Array:
        """(H, window_len) softmax(w^h) per head, Eq. (9a); windowless: the last row's."""
        return jax.nn.softmax(self.w.astype(self._dtypes()[1]), axis=-1)

    def scores(self, exact: bool = False) -> jax.Array:
        """(k!,) S(pi) = c sum_h beta_h^2 sum_i a^h_i M_pi[h, i], query = identity (notes §3).

        gamma is left out: it shifts every S(pi) by the same constant (notes §2.2). In the
        computation dtype, or with `exact` in the accumulation dtype (float32 under autocast).
        """
        _check_simplified(self, "scores")
        dtype, accum = self._dtypes()
        dtype = accum if exact else dtype
        a_HI = self.layer1_attention().astype(dtype)
        match_PHI = jnp.asarray(task_lib.match_tensor(self.k, self.num_heads), dtype)
        b_HI = self.scale * self.beta.astype(dtype)[:, None] ** 2 * a_HI
        return jnp.einsum("hi,phi->p", b_HI, match_PHI)

    def loss_collisions(self, y_BP: jax.Array) -> jax.Array:
        """Mean loss of collision vectors (fast path, notes §1): p_y = sum_pi softmax(S)_pi y_pi."""
        _check_simplified(self, "loss_collisions")
        accum = self._dtypes()[1]
        logits_BP = jnp.broadcast_to(self.scores().astype(accum), y_BP.shape)
        hit_BP = y_BP if self.dtype is None else y_BP.astype(accum)  # None: as given (no cast)
        return _loss_from_logits(logits_BP, hit_BP, self)

    def population_loss(self) -> jax.Array:
        """Exact population DP loss A (1 - softmax(S)_q), q = identity = permutation 0 (notes §3),
        in the accumulation dtype (the parameters' dtype unless autocast)."""
        _check_simplified(self, "population_loss")
        if self.loss != "dp":
            raise ValueError(
                "The population CE loss has no closed form (notes §3); estimate it "
                "with loss_collisions on a large sample_collisions batch instead."
            )
        return self.response_weight * (1.0 - jax.nn.softmax(self.scores(exact=True))[0])


def _check_simplified(model: RecallModel, what: str) -> None:
    if not model.simplified:
        raise ValueError(
            f"{what} is the closed form of the simplified model: it needs window, "
            f"exact_query and response_only all True and qk = 'beta' (got {model})."
        )


def matching_matrix(model: RecallModel, dtype: Any = None) -> jax.Array:
    """(|S|, |S|) I~_k: top-left block I_k - gamma 11^T, zeros on responses (notes §2.1)."""
    block_kk = np.eye(model.k) - model.gamma * np.ones((model.k, model.k))
    full = np.zeros((model.vocab_size, model.vocab_size))
    full[: model.k, : model.k] = block_kk
    return jnp.asarray(full, dtype)


def coupling_matrix(
    model: RecallModel, beta_H: ArrayLike, super_diagonal: bool = True
) -> jax.Array:
    """(D, D) Q^T K = c (B ⊗ I~_k) with B[g, g+1] = beta_{g+1}^2 (notes §2.1 erratum).

    `super_diagonal=False` gives the literal diag_{-1}: B[g+1, g] = beta_{g+1}^2, which cannot
    solve the task (notes §2.1).
    """
    beta_H = jnp.asarray(beta_H)
    couple_GG = jnp.diag(beta_H**2, 1 if super_diagonal else -1)
    return model.scale * jnp.kron(couple_GG, matching_matrix(model, beta_H.dtype))


def init_params(
    model: RecallModel,
    beta0: ArrayLike,
    w0: ArrayLike | None = None,
    qk0: ArrayLike | None = None,
) -> dict[str, jax.Array]:
    """Parameter dict at (w0, beta0); w0 defaults to zeros.

    For qk = "full" the matrix qk0 defaults to coupling_matrix(model, beta0), so that the full
    model starts exactly at the beta model with the same beta0.
    """
    beta_H = jnp.asarray(beta0)
    if not jnp.issubdtype(beta_H.dtype, jnp.floating):
        beta_H = beta_H.astype(jnp.float64 if jax.config.read("jax_enable_x64") else jnp.float32)
    shape = (model.num_heads, model.window_len)
    if beta_H.shape != (model.num_heads,):
        raise ValueError(f"beta0 has shape {beta_H.shape}: expected ({model.num_heads},).")
    w_HW = jnp.zeros(shape, beta_H.dtype) if w0 is None else jnp.asarray(w0, beta_H.dtype)
    if w_HW.shape != shape:
        raise ValueError(f"w0 has shape {w_HW.shape}: expected {shape}.")
    if model.qk == "beta":
        return {"w": w_HW, "beta": beta_H}
    qk_DD = coupling_matrix(model, beta_H) if qk0 is None else jnp.asarray(qk0, beta_H.dtype)
    if qk_DD.shape != (model.qk_dim, model.qk_dim):
        raise ValueError(f"qk0 has shape {qk_DD.shape}: expected {(model.qk_dim,) * 2}.")
    return {"w": w_HW, "qk": qk_DD}


def _apply(
    params: PyTree, model: RecallModel, *args: jax.Array, method: Callable[..., jax.Array]
) -> Any:
    return model.apply({"params": params}, *args, method=method)


@_jit
def layer1_attention(params: PyTree, model: RecallModel) -> jax.Array:
    """model.apply(..., method=RecallModel.layer1_attention), jitted."""
    return _apply(params, model, method=RecallModel.layer1_attention)


def _masked_softmax(logits: jax.Array, mask: ArrayLike, axis: int = -1) -> jax.Array:
    """Softmax over the entries where mask holds; an all-masked row gives zeros (no NaNs)."""
    peak = jnp.max(jnp.where(mask, logits, -jnp.inf), axis=axis, keepdims=True)
    peak = jax.lax.stop_gradient(jnp.where(jnp.isfinite(peak), peak, 0.0))
    exp = jnp.where(mask, jnp.exp(jnp.where(mask, logits - peak, 0.0)), 0.0)
    total = jnp.sum(exp, axis=axis, keepdims=True)
    return exp / jnp.where(total > 0, total, 1.0)


def _layer1(
    w_HW: jax.Array, onehot_BLV: jax.Array, positions_P: NDArray, model: RecallModel
) -> jax.Array:
    """R^h at the given positions, (B, H, P, |S|): Eq. (9a) / notes §2.1 layer 1.

    window: logits w^h_{i-1} on offsets i = 1..k (others masked, offset 0 included);
    windowless: w^h_d on causal offsets d = 0..g. Rows without a valid offset give R = 0.
    The softmax runs in the accumulation dtype, the mixing in onehot_BLV's (computation) dtype.
    """
    dtype = onehot_BLV.dtype
    w_HW = w_HW.astype(precision.accum_dtype(dtype))
    if model.window:
        offsets_W = np.arange(1, model.k + 1)
        source_PW = positions_P[:, None] - offsets_W[None, :]
        attention_HPW = _masked_softmax(w_HW[:, None, :], (source_PW >= 0)[None]).astype(dtype)
        window_BPWV = onehot_BLV[:, np.clip(source_PW, 0, None)]
        return jnp.einsum("hpw,bpwv->bhpv", attention_HPW, window_BPWV)
    offsets_PL = positions_P[:, None] - np.arange(model.seq_len)[None, :]
    logits_HPL = w_HW[:, np.clip(offsets_PL, 0, None)]
    attention_HPL = _masked_softmax(logits_HPL, (offsets_PL >= 0)[None]).astype(dtype)
    return jnp.einsum("hpl,blv->bhpv", attention_HPL, onehot_BLV)


def _logits_and_keys(
    params: PyTree, tokens_BL: jax.Array, model: RecallModel, dtype: Any
) -> tuple[jax.Array, NDArray]:
    """(layer-2 logits s~_BP of the last row, key positions P), in `dtype`: Eqs. (9a-b) / §2.1
    layer 2."""
    length, num_heads = model.seq_len, model.num_heads
    assert num_heads is not None  # RecallModel.__post_init__ turns None into k
    onehot_BLV = jax.nn.one_hot(tokens_BL, model.vocab_size, dtype=dtype)
    if model.response_only:
        keys_P = task_lib.response_positions(model.k)  # (A3)
    else:
        keys_P = np.arange(length)  # causal: row l-1 sees all
    need_query = not model.exact_query
    positions_P = np.append(keys_P, length - 1) if need_query else keys_P
    heads_BHPV = _layer1(params["w"], onehot_BLV, positions_P, model)
    num_keys = keys_P.shape[0]
    key_heads_BHPV = heads_BHPV[:, :, :num_keys]
    key_skip_BPV = onehot_BLV[:, keys_P]
    if model.exact_query:  # (A2): query block g
        query_BGV = onehot_BLV[:, length - 1 - np.arange(num_heads + 1)]  # = e_{x_{l-1-g}}
    else:  # [X, R^1, ..., R^H] at l-1
        query_BGV = jnp.concatenate(
            [onehot_BLV[:, length - 1 : length], heads_BHPV[:, :, -1]], axis=1
        )
    if model.qk == "beta":  # Eq. (9b), notes §2.1 erratum
        matched_BGV = query_BGV[:, :num_heads] @ matching_matrix(model, dtype)
        overlap_BHP = jnp.einsum("bhv,bhpv->bhp", matched_BGV, key_heads_BHPV)
        logits_BP = model.scale * jnp.einsum(
            "h,bhp->bp", params["beta"].astype(dtype) ** 2, overlap_BHP
        )
    else:  # R_{l-1} Q^T K R_t^T, §2.1
        batch = tokens_BL.shape[0]
        query_BD = query_BGV.reshape(batch, -1)
        key_BGPV = jnp.concatenate([key_skip_BPV[:, None], key_heads_BHPV], axis=1)
        key_BPD = jnp.moveaxis(key_BGPV, 1, 2).reshape(batch, num_keys, -1)
        logits_BP = jnp.einsum("bd,de,bpe->bp", query_BD, params["qk"].astype(dtype), key_BPD)
    return logits_BP, keys_P


@_jit
def forward(params: PyTree, tokens_BL: jax.Array, model: RecallModel) -> jax.Array:
    """p_BV = model.apply(params, tokens), jitted (Eqs. 9c-d; §2.1 p = X^T s)."""
    return _apply(params, model, tokens_BL, method=RecallModel.__call__)


def _loss_from_logits(logits_BP: jax.Array, hit_BP: jax.Array, model: RecallModel) -> jax.Array:
    """Mean DP 1 - p_y or CE -log p_y with p_y = sum_t softmax(logits)_t hit_t (Eq. 9e, §3)."""
    if model.loss == "dp":
        p_y_B = jnp.sum(jax.nn.softmax(logits_BP, axis=-1) * hit_BP, axis=-1)
        return jnp.mean(1.0 - p_y_B)
    log_p_y_B = jax.nn.logsumexp(logits_BP, axis=-1, b=hit_BP) - jax.nn.logsumexp(
        logits_BP, axis=-1
    )
    return -jnp.mean(log_p_y_B)


@_jit
def loss_tokens(
    params: PyTree, tokens_BL: jax.Array, target_B: jax.Array, model: RecallModel
) -> jax.Array:
    """Mean token-level loss (DP or CE per model.loss) of a batch, Eq. (9e) / notes §3."""
    return _apply(params, model, tokens_BL, target_B, method=RecallModel.loss_tokens)


@_jit
def scores(params: PyTree, model: RecallModel) -> jax.Array:
    """(k!,) S(pi) of notes §3 (RecallModel.scores), jitted."""
    _check_simplified(model, "scores")  # before Flax checks the shapes of params
    return _apply(params, model, method=RecallModel.scores)


@_jit
def loss_collisions(params: PyTree, y_BP: jax.Array, model: RecallModel) -> jax.Array:
    """Mean loss of collision vectors (fast path, notes §1), jitted."""
    _check_simplified(model, "loss_collisions")
    return _apply(params, model, y_BP, method=RecallModel.loss_collisions)


@_jit
def population_loss(params: PyTree, model: RecallModel) -> jax.Array:
    """Exact population DP loss A (1 - softmax(S)_q) (notes §3, RecallModel.population_loss)."""
    _check_simplified(model, "population_loss")
    return _apply(params, model, method=RecallModel.population_loss)


def from_config(cfg: ConfigDict) -> RecallModel:
    """The model of a config at precision.of(train.dtype, model.dtype); with model.dtype = ""
    the computation runs in the parameters' own dtype (dtype None)."""
    fields = dict(cfg.model)
    prec = precision.of(cfg.train.dtype, fields.pop("dtype"))
    return RecallModel(
        k=cfg.task.k,
        num_responses=cfg.task.num_responses,
        **fields,
        dtype=prec.dtype if cfg.model.dtype else None,
        param_dtype=prec.param_dtype,
    )
