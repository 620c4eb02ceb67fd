"""The constructed points of Attention with Markov (notes/markov.md §6), as `Point`s.

    theta_pi(p, q)        the unigram point of Thm 2 (tied) and Thm 3 (untied); S > 2 (§6.8)
    theta_star(p, q)      a global minimum of Thm 1 (B.1 for p + q <= 1, B.2 for p + q > 1)

Losses are the theory model's population loss, exact up to S^N = 2^16 sequences, else Monte
Carlo; `meta` carries the predictions. See docs/design/markov.md.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from landscape import _checks
from landscape.markov import model as model_lib
from landscape.markov import task, theory
from landscape.point import Point
from landscape.typing import ArrayLike, NDArray, PyTree

EXACT_LIMIT = 2**16

_FLAT_ARGUMENT = (
    "with e = a = 0 the prediction is sigma(b) whatever the other blocks are, so "
    "L(alpha_pi, beta) = H(pi) for every beta, and alpha_pi stays a strict local "
    "minimum of L(., beta) for beta near beta_pi (notes §6.2)"
)


def population_loss_fn(
    model: model_lib.MarkovModel, kernel: ArrayLike, init: ArrayLike | None, **population: Any
) -> Callable[[PyTree], jax.Array]:
    """params -> population cross-entropy with soft targets (notes §4), exact or Monte Carlo:
    on `population_inputs(model, kernel, init, **population)`."""
    inputs = population_inputs(model, kernel, init, **population)
    objective = population_objective(model)
    return lambda params: objective(params, inputs)


@functools.cache
def population_objective(model: model_lib.MarkovModel) -> Callable[[PyTree, Any], jax.Array]:
    """(params, (x_MN, weights_M, targets_MNS)) -> the soft-target cross-entropy of `model`
    (notes §4): one function object per model, so its points share compiled programs."""

    def objective(params: PyTree, inputs: Any) -> jax.Array:
        x, weights, targets = inputs
        return task.population_cross_entropy(model.apply({"params": params}, x), weights, targets)

    return objective


@functools.cache
def population_outputs(model: model_lib.MarkovModel) -> Callable[[PyTree, Any], jax.Array]:
    """(params, inputs) -> the model's logits on the population's sequences: the outputs of the
    Gauss-Newton split of `population_objective` (notes/landscape_geometry.md §7)."""

    def outputs(params: PyTree, inputs: Any) -> jax.Array:
        logits = model.apply({"params": params}, inputs[0], method=model_lib.MarkovModel.logits)
        return logits  # type: ignore[return-value]  # flax types apply for mutable too

    return outputs


@functools.cache
def population_output_loss(model: model_lib.MarkovModel) -> Callable[[jax.Array, Any], jax.Array]:
    """(logits, inputs) -> the soft-target cross-entropy: `population_objective` is this
    composed with `population_outputs`."""

    def output_loss(logits: jax.Array, inputs: Any) -> jax.Array:
        _, weights, targets = inputs
        log_probs = model_lib.log_probs_of(logits, model.reduced)
        return task.population_cross_entropy(log_probs, weights, targets)

    return output_loss


def population_point(
    model: model_lib.MarkovModel, params: PyTree, inputs: Any, name: str, meta: dict
) -> Point:
    """A Point of `model` judged by its population loss on `inputs` (`population_inputs`),
    carrying the logits/cross-entropy split for the Gauss-Newton matrix."""
    return Point(
        params,
        name=name,
        meta={"population": "sum", **meta},  # weighted sum over sequences: probes may slice it
        objective=population_objective(model),
        inputs=inputs,
        outputs=population_outputs(model),
        output_loss=population_output_loss(model),
    )


def population_inputs(
    model: model_lib.MarkovModel,
    kernel: ArrayLike,
    init: ArrayLike | None,
    *,
    population: str = "auto",
    num_sequences: int = 256,
    key: jax.Array | None = None,
) -> tuple[Any, jax.Array, jax.Array]:
    """(x_MN, weights_M, targets_MNS) of the chain: all S^N sequences when S^N <= 2^16 (or
    population="exact"), else `num_sequences` sampled from `key` (common random numbers)."""
    if not isinstance(model, model_lib.MarkovModel):
        raise TypeError(
            f"model = {model!r}: must be a landscape.markov.MarkovModel, not "
            f"{type(model).__name__}."
        )
    _checks.check_int("num_sequences", num_sequences, 1, "the Monte-Carlo sample size")
    _checks.check_key("key", key)
    size = model.num_states**model.seq_len
    if population == "auto":
        population = "exact" if size <= EXACT_LIMIT else "mc"
    if population == "exact":
        return task.exact_population(model.num_states, model.seq_len, kernel, init)
    if population == "mc":
        key = jax.random.key(0) if key is None else key
        return task.monte_carlo_population(key, kernel, init, num_sequences, model.seq_len)
    raise ValueError(f"population = {population!r}: must be 'auto', 'exact' or 'mc'.")


def _check_probabilities(caller: str, p: float | None, q: float | None, num_states: int) -> None:
    """p (and q for S = 2) must be given as single real numbers; their range is validate_chain's."""
    binary = num_states == 2
    meaning = {
        "p": "the switching probability 0 -> 1"
        if binary
        else "the probability of leaving the current state",
        "q": "the switching probability 1 -> 0",
    }
    for name, value in (("p", p), ("q", q)) if binary else (("p", p),):
        if value is None:
            raise _checks.ArgumentTypeError(
                f"{name} is missing: {caller} needs {name} = a number in (0, 1) ({meaning[name]})."
            )
        _checks.real_array(name, value, scalar=True)


