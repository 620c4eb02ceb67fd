"""The constructed points of "Sub-n-grams are near-stationary points" (notes/ngrams.md §4.4).

theta_star (θ_*^k(c)), unigram_point, bigram_point_all_heads and random_point, as `Point`s of the
simplified disentangled transformer (§3.2) on a fixed Monte-Carlo population (`population_set`,
common random numbers). The unbiased gradient norms (`gradient_norms`, notes §4.7 C7) live in
gradients.py and are re-exported here.
Conventions (positions, head indices, `meta`): docs/design/ngrams.md.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np

from landscape import _checks
from landscape.ngrams import estimators, task
from landscape.ngrams import model as model_lib
from landscape.ngrams.gradients import BLOCKS, gradient_norms, gradient_statistics
from landscape.point import Point
from landscape.typing import ArrayLike, PyTree

__all__ = [
    "BLOCKS",
    "population_set",
    "population_objective",
    "population_loss",
    "construction_params",
    "bigram_all_heads_params",
    "saddle_spectrum",
    "theta_star",
    "unigram_point",
    "bigram_point_all_heads",
    "random_point",
    "gradient_norms",  # gradients.py
    "gradient_statistics",  # gradients.py
]


# --------------------------------------------------------------------------------------------------
# Monte-Carlo population (notes §2.1, §2.2)
# --------------------------------------------------------------------------------------------------


def float_dtype() -> Any:
    """The points' float dtype: float64 where JAX runs in 64 bits, else float32."""
    return jnp.float64 if jax.config.read("jax_enable_x64") else jnp.float32


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


SAMPLE_BLOCK = 4096  # population sets are drawn in blocks of this many sequences


def population_set(
    num_states: int,
    order_n: int,
    seq_len: int,
    alpha: float,
    num_sequences: int,
    seed: int = 0,
    init: str = "uniform",
) -> tuple[jax.Array, jax.Array]:
    """(x_BT int32, target_BS float64): a fixed Monte-Carlo sample of the in-context n-gram task.

    Each sequence has its own Dirichlet(alpha) n-gram task (task.sample, notes §2.2); the target is
    the soft label p_tau(x_{T+1} = . | x^T). The same arguments give the same set, so points
    compared on one set share their Monte-Carlo error (common random numbers). Sequences are
    drawn in blocks of SAMPLE_BLOCK with keys fold_in(PRNGKey(seed), block), so a smaller set is
    a prefix of a larger one with the same seed, and the sampler compiles once per (S, n, T).
    Results are cached (the arrays are immutable).
    """
    if alpha is None:
        raise _checks.ArgumentTypeError(
            "alpha = None: the task needs the Dirichlet concentration alpha > 0."
        )
    task.validate_task(num_states, order_n, seq_len, alpha)
    _checks.real_array("alpha", alpha, scalar=True)
    _checks.check_int(
        "num_sequences",
        num_sequences,
        2,
        "the Monte-Carlo set is split into two halves for gradient_norms",
    )
    _checks.check_int("seed", seed, meaning="the PRNG seed of the Monte-Carlo set")
    if init not in task.INITS:
        raise ValueError(
            f"init = {init!r}: must be one of {task.INITS} (how the first n-1 tokens are drawn)."
        )
    return _population_set(
        int(num_states),
        int(order_n),
        int(seq_len),
        float(alpha),
        int(num_sequences),
        int(seed),
        init,
        float_dtype(),
    )


