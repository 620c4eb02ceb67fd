"""The three-vector SLQ's memory estimate against XLA's own count on one device: one probe's
run of 30 steps (compiled only) on a tanh MLP holds what `blocks.product_bytes` with
`three_term.vector_bytes` says, float32 and bfloat16 vectors, on pytrees (`spectra.slq_block`
on one device) and on flat vectors (the path over a mesh), within a quarter
(docs/guide/foundation_scale.md, "The estimate against XLA")."""

import pytest

from experiments.bench import peers, peers_data
from experiments.bench.three_term_memory_rows import measured
from landscape.core import three_vectors


@pytest.mark.parametrize("pytrees", [True, False], ids=["pytrees", "flat"])
@pytest.mark.parametrize("storage", [None, "bfloat16"], ids=["float32", "bfloat16"])
def test_a_three_vector_runs_estimate_is_within_a_quarter_of_xlas_count(storage, pytrees):
    arrays = peers_data.mlp_arrays(256)
    arrays["x"], arrays["y"] = arrays["x"][:32], arrays["y"][:32]  # vectors, not activations
    point = peers.mlp_point(arrays)
    objective, _ = point.shared
    dim = point.num_params
    assert three_vectors.on_pytrees(objective, storage)
    held, estimate = measured(point, storage, pytrees)
    assert 0.75 <= estimate / held <= 1.25, (estimate / dim, held / dim)
