"""Where a point's data lives, asked in one place: the operator owns the loop over the data
(curvlinops' shape), so no probe branches on it. `of(points, listed, caller)` gives a `Memory`
(one batch, batches stacked, a list of points, a mesh layout: each quantity one compiled
program) or a `stream.Streamed` (`landscape.stream`: the same quantities, a pass over the
source a product or a block of them), and both answer the same questions: the loss and its
gradient, products, Lanczos (`core.lanczos` run whole under a fori_loop, or a step a pass), the
search's calls, losses at other parameters. docs/design/curvature.md, "One path"."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.flatten_util import ravel_pytree

from landscape import trees
from landscape.core import batches as batches_lib
from landscape.core import compiled, lanczos, operator
from landscape.core import layout as layout_lib
from landscape.core.compiled import Objective
from landscape.core.layout import Layout
from landscape.core.stream import Streamed
from landscape.point import Point
from landscape.trees import unravel_numpy
from landscape.typing import PyTree


def of(points: Sequence[Point], listed: bool = False, caller: str = "") -> Memory | Streamed:
    """The points' data: `Streamed` over a `landscape.stream` (one point at a time: one sentence
    for a list), `Memory` otherwise."""
    if not batches_lib.streams(points[0].batches):
        return Memory(list(points), listed)
    if listed:
        raise TypeError(f"{caller}: give points over a streamed dataset one at a time.")
    return Streamed(points[0])


class Memory:
    """Data in memory: each quantity one compiled program over the point's inputs (a list of
    points: vmapped over their stack; over a mesh: in the params' layout)."""

    def __init__(self, points: list[Point], listed: bool) -> None:
        self.points, self.listed, self.point = points, listed, points[0]
        self.block_size: int | None = None  # the memory policy sizes the blocks
        self.layout = None if listed else layout_lib.spread(self.point.params, self.point.batches)

    @functools.cached_property
    def stacked(self) -> tuple[Objective, PyTree, PyTree]:
        """`compiled.arguments`, made once for every block of a call."""
        return compiled.arguments(self.points, self.listed)

    def one_evaluation(self) -> tuple[Objective, PyTree]:
        """(objective, inputs) of one loss evaluation, what memory estimates trace."""
        return self.point.shared

    def value_and_gradient(self) -> tuple[np.ndarray, PyTree]:
        """(loss, gradient pytree), a leading axis for a list of points: numpy, a leaf over
        several devices kept there (`trees.kept`)."""
        arguments = compiled.arguments(self.points, self.listed)
        loss, tree = compiled.value_and_grad(*arguments, batched=self.listed)
        return np.asarray(loss), trees.kept(tree)

    def product_tree(self, objective: Objective, v: PyTree, eps: float | None) -> PyTree:
        """H v for v shaped like the params (by central differences at `eps`)."""
        params, inputs = self.point.params, self.point.shared[1]
        if eps is not None:
            return operator.finite_difference_product(
                objective, params, inputs, v, eps, flat=False, layout=self.layout
            )
        return compiled.hvp(objective, params, inputs, v, batched=False, layout=self.layout)

    def product_flat(self, objective: Objective, v: Any, eps: float | None) -> Any:
        """H v of a flat v ((D,) or (D, 1)) in `ravel_pytree`'s order, shaped as v; over a mesh
        split into the params' leaves on the host and put as they lie (nothing of size D
        gathered on a device)."""
        params, inputs = self.point.params, self.point.shared[1]
        if self.layout is not None:
            tree = jax.tree.map(
                lambda x, p: jax.device_put(x, p.sharding),
                unravel_numpy(params, np.asarray(v).reshape(-1)),
                params,
            )
            product = self.product_tree(objective, tree, eps)
            flat = np.concatenate([trees.host(x).ravel() for x in jax.tree.leaves(product)])
            return flat.reshape(np.shape(v))
        if eps is not None:
            return operator.finite_difference_product(objective, params, inputs, v, eps, flat=True)
        return compiled.hvp_of_flat(objective, params, inputs, v)

    def needs_memory(self, caller: str, what: str, instead: str) -> None:
        """What takes the data in memory (an option of the products) takes this: no sentence."""

    def formed(
        self, objective: Objective, columns: int, progress: Any, caller: str, whole: Callable
    ) -> list[tuple[Any, Any, Any]]:
        """(loss, flat gradient, D x D matrix) of each point: `whole()`, its compiled programs."""
        return whole()

    def tridiagonal(
        self, objective: Objective, key: jax.Array, num_iters: int, progress: Any, check: Callable
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, PyTree]:
        """(alphas, betas, loss, gradient pytree) of Lanczos from `key`'s start: `lanczos.run`
        and the gradient in one program, once `check()` (the memory policy's plan) passes and
        gives the basis's rows (num_iters steps an argument)."""
        rows, inputs, steps = check(), self.point.shared[1], np.int32(num_iters)
        found = _tridiagonal(objective, self.point.params, inputs, key, steps, rows, self.layout)
        alphas, betas, loss = (np.asarray(x) for x in found[:3])
        return alphas[:num_iters], betas[: num_iters - 1], loss, trees.kept(found[3])

    def slq(
        self, objective: Objective, key: jax.Array, num_probes: int, num_iters: int,
        probe: str, basis: str, progress: Any, whole: Callable,
    ) -> tuple[list[tuple[np.ndarray, np.ndarray]], str]:  # fmt: skip
        """(each point's SLQ (alphas, betas), the basis used): `whole()`, blocks of probes a
        compiled program each (`spectra.slq_block`)."""
        return whole()

    def start(self, state: Any) -> Any:
        """What `block` carries: the state itself."""
        return state

    def block(self, objective: Objective, step: Any, carry: Any, fixed: tuple, args: tuple) -> Any:
        """One block of a probe (`traces.Step`) in one program, `step.fused`."""
        _, params, inputs = self.stacked
        return step.fused(objective, params, inputs, carry, fixed, args, self.listed, self.layout)

    def finish(self, step: Any, carry: Any, fixed: tuple) -> Any:
        """The state after the last block: the carry itself."""
        return carry

    def outputs(
        self, objective: Objective, step: Any, fixed: tuple, indices: np.ndarray
    ) -> tuple[Any, ...]:
        """A block's outputs (`step.fused`), one program."""
        _, params, inputs = self.stacked
        return step.fused(objective, params, inputs, fixed, indices, self.listed, self.layout)

    def searcher(self, advance: Callable, progress: Any) -> tuple[Callable, Layout | None]:
        """The search's call (`eigen_search.advance`, one program) and the layout of its vectors."""
        return advance, self.layout

    def certify(
        self, objective: Objective, vectors: np.ndarray, epsilons: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(H v for each row of `vectors`, the losses along them at `epsilons`), one program."""
        products, losses = _certify(
            objective, self.point.params, self.point.shared[1], vectors, epsilons
        )
        return np.asarray(products), np.asarray(losses)

    def mean_of(self, fn: Callable, args: tuple, static: tuple = ()) -> np.ndarray:
        """fn(objective, inputs, *args, *static) (`fn` module-level, calling one compiled
        program: losses at other parameters)."""
        objective, inputs = self.point.shared
        return np.asarray(fn(objective, inputs, *args, *static))


@functools.partial(jax.jit, static_argnames=("objective", "num_iters", "layout"))
def _tridiagonal(
    objective: Objective,
    params: PyTree,
    inputs: PyTree,
    key: jax.Array,
    steps: jax.Array,
    num_iters: int,
    layout: Layout | None = None,
) -> tuple[jax.Array, ...]:
    """(alphas, betas, loss, gradient pytree): `steps` Lanczos steps in a basis of `num_iters`
    rows (the rest zero) and the point's gradient, one program; over a mesh the vectors in
    `layout` (each device its own shards)."""
    op = operator.hessian_operator(objective, params, inputs, layout)
    start_key, restart_key = jax.random.split(key)
    start = layout_lib.draw("normal", start_key, params, layout)  # alike in any layout
    storage = operator.options_of(objective).storage  # the basis's dtype (None: start's)
    if layout is None:
        gradient = ravel_pytree(params)[1](op.gradient)
        run = lanczos.run(op.matvec, start, num_iters, restart_key, storage=storage, steps=steps)
    else:
        gradient = layout.from_flat(op.gradient)
        place = lambda x: layout.clean(layout.place(x))  # noqa: E731  # one draw's projection
        run = lanczos.run(
            op.matvec, start, num_iters, restart_key, project=place, storage=storage, steps=steps
        )
    found = lanczos.extract(run)
    return found.alphas, found.betas, op.value, gradient


@functools.partial(jax.jit, static_argnames=("objective",))
def _certify(
    objective: Objective,
    params: PyTree,
    inputs: PyTree,
    vectors: jax.Array,
    epsilons: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """(H v for each row v of `vectors` (K, D), `losses_along` the rows at `epsilons`): the
    dense path's fresh products and `escape_directions`' second-order check in one program."""
    products = operator.hessian_operator(objective, params, inputs).rows(vectors)
    directions = jax.vmap(ravel_pytree(params)[1])(vectors)
    return products, compiled.losses_along(objective, params, inputs, directions, epsilons)
