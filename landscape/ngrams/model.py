"""Transformers for in-context n-grams (notes/ngrams.md §3): one `flax.linen` Module, `NgramModel`.

kind = "simplified" (the simplified disentangled transformer of the theory, §3.2), "transformer"
(attention-only, one-hot or learned embeddings, optional MLP, §3.3) or "disentangled" (Def. 2.2).
Each maps tokens x_BT to next-token probabilities probs_BS at the last position; the module-level
functions are `model.apply` with the matching method. Parameter trees, orientation and
initialisation: docs/design/ngrams.md; precision: docs/design/precision.md.
"""

# Shape suffixes (x_BT has shape (B, T)):
#   B  sequences in a batch
#   T  positions of a sequence (its length)
#   J  key positions
#   S  states (the vocabulary)
#   D  residual-stream width
#   E  a head's width
#   F  the residual-stream width again (the second index of a D x D bilinear form)
#   H  attention heads
#   X  the stacked [input, heads] stream of the disentangled model
#   L  layers

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, cast

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from landscape.engine import precision
from landscape.typing import ArrayLike, PyTree

KINDS = ("simplified", "transformer", "disentangled")
EMBEDDINGS = ("one_hot", "learned")
READOUT_INITS = ("random", "zero")
_DEFAULT_READOUT = {"transformer": "random", "disentangled": "zero"}
_FLOATS = ("float16", "bfloat16", "float32", "float64")


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _is_shape(value: object) -> bool:
    return isinstance(value, tuple) and all(_is_int(v) for v in value)


def _float_dtype(field: str, value: Any, allow_none: bool) -> np.dtype | None:
    """value as a jnp.dtype (None or "" -> None where allowed); one sentence if not a float."""
    if allow_none and (value is None or (isinstance(value, str) and value == "")):
        return None
    try:
        dtype = jnp.dtype(value)
    except TypeError:
        dtype = None
    if dtype is None or dtype.name not in _FLOATS:
        raise ValueError(
            f"{field} = {value!r}: must be a floating dtype, one of {_FLOATS}"
            + (" (or None: the parameters' dtype)." if allow_none else ".")
        )
    return dtype


def _cast(dtype, *arrays):
    """arrays in the computation dtype (dtype None: unchanged; a no-op when already in it)."""
    if dtype is None:
        return arrays
    return tuple(jnp.asarray(a, dtype) for a in arrays)


def _softmax(logits: jax.Array, axis: int = -1) -> jax.Array:
    """Softmax in precision.accum_dtype (float32 for half logits, else the logits' dtype)."""
    return jax.nn.softmax(logits.astype(precision.accum_dtype(logits.dtype)), axis=axis)


def causal_softmax(logits_HTT: jax.Array) -> jax.Array:
    """sigma(X)[i, j] = exp X_ij / sum_{k <= i} exp X_ik for j <= i, else 0 (notes §1); in
    float32 for half logits (autocast)."""
    T = logits_HTT.shape[-1]
    logits_HTT = logits_HTT.astype(precision.accum_dtype(logits_HTT.dtype))
    masked = jnp.where(np.tri(T, dtype=bool), logits_HTT, -jnp.inf)
    return jax.nn.softmax(masked, axis=-1)


def _normal(std: float) -> nn.initializers.Initializer:
    """N(0, std^2) initialiser (std = 0: zeros, no draw)."""
    return nn.initializers.normal(std) if std else nn.initializers.zeros


# --------------------------------------------------------------------------------------------------
# Submodules of the general kinds
# --------------------------------------------------------------------------------------------------


class Embedding(nn.Module):
    """Learned embeddings r0[t] = W_te[x_t] + W_pe[t]: params "token" (S, d), "position" (T, d),
    both N(0, 1)/sqrt(d)."""

    num_states: int
    seq_len: int
    width: int
    dtype: Any = None
    param_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x_BT: jax.Array) -> jax.Array:
        std = 1.0 / math.sqrt(self.width)
        token = self.param("token", _normal(std), (self.num_states, self.width), self.param_dtype)
        position = self.param(
            "position", _normal(std), (self.seq_len, self.width), self.param_dtype
        )
        token, position = _cast(self.dtype, token, position)
        return token[x_BT] + position


