"""Transformers for in-context n-grams (notes/ngrams.md §3).

Every model maps tokens x_BT (ints in 0..S-1, exactly T positions) to next-token probabilities
probs_BS at the last position (the experiments train on position T only, notes §2.1). Parameters
are plain nested dicts (lists for the layers) whose "/"-joined key paths name Hessian blocks and
gradient-norm blocks (`landscape.point.param_names`): "A1", "layers/0/Q", "layers/1/mlp/W_in", ...
Heads are stacked on a leading axis, so one block holds all heads of one matrix of one layer, and
"layers/0" selects everything of layer 1 (layers are 0-based in names, 1-based in the notes).

kind = "simplified" (the simplified disentangled transformer of §3.2, the model of the theory and
of Figs 1, 3, 5, 6), with m first-layer heads, one-hot tokens (d = S) and d_h = head_dim:
  {"A1": (m, T, T), ["V1": (m, S, S) if learn_value], "Q2": (d_h, (m+1) S), "K2": (d_h, (m+1) S)}
  r1 = [r0, sigma(A1^h) r0 V1^h^T ...] (heads concatenated, block 0 = skip),
  p(x^T) = sum_i a2(i, T) e_{x_i},  a2(., T) = softmax_i <K2 r1[i], Q2 r1[T]>   (Eq. 9, no softmax
  on the output: p is a convex combination of one-hot past tokens).
  Init (authors' Simpleformer, §3.2): A1 = 0 (uniform causal heads), V1 ~ N(0, 1/S),
  Q2, K2 ~ init_scale N(0, 1) / sqrt((m+1) S).

The two general kinds share one layout. Every matrix multiplies from the RIGHT (row vectors, the
authors' code convention); layer l (0-based) has h_l = layer_heads[l] heads, input width d_in = d_l
and head width d_h (head_dim, default below):
  {["embed": {"token": (S, d), "position": (T, d)}]    (transformer with embedding = "learned")
   "layers": [{"Q": (h_l, d_in, d_h), "K": (h_l, d_in, d_h), "V": (h_l, d_in, d_in),
               ["mlp": {"W_in": (d, d), "b_in": (d,), "W_out": (d, d), "b_out": (d,)}]}  (mlp)
              for each layer l],
   "readout": (d_L, S)}
  head h of a layer:  SA_h(H) = sigma(H Q_h K_h^T H^T) H V_h   (sigma = causal softmax, notes §1;
                      no 1/sqrt(d_h) on the scores, no LayerNorm).
  output:             p = softmax(r_L[T] readout).

kind = "transformer" (attention-only transformer of §3.3 / Fig 4, MLP variant of Fig 7), d = S + T,
  d_h = head_dim (default d), heads layer_heads (default (num_heads, 1)):
  r0[t] = [e_{x_t}; e^T_t] (embedding = "one_hot", concatenated, no parameters) or
  r0[t] = W_te[x_t] + W_pe[t] (embedding = "learned", summed; W_te = embed/token,
  W_pe = embed/position);
  per layer  Delta = sum_h SA_h(H),  [Delta <- MLP(Delta) if mlp],  H <- H + Delta  (residual in
  every layer); readout = W of the notes, (d, S).
  MLP (mlp = True, widths [d, d, d], ReLU, muP-style linear maps):
    MLP(x) = lin_out(relu(lin_in(x))),  lin(x) = x W sqrt(out/in) + b sqrt(out)  (W: (in, out)).
  Init: Q, K, V ~ init_scale N(0, 1)/sqrt(d); W_te, W_pe ~ N(0, 1)/sqrt(d); readout ~
  N(0, 1)/sqrt(d) (readout_init = "random", the default) or 0 ("zero": initial loss exactly
  log S); W_in ~ N(0, 1)/sqrt(d), W_out = 0, biases 0, so with mlp every Delta is 0 at init and
  p = softmax(r0[T] W). Every parameter block is drawn with its own key (the authors' shared
  MLP key is not copied).

kind = "disentangled" (general disentangled transformer, Def. 2.2 / §3.1; CatFormer-like model):
  r0 = [one-hot token; one-hot position] (d_0 = S + T), r_l = [r_{l-1}, SA_1(r_{l-1}), ...,
  SA_h(r_{l-1})] (concatenated, d_l = (1 + h_l) d_{l-1}); d_h = head_dim, or d_{l-1} per layer when
  head_dim is None (the default). In Def. 2.2's notation the stored blocks are the TRANSPOSES:
    Q = Q_def^T, K = K_def^T (Q_def, K_def in R^{d_h x d_{l-1}}), V = V_def^T, readout = U^T,
  so SA(r) = sigma(r Q_def^T K_def r^T) r V_def^T and p = softmax(U r_L[T]).
  Init: Q, K, V ~ init_scale N(0, 1)/sqrt(d_{l-1}); readout = 0 (readout_init = "zero", the
  default: initial loss exactly log S) or N(0, 1)/sqrt(d_L) ("random").

The last layer only needs the last query row: `probs` computes layer L's attention for position T
only (all earlier layers need every position); `residual_stream(..., all_positions=True)` gives the
full r_L for checks.

Diagnostics: layer1_attention (Fig 3 / Fig 4 heat maps), attention_maps (every layer),
head_offset_attention (mean weight on offsets -1, -2, -3: heat maps as numbers, notes §7 item 5).
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

KINDS = ("simplified", "transformer", "disentangled")
EMBEDDINGS = ("one_hot", "learned")
READOUT_INITS = ("random", "zero")
_DEFAULT_READOUT = {"transformer": "random", "disentangled": "zero"}


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _is_shape(value) -> bool:
    return isinstance(value, tuple) and all(_is_int(v) for v in value)


@dataclasses.dataclass(frozen=True)
class NgramModel:
    """Static switches; hashable, so a static jit argument.

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

    def __post_init__(self):
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
            raise ValueError(f"embedding = 'learned': only kind = 'transformer' has learned "
                             f"embeddings (kind = {self.kind!r} is one-hot).")
        if not isinstance(self.mlp, (bool, np.bool_)):
            raise ValueError(f"mlp = {self.mlp!r}: must be a bool.")
        if self.mlp and self.kind != "transformer":
            raise ValueError(f"mlp = True: only kind = 'transformer' has MLP layers "
                             f"(got kind = {self.kind!r}).")
        if not self.learn_value and general:
            raise ValueError(f"learn_value = False: only kind = 'simplified' can fix its value "
                             f"matrix (got kind = {self.kind!r}).")
        if isinstance(self.init_scale, bool) or not isinstance(self.init_scale, (int, float,
                                                                                  np.number)):
            raise ValueError(f"init_scale = {self.init_scale!r}: must be a real number.")
        if not general:
            for field in ("readout_init", "layer_heads"):
                if getattr(self, field) is not None:
                    raise ValueError(f"{field} = {getattr(self, field)!r}: must be None for "
                                     "kind = 'simplified' (it applies to the general kinds).")
        else:
            readout_init = (_DEFAULT_READOUT[self.kind] if self.readout_init is None
                            else self.readout_init)
            if readout_init not in READOUT_INITS:
                raise ValueError(f"readout_init = {self.readout_init!r}: must be one of "
                                 f"{READOUT_INITS} (or None for the kind's default).")
            object.__setattr__(self, "readout_init", readout_init)
            heads = (self.num_heads, 1) if self.layer_heads is None else self.layer_heads
            if (not isinstance(heads, (tuple, list)) or not heads
                    or not all(_is_int(h) and h >= 1 for h in heads)):
                raise ValueError(f"layer_heads = {self.layer_heads!r}: must be a non-empty tuple "
                                 "of integers >= 1 (or None for (num_heads, 1)).")
            object.__setattr__(self, "layer_heads", tuple(int(h) for h in heads))
            object.__setattr__(self, "num_heads", self.layer_heads[0])
        if self.head_dim is None and self.kind != "disentangled":
            object.__setattr__(self, "head_dim", self.width)
        if self.head_dim is not None and (not _is_int(self.head_dim) or self.head_dim < 1):
            raise ValueError(f"head_dim = {self.head_dim!r}: must be an integer >= 1 "
                             "(or None for the kind's default).")

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
        for heads in self.layer_heads:
            widths.append(widths[-1] * (1 + heads) if self.kind == "disentangled" else d0)
        return tuple(widths)


