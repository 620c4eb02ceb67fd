"""Where a point's data lives, asked in one place: the operator owns the loop over the data
(curvlinops' shape), so no probe branches on it. `of(points, listed, caller)` gives a `Memory`
(one batch, batches stacked, a list of points, a mesh layout: each quantity one compiled
program) or a `Streamed` (`landscape.stream`: the same quantities, a pass over the source a
product or a block of them, `stream.py`), and both answer the same questions: the loss and its
gradient, products, Lanczos (`core.lanczos` run whole under a fori_loop, or a step a pass), the
search's calls, losses at other parameters. docs/design/curvature.md, "One path"."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from landscape import trees
from landscape.core import batches as batches_lib
from landscape.core import lanczos
from landscape.core import layout as layout_lib
from landscape.core.layout import Layout
from landscape.point import Point
from landscape.probes import compiled, operator, stream
from landscape.probes.datasets import dtype_of, per_batch
from landscape.trees import ravel_numpy, unravel_numpy
from landscape.typing import PyTree

Objective = Callable[[PyTree, PyTree], jax.Array]


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
        """`arguments()`, made once for every block of a call."""
        return self.arguments()

    def arguments(self) -> tuple[Objective, PyTree, PyTree]:
        """(objective, params, inputs) of the compiled programs (a list's stacked)."""
        if self.listed:
            return compiled.stack(self.points)
        objective, inputs = self.point.shared
        return objective, self.point.params, inputs

    def one_evaluation(self) -> tuple[Objective, PyTree]:
        """(objective, inputs) of one loss evaluation, what memory estimates trace."""
        return self.point.shared

    def value_and_gradient(self) -> tuple[np.ndarray, PyTree]:
        """(loss, gradient pytree) as numpy, a leading axis for a list of points."""
        loss, tree = compiled.value_and_grad(*self.arguments(), batched=self.listed)
        return np.asarray(loss), jax.tree.map(np.asarray, tree)

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
            flat = np.concatenate([_host(x).ravel() for x in jax.tree.leaves(product)])
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
        and the gradient in one program, once `check()` (the memory policy's plan) passes."""
        check()
        inputs = self.point.shared[1]
        found = _tridiagonal(objective, self.point.params, inputs, key, num_iters, self.layout)
        return (*(np.asarray(x) for x in found[:3]), jax.tree.map(np.asarray, found[3]))

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
        """The search's call (`krylov.advance`, one program) and the layout of its vectors."""
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


class Streamed:
    """A `landscape.stream`: each quantity a pass over the source (`stream.py`), its vectors in
    `ravel_pytree`'s order on one device."""

    def __init__(self, point: Point) -> None:
        self.point, self.points, self.listed, self.layout = point, [point], False, None
        self.block_size: int | None = stream.BLOCK  # the products of one pass

    def one_evaluation(self) -> tuple[Objective, PyTree]:
        """The objective of one batch and the first batch."""
        objective, inputs = self.point.shared
        return per_batch(objective), inputs.first

    def value_and_gradient(self) -> tuple[np.ndarray, PyTree]:
        value, vector = stream.value_and_gradient(self.point, self.point.shared[0])
        return np.asarray(value), unravel_numpy(self.point.params, vector)

    def product_tree(self, objective: Objective, v: PyTree, eps: float | None) -> PyTree:
        return unravel_numpy(self.point.params, self.product_flat(objective, ravel_numpy(v), eps))

    def product_flat(self, objective: Objective, v: Any, eps: float | None) -> Any:
        return stream.product(self.point, objective, np.asarray(v).reshape(-1)).reshape(np.shape(v))

    def needs_memory(self, caller: str, what: str, instead: str) -> None:
        """One sentence for `what` (an option of the products), built for data in memory."""
        raise ValueError(
            f"{caller}: {what} needs the data in memory (one batch or Point(..., "
            f"batches=...)); {instead}."
        )

    def formed(
        self, objective: Objective, columns: int, progress: Any, caller: str, whole: Callable
    ) -> list[tuple[Any, Any, Any]]:
        """(loss, flat gradient, D x D matrix) of H (or G): `columns` products of unit vectors
        a pass over the data (`stream.dense`); `whole`, the in-memory programs, unused."""
        return [stream.dense(self.point, objective, columns, progress, caller)]

    def tridiagonal(
        self, objective: Objective, key: jax.Array, num_iters: int, progress: Any, check: Callable
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, PyTree]:
        """`lanczos.step` a pass over the data (`stream.tridiagonal`), its memory one chunk's
        (`check`, the in-memory program's plan, unused)."""
        alphas, betas, loss, grad = stream.tridiagonal(
            self.point, objective, key, num_iters, progress
        )
        return alphas, betas, loss, unravel_numpy(self.point.params, grad)

    def slq(
        self, objective: Objective, key: jax.Array, num_probes: int, num_iters: int,
        probe: str, basis: str, progress: Any, whole: Callable,
    ) -> tuple[list[tuple[np.ndarray, np.ndarray]], str]:  # fmt: skip
        """SLQ's runs, a group advanced together a step a pass over the data (`stream.slq`,
        each run's basis kept: `whole`, the in-memory blocks, unused)."""
        if basis == "three":
            raise ValueError(
                "spectral_density: basis='three' is not built for a streamed dataset: give "
                "basis='full' or 'auto' (a stream's runs keep their bases)."
            )
        runs = stream.slq(self.point, objective, key, num_probes, num_iters, probe, progress)
        return [runs], "full"

    def start(self, state: Any) -> Between:
        """What `block` carries: the state, no block yet."""
        return Between(state, None, None, None)

    def block(
        self, objective: Objective, step: Any, carry: Between, fixed: tuple, args: tuple
    ) -> Between:
        """One block of a probe (`traces.Step`): one program keeps the last block's products
        (`step.kept`) and gives this block's vectors (`step.vectors`), multiplied in a pass
        over the data (`stream.rows`)."""
        if carry.last is None:  # the first block: zero vectors and products keep nothing
            zeros = np.zeros((len(args[1]), self.point.num_params), dtype_of(self.point.params))
            carry = Between(carry.state, args, zeros, zeros)
        state, vectors = _split(step, self.point.params, *carry, fixed, args)
        return Between(
            state, args, vectors, stream.rows(self.point, objective, np.asarray(vectors))
        )

    def finish(self, step: Any, carry: Between, fixed: tuple) -> Any:
        """The state after the last block's products (`step.kept`)."""
        return _split(step, self.point.params, *carry, fixed, carry.last)[0]

    def outputs(
        self, objective: Objective, step: Any, fixed: tuple, indices: np.ndarray
    ) -> tuple[Any, ...]:
        """A block's vectors (`step.vectors`, one program), their products in a pass over the
        data, and `step.kept` of both on the host."""
        vectors = np.asarray(_vectors_of(step, self.point.params, fixed, indices))
        products = stream.rows(self.point, objective, vectors)
        return (step.kept(None, fixed, indices, vectors, products),)

    def searcher(self, advance: Callable, progress: Any) -> tuple[Callable, Layout | None]:
        """`advance`'s steps host-driven, a pass over the data a product (`stream.searcher`)."""
        return stream.searcher(self.point, progress), None

    def certify(
        self, objective: Objective, vectors: np.ndarray, epsilons: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """A pass for the products, one for the losses."""
        products = stream.rows(self.point, objective, vectors)
        directions = rows_like(self.point.params, vectors)
        return products, self.mean_of(batch_losses_along, (self.point.params, directions, epsilons))

    def mean_of(self, fn: Callable, args: tuple, static: tuple = ()) -> np.ndarray:
        """The mean over the stream's batches of fn(objective, batch, *args, *static), a pass."""
        return stream.mean_of(self.point, fn, args, static)


def _host(x: jax.Array) -> np.ndarray:
    return trees.host(x)


class Between(NamedTuple):
    """What a stream carries between blocks: the probe's state, the last block's arguments,
    vectors and products (kept by the next block's program)."""

    state: Any
    last: Any
    vectors: Any
    products: Any


@functools.partial(jax.jit, static_argnames=("step",), donate_argnames=("state",))
def _split(
    step: Any, params: PyTree, state: Any, last: tuple, vectors: jax.Array, products: jax.Array,
    fixed: tuple, block: tuple,
) -> tuple[Any, jax.Array]:  # fmt: skip
    """The state after the last block's products (`step.kept`) and the next block's vectors
    (`step.vectors`), one program between two passes over the data."""
    state = step.kept(state, fixed, last, vectors, products.astype(vectors.dtype))
    return step.vectors(params, state, fixed, block, None)


@functools.partial(jax.jit, static_argnames=("step",))
def _vectors_of(step: Any, params: PyTree, fixed: tuple, indices: jax.Array) -> jax.Array:
    """A block's vectors (`step.vectors`), one program."""
    return step.vectors(params, None, fixed, indices, None)[1]


@functools.partial(jax.jit, static_argnames=("objective", "num_iters", "layout"))
def _tridiagonal(
    objective: Objective,
    params: PyTree,
    inputs: PyTree,
    key: jax.Array,
    num_iters: int,
    layout: Layout | None = None,
) -> tuple[jax.Array, ...]:
    """(alphas, betas, loss, gradient pytree): Lanczos and the point's gradient, one program;
    over a mesh the vectors in `layout` (each device its own shards)."""
    op = operator.hessian_operator(objective, params, inputs, layout)
    start_key, restart_key = jax.random.split(key)
    start = layout_lib.draw("normal", start_key, params, layout)  # alike in any layout
    storage = operator.options_of(objective).storage  # the basis's dtype (None: start's)
    if layout is None:
        gradient = ravel_pytree(params)[1](op.gradient)
        run = lanczos.run(op.matvec, start, num_iters, restart_key, storage=storage)
    else:
        gradient = layout.from_flat(op.gradient)
        place = lambda x: layout.clean(layout.place(x))  # noqa: E731  # one draw's projection
        run = lanczos.run(op.matvec, start, num_iters, restart_key, project=place, storage=storage)
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
    return products, losses_along(objective, params, inputs, directions, epsilons)


@functools.partial(jax.jit, static_argnames=("objective",))
def losses_along(
    objective: Objective,
    params: PyTree,
    inputs: PyTree,
    directions: PyTree,
    epsilons: jax.Array,
) -> jax.Array:
    """L(θ + ε v) for each direction v (a pytree like the params, its leaves stacked on a
    leading axis of N: `rows_like`) and each ε of (E,), as (N, E + 1): column 0 is ε = 0,
    evaluated in the same batched program so that differences cancel rounding (pass ε and -ε
    for symmetric differences). In params form: over a mesh nothing of size D is gathered."""
    dtype = jnp.result_type(*jax.tree.leaves(params))
    steps = jnp.concatenate([jnp.zeros(1, dtype), epsilons.astype(dtype)])

    def loss_at(direction: PyTree, step: jax.Array) -> jax.Array:
        moved = jax.tree.map(lambda p, d: p + step * d, params, direction)
        return objective(moved, inputs)

    return jax.vmap(lambda d: jax.vmap(lambda s: loss_at(d, s))(steps))(directions)


def batch_losses_along(
    objective: Objective,
    batch: PyTree,
    params: PyTree,
    directions: PyTree,
    epsilons: jax.Array,
) -> jax.Array:
    """`losses_along` on one batch (`mean_of`'s argument order)."""
    return losses_along(objective, params, batch, directions, epsilons)


def rows_like(params: PyTree, rows: np.ndarray) -> PyTree:
    """rows (N, D) in `ravel_pytree`'s order as a pytree like the params with leaves (N, ...),
    each put as its parameter lies over a mesh (the leading axis whole; split on the host)."""
    leaves, treedef = jax.tree.flatten(params)
    out, offset = [], 0
    for leaf in leaves:
        size = int(np.prod(np.shape(leaf)))
        part = rows[:, offset : offset + size].reshape((rows.shape[0], *np.shape(leaf)))
        offset += size
        sharding = getattr(leaf, "sharding", None)
        if isinstance(sharding, NamedSharding) and sharding.mesh.size > 1:
            part = jax.device_put(part, NamedSharding(sharding.mesh, P(None, *sharding.spec)))
        out.append(part)
    return jax.tree.unflatten(treedef, out)