def _mu_linear(x: jax.Array, W: jax.Array, b: jax.Array) -> jax.Array:
    """x W sqrt(out/in) + b sqrt(out) (muP-style map, W stored (in, out))."""
    d_in, d_out = W.shape
    return x @ (W * math.sqrt(d_out / d_in)) + b * math.sqrt(d_out)


class MLP(nn.Module):
    """MLP(x) = lin_out(relu(lin_in(x))) on the last axis (widths [d, d, d], Fig 7): params
    "W_in" (d, d) ~ N(0, 1)/sqrt(d), "b_in" (d,) = 0, "W_out" (d, d) = 0, "b_out" (d,) = 0."""

    width: int
    dtype: Any = None
    param_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        d, pd = self.width, self.param_dtype
        W_in = self.param("W_in", _normal(1.0 / math.sqrt(d)), (d, d), pd)
        b_in = self.param("b_in", nn.initializers.zeros, (d,), pd)
        W_out = self.param("W_out", nn.initializers.zeros, (d, d), pd)
        b_out = self.param("b_out", nn.initializers.zeros, (d,), pd)
        W_in, b_in, W_out, b_out = _cast(self.dtype, W_in, b_in, W_out, b_out)
        hidden = jax.nn.relu(_mu_linear(x, W_in, b_in))
        return _mu_linear(hidden, W_out, b_out)


class AttentionLayer(nn.Module):
    """One layer of the general kinds: params "Q", "K" (h, d_in, d_h), "V" (h, d_in, d_in), all
    init_scale N(0, 1)/sqrt(d_in), and the submodule "mlp" (use_mlp). Heads SA_h(H) =
    sigma(H Q_h K_h^T H^T) H V_h; disentangled concatenates [H, SA_1, ..., SA_h], the transformer
    adds H + [MLP](sum_h SA_h)."""

    heads: int
    d_in: int
    d_h: int
    init_scale: float = 1.0
    use_mlp: bool = False
    disentangled: bool = False
    dtype: Any = None
    param_dtype: Any = jnp.float32

    def setup(self) -> None:
        h, d_in, d_h, pd = self.heads, self.d_in, self.d_h, self.param_dtype
        init = _normal(self.init_scale / math.sqrt(d_in))
        self.Q = self.param("Q", init, (h, d_in, d_h), pd)
        self.K = self.param("K", init, (h, d_in, d_h), pd)
        self.V = self.param("V", init, (h, d_in, d_in), pd)
        if self.use_mlp:
            self.mlp = MLP(d_in, dtype=self.dtype, param_dtype=pd)

    def scores(self, H_BTD: jax.Array) -> jax.Array:
        """(B, h, T, T) H Q_h K_h^T H^T (query row t, key column j)."""
        Q, K = _cast(self.dtype, self.Q, self.K)
        if self.d_h >= self.d_in:  # bilinear form first: fewer flops
            bilinear_HDF = jnp.einsum("hde,hfe->hdf", Q, K)
            return jnp.einsum("btd,hdf,bjf->bhtj", H_BTD, bilinear_HDF, H_BTD)
        queries_BHTE = jnp.einsum("btd,hde->bhte", H_BTD, Q)
        keys_BHTE = jnp.einsum("btd,hde->bhte", H_BTD, K)
        return jnp.einsum("bhte,bhje->bhtj", queries_BHTE, keys_BHTE)

    def attention(self, H_BTD: jax.Array) -> jax.Array:
        """(B, h, T, T) the layer's causal attention weights (float32 for half H)."""
        return causal_softmax(self.scores(H_BTD))

    def _combine(self, H: jax.Array, heads: jax.Array) -> jax.Array:
        """Next residual from H (..., d) and the head outputs (..., h, d)."""
        if self.disentangled:  # r_l = [r_{l-1}, SA_1, ..., SA_h]
            return jnp.concatenate([H, heads.reshape(*heads.shape[:-2], -1)], axis=-1)
        delta = jnp.sum(heads, axis=-2)  # transformer: heads summed, residual
        if self.use_mlp:
            delta = self.mlp(delta)
        return H + delta

    def __call__(self, H_BTD: jax.Array) -> jax.Array:
        """(B, T, d_out): every position."""
        (V,) = _cast(self.dtype, self.V)
        att_BHTJ = self.attention(H_BTD).astype(H_BTD.dtype)
        values_BHJE = jnp.einsum("bjd,hde->bhje", H_BTD, V)  # (H V_h first: faster on CPU)
        return self._combine(H_BTD, jnp.einsum("bhtj,bhje->bthe", att_BHTJ, values_BHJE))

    def last(self, H_BTD: jax.Array) -> jax.Array:
        """(B, d_out): the last query row only (every key is in its causal past)."""
        Q, K, V = _cast(self.dtype, self.Q, self.K, self.V)
        query_BHE = jnp.einsum("bd,hde->bhe", H_BTD[:, -1], Q)
        keys_BHTE = jnp.einsum("btd,hde->bhte", H_BTD, K)
        att_BHT = _softmax(jnp.einsum("bhe,bhte->bht", query_BHE, keys_BHTE)).astype(H_BTD.dtype)
        mixed_BHD = jnp.einsum("bht,btd->bhd", att_BHT, H_BTD)
        return self._combine(H_BTD[:, -1], jnp.einsum("bhd,hde->bhe", mixed_BHD, V))


