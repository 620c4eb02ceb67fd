"""Theory and GPT-2 transformers for Markov chains (notes/markov.md §3.1, §3.2, §3.5, §6.8).

Both are one `flax.linen` Module, `MarkovModel`, used through `model.init` / `model.apply`: the
same `Block` (causal self-attention + MLP), different embeddings, LayerNorms and heads. Matrices
act on column vectors from the left (PyTorch's `nn.Linear.weight`), and parameter names are the
Hessian block names. Orientation, parameter trees and the causal attention:
docs/design/markov.md; precision: docs/design/precision.md.
"""

# Shape suffixes (q_BNHM has shape (B, N, H, M)):
#   B  sequences in a batch
#   N  positions of a sequence (its length)
#   I  key positions (scores_BHNI)
#   D  model width d
#   H  attention heads
#   M  a head's width m
#   S  chain states (the vocabulary)
#   K  tiles of the tiled attention (N padded to K T)
#   T  positions in a query tile
#   U  positions in a key tile
#   P  lower-triangular (query tile, key tile) pairs
#   W  the values' width with their column of ones (m + 1, padded)
#   O  (w_O: the output projection W_O, a parameter name, not a shape)

from __future__ import annotations

import functools
import math
from typing import Any, cast

import flax.linen as nn
import jax
import jax.numpy as jnp
from ml_collections import ConfigDict

from landscape import _checks
from landscape.engine import precision as precision_lib
from landscape.markov import attention
from landscape.typing import PyTree

FAMILIES = ("theory", "gpt")
ACTIVATIONS = ("relu", "gelu")
INIT_STD = 0.02  # GPT-2 init, notes §3.2 (the §11.4 pilot uses it for both families)
LN_EPS = 1e-5  # PyTorch LayerNorm default, notes §3.2
_PROJECTIONS = ("W_O", "W_2")  # GPT-2 c_proj weights: std 0.02 / sqrt(2 layers)
_BIASES = ("b", "head_bias")
_GAINS = ("ln_1", "ln_2", "ln_f")
_DTYPES = ("float16", "bfloat16", "float32", "float64")


def _cast(dtype: Any, *arrays: jax.Array) -> tuple[jax.Array, ...]:
    """The arrays in the computation dtype (unchanged when dtype is None: no op is added)."""
    if dtype is None:
        return arrays
    return tuple(a.astype(dtype) for a in arrays)


def _accum(dtype: Any) -> Any:
    """Where autocast keeps float32 (softmax, LayerNorm, loss); None: the operands' dtype."""
    return None if dtype is None else precision_lib.accum_dtype(dtype)


def _init_std(name: str, num_layers: int) -> float:
    return INIT_STD / math.sqrt(2 * num_layers) if name in _PROJECTIONS else INIT_STD


def _initializer(name: str, num_layers: int) -> nn.initializers.Initializer:
    """GPT-2 init (notes §3.2): biases 0, LN gains 1, W_O and W_2 N(0, (0.02 / sqrt(2 L))^2),
    every other weight and embedding N(0, 0.02^2)."""
    if name in _BIASES:
        return nn.initializers.zeros
    if name in _GAINS:
        return nn.initializers.ones
    return nn.initializers.normal(_init_std(name, num_layers))


