"""The Y/Z model of Tian et al. (notes/scan_snap.md §3.2) and its long-sequence limit (§3.5).

`YZModel` (flax.linen) has two M x M parameters, "Y" (decoder) and "Z" (attention logits, row =
query); `TextTransformer` is the WikiText model (Figs. 7, 10; notes §3.7). The parameter tree:
docs/design/scan_snap.md; precision: docs/design/precision.md.
"""

# Shape suffixes (x_BTD has shape (B, T, D)):
#   B  sequences in a batch
#   T  positions of a sequence (the context)
#   M  the Y/Z model's tokens (Y and Z are M x M)
#   K  the task's sequence classes (one per last token)
#   D  the WikiText model's embedding width
#   V  the WikiText model's vocabulary
#   N  positions whose next token is predicted, flattened over the batch (WikiText decoder)

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from landscape import _checks
from landscape.engine import precision
from landscape.point import Point
from landscape.scan_snap.task import Population, SequenceClasses, attention_weights
from landscape.typing import PyTree

INITS = ("zeros", "uniform")


def uniform_bound(num_tokens: int) -> jax.Array:
    """The half-width 1/sqrt(M) of the "uniform" initialisation's entries, M the vocabulary."""
    return 1.0 / jnp.sqrt(num_tokens)


def init_params(
    key: jax.Array, num_tokens: int, init: str = "zeros", dtype: jax.typing.DTypeLike = jnp.float32
) -> dict[str, jax.Array]:
    """The inner params dict {"Y", "Z"} of `YZModel`: Y(0) = Z(0) = 0, or both i.i.d.
    U(-1/sqrt(M), 1/sqrt(M)) (PyTorch nn.Linear default, §3.2) from `jax.random.split(key)`.

    Training draws its initial weights here rather than from `YZModel.init`, whose per-parameter
    keys Flax derives from the names: the same distribution, but this keeps the draws (and so
    every recorded number of the uniform-init configs, Fig. 6) what they were.
    """
    shape = (num_tokens, num_tokens)
    if init == "zeros":
        return {"Y": jnp.zeros(shape, dtype), "Z": jnp.zeros(shape, dtype)}
    if init == "uniform":
        bound = uniform_bound(num_tokens)
        y_key, z_key = jax.random.split(key)
        return {
            "Y": jax.random.uniform(y_key, shape, dtype, -bound, bound),
            "Z": jax.random.uniform(z_key, shape, dtype, -bound, bound),
        }
    raise ValueError(f"init = {init!r}: must be one of {INITS}.")


def cross_entropy(logits_BM: jax.Array, label_B: jax.Array) -> jax.Array:
    """Mean next-token cross-entropy with the softmax over all M ids (= -J of Eq. 2)."""
    log_probs = jax.nn.log_softmax(logits_BM, axis=-1)
    return -jnp.take_along_axis(log_probs, label_B[:, None], axis=1).mean()


