"""Dynamics of the recall model: initialisations of the theory, gradient flow on the exact
population loss, SGD/GD problems for the training engine, and readouts (jump times, order).

Time conventions: gradient flow time t; rescaled time tau = eps * t (notes §4.8); an SGD run with
learning rate eta and momentum mu covers t ~ eta * steps / (1 - mu) of flow time (notes C16).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from landscape import _checks
from landscape.engine import gradient_flow, training
from landscape.recall import model as model_lib
from landscape.recall import task as task_lib
from landscape.typing import ArrayLike, NDArray, PyTree

# ----------------------------------------------------------------------------- initialisations


def _check_model(model: object, caller: str) -> None:
    if not isinstance(model, model_lib.RecallModel):
        raise TypeError(
            f"{caller} expects a landscape.recall.RecallModel (e.g. RecallModel(k=3, "
            f"num_responses=3)) as model; got {type(model).__name__}."
        )


def _check_eps(eps: ArrayLike) -> None:
    """eps > 0 (elementwise for an array; a traced eps, in a sweep, is not checked)."""
    _checks.check_real(
        "eps", eps, low=0, low_open=True, scalar=False, meaning="the initialisation scale"
    )


def init_first_jump(model: model_lib.RecallModel, eps: ArrayLike) -> dict:
    """I_1 (notes §2.3): beta_1 = eps, every other beta 0, every w 0."""
    _check_model(model, "init_first_jump")
    _check_eps(eps)
    beta = jnp.zeros(model.num_heads).at[0].set(eps)
    return model_lib.init_params(model, beta)


def init_later_jump(
    model: model_lib.RecallModel, eps: ArrayLike, stage: int, big: ArrayLike
) -> dict:
    """I_h (notes §2.3): heads < h macroscopic (beta = big, w^i = big e_i), beta_h = eps, rest 0."""
    _check_model(model, "init_later_jump")
    _check_eps(eps)
    _checks.check_int(
        "stage", stage, 1, "the head h that jumps next, 1..num_heads", high=model.num_heads
    )
    _checks.check_real(
        "big",
        big,
        low=0,
        low_open=True,
        scalar=False,
        meaning="the macroscopic scale of the heads before h",
    )
    heads = jnp.arange(model.num_heads)
    beta = jnp.where(heads < stage - 1, big, jnp.where(heads == stage - 1, eps, 0.0))
    w = jnp.where((heads < stage - 1)[:, None], big * jnp.eye(model.num_heads, model.k), 0.0)
    return model_lib.init_params(model, beta, w)


def init_shape(
    model: model_lib.RecallModel,
    eps: ArrayLike,
    beta_shape: ArrayLike | Sequence[float],
    key: jax.Array | None = None,
    w_noise: float = 0.0,
) -> dict:
    """beta(0) = eps * shape (a vector) and w(0) = eps * w_noise * N(0, 1) (notes §4.7)."""
    _check_model(model, "init_shape")
    _check_eps(eps)
    _checks.check_real("beta_shape", beta_shape, scalar=False, meaning="one entry per head")
    if np.shape(beta_shape) != (model.num_heads,):
        raise ValueError(
            f"beta_shape has shape {np.shape(beta_shape)}: must be "
            f"({model.num_heads},), one entry per head (num_heads = "
            f"{model.num_heads})."
        )
    _checks.check_key("key", key)
    _checks.check_real("w_noise", w_noise, low=0, meaning="the relative scale of the w noise")
    beta = eps * jnp.asarray(beta_shape)
    window = model.k if model.window else task_lib.sequence_length(model.k)
    w: ArrayLike = jnp.zeros((model.num_heads, window), beta.dtype)
    if key is not None:  # drawn in beta's dtype (the config's), never the one x64 picks
        w = eps * w_noise * jax.random.normal(key, np.shape(w), beta.dtype)
    return model_lib.init_params(model, beta, w)


# ----------------------------------------------------------------------------- gradient flow

_DEFAULT_SETTINGS = gradient_flow.FlowSettings()


def population_flow(
    model: model_lib.RecallModel,
    params0: PyTree,
    save_times: ArrayLike,
    settings: gradient_flow.FlowSettings = _DEFAULT_SETTINGS,
) -> tuple[PyTree, NDArray, NDArray]:
    """Gradient flow on the exact DP population loss for a batch of runs (leading axis R).

    save_times: (R, S) times per run. Returns (params (R, S, ...), loss (R, S), ok (R,)).
    The compiled program is cached per (model, settings): later calls with the same shapes run
    without compiling.
    """
    params, loss, ok = _compiled_flow(model, settings)(params0, save_times)
    return jax.tree.map(np.asarray, params), np.asarray(loss), np.asarray(ok)


@functools.lru_cache(maxsize=16)
def _compiled_flow(
    model: model_lib.RecallModel, settings: gradient_flow.FlowSettings
) -> Callable[[PyTree, ArrayLike], tuple[PyTree, jax.Array, jax.Array]]:
    loss_fn = functools.partial(model_lib.population_loss, model=model)

    def one_run(params0: PyTree, save_times: jax.Array) -> tuple[PyTree, jax.Array, jax.Array]:
        params, ok = gradient_flow.gradient_flow(loss_fn, params0, save_times, settings)
        return params, jax.vmap(loss_fn)(params), ok

    return jax.jit(jax.vmap(one_run))


# ----------------------------------------------------------------------------- SGD / GD problems


def sgd_problem(
    model: model_lib.RecallModel,
    *,
    batch_size: int,
    sampler: str,
    init_fn: Callable[[jax.Array, training.HParams], PyTree],
    eval_size: int = 512,
) -> training.Problem:
    """The recall task for the training engine: fresh batches each step.

    sampler: "collisions" (exact fast sampler of notes §1; simplified model only), "tokens" (the
    token-level process) or "population" (no sampling: full-batch GD on the exact loss).
    hparams: "optim.lr" and the initialisation scale "init.eps".
    Snapshots: the exact population DP loss where a closed form exists (else the loss on a fixed
    evaluation set of `eval_size` token sequences), beta, layer-1 attention and 1^T w^h.
    """
    eval_loss = evaluation_loss(model, eval_size)

    def loss(
        params: PyTree, key: jax.Array, hp: training.HParams
    ) -> tuple[jax.Array, dict[str, jax.Array]]:
        if sampler == "population":
            return model_lib.population_loss(params, model), {}
        if sampler == "collisions":
            y = task_lib.sample_collisions(key, model.k, model.num_responses, batch_size)
            return model_lib.loss_collisions(params, y, model), {}
        tokens, target = task_lib.sample_tokens(key, model.k, model.num_responses, batch_size)
        return model_lib.loss_tokens(params, tokens, target, model), {}

    def snapshot(params: PyTree, hp: training.HParams) -> dict[str, jax.Array]:
        out = {
            "eval_loss": eval_loss(params),
            "w_sum": params["w"].sum(axis=-1),
            "attention": model_lib.layer1_attention(params, model),
        }
        if "beta" in params:
            out["beta"] = params["beta"]
        return out

    return training.Problem(
        init=init_fn, loss=loss, learning_rates=lambda hp: hp["optim.lr"], snapshot=snapshot
    )


def evaluation_loss(
    model: model_lib.RecallModel, eval_size: int = 512
) -> Callable[[PyTree], jax.Array]:
    """params -> the DP loss the SGD runs are evaluated by (the snapshots' eval_loss, the tracked
    curvature's loss): the exact population loss where a closed form exists, else the loss on
    `eval_size` token sequences drawn once from key 12345."""
    dp = model.clone(loss="dp")
    if has_closed_form(model):
        return functools.partial(model_lib.population_loss, model=dp)
    tokens, target = task_lib.sample_tokens(
        jax.random.key(12345), model.k, model.num_responses, eval_size
    )
    return lambda params: model_lib.loss_tokens(params, tokens, target, dp)


def has_closed_form(model: model_lib.RecallModel) -> bool:
    """The population loss has the closed form of notes §3 for the simplified model (A0-A3)."""
    return model.window and model.exact_query and model.response_only and model.qk == "beta"


# ----------------------------------------------------------------------------- readouts


def crossing_times(
    times: NDArray, values: NDArray, thresholds: Sequence[float] | NDArray
) -> NDArray:
    """First time each run's decreasing curve goes below each threshold (linear interpolation).

    times, values: (R, S); thresholds: (J,). Returns (R, J), NaN where never crossed.
    """
    times, values = np.atleast_2d(times), np.atleast_2d(values)
    out = np.full((values.shape[0], len(thresholds)), np.nan)
    for r in range(values.shape[0]):
        for j, level in enumerate(thresholds):
            below = np.flatnonzero(values[r] < level)
            if below.size == 0:
                continue
            i = below[0]
            if i == 0:
                out[r, j] = times[r, 0]
                continue
            v0, v1 = values[r, i - 1], values[r, i]
            out[r, j] = times[r, i - 1] + (v0 - level) / (v0 - v1) * (times[r, i] - times[r, i - 1])
    return out


def jump_times(times: NDArray, losses: NDArray, levels: ArrayLike) -> NDArray:
    """(R, len(levels)-1): time the loss crosses the midpoint of consecutive plateau levels."""
    levels = np.asarray(levels)
    return crossing_times(times, losses, (levels[:-1] + levels[1:]) / 2)


def activation_order(times: NDArray, beta: NDArray, threshold: float) -> list[list[int]]:
    """Per run, the heads (0-based) in the order their |beta| first exceeds `threshold`."""
    orders = []
    for r in range(beta.shape[0]):
        first: dict[int, float] = {}
        for h in range(beta.shape[-1]):
            above = np.flatnonzero(np.abs(beta[r, :, h]) > threshold)
            if above.size:
                first[h] = times[r, above[0]] if np.ndim(times) == 2 else times[above[0]]
        orders.append(sorted(first, key=first.__getitem__))
    return orders


def focus_logit(w: NDArray) -> NDArray:
    """alpha_h = w^h_h - mean of w^h over the other offsets (notes §4.1); w (..., H, k)."""
    H, k = w.shape[-2:]
    own = np.stack([w[..., h, h] for h in range(H)], axis=-1)
    return own - (w.sum(axis=-1) - own) / (k - 1)