# --------------------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------------------


def param_shapes(model: NgramModel) -> dict:
    """The parameter layout of the module docstring, with shape tuples as leaves."""
    S, T = model.num_states, model.seq_len
    if model.kind == "simplified":
        m = model.num_heads
        shapes = {"A1": (m, T, T)}
        if model.learn_value:
            shapes["V1"] = (m, S, S)
        shapes.update(Q2=(model.head_dim, model.width), K2=(model.head_dim, model.width))
        return shapes
    widths = model.residual_widths
    layers = []
    for layer, heads in enumerate(model.layer_heads):
        d_in = widths[layer]
        d_h = d_in if model.head_dim is None else model.head_dim
        shapes = {"Q": (heads, d_in, d_h), "K": (heads, d_in, d_h), "V": (heads, d_in, d_in)}
        if model.mlp:
            shapes["mlp"] = {"W_in": (d_in, d_in), "b_in": (d_in,),
                             "W_out": (d_in, d_in), "b_out": (d_in,)}
        layers.append(shapes)
    shapes = {"layers": layers, "readout": (widths[-1], S)}
    if model.embedding == "learned":
        shapes["embed"] = {"token": (S, widths[0]), "position": (T, widths[0])}
    return shapes


def num_params(model: NgramModel) -> int:
    """S = 5, T = 32, m = 2, d_h = 15 (simplified): 2 32^2 + 2 25 + 2 225 = 2548 (notes §3.2).
    Transformer, one-hot, S = 3, T = 32 (d = 35), heads (2, 1): 3 heads x 3 x 35^2 + 35 x 3 =
    11130."""
    leaves = jax.tree_util.tree_leaves(param_shapes(model), is_leaf=_is_shape)
    return sum(math.prod(shape) for shape in leaves)


