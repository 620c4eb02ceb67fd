"""The three-vector SLQ's memory rows: one probe's run (30 steps, compiled only) by XLA's count
against `blocks.product_bytes` with `three_term.vector_bytes`, on pytrees and flat vectors; the
command line: experiments/bench/three_term_memory.py."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from experiments.bench import peers, peers_data
from landscape.core import blocks, layout, operator, three_term
from landscape.probes import spectra


@functools.partial(jax.jit, static_argnames=("objective", "storage"))
def _flat_run(objective: Any, params: Any, inputs: Any, key: jax.Array, storage: Any) -> Any:
    """The flat branch of `three_vectors.runs_in_three_vectors`, one probe."""
    op = operator.hessian_operator(objective, params, inputs)
    start = layout.probe(key, jnp.zeros((), jnp.int32), "rademacher", params, None)
    return three_term.extract(three_term.run(op.matvec, start, 30, storage)).alphas


def measured(point: Any, storage: str | None, pytrees: bool) -> tuple[int, float]:
    """One probe's run in bytes: XLA's count (temporaries, arguments and output less the
    parameters and data) and the estimate, on pytrees or flat vectors."""
    objective, inputs = point.shared
    dim, key = point.num_params, jax.random.key(0)
    resident = 4 * dim + sum(np.asarray(x).nbytes for x in jax.tree.leaves(inputs))
    if pytrees:
        lowered = spectra.slq_block.lower(
            objective, point.params, inputs, key, np.zeros(1, np.int32), 30, "rademacher",
            False, None, "three", storage,
        )  # fmt: skip
    else:
        lowered = _flat_run.lower(objective, point.params, inputs, key, storage)
    made = lowered.compile().memory_analysis()
    assert made is not None, "this backend gives no memory analysis"
    held = (
        made.temp_size_in_bytes + made.argument_size_in_bytes
        + made.output_size_in_bytes - resident
    )  # fmt: skip
    kept = three_term.vector_bytes(dim, 4, "three", 30, storage, pytrees)
    return held, blocks.product_bytes(point, kept)


def rows(width: int, examples: int) -> list[str]:
    """One row per (vectors, path): bytes a parameter, XLA's and the estimate's."""
    arrays = peers_data.mlp_arrays(width)
    arrays["x"], arrays["y"] = arrays["x"][:examples], arrays["y"][:examples]
    point = peers.mlp_point(arrays)
    dim, found = point.num_params, []
    for storage in (None, "bfloat16"):
        for pytrees in (True, False):
            held, estimate = measured(point, storage, pytrees)
            cells = [f"{dim:.3g}", storage or "float32", "pytrees" if pytrees else "flat"]
            cells += [f"{held / dim:.1f}", f"{estimate / dim:.1f}", f"{estimate / held:.2f}"]
            found.append("| " + " | ".join(cells) + " |")
    return found
