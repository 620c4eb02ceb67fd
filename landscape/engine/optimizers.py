"""The optimizers without their learning rates (optax, PyTorch semantics) and the learning-rate
schedules: learning rates stay traced per-run numbers applied by the step (`step.py`), so a grid
of them compiles once (docs/design/training.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import optax

from landscape.engine import config as config_lib
from landscape.typing import ArrayLike

Params = Any


OPTIMIZERS = ("sgd", "adam", "adamw")


SCHEDULES = ("constant", "warmup_cosine", "onecycle")


def default_optim_config() -> ml_collections.ConfigDict:
    """Every optimizer field, with PyTorch's defaults. Learning rates belong to the package."""
    return ml_collections.ConfigDict(
        dict(
            name="sgd",  # sgd | adam | adamw
            momentum=0.0,  # SGD heavy ball, PyTorch semantics (dampening 0)
            nesterov=False,
            weight_decay=0.0,  # sgd/adam: L2 added to the gradient; adamw: decoupled
            b1=0.9,
            b2=0.999,
            eps=1e-8,
            schedule="constant",  # constant | warmup_cosine | onecycle (multiplies every lr)
            warmup_steps=0,
            initial_lr_fraction=0.0,  # warmup_cosine, onecycle: lr at step 0 / peak lr
            final_lr_fraction=0.0,  # warmup_cosine, onecycle: lr at the last step / peak lr
            clip_norm=0.0,  # > 0: clip the gradient's global L2 norm to this first
            # (torch.nn.utils.clip_grad_norm_); 0: no clipping
        )
    )


def validate_optim(cfg: ml_collections.ConfigDict, prefix: str = "optim") -> None:
    o = cfg[prefix]
    config_lib.require_choice(cfg, f"{prefix}.name", OPTIMIZERS)
    config_lib.require_choice(cfg, f"{prefix}.schedule", SCHEDULES)
    config_lib.require_number(cfg, f"{prefix}.momentum", low=0, high=1, high_open=True)
    config_lib.require_number(cfg, f"{prefix}.weight_decay", low=0)
    config_lib.require_number(cfg, f"{prefix}.b1", low=0, high=1, high_open=True)
    config_lib.require_number(cfg, f"{prefix}.b2", low=0, high=1, high_open=True)
    config_lib.require_number(cfg, f"{prefix}.eps", low=0, low_open=True)
    config_lib.require_number(cfg, f"{prefix}.warmup_steps", low=0, integer=True)
    config_lib.require_number(cfg, f"{prefix}.initial_lr_fraction", low=0, high=1)
    config_lib.require_number(cfg, f"{prefix}.final_lr_fraction", low=0, high=1)
    config_lib.require_number(cfg, f"{prefix}.clip_norm", low=0)
    if o.nesterov:
        config_lib.require(
            o.name == "sgd" and o.momentum > 0,
            f"{prefix}.nesterov",
            o.nesterov,
            "False unless optim.name is 'sgd' with momentum > 0",
        )


def direction(
    optim: ml_collections.ConfigDict,
    decay_mask: Callable[[Params], Any] | None = None,
    dtype: Any = None,
) -> optax.GradientTransformation:
    """The optimizer without its learning rate (updates are -lr * schedule * direction), after
    clipping the gradient's global norm when optim.clip_norm > 0 (PyTorch clips before the step).
    `dtype`: the parameters' dtype, in which Adam's bias corrections are computed (`_adam`)."""
    clip = [optax.clip_by_global_norm(optim.clip_norm)] if optim.get("clip_norm", 0.0) else []
    decay = (
        [optax.add_decayed_weights(optim.weight_decay, mask=decay_mask)]
        if optim.weight_decay
        else []
    )
    if optim.name == "sgd":
        trace = (
            [optax.trace(decay=optim.momentum, nesterov=optim.nesterov)] if optim.momentum else []
        )
        rest = decay + trace
    elif optim.name == "adam":  # PyTorch Adam: weight decay is an L2 term in the gradient
        rest = decay + [_adam(optim.b1, optim.b2, optim.eps, dtype)]
    else:  # AdamW: decoupled decay, scaled by lr as in PyTorch
        rest = [_adam(optim.b1, optim.b2, optim.eps, dtype)] + decay
    return optax.chain(*clip, *rest) if clip or rest else optax.identity()


