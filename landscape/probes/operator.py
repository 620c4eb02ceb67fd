"""The Hessian at a point as a linear operator inside a compiled program: `matvec(v_D)` and
`rows(V_KD)`, what every matrix-free probe multiplies by (legend: D parameters, K vectors).

One batch: the gradient linearised once (`jax.linearize`), so the forward and backward passes
run once per program and each product is one tangent pass. A dataset in batches
(`Point(..., batches=...)`): a `lax.scan` over the batches, each linearised in turn and its
products summed, memory one batch (docs/design/curvature.md, "At the size of real models").
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
from jax.flatten_util import ravel_pytree

from landscape import linalg
from landscape.point import MeanOverBatches
from landscape.typing import PyTree

Objective = Callable[[PyTree, PyTree], jax.Array]


class Operator(NamedTuple):
    """The loss, its flat gradient (D,) and the Hessian's products at the flat params `flat`."""

    flat: jax.Array
    value: jax.Array
    gradient: jax.Array
    matvec: Callable[[jax.Array], jax.Array]
    rows: Callable[[jax.Array], jax.Array]


def hessian_operator(objective: Objective, params: PyTree, inputs: PyTree) -> Operator:
    """The Hessian of objective(., inputs) at params, for use inside a traced program."""
    flat, unravel = ravel_pytree(params)
    if isinstance(objective, MeanOverBatches):
        return _over_batches(objective.per_batch, flat, unravel, inputs)
    value, gradient, linear = linalg.linearized_gradient(
        lambda x: objective(unravel(x), inputs), flat
    )
    return Operator(flat, value, gradient, linear, jax.vmap(linear))


@functools.partial(jax.jit, static_argnames=("objective",))
def products(objective: Objective, params: PyTree, inputs: PyTree, vectors: jax.Array) -> jax.Array:
    """H v for each row v of `vectors` (K, D), the gradient linearised once for all of them: the
    one program the eigenvalue search and its certificates share (one compile per model and K)."""
    return hessian_operator(objective, params, inputs).rows(vectors)


def _over_batches(
    per_batch: Objective, flat: jax.Array, unravel: Callable, batches: PyTree
) -> Operator:
    """The mean over the leading axis of `batches` of per_batch's loss, gradient and products,
    each accumulated batch by batch (`linalg.batched_gradient`)."""
    value, gradient, matvec, rows = linalg.batched_gradient(
        lambda x, batch: per_batch(unravel(x), batch), flat, batches
    )
    return Operator(flat, value, gradient, matvec, rows)


def value_and_grad(
    objective: Objective, params: PyTree, inputs: PyTree
) -> tuple[jax.Array, PyTree]:
    """(loss, gradient pytree): a dataset's accumulated batch by batch, without the
    rematerialisation its plain gradient would do."""
    if not isinstance(objective, MeanOverBatches):
        return jax.value_and_grad(objective)(params, inputs)
    operator = _over_batches(objective.per_batch, *ravel_pytree(params), inputs)
    return operator.value, ravel_pytree(params)[1](operator.gradient)