def _init_simplified(key, model, dtype):
    key_v, key_q, key_k = jax.random.split(key, 3)
    shapes = param_shapes(model)
    params = {"A1": jnp.zeros(shapes["A1"], dtype)}
    if model.learn_value:
        params["V1"] = jax.random.normal(key_v, shapes["V1"], dtype) / math.sqrt(model.num_states)
    scale = model.init_scale / math.sqrt(model.width)
    params["Q2"] = scale * jax.random.normal(key_q, shapes["Q2"], dtype)
    params["K2"] = scale * jax.random.normal(key_k, shapes["K2"], dtype)
    return params


def _init_std(name: str, shape: tuple, model: NgramModel) -> float:
    """Standard deviation of one leaf of a general model (0 = zero-initialised; docstring)."""
    if name in ("Q", "K", "V"):                     # (h, d_in, .): init_scale N(0, 1)/sqrt(d_in)
        return model.init_scale / math.sqrt(shape[1])
    if name in ("token", "position", "W_in"):       # N(0, 1)/sqrt(d); W_in: N(0, 1)/sqrt(out)
        return 1.0 / math.sqrt(shape[1])
    if name == "readout":
        return 0.0 if model.readout_init == "zero" else 1.0 / math.sqrt(shape[0])
    return 0.0                                      # W_out (zero-initialised last MLP map), biases


def init_params(key: jax.Array, model: NgramModel, dtype=jnp.float32) -> dict:
    """The authors' initialisation (module docstring); one independent key per parameter block."""
    if model.kind == "simplified":
        return _init_simplified(key, model, dtype)
    return _init_general(key, model, dtype)


