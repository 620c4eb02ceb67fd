"""A product's memory estimate against XLA's own count on one device over depth: a deep tanh
MLP's product holds v and H v flat, one of them as the parameters lie and its largest leaf
once more, not four vectors of D (`blocks.product_bytes`; docs/guide/foundation_scale.md,
"The estimate against XLA"). Compiled only."""

import pytest

from experiments.bench import three_term_memory_rows
from experiments.bench.depth_memory_rows import deep_mlp_point, product_held, search_held


@pytest.fixture(scope="module")
def deep():
    return deep_mlp_point(12, 300)  # D = 1.0e6, the largest leaf 9% of it


def test_a_deep_models_product_holds_three_vectors_and_its_largest_leaf(deep):
    held, estimate = product_held(deep)
    dim = deep.num_params
    assert 0.9 <= estimate / held <= 1.1, (estimate / dim, held / dim)
    assert held < 0.85 * 4 * 4 * dim  # four vectors of D (16 bytes a parameter): 1.27x over


@pytest.mark.parametrize("pytrees", [True, False], ids=["pytrees", "flat"])
def test_a_deep_models_three_vector_run_is_within_a_tenth(deep, pytrees):
    held, estimate = three_term_memory_rows.measured(deep, None, pytrees)
    assert 0.9 <= estimate / held <= 1.1, (estimate / deep.num_params, held / deep.num_params)


def test_a_search_in_bfloat16_holds_its_vectors_in_half_the_bytes(deep):
    """The search's 20 vectors as bfloat16 (`storage="bfloat16"`, held as its bits): XLA's
    count within a tenth of the estimate, and below float32's by at least 15 of the 40 bytes
    a parameter its vectors save (a restart's block and a step's vectors stay float32)."""
    held, estimate = search_held(deep, "bfloat16")
    wide, _ = search_held(deep)
    dim = deep.num_params
    assert 0.9 <= estimate / held <= 1.1, (estimate / dim, held / dim)
    assert wide - held >= 15 * dim, (wide / dim, held / dim)