class YZModel(nn.Module):
    """Eq. (1) in the Y/Z form of §3.2, with the authors' switches.

    num_tokens       M: Y and Z are (M, M).
    attend_to_query  the query attends to itself too (default: masked).
    residual         add e_{x_T} to X^T b before the normalisation (the authors'
                     residual=true, §3.6).
    normalize        l2-normalise X^T b (LN of the paper).
    initializer      "zeros" or "uniform": what `init` draws (see `init_params` for training).
    dtype            computation dtype (None = param_dtype); half = autocast, see the module doc.
    param_dtype      dtype of Y and Z.
    """

    num_tokens: int
    attend_to_query: bool = False
    residual: bool = False
    normalize: bool = True
    initializer: str = "zeros"
    dtype: Any = None
    param_dtype: Any = jnp.float32

    def setup(self) -> None:
        if self.initializer not in INITS:
            raise ValueError(f"initializer = {self.initializer!r}: must be one of {INITS}.")
        shape = (self.num_tokens, self.num_tokens)
        init: Callable[..., jax.Array]
        if self.initializer == "zeros":
            init = nn.initializers.zeros
        else:
            init = _uniform(uniform_bound(self.num_tokens))
        self.Y = self.param("Y", init, shape, self.param_dtype)
        self.Z = self.param("Z", init, shape, self.param_dtype)

    @property
    def compute_dtype(self) -> Any:
        """`dtype`, or with dtype None the parameters' own dtype (no cast, as Flax infers it)."""
        return jnp.dtype(self.dtype) if self.dtype is not None else self.Y.dtype

    @property
    def accum_dtype(self) -> Any:
        return precision.accum_dtype(self.compute_dtype)

    def __call__(self, context_BT: jax.Array, query_B: jax.Array) -> tuple[jax.Array, jax.Array]:
        """(logits_BM, attention_BT) for a batch of sequences; the query does not attend to
        itself unless `attend_to_query`. Logits are in accum_dtype (float32 under autocast)."""
        Y, Z = self.Y, self.Z
        dtype, accum = self.compute_dtype, self.accum_dtype
        B, M = query_B.shape[0], Y.shape[0]
        if self.attend_to_query:
            context_BT = jnp.concatenate([context_BT, query_B[:, None]], axis=1)
        z_BT = jnp.take_along_axis(Z[query_B].astype(dtype), context_BT, axis=1)
        b_BT = jax.nn.softmax(z_BT.astype(accum), axis=-1)
        # c = X^T b as a scatter-add (a one-hot einsum is ~50x slower on CPU, notes §3.2).
        c_BM = jnp.zeros((B, M), accum).at[jnp.arange(B)[:, None], context_BT].add(b_BT)
        if self.residual:
            c_BM = c_BM.at[jnp.arange(B), query_B].add(1.0)
        f_BM = c_BM / jnp.linalg.norm(c_BM, axis=-1, keepdims=True) if self.normalize else c_BM
        logits_BM = f_BM.astype(dtype) @ Y.astype(dtype)
        return logits_BM.astype(accum), b_BT

    def loss(self, context_BT: jax.Array, query_B: jax.Array, label_B: jax.Array) -> jax.Array:
        """Mean cross-entropy of a batch (in accum_dtype)."""
        logits_BM, _ = self(context_BT, query_B)
        return cross_entropy(logits_BM, label_B)

    def population_features(self, task: SequenceClasses | Population) -> jax.Array:
        """f_n (K, M) = LN(c_n), the T -> infinity limit of LN(X^T b) (Eqs. 5-6)."""
        c_KM = attention_weights(self.Z.astype(self.accum_dtype), task)
        if self.residual:
            c_KM = c_KM + jax.nn.one_hot(task.last_token, task.num_tokens, dtype=c_KM.dtype)
        return c_KM / jnp.linalg.norm(c_KM, axis=-1, keepdims=True)

    def population_logits(self, task: SequenceClasses | Population) -> jax.Array:
        """(K, M) logits Y^T f_n of each class at T -> infinity (§3.5), in accum_dtype."""
        return self.population_features(task) @ self.Y.astype(self.accum_dtype)

    def population_loss(self, task: SequenceClasses | Population) -> jax.Array:
        """-J_pop(Y, Z) = -(1/K) sum_n log softmax(Y^T f_n)_n (§3.5): classes uniform,
        T -> infinity. Exact: computed in accum_dtype (the param dtype unless autocast)."""
        return cross_entropy(self.population_logits(task), jnp.asarray(task.next_token))


def from_config(cfg: Any, num_tokens: int) -> YZModel:
    """The Y/Z model of a config over `num_tokens` ids, at precision.of(train.dtype,
    model.dtype)."""
    prec = precision.of(cfg.train.dtype, cfg.model.dtype)
    return YZModel(
        num_tokens,
        attend_to_query=cfg.model.attend_to_query,
        residual=cfg.model.residual,
        normalize=cfg.model.normalize,
        initializer=cfg.model.init,
        dtype=prec.dtype,
        param_dtype=prec.param_dtype,
    )


