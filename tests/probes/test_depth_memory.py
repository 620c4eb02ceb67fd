"""A product's memory estimate against XLA's own count on one device over depth: a deep tanh
MLP's product holds v and H v flat, one of them as the parameters lie and its largest leaf
once more, not four vectors of D (`blocks.product_bytes`; docs/guide/foundation_scale.md,
"The estimate against XLA"). Compiled only."""

import jax.numpy as jnp
import pytest

import landscape
from experiments.bench import three_term_memory_rows
from experiments.bench.activations_rows import transformer_point
from experiments.bench.depth_memory_rows import (
    deep_mlp_point,
    product_held,
    search_held,
    trace_held,
)
from landscape.core import blocks, budget


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


@pytest.mark.parametrize(
    "point",
    [lambda: deep_mlp_point(8, 300, 512), lambda: transformer_point(64, 2, 32, 32)],
    ids=["deep MLP, 512 examples", "transformer"],
)
def test_a_probes_activations_are_its_linearised_gradients_residuals(point):
    """Where the activations weigh (a Hutchinson block: the gradient linearised once for its
    products), the estimate counts the linearised gradient's residuals and one evaluation's
    peak (`blocks.activation_bytes`): within a quarter of XLA's count, where four loss
    evaluations' peaks fell to a fifth of it on the transformer and half on the deep MLP."""
    point = point()
    held, estimate = trace_held(point)
    four = estimate - blocks.activation_bytes(point) + 4 * budget.loss_bytes(point)
    assert 0.75 <= estimate / held <= 1.25, estimate / held
    assert four / held < 0.6, four / held


def test_the_residuals_a_loss_keeps_for_its_derivatives_in_closed_form():
    """L(w) = mean(sin(x w)) over n = 1000 fixed x (data) and w (the parameters): its backward
    pass keeps cos(x w), n numbers; the gradient x cos(x w) / n linearised with the loss keeps
    at least cos(x w) (the value's tangent) and sin(x w) (the gradient's); neither x nor w is
    counted, being resident before a call."""
    x = jnp.linspace(-1, 1, 1000, dtype=jnp.float32)
    point = landscape.Point({"w": jnp.ones(1000, jnp.float32)}, inputs=x,
                            objective=lambda p, x: jnp.mean(jnp.sin(x * p["w"])))  # fmt: skip
    assert budget.residual_bytes(point, linearised=False) == 4 * 1000
    assert budget.residual_bytes(point, linearised=True) >= 2 * 4 * 1000