def _chain(p: float, q: float | None, num_states: int) -> tuple[jax.Array, jax.Array]:
    if num_states == 2:
        assert q is not None  # _check_probabilities ran first: q is given for S = 2
        task.validate_chain(p=p, q=q)
        kernel = task.binary_kernel(p, q)
    else:
        if q is not None:
            raise ValueError(
                f"q = {q}: the {num_states}-state symmetric chain has one switching "
                "probability p; leave q out."
            )
        task.validate_chain(p=p, num_states=num_states)
        kernel = task.symmetric_kernel(num_states, p)
    return kernel, task.stationary(kernel)


def _theory_model(
    family: str,
    num_states: int,
    d: int,
    seq_len: int,
    num_layers: int,
    num_heads: int,
    mlp_width: int | None,
    tied: bool,
    dtype: Any,
) -> model_lib.MarkovModel:
    if family != "theory":
        raise ValueError(
            f"family = {family!r}: theta_pi and theta_star are the points of Theorems 1-3, which "
            "cover the theory model only (no LayerNorm; notes §3.1). With LayerNorm the point "
            "p_n = 0 is degenerate (LN of a zero vector), and no theorem says what it is; use "
            "family='theory', or build a Point by hand and label it 'not covered by the theorems'."
        )
    return model_lib.MarkovModel(
        family="theory",
        num_states=num_states,
        d=d,
        seq_len=seq_len,
        num_layers=num_layers,
        num_heads=num_heads,
        mlp_width=mlp_width,
        tied=tied,
        activation="relu",
        layer_norm=False,
        param_dtype=dtype,
    )


def _zeros(model: model_lib.MarkovModel, dtype: Any) -> PyTree:
    """The Flax parameter tree of `model`, every leaf zero."""
    shapes = model_lib.param_shapes(model)
    return jax.tree.map(
        lambda s: jnp.zeros(s, dtype), shapes, is_leaf=lambda s: isinstance(s, tuple)
    )