@functools.partial(jax.jit, static_argnames=("model", "dtype"))
def _init_general(key: jax.Array, model: NgramModel, dtype) -> dict:
    """Drawn block i (in key-path order) gets key i of split(key, #drawn blocks) and the first
    size_i entries of a normal draw of the largest block's size: independent keys per block, one
    vmapped threefry (one cheap compile per model; a draw per shape compiles ~3x longer)."""
    paths_shapes, treedef = jax.tree_util.tree_flatten_with_path(param_shapes(model),
                                                                 is_leaf=_is_shape)
    stds = [_init_std(path[-1].key, shape, model) for path, shape in paths_shapes]
    drawn = [i for i, std in enumerate(stds) if std]
    sizes = [math.prod(shape) for _, shape in paths_shapes]
    leaves = [jnp.zeros(shape, dtype) for _, shape in paths_shapes]
    if not drawn:                                   # init_scale = 0 and a zero readout
        return jax.tree_util.tree_unflatten(treedef, leaves)
    longest = max(sizes[i] for i in drawn)
    keys = jax.random.split(key, len(drawn))
    normals = jax.vmap(lambda k: jax.random.normal(k, (longest,), dtype))(keys)
    for row, i in enumerate(drawn):
        shape = paths_shapes[i][1]
        leaves[i] = stds[i] * normals[row, :sizes[i]].reshape(shape)
    return jax.tree_util.tree_unflatten(treedef, leaves)


# --------------------------------------------------------------------------------------------------
# Forward passes
# --------------------------------------------------------------------------------------------------


def causal_softmax(logits_HTT: jax.Array) -> jax.Array:
    """sigma(X)[i, j] = exp X_ij / sum_{k <= i} exp X_ik for j <= i, else 0 (notes §1)."""
    T = logits_HTT.shape[-1]
    masked = jnp.where(np.tri(T, dtype=bool), logits_HTT, -jnp.inf)
    return jax.nn.softmax(masked, axis=-1)


def _check_tokens(x_BT, model: NgramModel) -> None:
    if np.shape(x_BT)[-1] != model.seq_len:
        what = "its A1 is T x T" if model.kind == "simplified" else "it embeds T positions"
        raise ValueError(f"x has {np.shape(x_BT)[-1]} positions: the model was built for "
                         f"seq_len = {model.seq_len} ({what}).")


def _dtype(params, model: NgramModel):
    return params["A1" if model.kind == "simplified" else "readout"].dtype


def embed(params, x_BT: jax.Array, model: NgramModel) -> jax.Array:
    """(B, T, d_0) r0: one-hot tokens (simplified), [e_x; e_t] (one-hot general kinds) or
    W_te[x] + W_pe[t] (learned)."""
    dtype = _dtype(params, model)
    tokens_BTS = jax.nn.one_hot(x_BT, model.num_states, dtype=dtype)
    if model.kind == "simplified":
        return tokens_BTS
    if model.embedding == "learned":
        return params["embed"]["token"][x_BT] + params["embed"]["position"]
    T = model.seq_len
    positions_BTT = jnp.broadcast_to(jnp.eye(T, dtype=dtype), (*np.shape(x_BT), T))
    return jnp.concatenate([tokens_BTS, positions_BTT], axis=-1)


def _scores(H_BTD: jax.Array, layer: dict) -> jax.Array:
    """(B, h, T, T) H Q_h K_h^T H^T (query row t, key column j)."""
    d_in, d_h = layer["Q"].shape[-2:]
    if d_h >= d_in:                                  # bilinear form first: fewer flops
        bilinear_HDF = jnp.einsum("hde,hfe->hdf", layer["Q"], layer["K"])
        return jnp.einsum("btd,hdf,bjf->bhtj", H_BTD, bilinear_HDF, H_BTD)
    queries_BHTE = jnp.einsum("btd,hde->bhte", H_BTD, layer["Q"])
    keys_BHTE = jnp.einsum("btd,hde->bhte", H_BTD, layer["K"])
    return jnp.einsum("bhte,bhje->bhtj", queries_BHTE, keys_BHTE)


