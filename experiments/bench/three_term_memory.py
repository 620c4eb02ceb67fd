"""One probe's three-vector SLQ (30 steps) by XLA's count (`memory_analysis()`: temporaries,
arguments and output less the parameters and data) against `blocks.product_bytes` with
`three_term.vector_bytes`, on pytrees (one device's path) and flat vectors (a mesh's), float32
and bfloat16, on the peers MLP (64 -> h -> h -> 10, 64 examples), one device, compiled only:

    python -m experiments.bench.three_term_memory --width=1380

docs/guide/foundation_scale.md, "The estimate against XLA", has its rows at D = 2e6.
"""

from __future__ import annotations

import argparse
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from experiments.bench import peers, peers_data
from landscape.core import layout, three_term
from landscape.probes import blocks, operator, spectra


@functools.partial(jax.jit, static_argnames=("objective", "storage"))
def _flat_run(objective: Any, params: Any, inputs: Any, key: jax.Array, storage: Any) -> Any:
    """The flat branch of `three_vectors.runs_in_three_vectors`, one probe."""
    op = operator.hessian_operator(objective, params, inputs)
    start = layout.probe(key, jnp.zeros((), jnp.int32), "rademacher", params, None)
    return three_term.extract(three_term.run(op.matvec, start, 30, storage)).alphas


def rows(width: int, examples: int) -> list[str]:
    """One row per (vectors, path): bytes a parameter, XLA's and the estimate's."""
    arrays = peers_data.mlp_arrays(width)
    arrays["x"], arrays["y"] = arrays["x"][:examples], arrays["y"][:examples]
    point = peers.mlp_point(arrays)
    objective, inputs = point.shared
    dim, key = point.num_params, jax.random.key(0)
    resident = 4 * dim + sum(np.asarray(x).nbytes for x in jax.tree.leaves(inputs))
    found = []
    for storage in (None, "bfloat16"):
        for pytrees in (True, False):
            if pytrees:
                lowered = spectra.slq_block.lower(
                    objective, point.params, inputs, key, np.zeros(1, np.int32), 30,
                    "rademacher", False, None, "three", storage,
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
            estimate = blocks.product_bytes(point, kept)
            cells = [f"{dim:.3g}", storage or "float32", "pytrees" if pytrees else "flat"]
            cells += [f"{held / dim:.1f}", f"{estimate / dim:.1f}", f"{estimate / held:.2f}"]
            found.append("| " + " | ".join(cells) + " |")
    return found


def main() -> None:
    """Print the rows for the width asked (`--width`, `--examples`)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=1380, help="h (1380: D = 2.01e6)")
    parser.add_argument("--examples", type=int, default=64)
    args = parser.parse_args()
    print("| D | vectors | path | XLA, bytes a parameter | estimate | estimate / XLA |")
    print("|---|---|---|---|---|---|")
    for line in rows(args.width, args.examples):
        print(line, flush=True)


if __name__ == "__main__":
    main()