def theta_pi(
    p: float,
    q: float | None = None,
    *,
    d: int = 4,
    seq_len: int = 10,
    num_states: int = 2,
    num_layers: int = 1,
    num_heads: int = 1,
    mlp_width: int | None = None,
    tied: bool = True,
    pos: ArrayLike | str | None = None,
    rest: str = "zero",
    key: jax.Array | None = None,
    family: str = "theory",
    population: str = "auto",
    num_sequences: int = 256,
) -> Point:
    """The unigram point of Thm 2 (tied) / Thm 3 (untied) (Eq. 11, notes §6.2-6.5, §6.8).

    e = a = 0 (E = A = 0 for S > 2), W_O = 0, W_2 = 0, b = log(p/q) (b = log pi for S > 2).
    The blocks the theorem leaves arbitrary are 0 by default; `pos` may be an (N, d) array of
    positional vectors p_n or "random" (N(0, 1) entries, from `key`), and rest="random" draws
    W_Q, W_K, W_V, W_1 from N(0, 1/d). The theorem holds for every choice; only u = mean p_n
    and Cov(p_n) enter the alpha block (Eq. 12).
    """
    _checks.check_bool("tied", tied, "tied head a = e, Thm 2; untied, Thm 3")
    dtype = jnp.float64 if jax.config.read("jax_enable_x64") else jnp.float32
    model = _theory_model(
        family, num_states, d, seq_len, num_layers, num_heads, mlp_width, tied, dtype
    )
    _check_probabilities("theta_pi", p, q, num_states)
    kernel, init = _chain(p, q, num_states)
    _checks.check_key("key", key)
    params = _zeros(model, dtype)
    key = jax.random.key(0) if key is None else key
    pos_key, rest_key = jax.random.split(key)
    positions = _positions(pos, pos_key, seq_len, d, dtype)
    if positions is not None:
        params["pos"] = positions
    _draw_rest(params, rest, rest_key, num_layers, d, dtype)
    if num_states == 2:
        assert q is not None  # _check_probabilities: q is given for S = 2
        b, unigram = _binary_unigram(p, q, d, tied, np.asarray(params["pos"]))
        params["b"] = jnp.asarray(b, dtype)
    else:
        params["b"] = jnp.log(init).astype(dtype)
        unigram = _multistate_unigram(p, num_states, d, tied)
    inputs = population_inputs(
        model,
        kernel,
        init,
        population=population,
        num_sequences=num_sequences,
        key=jax.random.fold_in(key, 7),
    )
    meta = {
        "prediction": unigram.prediction,
        "expected_loss": unigram.expected_loss,
        "focus_blocks": unigram.focus_blocks,
        "focus_prediction": unigram.focus_prediction,
        "flat_argument": _FLAT_ARGUMENT,
        "model": model,
        "p": p,
        "q": q,
    }
    name = f"theta_pi ({'tied' if tied else 'untied'}, {unigram.label}, d={d}, N={seq_len})"
    return population_point(model, params, inputs, name, meta)


def _positions(
    pos: ArrayLike | str | None, pos_key: jax.Array, seq_len: int, d: int, dtype: Any
) -> jax.Array | None:
    """theta_pi's (N, d) positional vectors p_n: `pos`, N(0, 1) for "random"; None keeps 0."""
    if isinstance(pos, str):
        if pos != "random":
            raise ValueError(f"pos = {pos!r}: must be an (N, d) array, 'random' or None.")
        pos = jax.random.normal(pos_key, (seq_len, d), dtype)
    if pos is None:
        return None
    if np.shape(pos) != (seq_len, d):
        raise ValueError(
            f"pos has shape {np.shape(pos)}: must be (seq_len, d) = "
            f"({seq_len}, {d}), one positional vector p_n per position."
        )
    return jnp.asarray(pos, dtype)


def _draw_rest(
    params: PyTree, rest: str, rest_key: jax.Array, num_layers: int, d: int, dtype: Any
) -> None:
    """rest="random": W_Q, W_K, W_V, W_1 of every block from N(0, 1/d), in place."""
    if rest == "random":
        for layer in range(num_layers):
            block = params[f"block_{layer}"]
            keys = jax.random.split(jax.random.fold_in(rest_key, layer), 4)
            for k, name in zip(keys, ("W_Q", "W_K", "W_V", "W_1"), strict=True):
                block[name] = jax.random.normal(k, block[name].shape, dtype) / np.sqrt(d)
    elif rest != "zero":
        raise ValueError(f"rest = {rest!r}: must be 'zero' or 'random'.")


class _Unigram(NamedTuple):
    """What theory says about a unigram point: its `meta` entries and its name's label."""

    prediction: str
    expected_loss: float
    focus_blocks: list[str]
    focus_prediction: NDArray
    label: str


def _binary_unigram(
    p: float, q: float, d: int, tied: bool, pos_np: NDArray
) -> tuple[jax.Array, _Unigram]:
    """(b = log(p/q), the prediction) at the S = 2 unigram point (Thm 2 / Thm 3, Eq. 12)."""
    b = theory.theta_pi_logit(p, q)
    predicted = np.linalg.eigvalsh(np.asarray(theory.alpha_block(p, q, d, pos=pos_np, tied=tied)))
    return b, _Unigram(
        prediction=theory.theta_pi_verdict(p, q, pos=pos_np, tied=tied),
        expected_loss=float(theory.unigram_loss(p, q)),
        focus_blocks=["b", "e"] if tied else ["b", "a", "e"],
        focus_prediction=predicted,
        label=f"p={p:g}, q={q:g}",
    )


