"""The three-vector SLQ's memory estimate against XLA's own count on one device: one probe's
run of 30 steps (compiled only) on a tanh MLP holds what `blocks.product_bytes` with
`three_term.vector_bytes` says, float32 and bfloat16 vectors, on pytrees (`spectra.slq_block`
on one device) and on flat vectors (the path over a mesh), within a quarter
(docs/guide/foundation_scale.md, "The estimate against XLA")."""

import functools

import jax
import numpy as np
import pytest

from experiments.bench import peers, peers_data
from landscape.core import layout, three_term
from landscape.probes import blocks, operator, spectra, three_vectors


@functools.partial(jax.jit, static_argnames=("objective", "storage"))
def _flat_run(objective, params, inputs, key, storage):
    """The flat branch of `three_vectors.runs_in_three_vectors`, one probe."""
    op = operator.hessian_operator(objective, params, inputs)
    start = layout.probe(key, 0, "rademacher", params, None)
    return three_term.extract(three_term.run(op.matvec, start, 30, storage)).alphas


@pytest.mark.parametrize("pytrees", [True, False])
@pytest.mark.parametrize("storage", [None, "bfloat16"])
def test_a_three_vector_runs_estimate_is_within_a_quarter_of_xlas_count(storage, pytrees):
    arrays = peers_data.mlp_arrays(256)
    arrays["x"], arrays["y"] = arrays["x"][:32], arrays["y"][:32]  # vectors, not activations
    point = peers.mlp_point(arrays)
    objective, inputs = point.shared
    dim, key = point.num_params, jax.random.key(0)
    assert three_vectors.on_pytrees(objective, None, storage)
    if pytrees:
        lowered = spectra.slq_block.lower(
            objective, point.params, inputs, key, np.zeros(1, np.int32), 30, "rademacher",
            False, None, "three", storage,
        )  # fmt: skip
    else:
        lowered = _flat_run.lower(objective, point.params, inputs, key, storage)
    analysis = lowered.compile().memory_analysis()
    resident = 4 * dim + sum(np.asarray(x).nbytes for x in jax.tree.leaves(inputs))
    held = (
        analysis.temp_size_in_bytes + analysis.argument_size_in_bytes
        + analysis.output_size_in_bytes - resident
    )  # fmt: skip
    kept = three_term.vector_bytes(dim, 4, "three", 30, storage, pytrees)
    estimate = blocks.product_bytes(point, kept)
    assert 0.75 <= estimate / held <= 1.25, (estimate / dim, held / dim)