@functools.cache
def population_objective(model: YZModel) -> Callable[[PyTree, Population], jax.Array]:
    """(params, Population) -> the long-sequence loss: one function object per model, so its
    points share compiled programs."""

    def objective(params: PyTree, population: Population) -> jax.Array:
        return model.apply(  # type: ignore[return-value]  # flax types apply for mutable too
            {"params": params}, population, method=YZModel.population_loss
        )

    return objective


@functools.cache
def population_outputs(model: YZModel) -> Callable[[PyTree, Population], jax.Array]:
    """(params, Population) -> the (K, M) logits: the outputs of the Gauss-Newton split
    (docs/notes/landscape_geometry.md §7); the output loss is `population_output_loss`."""

    def outputs(params: PyTree, population: Population) -> jax.Array:
        return model.apply(  # type: ignore[return-value]  # flax types apply for mutable too
            {"params": params}, population, method=YZModel.population_logits
        )

    return outputs


def population_output_loss(logits_KM: jax.Array, population: Population) -> jax.Array:
    """The classes' mean cross-entropy of their logits: the objective is this composed with
    `population_outputs`."""
    return cross_entropy(logits_KM, population.next_token)


def population_point(
    task: SequenceClasses, params: PyTree | None = None, *, residual: bool = False, name: str = ""
) -> Point:
    """The population loss (§3.5) at (Y, Z) as a Point; default Y = Z = 0, where the loss is ln M.

    params is YZModel's inner params dict {"Y": (M, M), "Z": (M, M)}. Tasks of one (K, M) share
    compiled programs, and the Point carries the logits/cross-entropy split for `ggn_at`.
    """
    if not isinstance(task, SequenceClasses):
        raise TypeError(
            f"population_point expects a SequenceClasses task (e.g. "
            f"landscape.scan_snap.sequence_classes(...)); got {type(task).__name__}."
        )
    _checks.check_bool("residual", residual, "add the last token's one-hot to c_n")
    shape = (task.num_tokens, task.num_tokens)
    if params is not None:
        if not isinstance(params, dict) or set(params) != {"Y", "Z"}:
            raise ValueError(
                f"params = {type(params).__name__}: must be a dict with keys 'Y' and "
                f"'Z', both {shape} (or None for Y = Z = 0)."
            )
        for key in ("Y", "Z"):
            if jnp.shape(params[key]) != shape:
                raise ValueError(
                    f"params['{key}'] has shape {jnp.shape(params[key])}: must be "
                    f"{shape} (M = {task.num_tokens} tokens)."
                )
    dtype = jnp.float64 if jax.config.read("jax_enable_x64") else jnp.float32
    model = YZModel(task.num_tokens, residual=residual, param_dtype=dtype)
    population = Population.of(task, dtype)
    if params is None:
        params = model.init(jax.random.key(0), population, method=YZModel.population_loss)["params"]
    return Point(
        params,
        name=name or f"Y/Z population loss (K={task.num_classes}, M={task.num_tokens})",
        objective=population_objective(model),
        inputs=population,
        outputs=population_outputs(model),
        output_loss=population_output_loss,
    )


# ----------------------------------------------------------------------------- WikiText (§3.7)


def _uniform(bound: float | jax.Array) -> Callable[..., jax.Array]:
    """The initializer U(-bound, bound): (key, shape, dtype=float32) -> array."""

    def init(
        key: jax.Array, shape: tuple[int, ...], dtype: jax.typing.DTypeLike = jnp.float32
    ) -> jax.Array:
        return jax.random.uniform(key, shape, dtype, -bound, bound)

    return init


