"""The finite-difference table's rows: exact Hessian-vector products against central differences
of the gradient over random unit directions, and its markdown; the command line:
experiments/bench/finite_differences.py."""

from __future__ import annotations

import statistics
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from experiments.bench import peers, peers_data
from landscape.core import operator

EPSILONS = tuple(float(f"{10 ** (-k / 2):.0e}") for k in range(15))  # 1, 3e-1, ..., 1e-7
DIRECTIONS = 3


def table(dtype: str = "float32", dim: int = 10_000, directions: int = DIRECTIONS) -> dict:
    """{"dtype", "D", "fd": {ε: median relative error}, "exact": the exact product's median
    relative error in `dtype`}, every error against float64's exact product at the point
    rounded to `dtype`."""
    arrays = peers_data.mlp_arrays(peers_data.hidden_for(dim))
    with jax.enable_x64(True):
        point = peers.mlp_point(arrays, jnp.dtype(dtype))
        params, (x, y) = point.params, point.inputs
        wide = jax.tree.map(lambda a: a.astype(jnp.float64), params)
        wide_inputs = (x.astype(jnp.float64), y)
        rng = np.random.default_rng(0)
        fd: dict[float, list[float]] = {eps: [] for eps in EPSILONS}
        exact: list[float] = []
        for _ in range(directions):
            v = rng.standard_normal(point.num_params)
            v = jnp.asarray(v / np.linalg.norm(v), dtype)
            reference = _exact(peers.mlp_objective, wide, wide_inputs, v.astype(jnp.float64))
            exact.append(relative_error(_exact(peers.mlp_objective, params, (x, y), v), reference))
            for eps in EPSILONS:
                product = operator.finite_difference_product(
                    peers.mlp_objective, params, (x, y), v, eps, flat=True
                )
                fd[eps].append(relative_error(product, reference))
    return {
        "dtype": dtype,
        "D": point.num_params,
        "fd": {eps: statistics.median(errors) for eps, errors in fd.items()},
        "exact": statistics.median(exact),
    }


def _exact(objective: Any, params: Any, inputs: Any, v: jax.Array) -> jax.Array:
    return operator.products(objective, params, inputs, v[None])[0]


def relative_error(product: jax.Array, reference: jax.Array) -> float:
    """|product - reference| / |reference| in float64."""
    difference = np.asarray(product, np.float64) - np.asarray(reference)
    return float(np.linalg.norm(difference) / np.linalg.norm(np.asarray(reference)))


def markdown(tables: list[dict]) -> str:
    """The tables side by side: one row per ε, the exact product's row last."""
    head = "| ε | " + " | ".join(f"{t['dtype']} finite difference" for t in tables) + " |"
    lines = [head, "|---" * (len(tables) + 1) + "|"]
    for eps in EPSILONS:
        lines.append(f"| {eps:.0e} | " + " | ".join(f"{t['fd'][eps]:.1e}" for t in tables) + " |")
    lines.append("| exact (ours) | " + " | ".join(f"{t['exact']:.1e}" for t in tables) + " |")
    best = [(t, min(t["fd"], key=t["fd"].get)) for t in tables]
    notes = [f"{t['dtype']}: best ε = {e:.0e}, {t['fd'][e]:.1e}" for t, e in best]
    return "\n".join(lines) + f"\n\nD = {tables[0]['D']}; " + "; ".join(notes) + "."