class Block(nn.Module):
    """One block, shared by both families: y = x + Attn(LN_1 x), z = y + W_2 act(W_1 LN_2 y)
    (notes §3.1; the LNs are the identity unless layer_norm, notes §3.2). Its parameters are
    W_Q, W_K, W_V, W_O, W_1, W_2 (+ ln_1, ln_2 gains with layer_norm)."""

    d: int
    num_heads: int
    mlp_width: int
    activation: str = "relu"
    layer_norm: bool = False
    num_layers: int = 1  # of the whole model: the projections' init std
    dtype: Any = None
    param_dtype: Any = jnp.float32

    def setup(self) -> None:
        d, r = self.d, self.mlp_width
        shapes: dict[str, tuple[int, ...]] = {
            "W_Q": (d, d),
            "W_K": (d, d),
            "W_V": (d, d),
            "W_O": (d, d),
            "W_1": (r, d),
            "W_2": (d, r),
        }
        if self.layer_norm:
            shapes.update(ln_1=(d,), ln_2=(d,))
        self.weights = {
            name: self.param(name, _initializer(name, self.num_layers), shape, self.param_dtype)
            for name, shape in shapes.items()
        }

    def _norm(self, x_BND: jax.Array, gain: str) -> jax.Array:
        """Gain-only LayerNorm in the accumulation dtype (float32 under autocast)."""
        if not self.layer_norm:
            return x_BND
        x_BND, gain_D = _cast(_accum(self.dtype), x_BND, self.weights[gain])
        return _layer_norm(x_BND, gain_D)

    def _heads(self, x_BND: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """(q, k, v) (B, N, H, m): W_Q x, W_K x, W_V x split into heads (head h: rows
        h m .. (h+1) m - 1)."""
        B, N, _ = x_BND.shape
        w = self.weights
        # One product with the stacked (3 d, d) weights: at d = 4-8 a CPU matmul costs about the
        # same whatever its size, so one instead of three (and one each for dx and dW backward).
        x_BND, qkv_3DD = _cast(self.dtype, x_BND, jnp.concatenate([w["W_Q"], w["W_K"], w["W_V"]]))
        qkv_BN3HM = (x_BND @ qkv_3DD.T).reshape(B, N, 3, self.num_heads, self.d // self.num_heads)
        return qkv_BN3HM[:, :, 0], qkv_BN3HM[:, :, 1], qkv_BN3HM[:, :, 2]

    def attention_matrix(self, x_BND: jax.Array) -> jax.Array:
        """(B, H, N, N) att_{n,i} of this block's input x (plots only; training uses
        `attention.causal_mix`)."""
        q_BNHM, k_BNHM, _ = _cast(_accum(self.dtype), *self._heads(self._norm(x_BND, "ln_1")))
        return attention.causal_softmax(q_BNHM, k_BNHM)

    def __call__(self, x_BND: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """(z, attention output W_O sum_i att_{n,i} W_V x_i, y)."""
        B, N, _ = x_BND.shape
        w = self.weights
        h_BND = self._norm(x_BND, "ln_1")
        q_BNHM, k_BNHM, v_BNHM = self._heads(h_BND)
        # softmax in the accumulation dtype, the mixed values back in the computation dtype
        mixed_BNHM = attention.causal_mix(*_cast(_accum(self.dtype), q_BNHM, k_BNHM, v_BNHM))
        mixed_BND, w_O = _cast(self.dtype, mixed_BNHM.reshape(B, N, self.d), w["W_O"])
        attended_BND = mixed_BND @ w_O.T
        y_BND = x_BND + attended_BND
        h_BND, w_1, w_2 = _cast(self.dtype, self._norm(y_BND, "ln_2"), w["W_1"], w["W_2"])
        z_BND = y_BND + _activation(h_BND @ w_1.T, self.activation) @ w_2.T
        return z_BND, attended_BND, y_BND


class MarkovModel(nn.Module):
    """Static switches (notes §3.1, §3.2, §12.1-12.3); hashable, so a static jit argument.

    family       "theory": no LN, reduced uni-embedding and sigmoid head for S = 2 (§3.1);
                 "gpt": wte/wpe, softmax head with bias, optional pre-LN (§3.2).
    num_states   S; the theory model with S > 2 is the (E, b) model of §6.8.
    num_heads    H; heads split d, m = d / H per head, softmax scale 1/sqrt(m) (§6.9).
    mlp_width    r; None means 4 d (Table 1).
    tied         head = token embedding (a = e, lm_head = wte); False adds "a" / "A" / "lm_head".
    layer_norm   gpt only: pre-LN blocks + final LN (GPT-2); False is 'Markov-Simple' (§3.2).
    dtype        computation dtype: None (the parameters'), float32, float64, or float16 /
                 bfloat16 for torch.autocast-style mixed precision (module docstring).
    param_dtype  dtype of the parameters `init` makes (float32 or float64).

    Methods (through `apply`): __call__ = log-probabilities (B, N, S), `logit_binary`,
    `attention_weights`, `attention_ratio`, `residual_stream`.
    """

    family: str = "theory"
    num_states: int = 2
    d: int = 4
    seq_len: int = 1024
    num_layers: int = 1
    num_heads: int = 1
    mlp_width: int | None = None
    tied: bool = True
    activation: str = "relu"
    layer_norm: bool = False
    dtype: Any = None
    param_dtype: Any = jnp.float32

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"family = {self.family!r}: must be one of {FAMILIES}.")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation = {self.activation!r}: must be one of {ACTIVATIONS}.")
        for field, low in (
            ("num_states", 2),
            ("d", 1),
            ("seq_len", 1),
            ("num_layers", 1),
            ("num_heads", 1),
        ):
            _checks.check_int(field, getattr(self, field), low)
        for field in ("tied", "layer_norm"):
            _checks.check_bool(field, getattr(self, field))
        if self.d % self.num_heads:
            raise ValueError(
                f"num_heads = {self.num_heads}: must divide d = {self.d} (heads "
                "split d, m = d / H, notes §3.2), in both families."
            )
        if self.mlp_width is None:
            object.__setattr__(self, "mlp_width", 4 * self.d)
        _checks.check_int("mlp_width", self.mlp_width, 1, "or None for 4 d")
        if self.family == "theory" and self.layer_norm:
            raise ValueError(
                "layer_norm = True: the theory model has no LayerNorm (notes §3.1); "
                "use family = 'gpt' for pre-LN blocks."
            )
        for field, allowed in (("dtype", _DTYPES), ("param_dtype", _DTYPES[2:])):
            value = getattr(self, field)
            if value is None and field == "dtype":
                continue
            try:
                name = jnp.dtype(value).name
            except TypeError:
                name = None
            if name not in allowed:
                raise ValueError(
                    f"{field} = {value!r}: must be one of {', '.join(allowed)}"
                    + (" or None" if field == "dtype" else "")
                    + "."
                )
            object.__setattr__(self, field, jnp.dtype(name))  # equal models hash equally
        super().__post_init__()

    @property
    def head_dim(self) -> int:
        """m = d / H."""
        return self.d // self.num_heads

    @property
    def reduced(self) -> bool:
        """The S = 2 theory model: uni-embedding e and scalar sigmoid head (notes §3.1)."""
        return self.family == "theory" and self.num_states == 2

    def setup(self) -> None:
        S, d, N = self.num_states, self.d, self.seq_len
        if self.reduced:
            shapes = {"b": (), "e": (d,), "pos": (N, d)} | ({} if self.tied else {"a": (d,)})
        elif self.family == "theory":
            shapes = {"b": (S,), "E": (S, d), "pos": (N, d)} | ({} if self.tied else {"A": (S, d)})
        else:
            shapes = {"wte": (S, d), "wpe": (N, d), "head_bias": (S,)}
            if self.layer_norm:
                shapes["ln_f"] = (d,)
            if not self.tied:
                shapes["lm_head"] = (S, d)
        self.weights = {
            name: self.param(name, _initializer(name, self.num_layers), shape, self.param_dtype)
            for name, shape in shapes.items()
        }
        assert self.mlp_width is not None  # __post_init__ turns None into 4 d
        self.block = [
            Block(
                d=d,
                num_heads=self.num_heads,
                mlp_width=self.mlp_width,
                activation=self.activation,
                layer_norm=self.layer_norm,
                num_layers=self.num_layers,
                dtype=self.dtype,
                param_dtype=self.param_dtype,
            )
            for _ in range(self.num_layers)
        ]

    def _embed(self, x_BN: jax.Array) -> jax.Array:
        """x_BND: x_n e + p_n (theory S = 2), E[x_n] + p_n (theory S > 2), wte[x_n] + wpe[n]
        (gpt); in the parameter dtype (autocast leaves embeddings alone)."""
        w, N = self.weights, x_BN.shape[1]
        if self.reduced:
            e_D = w["e"]
            return x_BN[..., None].astype(e_D.dtype) * e_D + w["pos"][:N]
        if self.family == "theory":
            return w["E"][x_BN] + w["pos"][:N]
        return w["wte"][x_BN] + w["wpe"][:N]

    def residual_stream(self, x_BN: jax.Array, num_blocks: int | None = None) -> jax.Array:
        """The residual stream (B, N, d) after the first `num_blocks` blocks (default: all)."""
        _check_tokens(x_BN, self)
        z_BND = self._embed(x_BN)
        for block in self.block[:num_blocks]:
            z_BND = block(z_BND)[0]
        return z_BND

    def _head(self, z_BND: jax.Array) -> jax.Array:
        """Logit (B, N) for the reduced theory model, logits (B, N, S) otherwise, in the
        accumulation dtype (a half-precision head product, then float32 for the loss)."""
        w = self.weights
        if self.reduced:
            head_D, bias = w["e"] if self.tied else w["a"], w["b"]
        elif self.family == "theory":
            head_D, bias = (w["E"] if self.tied else w["A"]).T, w["b"]
        else:
            if self.layer_norm:
                z_BND = _layer_norm(*_cast(_accum(self.dtype), z_BND, w["ln_f"]))
            head_D, bias = (w["wte"] if self.tied else w["lm_head"]).T, w["head_bias"]
        if self.dtype is None:
            return z_BND @ head_D + bias
        z_BND, head_D, bias = _cast(self.dtype, z_BND, head_D, bias)
        return (z_BND @ head_D + bias).astype(_accum(self.dtype))

    def __call__(self, x_BN: jax.Array) -> jax.Array:
        """(B, N, S) log P(x_{n+1} = s | x_1^n) at every position n (notes §3.1 Prediction).

        Reduced theory model: [log sigmoid(-logit), log sigmoid(logit)] = [log P(0), log P(1)].
        """
        return log_probs_of(self.logits(x_BN), self.reduced)

    def logits(self, x_BN: jax.Array) -> jax.Array:
        """The head's output before the log-softmax: (B, N) for the reduced theory model, else
        (B, N, S); `log_probs_of` turns it into `__call__`'s output (the Gauss-Newton split)."""
        return self._head(self.residual_stream(x_BN))

    def logit_binary(self, x_BN: jax.Array) -> jax.Array:
        """(B, N) logit_n = <a, z_n> + b (theory, notes §3.1); logit_1 - logit_0 for gpt (S = 2)."""
        if self.num_states != 2:
            raise ValueError(
                f"num_states = {self.num_states}: logit_binary needs a binary model "
                "(num_states = 2)."
            )
        out = self._head(self.residual_stream(x_BN))
        return out if self.reduced else out[..., 1] - out[..., 0]

    def attention_weights(self, x_BN: jax.Array, layer: int = 0) -> jax.Array:
        """(B, H, N, N) att_{n,i} of block `layer`, zero for i > n (notes §3.1; Fig. R2 of §8)."""
        _check_layer(layer, self)
        return self.block[layer].attention_matrix(self.residual_stream(x_BN, num_blocks=layer))

    def attention_ratio(self, x_BN: jax.Array, layer: int = 0) -> jax.Array:
        """(B, N) ||W_O sum_i att_{n,i} W_V x_i|| / ||y_n|| in block `layer` (notes §6.6, §8
        Fig. 3: about 0.01 at the learned (0.2, 0.3) solution)."""
        _check_layer(layer, self)
        _, attended_BND, y_BND = self.block[layer](self.residual_stream(x_BN, num_blocks=layer))
        attended_BND, y_BND = _cast(_accum(self.dtype), attended_BND, y_BND)
        return jnp.linalg.norm(attended_BND, axis=-1) / jnp.linalg.norm(y_BND, axis=-1)


def _check_tokens(x_BN: jax.Array, model: MarkovModel) -> None:
    if x_BN.ndim != 2:
        raise ValueError(f"x_BN has shape {x_BN.shape}: expected (batch, length).")
    if x_BN.shape[1] > model.seq_len:
        raise ValueError(f"x_BN has length {x_BN.shape[1]}: at most seq_len = {model.seq_len}.")


def _check_layer(layer: int, model: MarkovModel) -> None:
    if not 0 <= layer < model.num_layers:
        raise ValueError(
            f"layer = {layer!r}: must be in 0..{model.num_layers - 1} "
            f"(num_layers = {model.num_layers})."
        )


# ----------------------------------------------------------------------------- parameters


@functools.lru_cache(maxsize=64)
def _abstract_params(model: MarkovModel) -> PyTree:
    """model.init's parameter tree as ShapeDtypeStructs (traced, nothing computed)."""
    x_BN = jax.ShapeDtypeStruct((1, model.seq_len), jnp.int32)
    return jax.eval_shape(model.init, jax.random.key(0), x_BN)["params"]


def param_shapes(model: MarkovModel) -> dict:
    """Nested dict of shape tuples, the layout of the module docstring (leaves are tuples), as
    `model.init` makes it."""
    return jax.tree.map(lambda s: tuple(s.shape), _abstract_params(model))


def _is_shape(node: Any) -> bool:
    return isinstance(node, tuple) and all(isinstance(n, int) for n in node)


def num_params(model: MarkovModel) -> int:
    """Number of scalars; gpt, d = 4, N = 1024, 1 layer: 4310 tied, 4318 untied (notes §3.2)."""
    leaves = jax.tree_util.tree_leaves(param_shapes(model), is_leaf=_is_shape)
    return sum(math.prod(shape) for shape in leaves)


@functools.partial(jax.jit, static_argnames=("model", "dtype"))
def init_params(key: jax.Array, model: MarkovModel, dtype: Any = jnp.float32) -> dict:
    """The training init: `model.init`'s parameters with its law (GPT-2 init, notes §3.2, for both
    families: weights and embeddings N(0, 0.02^2), W_O and W_2 N(0, (0.02 / sqrt(2 layers))^2),
    biases 0, LN gains 1), drawn as one normal vector of all weights cut into leaves in
    `ravel_pytree` order: one cheap compile per model (a draw per leaf, as `model.init` does,
    compiles for seconds), and a seed gives the same weights as before the Flax rewrite.
    """
    paths_shapes, treedef = jax.tree_util.tree_flatten_with_path(
        param_shapes(model), is_leaf=_is_shape
    )
    names = [path[-1].key for path, _ in paths_shapes]
    drawn = [name not in _BIASES + _GAINS for name in names]
    total = sum(
        math.prod(shape) for (_, shape), draw in zip(paths_shapes, drawn, strict=True) if draw
    )
    normal = jax.random.normal(key, (total,), dtype)
    leaves, offset = [], 0
    for name, draw, (_, shape) in zip(names, drawn, paths_shapes, strict=True):
        if not draw:
            leaves.append((jnp.zeros if name in _BIASES else jnp.ones)(shape, dtype))
            continue
        size = math.prod(shape)
        leaves.append(
            _init_std(name, model.num_layers) * normal[offset : offset + size].reshape(shape)
        )
        offset += size
    return jax.tree_util.tree_unflatten(treedef, leaves)


# ----------------------------------------------------------------------------- kernels


def _mean_last(x_BND: jax.Array) -> jax.Array:
    """Mean over the last axis, keepdims (`attention.reduce_last`)."""
    return attention.reduce_last(x_BND) / x_BND.shape[-1]


def log_probs_of(logits: jax.Array, reduced: bool) -> jax.Array:
    """(B, N, S) log-probabilities from `MarkovModel.logits`: [log sigmoid(-l), log sigmoid(l)]
    for the reduced model's single logit l, the log-softmax over S otherwise."""
    if reduced:
        return jnp.stack([jax.nn.log_sigmoid(-logits), jax.nn.log_sigmoid(logits)], axis=-1)
    return _log_softmax_last(logits)


def _log_softmax_last(logits_BNS: jax.Array) -> jax.Array:
    """jax.nn.log_softmax over a short last axis (S states), with `attention.reduce_last`."""
    shifted_BNS = logits_BNS - jax.lax.stop_gradient(attention.reduce_last(logits_BNS, jnp.maximum))
    return shifted_BNS - jnp.log(attention.reduce_last(jnp.exp(shifted_BNS)))


@jax.custom_vjp
def _layer_norm(x_BND: jax.Array, gain_D: jax.Array) -> jax.Array:
    """Gain-only LayerNorm, eps 1e-5, biased variance (PyTorch, notes §3.2)."""
    return _layer_norm_fwd(x_BND, gain_D)[0]


def _layer_norm_fwd(
    x_BND: jax.Array, gain_D: jax.Array
) -> tuple[jax.Array, tuple[jax.Array, jax.Array, jax.Array]]:
    centred_BND = x_BND - _mean_last(x_BND)
    inv_std_BN1 = jax.lax.rsqrt(_mean_last(centred_BND * centred_BND) + LN_EPS)
    normed_BND = centred_BND * inv_std_BN1
    return normed_BND * gain_D, (normed_BND, inv_std_BN1, gain_D)


def _layer_norm_bwd(
    saved: tuple[jax.Array, jax.Array, jax.Array], dout_BND: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """dx = (g - mean(g) - x_hat mean(g x_hat)) / std with g = dout * gain (x_hat: normed x)."""
    normed_BND, inv_std_BN1, gain_D = saved
    dnormed_BND = dout_BND * gain_D
    dx_BND = inv_std_BN1 * (
        dnormed_BND - _mean_last(dnormed_BND) - normed_BND * _mean_last(dnormed_BND * normed_BND)
    )
    dgain_D = jnp.sum(dout_BND * normed_BND, axis=tuple(range(dout_BND.ndim - 1)))
    return dx_BND, dgain_D


_layer_norm.defvjp(_layer_norm_fwd, _layer_norm_bwd)


def _activation(h: jax.Array, activation: str) -> jax.Array:
    if activation == "relu":
        return jax.nn.relu(h)
    return jax.nn.gelu(h, approximate=False)  # PyTorch nn.GELU() is the exact erf form


# ----------------------------------------------------------------------------- functional API
# model.apply on a params dict, jitted with the model static: what the experiments and tests call.

_jit = functools.partial(jax.jit, static_argnames="model")


@_jit
def log_probs(params: PyTree, x_BN: jax.Array, model: MarkovModel) -> jax.Array:
    """(B, N, S) log-probabilities: model.apply({"params": params}, x_BN)."""
    return cast(jax.Array, model.apply({"params": params}, x_BN))


@_jit
def logit_binary(params: PyTree, x_BN: jax.Array, model: MarkovModel) -> jax.Array:
    """(B, N) binary logit (MarkovModel.logit_binary)."""
    return cast(jax.Array, model.apply({"params": params}, x_BN, method=MarkovModel.logit_binary))


@functools.partial(jax.jit, static_argnames=("model", "layer", "method"))
def _of_block(
    params: PyTree, x_BN: jax.Array, model: MarkovModel, layer: int, method: Any
) -> jax.Array:
    """`method`, a MarkovModel method of one block, at block `layer` (the model static)."""
    return cast(jax.Array, model.apply({"params": params}, x_BN, layer, method=method))


def attention_weights(
    params: PyTree, x_BN: jax.Array, model: MarkovModel, layer: int = 0
) -> jax.Array:
    """(B, H, N, N) att_{n,i} of block `layer` (MarkovModel.attention_weights)."""
    return _of_block(params, x_BN, model, layer, MarkovModel.attention_weights)


def attention_ratio(
    params: PyTree, x_BN: jax.Array, model: MarkovModel, layer: int = 0
) -> jax.Array:
    """(B, N) attention-output / residual norm ratio (MarkovModel.attention_ratio)."""
    return _of_block(params, x_BN, model, layer, MarkovModel.attention_ratio)


def from_config(cfg: ConfigDict) -> MarkovModel:
    """The Flax module of cfg: param_dtype = train.dtype, dtype = model.dtype (or the same)."""
    fields = dict(cfg.model)
    fields["mlp_width"] = fields["mlp_width"] or None
    prec = precision_lib.of(cfg.train.dtype, fields.pop("dtype"))
    return MarkovModel(
        num_states=cfg.chain.num_states, dtype=prec.dtype, param_dtype=prec.param_dtype, **fields
    )
