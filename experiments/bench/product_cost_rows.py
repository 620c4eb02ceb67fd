"""The rows of `experiments/bench/product_cost.py`: a Hessian-vector product of the peers MLP
against an Adam training step of it, warm medians (`row`), and their markdown table."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import jax
import numpy as np
import optax

import landscape
from experiments.bench import peers, peers_data

REPEATS = 7  # warm calls, the median reported
PROBES = 100  # the Hutchinson trace whose time per product is the in-block cost


def _median_seconds(call: Callable[[], object]) -> float:
    """The median over REPEATS warm calls (one call first, compiling)."""
    jax.block_until_ready(call())
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        jax.block_until_ready(call())
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def row(size: str) -> dict[str, float]:
    """The seconds of a step, a product and a product in a block, and their ratios to the step."""
    point = peers.mlp_point(peers_data.mlp_arrays(peers_data.hidden_for(int(float(size)))))
    optimizer = optax.adam(1e-3)

    @jax.jit
    def step(params: dict, state: optax.OptState) -> tuple[dict, optax.OptState]:
        grads = jax.grad(peers.mlp_objective)(params, point.inputs)
        updates, state = optimizer.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    state = optimizer.init(point.params)
    seconds_step = _median_seconds(lambda: step(point.params, state))
    _, product = landscape.hvp_flat(point)
    v = np.random.default_rng(0).standard_normal(point.num_params).astype(np.float32)
    seconds_product = _median_seconds(lambda: product(v))
    trace = lambda: landscape.trace(point, PROBES, method="hutchinson", progress=None).value  # noqa: E731
    seconds_in_block = _median_seconds(trace) / PROBES
    return {
        "D": point.num_params,
        "step_s": seconds_step,
        "product_s": seconds_product,
        "in_block_s": seconds_in_block,
        "product_over_step": seconds_product / seconds_step,
        "in_block_over_step": seconds_in_block / seconds_step,
    }


def markdown(rows: list[dict[str, float]]) -> str:
    """The rows as a markdown table."""
    lines = [
        "| D | Adam step, ms | a product (`hvp_flat`), ms | a product in a block, ms | "
        "product / step | in a block / step |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['D']:,} | {1e3 * r['step_s']:.3g} | {1e3 * r['product_s']:.3g} | "
            f"{1e3 * r['in_block_s']:.3g} | {r['product_over_step']:.2f} | "
            f"{r['in_block_over_step']:.2f} |"
        )
    return "\n".join(lines)