class Layers(nn.Module):
    """The stack of AttentionLayers, named "0", "1", ... (layer_heads[l] heads, input width
    widths[l]; d_h = head_dim or d_in)."""

    layer_heads: tuple
    widths: tuple
    head_dim: int | None = None
    init_scale: float = 1.0
    use_mlp: bool = False
    disentangled: bool = False
    dtype: Any = None
    param_dtype: Any = jnp.float32

    def setup(self) -> None:
        self.blocks = [
            AttentionLayer(
                heads,
                self.widths[index],
                self.widths[index] if self.head_dim is None else self.head_dim,
                self.init_scale,
                self.use_mlp,
                self.disentangled,
                self.dtype,
                self.param_dtype,
                name=str(index),
            )
            for index, heads in enumerate(self.layer_heads)
        ]

    def __call__(self, H_BTD: jax.Array, all_positions: bool = False) -> jax.Array:
        """(B, d_L) r_L[T], or (B, T, d_L) with all_positions (the last layer then attends from
        every query row too)."""
        for index, layer in enumerate(self.blocks):
            if index == len(self.blocks) - 1 and not all_positions:
                return layer.last(H_BTD)
            H_BTD = layer(H_BTD)
        return H_BTD

    def first_attention(self, H_BTD: jax.Array) -> jax.Array:
        return self.blocks[0].attention(H_BTD)

    def attention_maps(self, H_BTD: jax.Array) -> list[jax.Array]:
        maps = []
        for layer in self.blocks:
            maps.append(layer.attention(H_BTD))
            H_BTD = layer(H_BTD)
        return maps


# --------------------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------------------


