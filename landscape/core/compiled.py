"""The compiled programs behind every probe, shared by all points of one model.

Each program takes a point's `objective` as a static argument and its params and inputs as traced
ones (`Point.shared`), so jax compiles it once per objective (and shapes) and a new (p, q), key or
batch reuses it. `batched=True` vmaps the same body over a leading axis of params and inputs: a
list of points is one call (`stack`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from landscape import trees
from landscape.core import operator
from landscape.core.layout import Layout
from landscape.point import Point
from landscape.typing import PyTree

Objective = Callable[[PyTree, PyTree], jax.Array]
Parts = tuple[int, bool]  # (equal slices of the population, whether the loss is their mean)


def stack(points: Sequence[Point]) -> tuple[Objective, PyTree, PyTree]:
    """(objective, params_P, inputs_P): the points' params and inputs stacked on a new axis."""
    objective, _ = points[0].shared
    params = stack_trees(*[p.params for p in points])
    inputs = stack_trees(*[p.shared[1] for p in points])
    return objective, params, inputs


def arguments(points: Sequence[Point], listed: bool) -> tuple[Objective, PyTree, PyTree]:
    """(objective, params, inputs) of the compiled programs: a list's stacked (`stack`)."""
    if listed:
        return stack(points)
    objective, inputs = points[0].shared
    return objective, points[0].params, inputs


def stack_trees(*trees: PyTree) -> PyTree:
    """Pytrees of one structure stacked leaf by leaf on a new leading axis: with numpy on the
    host (an eager `jnp.stack` compiles a program per shape), with jnp inside a trace."""
    leaves = jax.tree.leaves(trees)
    stack = jnp.stack if any(isinstance(x, jax.core.Tracer) for x in leaves) else np.stack
    return jax.tree.map(lambda *leaves: stack([x for x in leaves]), *trees)


def maybe_batched(body: Callable, batched: bool, *args: Any) -> Any:
    """body(*args), vmapped over the leading axis of every argument when `batched`."""
    return jax.vmap(body)(*args) if batched else body(*args)


def _flat(objective: Objective, params: PyTree, inputs: PyTree) -> tuple[jax.Array, Callable]:
    """The raveled params and the loss as a function of them."""
    flat, unravel = ravel_pytree(params)
    return flat, lambda x: objective(unravel(x), inputs)


@functools.partial(jax.jit, static_argnames=("objective", "batched"))
def value_and_grad(objective: Objective, params: PyTree, inputs: PyTree, batched: bool) -> Any:
    """(loss, gradient pytree) at params."""
    body = functools.partial(operator.value_and_grad, objective)
    return maybe_batched(body, batched, params, inputs)


def _hessian(
    objective: Objective, columns_per_batch: int, params: PyTree, inputs: PyTree
) -> tuple[jax.Array, jax.Array, jax.Array]:
    flat, loss_of_flat = _flat(objective, params, inputs)
    grad, linear_grad = jax.linearize(jax.grad(loss_of_flat), flat)
    basis = jnp.eye(flat.size, dtype=flat.dtype)
    if flat.size <= columns_per_batch:
        matrix = jax.vmap(linear_grad)(basis)
    else:
        matrix = jax.lax.map(linear_grad, basis, batch_size=columns_per_batch)
    return loss_of_flat(flat), grad, matrix


def over_parts(one: Callable[[PyTree], tuple], inputs: PyTree, parts: Parts) -> Any:
    """one(inputs), each output summed (or averaged, where `parts[1]`) over `parts[0]` equal
    slices of the leading axis of every input leaf, a lax.scan: a slice's activations stay in
    cache, where the whole population's tangents would stream through memory once per column
    (`Point.meta["population"]`)."""
    number, mean = parts
    if number == 1:
        return one(inputs)
    slices = jax.tree.map(lambda x: x.reshape((number, -1) + x.shape[1:]), inputs)
    shapes = jax.eval_shape(one, jax.tree.map(lambda x: x[0], slices))

    def add(total: tuple, piece: PyTree) -> tuple[tuple, None]:
        return tuple(a + b for a, b in zip(total, one(piece), strict=True)), None

    total, _ = jax.lax.scan(add, tuple(jnp.zeros(x.shape, x.dtype) for x in shapes), slices)
    return tuple(t / number for t in total) if mean else total