@functools.lru_cache(maxsize=8)
def _population_set(num_states, order_n, seq_len, alpha, num_sequences, seed, init, dtype):
    key = jax.random.PRNGKey(seed)
    xs, ys = [], []
    for block in range(-(-num_sequences // SAMPLE_BLOCK)):
        x_BT, target_BS, _ = task.sample(
            jax.random.fold_in(key, block),
            num_states,
            order_n,
            seq_len,
            alpha,
            SAMPLE_BLOCK,
            init,
            dtype,
        )
        xs.append(x_BT)
        ys.append(target_BS)
    x_BT = jnp.concatenate(xs)[:num_sequences]
    target_BS = jnp.concatenate(ys)[:num_sequences].astype(dtype)
    return x_BT, target_BS


def mean_ce(
    params: PyTree,
    x_BT: jax.Array,
    target_BS: jax.Array,
    model: model_lib.NgramModel,
    floor: float,
) -> jax.Array:
    """The mean over the set of the floored cross-entropy of the model's next-token law."""
    probs_BS = model.apply({"params": params}, x_BT)
    return jnp.mean(estimators.cross_entropy(probs_BS, target_BS, floor))


@functools.cache
def population_objective(
    model: model_lib.NgramModel, floor: float
) -> Callable[[PyTree, Any], jax.Array]:
    """(params, (x_BT, target_BS)) -> `population_loss`'s value: one function per (model,
    floor), so the points of a model share compiled programs."""

    def objective(params: PyTree, inputs: Any) -> jax.Array:
        x_BT, target_BS = inputs
        return mean_ce(params, x_BT, target_BS, model, floor)

    return objective


@functools.cache
def population_outputs(model: model_lib.NgramModel) -> Callable[[PyTree, Any], jax.Array]:
    """(params, inputs) -> the next-token probabilities (B, S): the Gauss-Newton outputs."""

    def outputs(params: PyTree, inputs: Any) -> jax.Array:
        return model.apply({"params": params}, inputs[0])  # type: ignore[return-value]

    return outputs


@functools.cache
def population_output_loss(floor: float) -> Callable[[jax.Array, Any], jax.Array]:
    """(probs, inputs) -> the mean cross-entropy, convex in the probabilities (floor >= 0)."""

    def output_loss(probs_BS: jax.Array, inputs: Any) -> jax.Array:
        return jnp.mean(estimators.cross_entropy(probs_BS, inputs[1], floor))

    return output_loss


def population_loss(
    model: model_lib.NgramModel, x_BT: ArrayLike, target_BS: ArrayLike, floor: float = 1e-8
) -> Callable[[PyTree], jax.Array]:
    """params -> mean over the set of -sum_s y_s log(p_theta(x^T)[s] + floor) (notes §2.1).

    floor = 1e-8 is the authors' code; floor = 0 is the exact CE of the theory (infinite when a
    token with y_s > 0 is absent from the context, since the simplified model gives it p_s = 0).
    """
    _checks.real_array("floor", floor, scalar=True)
    if not floor >= 0:
        raise ValueError(f"floor = {floor!r}: must be >= 0 (added to p inside the log).")
    x_BT = jnp.asarray(x_BT)
    target_BS = jnp.asarray(target_BS)
    return functools.partial(mean_ce, x_BT=x_BT, target_BS=target_BS, model=model, floor=floor)


# --------------------------------------------------------------------------------------------------
# Constructions (notes §4.4)
# --------------------------------------------------------------------------------------------------


_UNSET = object()  # check_construction's default: no k / c to check


def check_construction(
    num_states: int,
    order_n: int,
    seq_len: int | None,
    alpha: Any,
    num_heads: int | None,
    k: Any = _UNSET,
    c: Any = _UNSET,
) -> int:
    """One sentence for the first bad argument of a construction (the task's, num_heads, and k
    and c where given); returns num_heads (order_n - 1 where None)."""
    if alpha is None:
        raise _checks.ArgumentTypeError(
            "alpha = None: the task needs the Dirichlet concentration alpha > 0."
        )
    task.validate_task(num_states, order_n, seq_len, alpha)
    _checks.real_array("alpha", alpha, scalar=True)
    if num_heads is None:
        num_heads = order_n - 1
    _checks.check_int(
        "num_heads", num_heads, meaning="the first-layer heads m; the theory uses m = order_n - 1"
    )
    if num_heads < 1:
        raise ValueError(
            f"num_heads = {num_heads!r}: must be an integer >= 1 "
            "(the first-layer heads m; the theory uses m = order_n - 1)."
        )
    if k is not _UNSET:
        _checks.check_int("k", k, meaning="the order of the k-gram construction")
        if not 1 <= k <= order_n:
            raise ValueError(
                f"k = {k!r}: a construction needs 1 <= k <= order_n = {order_n} "
                "(theta_*^k implements the in-context k-gram estimator)."
            )
        if num_heads < k - 1:
            raise ValueError(
                f"num_heads = {num_heads}: theta_*^{k} needs k - 1 = {k - 1} "
                "first-layer heads (one per history offset 1..k-1)."
            )
    if c is not _UNSET:
        if c is None:
            raise _checks.ArgumentTypeError(
                "c = None: the construction needs c, a finite number "
                "> 0 (the scale of the attention logits)."
            )
        _checks.real_array("c", c, scalar=True)
    if c is not _UNSET and not 0 < c < math.inf:
        raise ValueError(
            f"c = {c!r}: must be a finite number > 0 (the scale of the attention logits)."
        )
    return num_heads


def construction_params(
    k: int, c: ArrayLike, model: model_lib.NgramModel, dtype: Any = None
) -> dict:
    """theta_*^k(c) of notes §4.4 for `model` (0-based positions; c may be traced).

    Head h = 1..k-1 (A1[h-1], V1[h-1]): A1[p, q] = c iff (p >= h and q = p - h) or (p < h and
    q = 0), else 0; V1 = I. Heads h >= k: A1 = 0 (arbitrary in the paper), V1 = 0.
    Q2[hS + j, (h-1)S + j] = sqrt(c), K2[hS + j, hS + j] = sqrt(c) for h = 1..k-1, all other
    entries 0 (so Q2^T K2 = c sum_j sum_h s_j^(h-1) s_j^(h)^T, Eqs. 6, 8c). k = 1: every head off
    and Q2 = K2 = 0, the unigram point.
    """
    dtype = float_dtype() if dtype is None else dtype
    S, T, m = model.num_states, model.seq_len, model.num_heads
    head_dim = cast(int, model.head_dim)  # None only for the disentangled kind
    if not model.learn_value:
        raise ValueError(
            "learn_value = False: the constructions set V1 = 0 on inactive heads, so "
            "the model must learn V1 (learn_value=True)."
        )
    if head_dim < (k - 1) * S + S:
        raise ValueError(
            f"head_dim = {head_dim}: theta_*^{k} needs head_dim >= k S = "
            f"{k * S} (rows hS + j, h <= k - 1)."
        )
    pattern = np.zeros((m, T, T))
    for h in range(1, k):
        p = np.arange(T)
        pattern[h - 1, p, np.where(p >= h, p - h, 0)] = 1.0
    value = np.zeros((m, S, S))
    value[: k - 1] = np.eye(S)
    q2 = np.zeros((head_dim, model.width))
    k2 = np.zeros((head_dim, model.width))
    for h in range(1, k):
        for j in range(S):
            q2[h * S + j, (h - 1) * S + j] = 1.0
            k2[h * S + j, h * S + j] = 1.0
    c = jnp.asarray(c, dtype)
    root = jnp.sqrt(c)
    return {
        "A1": c * jnp.asarray(pattern, dtype),
        "V1": jnp.asarray(value, dtype),
        "Q2": root * jnp.asarray(q2, dtype),
        "K2": root * jnp.asarray(k2, dtype),
    }


def bigram_all_heads_params(c: ArrayLike, model: model_lib.NgramModel, dtype: Any = None) -> dict:
    """App. F Eq. 30 (notes §4.4): every head on the (-1)-token, V1 = sqrt(c) I,
    Q2^T = sqrt(c) sum_j sum_h s_j^0 s_j^h^T (i.e. Q2[hS + j, j] = sqrt(c)) and
    K2 = sqrt(c) sum_j sum_h s_j^h s_j^h^T (K2[hS + j, hS + j] = sqrt(c)), h = 1..m.

    Score <K2 r1[i], Q2 r1[T]> = c sum_h <e_{x_T}, block h of r1[i]> -> m c^(3/2) 1{x_{i-1} = x_T}
    (position 0's previous token is itself).
    """
    dtype = float_dtype() if dtype is None else dtype
    S, T, m = model.num_states, model.seq_len, model.num_heads
    head_dim = cast(int, model.head_dim)  # None only for the disentangled kind
    if head_dim < model.width:
        raise ValueError(
            f"head_dim = {head_dim}: Eq. 30 needs head_dim >= (m + 1) S = {model.width}."
        )
    p = np.arange(T)
    pattern = np.zeros((m, T, T))
    pattern[:, p, np.maximum(p - 1, 0)] = 1.0
    q2 = np.zeros((head_dim, model.width))
    k2 = np.zeros((head_dim, model.width))
    for h in range(1, m + 1):
        for j in range(S):
            q2[h * S + j, j] = 1.0
            k2[h * S + j, h * S + j] = 1.0
    c = jnp.asarray(c, dtype)
    root = jnp.sqrt(c)
    return {
        "A1": c * jnp.asarray(pattern, dtype),
        "V1": root * jnp.broadcast_to(jnp.eye(S, dtype=dtype), (m, S, S)),
        "Q2": root * jnp.asarray(q2, dtype),
        "K2": root * jnp.asarray(k2, dtype),
    }


def _simplified_model(num_states: int, seq_len: int, num_heads: int) -> model_lib.NgramModel:
    """The simplified model of the constructions (§3.2): learned V1, the session's dtype."""
    return model_lib.NgramModel(
        kind="simplified",
        num_states=num_states,
        seq_len=seq_len,
        num_heads=num_heads,
        learn_value=True,
        param_dtype=float_dtype(),
    )


_TASK_ARGS = ("num_states", "order_n", "seq_len", "alpha", "num_sequences", "seed", "init")


def _task(*args: Any) -> dict[str, Any]:
    """population_set's arguments (in its order), as a point's meta["task"] records them."""
    return dict(zip(_TASK_ARGS, args, strict=True))


def _population_point(params, model, name, meta, floor, task):
    x_BT, target_BS = population_set(**task)
    meta = dict(
        meta,
        population="mean",  # the loss is the mean over sequences: probes may slice it
        model=model,
        x_BT=x_BT,
        target_BS=target_BS,
        floor=floor,
        task=task,
    )
    population_loss(model, x_BT, target_BS, floor)  # validates floor
    return Point(
        params,
        name=name,
        meta=meta,
        objective=population_objective(model, float(floor)),
        inputs=(jnp.asarray(x_BT), jnp.asarray(target_BS)),
        outputs=population_outputs(model),
        output_loss=population_output_loss(float(floor)),
    )


def saddle_spectrum(point: Point) -> np.ndarray:
    """Predicted Hessian eigenvalues of the (Q2, K2) block at a point with Q2 = K2 = 0 (§4.6.4).

    L = f(W), W = Q2^T K2, so the second-order term is <G, dQ2^T dK2> with G = dL/dW at W = 0:
    the (Q2, K2) block is d_h copies of [[0, G], [G^T, 0]], eigenvalues +-sigma_i(G), each d_h
    times (ascending, length 2 d_h width). Every other Hessian entry is 0.
    """
    model = point.meta["model"]
    x_BT, target_BS = point.meta["x_BT"], point.meta["target_BS"]
    params = point.params

    def loss_of_w(w: jax.Array) -> jax.Array:
        r1_BTX = model_lib.simplified_residual(params, x_BT, model)
        scores_BT = jnp.einsum("btx,xy,by->bt", r1_BTX, w.T, r1_BTX[:, -1])
        a2_BT = jax.nn.softmax(scores_BT, axis=-1)
        probs_BS = jnp.einsum(
            "bt,bts->bs", a2_BT, jax.nn.one_hot(x_BT, model.num_states, dtype=a2_BT.dtype)
        )
        return jnp.mean(estimators.cross_entropy(probs_BS, target_BS, point.meta["floor"]))

    # score = <K2 r1[i], Q2 r1[T]> = r1[T]^T Q2^T K2 r1[i] = r1[T]^T W r1[i]
    w0 = jnp.zeros((model.width, model.width), params["Q2"].dtype)
    G = np.asarray(jax.jit(jax.grad(loss_of_w))(w0))
    sigma = np.linalg.svd(G, compute_uv=False)
    return np.sort(np.repeat(np.concatenate([sigma, -sigma]), model.head_dim))


def theta_star(
    k: int,
    c: float,
    *,
    num_states: int,
    order_n: int,
    seq_len: int,
    alpha: float,
    num_heads: int | None = None,
    num_sequences: int = 8192,
    seed: int = 0,
    init: str = "uniform",
    floor: float = 1e-8,
) -> Point:
    """theta_*^k(c) of notes §4.4 (Def. A.2, Eqs. 8a-c), judged on population_set(..., seed).

    The simplified model with m = num_heads (default n - 1) heads, learned V1 and
    d_h = (m + 1) S; the entries are those of `construction_params`. As c -> inf the model
    outputs the *padded* k-gram estimator (estimators.padded_kgram_estimate, notes §4.4 [ours]),
    which differs from Def. 2.1 by O(1/T). Theorem 4.2: near-stationary as T, c -> inf together.
    """
    num_heads = check_construction(num_states, order_n, seq_len, alpha, num_heads, k, c)
    model = _simplified_model(num_states, seq_len, num_heads)
    params = construction_params(k, c, model)
    meta = {
        "k": k,
        "c": float(c),
        "estimator": (
            f"padded {k}-gram MLE (estimators.padded_kgram_estimate) as c -> inf; Def. 2.1 up to "
            "O(1/T)"
            if k > 1
            else "unigram MLE (estimators.kgram_estimate with k = 1), for every c"
        ),
    }
    if k == 1:
        meta["prediction"] = (
            "exactly stationary for every T and c (Q2 = K2 = 0: the score is 0, so the output is "
            "the unigram MLE and every gradient block vanishes; notes §4.6 caveat 4, C5); strict "
            "saddle: the Hessian is zero outside the (Q2, K2) block, which has the symmetric "
            "spectrum +-sigma_i(dL/d(Q2^T K2)), each d_h times (C9)"
        )
        meta["focus_blocks"] = ["Q2", "K2"]
        name = f"theta_star^1 (unigram, c={float(c):g}, S={num_states}, n={order_n}, T={seq_len})"
    else:
        meta["prediction"] = (
            f"near-stationary as T, c -> inf (Thm 4.2): ||grad L|| = O(sqrt(c) E||p_tau(.|suffix) "
            f"- p_{k}||) + O(T sqrt(c) e^-c); inactive heads h >= {k} have exactly zero A1, V1 "
            "gradients (C6); at fixed T the norm grows with c once zero counts dominate (§4.6)"
        )
        name = f"theta_star^{k} (c={float(c):g}, S={num_states}, n={order_n}, T={seq_len})"
    point = _population_point(
        params,
        model,
        name,
        meta,
        floor,
        _task(num_states, order_n, seq_len, alpha, num_sequences, seed, init),
    )
    if k == 1:
        point.meta["focus_prediction"] = saddle_spectrum(point)
    return point


def unigram_point(
    c: float = 1.0,
    *,
    num_states: int,
    order_n: int,
    seq_len: int,
    alpha: float,
    num_heads: int | None = None,
    num_sequences: int = 8192,
    seed: int = 0,
    init: str = "uniform",
    floor: float = 1e-8,
) -> Point:
    """theta_*^1 (every head off, Q2 = K2 = 0): the unigram point, exactly stationary (C5) and a
    strict saddle (C9). Every parameter is 0 whatever c is (k = 1 has no active head and no c-scaled
    entry); c only labels the point, for symmetry with theta_star.
    """
    return theta_star(
        1,
        c,
        num_states=num_states,
        order_n=order_n,
        seq_len=seq_len,
        alpha=alpha,
        num_heads=num_heads,
        num_sequences=num_sequences,
        seed=seed,
        init=init,
        floor=floor,
    )


def bigram_point_all_heads(
    c: float,
    *,
    num_states: int,
    order_n: int,
    seq_len: int,
    alpha: float,
    num_heads: int | None = None,
    num_sequences: int = 8192,
    seed: int = 0,
    init: str = "uniform",
    floor: float = 1e-8,
) -> Point:
    """App. F Eq. 30: every first-layer head attends to the (-1)-token (Fig. 3's bigram plateau).

    Parameters in `bigram_all_heads_params`; as c -> inf the model outputs the padded bigram
    estimator, like theta_*^2 (notes §4.4).
    """
    num_heads = check_construction(num_states, order_n, seq_len, alpha, num_heads, c=c)
    model = _simplified_model(num_states, seq_len, num_heads)
    meta = {
        "k": 2,
        "c": float(c),
        "estimator": "padded bigram MLE (estimators.padded_kgram_estimate, k = 2) as c -> inf",
        "prediction": (
            f"near-stationary as T, c -> inf like theta_*^2 (App. F, Eq. 30): "
            f"every head on the (-1)-token, score {num_heads} c^(3/2) "
            "1{x_(i-1) = x_T}"
        ),
    }
    name = f"bigram, all heads on -1 (c={float(c):g}, S={num_states}, n={order_n}, T={seq_len})"
    return _population_point(
        bigram_all_heads_params(c, model),
        model,
        name,
        meta,
        floor,
        _task(num_states, order_n, seq_len, alpha, num_sequences, seed, init),
    )


def random_point(
    seed: int = 0,
    *,
    num_states: int,
    order_n: int,
    seq_len: int,
    alpha: float,
    num_heads: int | None = None,
    num_sequences: int = 8192,
    data_seed: int = 0,
    init: str = "uniform",
    floor: float = 1e-8,
) -> Point:
    """The authors' initialisation (model.init with jax.random.PRNGKey(seed)): A1 = 0,
    V1 ~ N(0, 1/S), Q2, K2 ~ N(0, 1/((m+1) S)); the set is population_set(..., data_seed)."""
    num_heads = check_construction(num_states, order_n, seq_len, alpha, num_heads)
    model = _simplified_model(num_states, seq_len, num_heads)
    params = model.init(jax.random.PRNGKey(seed), model_lib.dummy_tokens(model))["params"]
    meta = {
        "prediction": "random initialisation: not a critical point (reference gradient norm "
        "0.06-0.18 at S=3, n=3, alpha=1; notes §4.7 C7)",
        "seed": seed,
    }
    name = f"random init (seed {seed}, S={num_states}, n={order_n}, T={seq_len})"
    return _population_point(
        params,
        model,
        name,
        meta,
        floor,
        _task(num_states, order_n, seq_len, alpha, num_sequences, data_seed, init),
    )