def _adam(b1: float, b2: float, eps: float, dtype: Any) -> optax.GradientTransformation:
    """optax.scale_by_adam, with the bias corrections 1 - b^t computed in `dtype` (None: as
    optax does, from Python floats: in float64 with x64 on). A float32 run then computes the
    same numbers with x64 on or off, the numbers optax computes with x64 off."""
    adam = optax.scale_by_adam(b1=b1, b2=b2, eps=eps)
    if dtype is None:
        return adam
    typed_b1, typed_b2 = jnp.dtype(dtype).type(b1), jnp.dtype(dtype).type(b2)

    def update(updates: Any, state: Any, params: Any = None) -> tuple[Any, Any]:
        mu = optax.tree.update_moment(updates, state.mu, b1, 1)
        nu = optax.tree.update_moment_per_elem_norm(updates, state.nu, b2, 2)
        count = optax.safe_increment(state.count)
        mu_hat = optax.tree.bias_correction(mu, typed_b1, count)
        nu_hat = optax.tree.bias_correction(nu, typed_b2, count)
        out = jax.tree.map(lambda m, v: m / (jnp.sqrt(v + 0.0) + eps), mu_hat, nu_hat)
        return out, optax.ScaleByAdamState(
            count=count, mu=mu, nu=optax.tree.cast_like(nu, state.nu)
        )

    return optax.GradientTransformation(adam.init, update)


def schedule(optim: ml_collections.ConfigDict, num_steps: int) -> optax.Schedule:
    """Multiplier of every learning rate at a step (1 at the peak).

    warmup_cosine: optax's linear warm-up over `warmup_steps` (peak at step warmup_steps), then a
    cosine to final_lr_fraction at num_steps. onecycle: PyTorch's OneCycleLR(anneal_strategy="cos",
    cycle_momentum=False, total_steps=num_steps, pct_start=warmup_steps / num_steps), as the Markov
    authors trained (notes/markov.md §13): a cosine *warm-up* too, peak at step warmup_steps - 1,
    and the cosine down reaches final_lr_fraction at the last step, num_steps - 1.
    """
    if optim.schedule == "constant":
        return lambda step: jnp.ones((), jnp.float32)
    if optim.schedule == "onecycle":
        return onecycle(
            optim.initial_lr_fraction, optim.final_lr_fraction, optim.warmup_steps, num_steps
        )
    return optax.warmup_cosine_decay_schedule(
        init_value=optim.initial_lr_fraction,
        peak_value=1.0,
        warmup_steps=optim.warmup_steps,
        decay_steps=max(num_steps, optim.warmup_steps + 1),
        end_value=optim.final_lr_fraction,
    )


def onecycle(initial: float, final: float, warmup_steps: int, num_steps: int) -> optax.Schedule:
    """torch.optim.lr_scheduler.OneCycleLR's multiplier (two phases, cosine annealing): from
    `initial` at step 0 up to 1 at step e = warmup_steps - 1 along a half cosine, then down to
    `final` at step num_steps - 1 along another; e <= 0 starts at the peak."""
    peak_step = float(warmup_steps - 1)
    last = float(max(num_steps - 1, peak_step + 1))

    def anneal(start: float, end: float, fraction: jax.Array) -> jax.Array:
        """PyTorch's _annealing_cos."""
        return end + (start - end) / 2.0 * (jnp.cos(jnp.pi * fraction) + 1.0)

    def multiplier(step: ArrayLike) -> jax.Array:
        step = jnp.asarray(step, jnp.float32)
        up = anneal(initial, 1.0, step / max(peak_step, 1.0))
        down = anneal(1.0, final, jnp.clip((step - peak_step) / (last - peak_step), 0.0, 1.0))
        return jnp.where(step <= peak_step, up, down) if peak_step > 0 else down

    return multiplier
