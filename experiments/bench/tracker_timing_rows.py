"""The tracker benchmark's problem (the MLP of docs/guide/own_loop.md and its data) and its
helpers; the group, its flag and its rows: experiments/bench/tracker_timing.py."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

EVERY, STEPS, LR = 25, 1000, 0.4


class MLP(nn.Module):
    """The page's model: two tanh layers of `features`, 10 outputs."""

    features: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = jnp.tanh(nn.Dense(self.features)(x))
        x = jnp.tanh(nn.Dense(self.features)(x))
        return nn.Dense(10)(x)


def problem(n: int = 2048, features: int = 256) -> tuple[Any, Any, Callable]:
    """(params, batch, loss): the page's noisy-label data and its mean squared error."""
    model = MLP(features)
    x = jax.random.normal(jax.random.key(0), (n, 32))
    teacher = jax.random.normal(jax.random.key(1), (32, 10))
    noise = 2.0 * jax.random.normal(jax.random.key(2), (n, 10))
    y = jax.nn.one_hot(jnp.argmax(x @ teacher + noise, axis=-1), 10)
    params = model.init(jax.random.key(3), x[:1])["params"]

    def loss(params: Any, batch: Any) -> jax.Array:
        x, y = batch
        return 0.5 * jnp.mean(jnp.sum((model.apply({"params": params}, x) - y) ** 2, axis=-1))

    return params, (x, y), loss


def timed(call: Callable[..., Any], *args: Any) -> tuple[float, Any]:
    """The seconds of one call (its outputs ready) and its outputs."""
    t0 = time.perf_counter()
    out = jax.block_until_ready(call(*args))
    return time.perf_counter() - t0, out


def num_params(params: Any) -> int:
    """The number of parameters in a pytree."""
    return int(sum(np.size(leaf) for leaf in jax.tree.leaves(params)))