class NgramModel(nn.Module):
    """The n-gram model (module docstring); its fields are static switches (hashable, so a static
    jit argument).

    kind          "simplified" (§3.2), "transformer" (§3.3, Figs 4 and 7) or "disentangled"
                  (Def. 2.2, §3.1).
    num_states    S (one-hot tokens).
    seq_len       T; A1 (simplified) is T x T and the position embeddings have T rows, so sequences
                  must have exactly T tokens.
    num_heads     m, first-layer heads (theory: n - 1; more are allowed, footnote 2). For the
                  general kinds it is layer_heads[0] (set from layer_heads when that is given).
    head_dim      d_h of the query/key maps. None means: simplified (m + 1) S (the code's
                  dratio = 1); transformer d = S + T; disentangled d_{l-1} per layer (stays None).
    learn_value   simplified: V1 is learned (the code's default); False fixes V1 = I.
    init_scale    multiplies the N(0, 1)/sqrt(d) initialisation of the query/key (and, for the
                  general kinds, value) matrices.
    embedding     transformer: "one_hot" ([e_x; e_t], d = S + T) or "learned" (W_te[x] + W_pe[t]).
    mlp           transformer: per-layer MLP on Delta before the residual add (Fig 7).
    readout_init  general kinds: "random" | "zero"; None means "random" (transformer) or "zero"
                  (disentangled). Must be None for "simplified" (it has no readout).
    layer_heads   general kinds: heads per layer (any depth >= 1); None means (num_heads, 1).
                  Must be None for "simplified" (its heads are (m, 1) by construction).
    dtype         the computation dtype; None (or "") = the dtype of the parameters passed in.
                  float16 / bfloat16: autocast (module docstring).
    param_dtype   the dtype `init` draws the parameters in (float32 default).
    """

    kind: str = "simplified"
    num_states: int = 5
    seq_len: int = 32
    num_heads: int = 2
    head_dim: int | None = None
    learn_value: bool = True
    init_scale: float = 1.0
    embedding: str = "one_hot"
    mlp: bool = False
    readout_init: str | None = None
    layer_heads: tuple[int, ...] | None = None
    dtype: Any = None
    param_dtype: Any = jnp.float32

    def __post_init__(self):
        self._validate()
        super().__post_init__()

    def _validate(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind = {self.kind!r}: must be one of {KINDS}.")
        for field, low in (("num_states", 2), ("seq_len", 2), ("num_heads", 1)):
            value = getattr(self, field)
            if not _is_int(value) or value < low:
                raise ValueError(f"{field} = {value!r}: must be an integer >= {low}.")
        general = self.kind != "simplified"
        if self.embedding not in EMBEDDINGS:
            raise ValueError(f"embedding = {self.embedding!r}: must be one of {EMBEDDINGS}.")
        if self.embedding == "learned" and self.kind != "transformer":
            raise ValueError(
                f"embedding = 'learned': only kind = 'transformer' has learned "
                f"embeddings (kind = {self.kind!r} is one-hot)."
            )
        if not isinstance(self.mlp, (bool, np.bool_)):
            raise ValueError(f"mlp = {self.mlp!r}: must be a bool.")
        if self.mlp and self.kind != "transformer":
            raise ValueError(
                f"mlp = True: only kind = 'transformer' has MLP layers (got kind = {self.kind!r})."
            )
        if not self.learn_value and general:
            raise ValueError(
                f"learn_value = False: only kind = 'simplified' can fix its value "
                f"matrix (got kind = {self.kind!r})."
            )
        if isinstance(self.init_scale, bool) or not isinstance(
            self.init_scale, (int, float, np.number)
        ):
            raise ValueError(f"init_scale = {self.init_scale!r}: must be a real number.")
        if not general:
            for field in ("readout_init", "layer_heads"):
                if getattr(self, field) is not None:
                    raise ValueError(
                        f"{field} = {getattr(self, field)!r}: must be None for "
                        "kind = 'simplified' (it applies to the general kinds)."
                    )
        else:
            readout_init = (
                _DEFAULT_READOUT[self.kind] if self.readout_init is None else self.readout_init
            )
            if readout_init not in READOUT_INITS:
                raise ValueError(
                    f"readout_init = {self.readout_init!r}: must be one of "
                    f"{READOUT_INITS} (or None for the kind's default)."
                )
            object.__setattr__(self, "readout_init", readout_init)
            heads = (self.num_heads, 1) if self.layer_heads is None else self.layer_heads
            if (
                not isinstance(heads, (tuple, list))
                or not heads
                or not all(_is_int(h) and h >= 1 for h in heads)
            ):
                raise ValueError(
                    f"layer_heads = {self.layer_heads!r}: must be a non-empty tuple "
                    "of integers >= 1 (or None for (num_heads, 1))."
                )
            object.__setattr__(self, "layer_heads", tuple(int(h) for h in heads))
            object.__setattr__(self, "num_heads", self.layer_heads[0])
        if self.head_dim is None and self.kind != "disentangled":
            object.__setattr__(self, "head_dim", self.width)
        if self.head_dim is not None and (not _is_int(self.head_dim) or self.head_dim < 1):
            raise ValueError(
                f"head_dim = {self.head_dim!r}: must be an integer >= 1 "
                "(or None for the kind's default)."
            )
        object.__setattr__(self, "dtype", _float_dtype("dtype", self.dtype, True))
        object.__setattr__(
            self, "param_dtype", _float_dtype("param_dtype", self.param_dtype, False)
        )

    @property
    def width(self) -> int:
        """The width of the residual stream the output reads: simplified (m + 1) S (the width of
        r1: skip block + one block per head), transformer d = S + T, disentangled d_L."""
        if self.kind == "simplified":
            return (self.num_heads + 1) * self.num_states
        return self.residual_widths[-1]

    @property
    def residual_widths(self) -> tuple[int, ...]:
        """(d_0, ..., d_L): residual widths before / after each layer (simplified: (S, (m+1) S))."""
        d0 = self.num_states if self.kind == "simplified" else self.num_states + self.seq_len
        if self.kind == "simplified":
            return (d0, (self.num_heads + 1) * d0)
        widths = [d0]
        assert self.layer_heads is not None  # the general kinds': set by _validate
        for heads in self.layer_heads:
            widths.append(widths[-1] * (1 + heads) if self.kind == "disentangled" else d0)
        return tuple(widths)

    # ----------------------------------------------------------------------------- parameters

    def setup(self) -> None:
        S, T, pd = self.num_states, self.seq_len, self.param_dtype
        if self.kind == "simplified":
            m = self.num_heads
            self.A1 = self.param("A1", nn.initializers.zeros, (m, T, T), pd)
            if self.learn_value:
                self.V1 = self.param("V1", _normal(1.0 / math.sqrt(S)), (m, S, S), pd)
            init = _normal(self.init_scale / math.sqrt(self.width))
            self.Q2 = self.param("Q2", init, (self.head_dim, self.width), pd)
            self.K2 = self.param("K2", init, (self.head_dim, self.width), pd)
            return
        widths = self.residual_widths
        assert self.layer_heads is not None  # the general kinds': set by _validate
        if self.embedding == "learned":
            self.embed = Embedding(S, T, widths[0], self.dtype, pd)
        self.layers = Layers(
            self.layer_heads,
            widths,
            self.head_dim,
            self.init_scale,
            self.mlp,
            self.kind == "disentangled",
            self.dtype,
            pd,
        )
        std = 0.0 if self.readout_init == "zero" else 1.0 / math.sqrt(widths[-1])
        self.readout = self.param("readout", _normal(std), (widths[-1], S), pd)

    def _compute_dtype(self):
        """dtype, or (None) the dtype of the parameters passed in."""
        if self.dtype is not None:
            return self.dtype
        return (self.A1 if self.kind == "simplified" else self.readout).dtype

    def _check_tokens(self, x_BT: ArrayLike) -> None:
        if np.shape(x_BT)[-1] != self.seq_len:
            what = "its A1 is T x T" if self.kind == "simplified" else "it embeds T positions"
            raise ValueError(
                f"x has {np.shape(x_BT)[-1]} positions: the model was built for "
                f"seq_len = {self.seq_len} ({what})."
            )

    # ----------------------------------------------------------------------------- forward

    def __call__(self, x_BT: jax.Array) -> jax.Array:
        """(B, S) p_theta(x^T): Eq. 9 for "simplified" (sum_i a2(i, T) e_{x_i}), else
        softmax(r_L[T] readout); float32 when the computation is half."""
        self._check_tokens(x_BT)
        if self.kind != "simplified":
            (readout,) = _cast(self.dtype, self.readout)
            return _softmax(self.residual(x_BT) @ readout)
        a2_BT = self.layer2_attention(x_BT)
        onehot_BTS = jax.nn.one_hot(x_BT, self.num_states, dtype=a2_BT.dtype)
        return jnp.einsum("bt,bts->bs", a2_BT, onehot_BTS)

    def r0(self, x_BT: jax.Array) -> jax.Array:
        """(B, T, d_0) r0: one-hot tokens (simplified), [e_x; e_t] (one-hot general kinds) or
        W_te[x] + W_pe[t] (learned)."""
        dtype = self._compute_dtype()
        tokens_BTS = jax.nn.one_hot(x_BT, self.num_states, dtype=dtype)
        if self.kind == "simplified":
            return tokens_BTS
        if self.embedding == "learned":
            return self.embed(x_BT)
        T = self.seq_len
        positions_BTT = jnp.broadcast_to(jnp.eye(T, dtype=dtype), (*np.shape(x_BT), T))
        return jnp.concatenate([tokens_BTS, positions_BTT], axis=-1)

    def residual(self, x_BT: jax.Array, all_positions: bool = False) -> jax.Array:
        """(B, d_L) r_L[T] of a general model; (B, T, d_L) every position with all_positions."""
        if self.kind == "simplified":
            raise ValueError(
                "model.kind = 'simplified': use simplified_residual (its layer 2 reads r0)."
            )
        self._check_tokens(x_BT)
        return self.layers(self.r0(x_BT), all_positions)

    def simplified_residual(self, x_BT: jax.Array) -> jax.Array:
        """(B, T, (m+1) S) r1 = [r0, r1^(1), ..., r1^(m)] of the simplified model (§3.2)."""
        dtype = self._compute_dtype()
        S = self.num_states
        r0_BTS = jax.nn.one_hot(x_BT, S, dtype=dtype)
        att_HTJ = self.layer1_attention().astype(dtype)
        mixed_BHTS = jnp.einsum("htj,bjs->bhts", att_HTJ, r0_BTS)  # sum_j a_(j,t) r0[j]
        if self.learn_value:
            (V1,) = _cast(self.dtype, self.V1)
            mixed_BHTS = jnp.einsum("bhts,hus->bhtu", mixed_BHTS, V1)  # r V1^T
        B, H, T, _ = mixed_BHTS.shape
        heads_BTX = jnp.moveaxis(mixed_BHTS, 1, 2).reshape(B, T, H * S)
        return jnp.concatenate([r0_BTS, heads_BTX], axis=-1)

    def layer2_attention(self, x_BT: jax.Array) -> jax.Array:
        """(B, T) a2(i, T): the simplified second layer's attention of the last position over
        keys i (Eq. 9)."""
        r1_BTX = self.simplified_residual(x_BT)
        Q2, K2 = _cast(self.dtype, self.Q2, self.K2)
        query_BD = r1_BTX[:, -1] @ Q2.T
        keys_BTD = r1_BTX @ K2.T
        return _softmax(jnp.einsum("btd,bd->bt", keys_BTD, query_BD))

    def layer1_attention(self, x_BT: jax.Array | None = None) -> jax.Array:
        """simplified: (m, T, T) sigma(A1^h), input-independent (x_BT is ignored); general:
        (B, h_1, T, T) sigma(r0 Q_h K_h^T r0^T)."""
        if self.kind == "simplified":
            (A1,) = _cast(self.dtype, self.A1)
            return causal_softmax(A1)
        # the general kinds need the tokens (layer1_attention below checks for None)
        return self.layers.first_attention(self.r0(cast(jax.Array, x_BT)))

    def attention_maps(self, x_BT: jax.Array) -> list[jax.Array]:
        """[(B, h_l, T, T)] every layer's attention of a general model."""
        return self.layers.attention_maps(self.r0(x_BT))


# --------------------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------------------


def dummy_tokens(model: NgramModel, batch: int = 1) -> jax.Array:
    """(batch, T) zeros: the input `model.init` needs (the values do not matter)."""
    return jnp.zeros((batch, model.seq_len), jnp.int32)


@functools.partial(jax.jit, static_argnames=("model",))
def _init(key: jax.Array, model: NgramModel) -> dict:
    return model.init(key, dummy_tokens(model))["params"]


def init_params(key: jax.Array, model: NgramModel, dtype: Any = None) -> dict:
    """model.init(key, tokens)["params"], jitted (the forward pass init traces is dropped); dtype
    overrides model.param_dtype."""
    if dtype is not None:
        model = model.clone(param_dtype=dtype)
    return _init(key, model)


@functools.lru_cache(maxsize=64)
def _param_shapes(model: NgramModel) -> dict:
    abstract = jax.eval_shape(
        lambda key: model.init(key, dummy_tokens(model))["params"], jax.random.key(0)
    )
    return jax.tree.map(lambda leaf: tuple(leaf.shape), abstract)


def param_shapes(model: NgramModel) -> dict:
    """The parameter tree of the module docstring, with shape tuples as leaves."""
    return jax.tree.map(lambda s: s, _param_shapes(model), is_leaf=_is_shape)


def num_params(model: NgramModel) -> int:
    """S = 5, T = 32, m = 2, d_h = 15 (simplified): 2 32^2 + 2 25 + 2 225 = 2548 (notes §3.2).
    Transformer, one-hot, S = 3, T = 32 (d = 35), heads (2, 1): 3 heads x 3 x 35^2 + 35 x 3 =
    11130."""
    leaves = jax.tree_util.tree_leaves(param_shapes(model), is_leaf=_is_shape)
    return sum(math.prod(shape) for shape in leaves)


# --------------------------------------------------------------------------------------------------
# (params, model) functions: model.apply with a method
# --------------------------------------------------------------------------------------------------


def _apply(
    params: PyTree, model: NgramModel, *args: Any, method: Callable[..., Any] | None = None
) -> Any:
    """model.apply({"params": params}, *args, method=method): the output alone (no mutable
    collections, so never an (output, state) pair)."""
    return model.apply({"params": params}, *args, method=method)


def probs(params: PyTree, x_BT: jax.Array, model: NgramModel) -> jax.Array:
    """(B, S) p_theta(x^T) = model.apply({"params": params}, x_BT)."""
    return _apply(params, model, x_BT)


def embed(params: PyTree, x_BT: jax.Array, model: NgramModel) -> jax.Array:
    """(B, T, d_0) r0 (NgramModel.r0)."""
    return _apply(params, model, x_BT, method=NgramModel.r0)


def residual_stream(
    params: PyTree, x_BT: jax.Array, model: NgramModel, all_positions: bool = False
) -> jax.Array:
    """(B, d_L) r_L[T] of a general model; (B, T, d_L) every position with all_positions (the last
    layer then also attends from every query row; its row T equals the default's output)."""
    if model.kind == "simplified":
        raise ValueError(
            "model.kind = 'simplified': use simplified_residual (its layer 2 reads r0)."
        )
    return _apply(params, model, x_BT, all_positions, method=NgramModel.residual)


def simplified_residual(params: PyTree, x_BT: jax.Array, model: NgramModel) -> jax.Array:
    """(B, T, (m+1) S) r1 of the simplified model (§3.2)."""
    return _apply(params, model, x_BT, method=NgramModel.simplified_residual)


def layer2_attention(params: PyTree, x_BT: jax.Array, model: NgramModel) -> jax.Array:
    """(B, T) a2(i, T) of the simplified model (Eq. 9)."""
    return _apply(params, model, x_BT, method=NgramModel.layer2_attention)


def layer1_attention(params: PyTree, model: NgramModel, x_BT: jax.Array | None = None) -> jax.Array:
    """First-layer attention (row = query position, column = key position; Figs 3 and 4).

    simplified: (m, T, T) sigma(A1^h), input-independent (x_BT is ignored).
    transformer / disentangled: (B, h_1, T, T) sigma(r0 Q_h K_h^T r0^T) for the sequences x_BT.
    """
    if model.kind == "simplified":
        return _apply(params, model, method=NgramModel.layer1_attention)
    if x_BT is None:
        raise ValueError(
            f"x_BT = None: kind = {model.kind!r} has input-dependent attention; "
            "pass the (B, T) sequences."
        )
    model._check_tokens(x_BT)
    return _apply(params, model, x_BT, method=NgramModel.layer1_attention)


def attention_maps(params: PyTree, x_BT: jax.Array, model: NgramModel) -> list[jax.Array]:
    """[(B, h_l, T, T)] every layer's attention of a general model for the sequences x_BT."""
    if model.kind == "simplified":
        raise ValueError("model.kind = 'simplified': use layer1_attention and layer2_attention.")
    model._check_tokens(x_BT)
    return _apply(params, model, x_BT, method=NgramModel.attention_maps)


# --------------------------------------------------------------------------------------------------
# Attention diagnostics
# --------------------------------------------------------------------------------------------------


def head_offset_attention(att: ArrayLike, offsets: int | Sequence[int] = (1, 2, 3)) -> jax.Array:
    """(m, len(offsets)) mean attention weight of each head on relative offset -o, averaged over
    the query rows t >= o (0-based rows and keys: entries att[t, t - o]), and over the batch when
    att is (B, m, T, T) (notes §7 item 5: heat maps as testable numbers)."""
    att = jnp.asarray(att)
    if att.ndim not in (3, 4) or att.shape[-1] != att.shape[-2]:
        raise ValueError(f"att has shape {att.shape}: must be (m, T, T) or (B, m, T, T).")
    T = att.shape[-1]
    chosen: tuple[Any, ...] = tuple(offsets) if isinstance(offsets, (tuple, list)) else (offsets,)
    if not chosen or not all(_is_int(o) and 1 <= o < T for o in chosen):
        raise ValueError(f"offsets = {chosen!r}: must be integers in 1..T-1 = 1..{T - 1}.")
    per_offset = [
        jnp.mean(jnp.diagonal(att, offset=-o, axis1=-2, axis2=-1), axis=-1) for o in chosen
    ]
    summary = jnp.stack(per_offset, axis=-1)
    return jnp.mean(summary, axis=0) if att.ndim == 4 else summary