def _heads_all(H_BTD: jax.Array, layer: dict) -> jax.Array:
    """(B, T, h, d) SA_h(H) for every position: sigma(H Q_h K_h^T H^T) H V_h."""
    att_BHTJ = causal_softmax(_scores(H_BTD, layer))
    values_BHJE = jnp.einsum("bjd,hde->bhje", H_BTD, layer["V"])     # (H V_h first: faster on CPU)
    return jnp.einsum("bhtj,bhje->bthe", att_BHTJ, values_BHJE)


def _heads_last(H_BTD: jax.Array, layer: dict) -> jax.Array:
    """(B, h, d) SA_h(H)[T]: the last query row only (every key is in its causal past)."""
    query_BHE = jnp.einsum("bd,hde->bhe", H_BTD[:, -1], layer["Q"])
    keys_BHTE = jnp.einsum("btd,hde->bhte", H_BTD, layer["K"])
    att_BHT = jax.nn.softmax(jnp.einsum("bhe,bhte->bht", query_BHE, keys_BHTE), axis=-1)
    mixed_BHD = jnp.einsum("bht,btd->bhd", att_BHT, H_BTD)
    return jnp.einsum("bhd,hde->bhe", mixed_BHD, layer["V"])


def _mu_linear(x: jax.Array, W: jax.Array, b: jax.Array) -> jax.Array:
    """x W sqrt(out/in) + b sqrt(out) (muP-style map, W stored (in, out))."""
    d_in, d_out = W.shape
    return x @ (W * math.sqrt(d_out / d_in)) + b * math.sqrt(d_out)


def mlp_apply(mlp_params: dict, x: jax.Array) -> jax.Array:
    """MLP(x) = lin_out(relu(lin_in(x))) on the last axis (widths [d, d, d], Fig 7)."""
    hidden = jax.nn.relu(_mu_linear(x, mlp_params["W_in"], mlp_params["b_in"]))
    return _mu_linear(hidden, mlp_params["W_out"], mlp_params["b_out"])


def _combine(H: jax.Array, heads: jax.Array, layer: dict, model: NgramModel) -> jax.Array:
    """Next residual from H (..., d) and the head outputs (..., h, d)."""
    if model.kind == "disentangled":                 # r_l = [r_{l-1}, SA_1, ..., SA_h]
        return jnp.concatenate([H, heads.reshape(*heads.shape[:-2], -1)], axis=-1)
    delta = jnp.sum(heads, axis=-2)                  # transformer: heads summed, residual
    if "mlp" in layer:
        delta = mlp_apply(layer["mlp"], delta)
    return H + delta


def residual_stream(params, x_BT: jax.Array, model: NgramModel,
                    all_positions: bool = False) -> jax.Array:
    """(B, d_L) r_L[T] of a general model; (B, T, d_L) every position with all_positions (the last
    layer then also attends from every query row; its row T equals the default's output)."""
    if model.kind == "simplified":
        raise ValueError("model.kind = 'simplified': use simplified_residual "
                         "(its layer 2 reads r0).")
    _check_tokens(x_BT, model)
    H = embed(params, x_BT, model)
    num_layers = len(params["layers"])
    for index, layer in enumerate(params["layers"]):
        if index == num_layers - 1 and not all_positions:
            return _combine(H[:, -1], _heads_last(H, layer), layer, model)
        H = _combine(H, _heads_all(H, layer), layer, model)
    return H


def simplified_residual(params, x_BT: jax.Array, model: NgramModel) -> jax.Array:
    """(B, T, (m+1) S) r1 = [r0, r1^(1), ..., r1^(m)] of the simplified model (§3.2)."""
    S = model.num_states
    r0_BTS = jax.nn.one_hot(x_BT, S, dtype=params["A1"].dtype)
    att_HTJ = layer1_attention(params, model)
    mixed_BHTS = jnp.einsum("htj,bjs->bhts", att_HTJ, r0_BTS)        # sum_j a_(j,t) r0[j]
    if "V1" in params:
        mixed_BHTS = jnp.einsum("bhts,hus->bhtu", mixed_BHTS, params["V1"])   # V1 applied: r V1^T
    B, H, T, _ = mixed_BHTS.shape
    heads_BTX = jnp.moveaxis(mixed_BHTS, 1, 2).reshape(B, T, H * S)
    return jnp.concatenate([r0_BTS, heads_BTX], axis=-1)


