"""SLQ's runs in three vectors of D (`core/three_term.py`) with the vectors laid out as the
parameters: the product takes and gives pytrees (the gradient linearised at the parameters),
so no flat vector is cut into the leaves before a product nor joined from them after, which
XLA holds as a vector of D more (docs/design/curvature.md, "Densities in three vectors").
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
from jax.flatten_util import ravel_pytree

from landscape.core import operator, preconditioner, three_term
from landscape.core.batches import MeanOverBatches
from landscape.core.lanczos import Tridiagonal
from landscape.core.layout import Layout
from landscape.typing import PyTree


def on_pytrees(objective: operator.Objective, storage: str | None) -> bool:
    """Whether the runs take their products on pytrees (`pytree_product`): the Hessian of a
    plain objective, on one device or split over a mesh as the parameters are, under no option
    but the run's own storage; the flat operator's vectors elsewhere (batches, the Gauss-Newton
    matrix, a preconditioner, finite differences)."""
    options = operator.options_of(objective)
    plain = getattr(objective, "objective", objective)
    special = (MeanOverBatches, operator.GaussNewtonSplit, preconditioner.Preconditioned)
    own = options.finite_difference is None and options.storage in (None, storage)
    return own and not isinstance(plain, special)


def pytree_product(objective: operator.Objective, params: PyTree, inputs: PyTree) -> Callable:
    """v -> H v on pytrees shaped as `params`, the gradient linearised once at them (a storage
    option is the run's own: its vectors are kept so rounded, so nothing is rounded here)."""
    plain = getattr(objective, "objective", objective)
    _, linear = jax.linearize(jax.grad(lambda p: plain(p, inputs)), params)
    return linear


def runs_in_three_vectors(
    objective: operator.Objective,
    params: PyTree,
    inputs: PyTree,
    layout: Layout | None,
    starts: jax.Array,
    num_iters: int,
    storage: str | None,
    flat_matvec: Callable[[jax.Array], jax.Array],
    steps: jax.Array | None = None,
    pytrees: bool | None = None,
) -> Tridiagonal:
    """Each start's run (K, D) of `steps` steps (default num_iters, T's rows) in three vectors:
    on pytrees (split as the parameters over a mesh) where `pytrees` (None: where `on_pytrees`
    on one device), else on the flat vectors through `flat_matvec`."""
    mesh_layout = layout if layout is not None and layout.mesh is not None else None
    if pytrees is None:
        pytrees = on_pytrees(objective, storage) and mesh_layout is None
    if not pytrees:
        short = functools.partial(three_term.run, flat_matvec, num_iters=num_iters, steps=steps)
        return jax.vmap(lambda v: three_term.extract(short(v, storage=storage)))(starts)
    unravel = ravel_pytree(params)[1] if mesh_layout is None else mesh_layout.from_flat
    product = pytree_product(objective, params, inputs)
    short = functools.partial(
        three_term.run, product, num_iters=num_iters, storage=storage, steps=steps
    )
    if starts.shape[0] == 1:  # a block of one probe unbatched: vmapped, XLA held 4 bytes more
        return jax.tree.map(lambda x: x[None], three_term.extract(short(unravel(starts[0]))))
    return jax.vmap(lambda v: three_term.extract(short(unravel(v))))(starts)