def _multistate_unigram(p: float, num_states: int, d: int, tied: bool) -> _Unigram:
    """The prediction at the S > 2 symmetric unigram point (notes §6.8)."""
    predicted = np.sort(
        np.asarray(theory.multistate_unigram_eigenvalues(num_states, p, tied=tied, d=d))
    )
    threshold = theory.multistate_threshold(num_states)
    prediction = f"{'tied' if tied else 'untied'} multi-state unigram point: " + (
        f"local-minimum candidate iff p > (S-1)/S = {threshold:g} (here p = {p:g}: "
        f"{'yes' if p > threshold else 'no, a saddle'}; notes §6.8)"
        if tied
        else "a saddle whenever p != (S-1)/S (notes §6.8)"
    )
    return _Unigram(
        prediction=prediction,
        expected_loss=float(np.log(num_states)),
        focus_blocks=["b", "E"] if tied else ["b", "A", "E"],
        focus_prediction=predicted,
        label=f"S={num_states}, p={p:g}",
    )


def theta_star(
    p: float,
    q: float,
    *,
    d: int = 4,
    seq_len: int = 10,
    num_layers: int = 1,
    num_heads: int = 1,
    mlp_width: int | None = None,
    tied: bool = True,
    paper_w_star: bool = False,
    family: str = "theory",
    population: str = "auto",
    num_sequences: int = 256,
    key: jax.Array | None = None,
) -> Point:
    """A global minimum of Thm 1 that outputs the bigram kernel (notes §6.1).

    p + q <= 1: B.1 (e = a = 1 sqrt(log((1-p)(1-q)/(pq))/d), p_n = 0, b = log(p/(1-p))).
    p + q > 1: B.2 with the d*r-corrected w_star (e = a = 1, p_n = -1/2, W_1 = w 1 1^T,
    W_2 = -W_1^T, b = log(p/(1-p)) + d/2); `paper_w_star=True` uses the paper's d^2 version,
    which outputs the wrong kernel unless r = d (erratum, notes §6.9, C12).
    """
    _checks.check_bool("tied", tied, "tied head a = e, or untied")
    _checks.check_bool("paper_w_star", paper_w_star, "the paper's d^2 w_star instead of d r")
    dtype = jnp.float64 if jax.config.read("jax_enable_x64") else jnp.float32
    model = _theory_model(family, 2, d, seq_len, num_layers, num_heads, mlp_width, tied, dtype)
    _check_probabilities("theta_star", p, q, 2)
    kernel, init = _chain(p, q, 2)
    params = _zeros(model, dtype)
    r = model.mlp_width or 4 * d
    if p + q <= 1:
        e_i, b = theory.theta_star_b1(p, q, d)
        construction = "B.1"
        params["e"] = jnp.full((d,), e_i, dtype)
    else:
        w, b = theory.theta_star_b2(p, q, d, r, paper=paper_w_star)
        construction = "B.2" + (" (paper's w_star)" if paper_w_star else "")
        params["e"] = jnp.ones((d,), dtype)
        params["pos"] = jnp.full((seq_len, d), -0.5, dtype)
        for layer in range(num_layers):
            block = params[f"block_{layer}"]
            block["W_1"] = jnp.full((r, d), w, dtype)
            block["W_2"] = -block["W_1"].T
    params["b"] = jnp.asarray(b, dtype)
    if not tied:
        params["a"] = params["e"]
    inputs = population_inputs(
        model, kernel, init, population=population, num_sequences=num_sequences, key=key
    )
    meta = {
        "prediction": f"global minimum (Thm 1, {construction}): outputs the bigram kernel, "
        "L = entropy rate, gradient 0",
        "expected_loss": float(theory.entropy_rate(p, q)),
        "model": model,
        "p": p,
        "q": q,
    }
    name = f"theta_star ({construction}, {'tied' if tied else 'untied'}, p={p:g}, q={q:g}, d={d})"
    return population_point(model, params, inputs, name, meta)