def sinusoidal_positions(length: int, width: int) -> jax.Array:
    """(length, width): sin(pos / 10000^(2i/width)) at 2i, cos at 2i + 1 (the tutorial's
    PositionalEncoding)."""
    position = jnp.arange(length, dtype=jnp.float32)[:, None]
    frequency = jnp.exp(jnp.arange(0, width, 2, dtype=jnp.float32) * (-jnp.log(10000.0) / width))
    table = jnp.zeros((length, width), jnp.float32)
    table = table.at[:, 0::2].set(jnp.sin(position * frequency))
    return table.at[:, 1::2].set(jnp.cos(position * frequency[: width // 2]))


def attention_entropy(attention_BTT: jax.Array) -> jax.Array:
    """The mean attention entropy of notes §5.10: -sum_j a_ij log(a_ij + 1e-8) averaged over the
    query rows i (the causal rows: row i has i + 1 keys) and the batch."""
    a = attention_BTT.astype(jnp.float32)
    return -(a * jnp.log(a + 1e-8)).sum(-1).mean()


class _Block(nn.Module):
    """The fields of a layer's parts: model width, FFN width, dropout rate, precision."""

    width: int
    hidden: int
    dropout: float
    dtype: Any
    param_dtype: Any


class _FeedForward(_Block):
    """linear1 -> ReLU -> dropout -> linear2 with PyTorch Linear's init U(+-1/sqrt(fan_in)) for
    weights and biases. Its own module so its parameters ("ffn") can have their own lr."""

    @nn.compact
    def __call__(self, x: jax.Array, deterministic: bool) -> jax.Array:
        def dense(n: int, fan_in: int, name: str) -> nn.Dense:
            return nn.Dense(
                n,
                kernel_init=_uniform(fan_in**-0.5),
                bias_init=_uniform(fan_in**-0.5),
                dtype=self.dtype,
                param_dtype=self.param_dtype,
                name=name,
            )

        h = nn.relu(dense(self.hidden, self.width, "linear1")(x))
        h = nn.Dropout(self.dropout)(h, deterministic=deterministic)
        return dense(self.width, self.hidden, "linear2")(h)


class _EncoderLayer(_Block):
    """PyTorch's post-LN TransformerEncoderLayer with one head: x = LN(x + drop(attn(x))),
    x = LN(x + drop(ffn(x))). Attention: q, k, v from one (d, 3d) projection (Xavier-uniform over
    it, bias 0), softmax(q k^T / sqrt(d)) under a causal mask that allows the diagonal, dropout
    on the weights, out projection U(+-1/sqrt(d)) with bias 0. Returns (x, attention weights)."""

    @nn.compact
    def __call__(self, x_BTD: jax.Array, deterministic: bool) -> tuple[jax.Array, jax.Array]:
        d, T = self.width, x_BTD.shape[1]
        accum = precision.accum_dtype(self.dtype or self.param_dtype)
        qkv = nn.Dense(
            3 * d,
            kernel_init=_uniform((6.0 / (4 * d)) ** 0.5),
            bias_init=nn.initializers.zeros,
            dtype=self.dtype,
            param_dtype=self.param_dtype,
            name="qkv",
        )(x_BTD)
        q, k, v = jnp.split(qkv, 3, axis=-1)
        scores = jnp.einsum("btd,bsd->bts", q, k).astype(accum) / jnp.sqrt(jnp.asarray(d, accum))
        causal = jnp.tril(jnp.ones((T, T), bool))
        weights = jax.nn.softmax(jnp.where(causal, scores, -jnp.inf), axis=-1)
        dropped = nn.Dropout(self.dropout)(weights, deterministic=deterministic)
        mixed = jnp.einsum("bts,bsd->btd", dropped.astype(v.dtype), v)
        out = nn.Dense(
            d,
            kernel_init=_uniform(d**-0.5),
            bias_init=nn.initializers.zeros,
            dtype=self.dtype,
            param_dtype=self.param_dtype,
            name="out",
        )(mixed)

        def norm(name: str) -> nn.LayerNorm:
            return nn.LayerNorm(epsilon=1e-5, dtype=accum, param_dtype=self.param_dtype, name=name)

        def drop(y: jax.Array) -> jax.Array:
            return nn.Dropout(self.dropout)(y, deterministic=deterministic)

        x = norm("ln_attention")(x_BTD + drop(out))
        ffn = _FeedForward(d, self.hidden, self.dropout, self.dtype, self.param_dtype, name="ffn")
        x = norm("ln_ffn")(x + drop(ffn(x, deterministic)))
        return x.astype(x_BTD.dtype), weights


class TextTransformer(nn.Module):
    """The transformer of Figs. 7 and 10 (notes §3.7; the PyTorch transformer tutorial's model).

    Embedding U(-0.1, 0.1) scaled by sqrt(d) plus sinusoidal positions, then dropout;
    `num_layers` post-LN encoder layers (one head, FFN `hidden` wide with ReLU, causal mask with
    the diagonal allowed); an untied decoder U(-0.1, 0.1) with bias 0. Dropout (rng "dropout")
    acts unless `deterministic`.

    Parameters: "embed", "layers_<i>" (with "qkv", "out", "ffn": {"linear1", "linear2"},
    "ln_attention", "ln_ffn") and "decoder". Tokens are (B, T) ids.
    """

    vocab_size: int
    width: int = 200
    hidden: int = 200
    num_layers: int = 1
    dropout: float = 0.2
    max_len: int = 5000
    dtype: Any = None
    param_dtype: Any = jnp.float32

    def setup(self) -> None:
        self.embed = nn.Embed(
            self.vocab_size, self.width, embedding_init=_uniform(0.1), param_dtype=self.param_dtype
        )
        self.layers = [
            _EncoderLayer(self.width, self.hidden, self.dropout, self.dtype, self.param_dtype)
            for _ in range(self.num_layers)
        ]
        self.decoder = _Decoder(self.width, self.vocab_size, self.dtype, self.param_dtype)
        self.drop = nn.Dropout(self.dropout)

    def encode(
        self, tokens_BT: jax.Array, deterministic: bool = True
    ) -> tuple[jax.Array, jax.Array]:
        """(the last layer's output (B, T, d), attention weights (num_layers, B, T, T))."""
        T = tokens_BT.shape[1]
        x = self.embed(tokens_BT) * jnp.sqrt(float(self.width))
        x = x + sinusoidal_positions(T, self.width).astype(x.dtype)
        x = self.drop(x, deterministic=deterministic)
        if self.dtype is not None:
            x = x.astype(self.dtype)
        maps = []
        for layer in self.layers:
            x, weights = layer(x, deterministic)
            maps.append(weights)
        return x, jnp.stack(maps)

    def __call__(
        self, tokens_BT: jax.Array, deterministic: bool = True
    ) -> tuple[jax.Array, jax.Array]:
        """(logits (B, T, vocab) in float32 or wider, attention weights (num_layers, B, T, T))."""
        x, maps = self.encode(tokens_BT, deterministic)
        logits = self.decoder(x)
        return logits.astype(precision.accum_dtype(logits.dtype)), maps

    def loss(
        self, tokens_BT: jax.Array, targets_BT: jax.Array, deterministic: bool = True
    ) -> tuple[jax.Array, jax.Array]:
        """(mean next-token cross-entropy over every position, attention weights)."""
        x, maps = self.encode(tokens_BT, deterministic)
        return self.decoder.mean_cross_entropy(
            x.reshape(-1, x.shape[-1]), targets_BT.reshape(-1)
        ), maps


class _Decoder(nn.Module):
    """The untied decoder, PyTorch's Linear(width, V): "kernel" (width, V) U(-0.1, 0.1) and
    "bias" 0, the parameters and init of `nn.Dense` (same names, same draws)."""

    width: int
    vocab_size: int
    dtype: Any
    param_dtype: Any

    def setup(self) -> None:
        self.kernel = self.param(
            "kernel", _uniform(0.1), (self.width, self.vocab_size), self.param_dtype
        )
        self.bias = self.param("bias", nn.initializers.zeros, (self.vocab_size,), self.param_dtype)

    def _operands(self, x: jax.Array) -> list[jax.Array]:
        """x, W, b in the promoted dtype (`dtype` when it is set), as nn.Dense."""
        return nn.dtypes.promote_dtype(x, self.kernel, self.bias, dtype=self.dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        """Logits x W + b."""
        x, kernel, bias = self._operands(x)
        return x @ kernel + bias

    def mean_cross_entropy(self, x_ND: jax.Array, labels_N: jax.Array) -> jax.Array:
        """The mean cross-entropy of the logits x W + b against labels. In float32 (or wider)
        `decoder_cross_entropy`, which never writes the N x V logits + bias out; a half `dtype`
        is autocast: logits in half, the loss in float32."""
        if self.dtype is not None and precision.is_half(self.dtype):
            return mean_cross_entropy(self(x_ND).astype(jnp.float32), labels_N)
        return decoder_cross_entropy(*self._operands(x_ND), labels_N)


@jax.custom_vjp
def decoder_cross_entropy(
    x_ND: jax.Array, kernel_DV: jax.Array, bias_V: jax.Array, labels_N: jax.Array
) -> jax.Array:
    """mean_n [logsumexp(z_n) - z_n[label_n]] for the logits z = x W + b, with the gradient
    written out: G = (softmax(z) - onehot) / N, then G W^T, x^T G and the column sums of G.
    The bias joins the reductions and the backward's one elementwise pass instead of a pass of
    its own over the N x V logits (WikiText's decoder, 700 x 12000; docs/performance.md)."""
    return _decoder_cross_entropy_forward(x_ND, kernel_DV, bias_V, labels_N)[0]


def _decoder_cross_entropy_forward(x_ND, kernel_DV, bias_V, labels_N):
    xw_NV = x_ND @ kernel_DV
    lse_N = jax.nn.logsumexp(xw_NV + bias_V, axis=-1)
    picked_N = jnp.take_along_axis(xw_NV, labels_N[:, None], axis=-1)[:, 0] + bias_V[labels_N]
    return (lse_N - picked_N).mean(), (x_ND, kernel_DV, bias_V, xw_NV, lse_N, labels_N)


def _decoder_cross_entropy_backward(saved, g):
    x_ND, kernel_DV, bias_V, xw_NV, lse_N, labels_N = saved
    N, V = xw_NV.shape
    onehot = jax.nn.one_hot(labels_N, V, dtype=xw_NV.dtype)
    G_NV = (jnp.exp(xw_NV + bias_V - lse_N[:, None]) - onehot) * (g / N).astype(xw_NV.dtype)
    return G_NV @ kernel_DV.T, x_ND.T @ G_NV, G_NV.sum(0), None


decoder_cross_entropy.defvjp(_decoder_cross_entropy_forward, _decoder_cross_entropy_backward)


@jax.custom_vjp
def mean_cross_entropy(logits_NV: jax.Array, labels_N: jax.Array) -> jax.Array:
    """mean_n [logsumexp(logits_n) - logits_n[label_n]], with the gradient written out,
    (softmax - onehot) / N: one pass of exp each way over the N x V logits (autodiff through
    log_softmax makes more; docs/performance.md)."""
    return _cross_entropy_forward(logits_NV, labels_N)[0]


def _cross_entropy_forward(logits_NV, labels_N):
    lse_N = jax.nn.logsumexp(logits_NV, axis=-1)
    picked_N = jnp.take_along_axis(logits_NV, labels_N[:, None], axis=-1)[:, 0]
    return (lse_N - picked_N).mean(), (logits_NV, lse_N, labels_N)


def _cross_entropy_backward(saved, g):
    logits_NV, lse_N, labels_N = saved
    probs = jnp.exp(logits_NV - lse_N[:, None])
    onehot = jax.nn.one_hot(labels_N, logits_NV.shape[-1], dtype=probs.dtype)
    return (probs - onehot) * (g / logits_NV.shape[0]).astype(probs.dtype), None


mean_cross_entropy.defvjp(_cross_entropy_forward, _cross_entropy_backward)