def layer2_attention(params, x_BT: jax.Array, model: NgramModel) -> jax.Array:
    """(B, T) a2(i, T): the simplified second layer's attention of the last position over keys i
    (Eq. 9)."""
    r1_BTX = simplified_residual(params, x_BT, model)
    query_BD = r1_BTX[:, -1] @ params["Q2"].T
    keys_BTD = r1_BTX @ params["K2"].T
    return jax.nn.softmax(jnp.einsum("btd,bd->bt", keys_BTD, query_BD), axis=-1)


def probs(params, x_BT: jax.Array, model: NgramModel) -> jax.Array:
    """(B, S) p_theta(x^T): Eq. 9 for "simplified" (sum_i a2(i, T) e_{x_i}), else
    softmax(r_L[T] readout)."""
    _check_tokens(x_BT, model)
    if model.kind != "simplified":
        return jax.nn.softmax(residual_stream(params, x_BT, model) @ params["readout"], axis=-1)
    a2_BT = layer2_attention(params, x_BT, model)
    onehot_BTS = jax.nn.one_hot(x_BT, model.num_states, dtype=a2_BT.dtype)
    return jnp.einsum("bt,bts->bs", a2_BT, onehot_BTS)


# --------------------------------------------------------------------------------------------------
# Attention diagnostics
# --------------------------------------------------------------------------------------------------


def layer1_attention(params, model: NgramModel, x_BT: jax.Array | None = None) -> jax.Array:
    """First-layer attention (row = query position, column = key position; Figs 3 and 4).

    simplified: (m, T, T) sigma(A1^h), input-independent (x_BT is ignored).
    transformer / disentangled: (B, h_1, T, T) sigma(r0 Q_h K_h^T r0^T) for the sequences x_BT.
    """
    if model.kind == "simplified":
        return causal_softmax(params["A1"])
    if x_BT is None:
        raise ValueError(f"x_BT = None: kind = {model.kind!r} has input-dependent attention; "
                         "pass the (B, T) sequences.")
    _check_tokens(x_BT, model)
    return causal_softmax(_scores(embed(params, x_BT, model), params["layers"][0]))


def attention_maps(params, x_BT: jax.Array, model: NgramModel) -> list[jax.Array]:
    """[(B, h_l, T, T)] every layer's attention of a general model for the sequences x_BT."""
    if model.kind == "simplified":
        raise ValueError("model.kind = 'simplified': use layer1_attention and layer2_attention.")
    _check_tokens(x_BT, model)
    H = embed(params, x_BT, model)
    maps = []
    for layer in params["layers"]:
        maps.append(causal_softmax(_scores(H, layer)))
        H = _combine(H, _heads_all(H, layer), layer, model)
    return maps


def head_offset_attention(att, offsets=(1, 2, 3)) -> jax.Array:
    """(m, len(offsets)) mean attention weight of each head on relative offset -o, averaged over
    the query rows t >= o (0-based rows and keys: entries att[t, t - o]), and over the batch when
    att is (B, m, T, T) (notes §7 item 5: heat maps as testable numbers)."""
    att = jnp.asarray(att)
    if att.ndim not in (3, 4) or att.shape[-1] != att.shape[-2]:
        raise ValueError(f"att has shape {att.shape}: must be (m, T, T) or (B, m, T, T).")
    T = att.shape[-1]
    offsets = tuple(offsets) if isinstance(offsets, (tuple, list)) else (offsets,)
    if not offsets or not all(_is_int(o) and 1 <= o < T for o in offsets):
        raise ValueError(f"offsets = {offsets!r}: must be integers in 1..T-1 = 1..{T - 1}.")
    per_offset = [jnp.mean(jnp.diagonal(att, offset=-o, axis1=-2, axis2=-1), axis=-1)
                  for o in offsets]
    summary = jnp.stack(per_offset, axis=-1)
    return jnp.mean(summary, axis=0) if att.ndim == 4 else summary
