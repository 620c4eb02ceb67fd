"""The functional tracker's cost in a plain optax loop (`python -m experiments.benchmark
--only=tracker`): the 32 -> 256 -> 256 -> 10 tanh MLP of docs/guide/own_loop.md, full-batch SGD
on 2048 examples at lr 0.4, λ_max every 25 steps by `landscape.tracker` at several num_iters,
each measurement timed against the training steps around it, its error against a 40-step
reference; and a new Point with `lanczos_spectrum` from Python per measurement, the way
without the tracker. Medians over the run; the measurements alternate with the steps."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import flags

import landscape

EVERY, STEPS, LR = 25, 1000, 0.4
_ITERS = flags.DEFINE_list("tracker.iters", ["3", "5", "8"], "Lanczos steps a measurement.")


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


def _timed(call: Callable[..., Any], *args: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = jax.block_until_ready(call(*args))
    return time.perf_counter() - t0, out


def bench_tracker(repeats: int, one_by_one: int) -> dict:
    """Rows: the training step; per num_iters (`--tracker.iters`) the measurement's seconds, in
    training steps, the cost of one every 25 steps against the training time, and λ_max's median
    relative error against the reference; the new-Point-per-measurement way at 20 Lanczos
    steps."""
    del repeats, one_by_one
    iters = tuple(int(m) for m in _ITERS.value)
    params, batch, loss = problem()
    optimizer = optax.sgd(LR)

    @jax.jit
    def train_step(params: Any, opt_state: Any) -> tuple[Any, Any]:
        updates, opt_state = optimizer.update(jax.grad(loss)(params, batch), opt_state)
        return optax.apply_updates(params, updates), opt_state

    trackers = {m: landscape.tracker(loss, num_iters=m) for m in (*iters, 40)}
    states = {m: t.init(params, jax.random.key(4)) for m, t in trackers.items()}
    opt_state, steps = optimizer.init(params), []
    seconds: dict[int, list[float]] = {m: [] for m in trackers}
    errors: dict[int, list[float]] = {m: [] for m in iters}
    old_way: list[float] = []
    for step in range(STEPS + 1):
        if step % EVERY == 0:
            found = {}
            for m, t in trackers.items():
                took, (found[m], states[m]) = _timed(t.update, states[m], params, batch)
                seconds[m].append(took)
            reference = float(found[40].lambda_max)
            for m in iters:
                errors[m].append(abs(float(found[m].lambda_max) - reference) / reference)
            if step % (4 * EVERY) == 0:
                point = landscape.Point(params, objective=loss, inputs=batch)
                old_way.append(_timed(landscape.lanczos_spectrum, point, 20)[0])
        took, (params, opt_state) = _timed(train_step, params, opt_state)
        steps.append(took)
    step_s = statistics.median(steps[1:])
    rows: dict[str, Any] = {"train_step": dict(ms=1e3 * step_s, D=_size(params))}
    for m in iters:
        each = statistics.median(seconds[m][1:])  # the first compiles
        rows[f"tracker_{m}_iters"] = dict(
            ms=1e3 * each, in_steps=each / step_s, every_25=each / (EVERY * step_s),
            median_rel_error=statistics.median(errors[m][1:]), target_every_25=0.2,
        )  # fmt: skip
    each = statistics.median(old_way[1:])
    rows["new_point_lanczos_spectrum_20"] = dict(
        ms=1e3 * each, in_steps=each / step_s, every_25=each / (EVERY * step_s)
    )
    for name, row in rows.items():
        print(f"  {name}: {row}", flush=True)
    return rows


def _size(params: Any) -> int:
    return int(sum(np.size(leaf) for leaf in jax.tree.leaves(params)))