@functools.partial(jax.jit, static_argnames=("objective", "columns_per_batch", "batched", "parts"))
def hessian(
    objective: Objective,
    params: PyTree,
    inputs: PyTree,
    columns_per_batch: int,
    batched: bool,
    parts: Parts = (1, True),
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(loss, flat gradient (D,), Hessian (D, D)): the linearised gradient map applied to the
    unit vectors (forward-over-reverse, the primal pass once), `columns_per_batch` at a time;
    `parts`: over slices of each point's population (`over_parts`)."""

    def body(params: PyTree, inputs: PyTree) -> tuple[jax.Array, jax.Array, jax.Array]:
        one = functools.partial(_hessian, objective, columns_per_batch, params)
        return over_parts(one, inputs, parts)

    if not batched:
        return body(params, inputs)
    # points one after another (several at once when their columns fit in one batch): a
    # vmap over points would hold every point's columns at once
    dim = ravel_pytree(jax.tree.map(lambda x: x[0], params))[0].size
    return jax.lax.map(
        lambda args: body(*args), (params, inputs), batch_size=max(1, columns_per_batch // dim)
    )


def _hvp(objective: Objective, params: PyTree, inputs: PyTree, tangent: PyTree) -> PyTree:
    if operator.is_ggn(objective):  # G's operator, on the flat tangent
        flat, unravel = ravel_pytree(tangent)
        return unravel(operator.hessian_operator(objective, params, inputs).matvec(flat))
    grad = jax.grad(objective)
    return jax.jvp(lambda p: grad(p, inputs), (params,), (tangent,))[1]


@functools.partial(jax.jit, static_argnames=("objective", "batched", "layout"))
def hvp(
    objective: Objective,
    params: PyTree,
    inputs: PyTree,
    tangent: PyTree,
    batched: bool,
    layout: Layout | None = None,
) -> PyTree:
    """H v at params, v a pytree shaped like the params; over a mesh (`layout`) through the
    flat layout's operator, as the other probes multiply (a dataset split over a data axis
    reduced once)."""
    if layout is not None:
        op = operator.hessian_operator(objective, params, inputs, layout)
        return layout.from_flat(op.matvec(layout.to_flat(tangent)))
    body = functools.partial(_hvp, objective)
    return maybe_batched(body, batched, params, inputs, tangent)


@functools.partial(jax.jit, static_argnames=("objective",))
def hvp_of_flat(objective: Objective, params: PyTree, inputs: PyTree, vector: jax.Array) -> Any:
    """H v at params for a flat v ((D,) or (D, 1)) in `ravel_pytree` order, shaped as v."""
    product = operator.hessian_operator(objective, params, inputs).matvec(vector.reshape(-1))
    return product.reshape(vector.shape)


@functools.partial(jax.jit, static_argnames=("objective",))
def value_grad_hvp(
    objective: Objective, params: PyTree, inputs: PyTree, tangent: PyTree
) -> tuple[jax.Array, PyTree, PyTree]:
    """(loss, gradient, H v) at params in one pass (the near-stationary check's program)."""
    (loss, grad), (_, product) = jax.jvp(
        lambda p: jax.value_and_grad(objective)(p, inputs), (params,), (tangent,)
    )
    return loss, grad, product


def _columns(
    objective: Objective,
    columns_per_batch: int,
    count: int,
    params: PyTree,
    inputs: PyTree,
    first: jax.Array,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    flat, loss_of_flat = _flat(objective, params, inputs)
    (loss, grad), linear = jax.linearize(jax.value_and_grad(loss_of_flat), flat)
    rows = first + jnp.arange(count)  # rows past D are zero vectors: zero columns, dropped
    basis = jax.nn.one_hot(rows, flat.size, dtype=flat.dtype)
    columns = jax.lax.map(lambda e: linear(e)[1], basis, batch_size=min(columns_per_batch, count))
    return loss, grad, columns


def _columns_by_parts(
    objective: Objective,
    columns_per_batch: int,
    count: int,
    parts: Parts,
    params: PyTree,
    inputs: PyTree,
    first: jax.Array,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(loss, flat gradient, `_columns`) over slices of the population (`over_parts`)."""

    def one(piece: PyTree) -> tuple[jax.Array, jax.Array, jax.Array]:
        return _columns(objective, columns_per_batch, count, params, piece, first)

    return over_parts(one, inputs, parts)


@functools.partial(jax.jit, static_argnames=("objective", "columns_per_batch", "count", "parts"))
def hessian_columns(
    objective: Objective,
    params: PyTree,
    inputs: PyTree,
    first: jax.Array,
    columns_per_batch: int,
    count: int,
    parts: Parts = (1, True),
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(loss, flat gradient, columns first, ..., first + count - 1 of the Hessian (count, D)):
    one program for every chunk of a large Hessian, so the host can report progress between
    chunks; `parts`: over slices of the population (`over_parts`)."""
    return _columns_by_parts(objective, columns_per_batch, count, parts, params, inputs, first)


@functools.partial(
    jax.jit, static_argnames=("objective", "columns_per_batch", "count", "mesh", "parts")
)
def hessian_columns_on_devices(
    objective: Objective,
    params: PyTree,
    inputs: PyTree,
    firsts: jax.Array,
    columns_per_batch: int,
    count: int,
    mesh: Mesh,
    parts: Parts = (1, True),
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """`hessian_columns` from each of `firsts` (one per device of the 1-D `mesh`), every device
    its own chunk (a shard_map; the point replicated): the loss (devices,), the gradient
    (devices, D), each device's own, and the columns (devices, count, D). XLA's CPU fusions use
    one thread, so a process with a CPU device per core (`landscape.setup()`) uses every core."""

    def body(
        params: PyTree, inputs: PyTree, first: jax.Array
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        loss, grad, columns = _columns_by_parts(
            objective, columns_per_batch, count, parts, params, inputs, first[0]
        )
        return loss[None], grad[None], columns[None]

    spec = PartitionSpec(mesh.axis_names[0])
    # check_vma off: the linearised gradient is replicated, the basis vectors vary by device
    return jax.shard_map(
        body,
        mesh=mesh,
        in_specs=(PartitionSpec(), PartitionSpec(), spec),
        out_specs=(spec, spec, spec),
        check_vma=False,
    )(params, inputs, firsts)


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
    return _placed_as(params, trees.unravel_rows(params, rows))


def stacked_like(params: PyTree, vectors: list[PyTree]) -> PyTree:
    """Pytrees like the params stacked on a leading axis, each leaf put as its parameter lies
    over a mesh (a leaf already there stacked on its devices)."""

    def stack(*leaves: Any) -> Any:
        return jnp.stack(leaves) if trees.on_several_devices(leaves[0]) else np.stack(leaves)

    return _placed_as(params, jax.tree.map(stack, *vectors))


def _placed_as(params: PyTree, stacked: PyTree) -> PyTree:
    def place(part: Any, leaf: Any) -> Any:
        sharding = getattr(leaf, "sharding", None)
        if isinstance(sharding, NamedSharding) and sharding.mesh.size > 1:
            spec = PartitionSpec(None, *sharding.spec)
            return jax.device_put(part, NamedSharding(sharding.mesh, spec))
        return part

    return jax.tree.map(place, stacked, params)
