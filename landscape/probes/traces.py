"""Hutch++ and Hutchinson's trace, and Hutchinson's diagonal, at a point: one loop over blocks of
probes whatever the data, each block split at its one product site into the vectors to multiply
(`_vectors`) and what the products leave in the state (`_kept`). The data object runs a block
(`data.Memory.block`: the two halves and the products in one compiled program, `trace_block`;
`stream.Streamed.block`: the halves in a program between passes over the data). Meyer, Musco,
Musco and Woodruff 2021; `landscape.core.hutchpp`; docs/design/curvature.md, "Stochastic
spectra, traces and diagonals"."""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from landscape import trees
from landscape.core import blocks, compiled, hutchpp, hvp, operator, sizes
from landscape.core import layout as layout_lib
from landscape.core.hutchpp import EXACT, REST, SKETCH
from landscape.core.layout import Layout
from landscape.typing import PyTree


def probes(
    key: jax.Array, indices: jax.Array, kind: str, params: PyTree, layout: Layout | None
) -> jax.Array:
    """The probes of `indices` (K, D)."""
    return jax.vmap(lambda i: layout_lib.probe(key, i, kind, params, layout))(indices)


class TraceState(NamedTuple):
    """`trace` between blocks: `range_` (R, D) the sketch H g, orthonormal rows Q once the exact
    stage begins (rows from the sketch's rank r on zero); `exact` () tr(Q^T H Q) so far;
    `samples` (M,) the Hutchinson forms of the probes projected off the range (all of a point's,
    R = 0, for plain Hutchinson). R and M are the rank and the rest padded to whole blocks, so
    the count is no shape of the program; the forms past the rest are cut on the host."""

    range_: jax.Array
    exact: jax.Array
    samples: jax.Array


class Step(NamedTuple):
    """A block of a probe split at its product site, for the data object to run: `fused` the
    whole block in one program over data in memory, `vectors` (params, state, fixed, block,
    layout) -> (state, the block's vectors) and `kept` (state, fixed, block, vectors, products)
    -> state the halves around a product made elsewhere (zero vectors and products keep
    nothing)."""

    fused: Any
    vectors: Any
    kept: Any


def _vectors(
    params: PyTree, state: TraceState, fixed: tuple, block: tuple, layout: Layout | None
) -> tuple[TraceState, jax.Array]:
    """The vectors of a block of `trace` (K, D): SKETCH the probes `indices`, EXACT the range
    rows `indices` (orthonormalised at its first block, unless the host does it: over a mesh of
    CPU devices), REST the probes projected off the range (plain Hutchinson: the probes)."""
    (key, rank), (stage, indices) = fixed, block
    kind = ("rademacher", params, layout)
    rows_held = state.range_.shape[0]
    if not rows_held:
        return state, probes(key, indices, *kind)
    sketch_key, probe_key = jax.random.split(key)
    first_exact = (stage == EXACT) & (indices[0] == 0)
    orthonormal = functools.partial(_orthonormal_range, layout=layout, rank=rank)
    if layout is None or not layout.cpu_mesh:  # there the host calls `orthonormalised`
        state = jax.lax.cond(first_exact, orthonormal, lambda s: s, state)
    rows = state.range_[jnp.minimum(indices, rows_held - 1)]
    rows = rows.astype(jnp.result_type(*jax.tree.leaves(params)))
    vectors = jax.lax.switch(
        stage,
        [
            lambda: probes(sketch_key, indices, *kind),
            lambda: jnp.where((indices < rank)[:, None], rows, 0),
            lambda: hutchpp.projected(state.range_, probes(probe_key, indices, *kind)),
        ],
    )
    return state, vectors


def _kept(
    state: TraceState, fixed: tuple, block: tuple, vectors: jax.Array, products: jax.Array
) -> TraceState:
    """The state after a block's products: SKETCH puts H g in the range rows, EXACT adds
    q^T H q, REST keeps g^T H g of each probe (mode "drop": padding past the counts)."""
    (_, rank), (stage, indices) = fixed, block
    forms = jnp.sum(vectors * products, axis=1)
    rows_held = state.range_.shape[0]
    samples = lambda: state._replace(samples=state.samples.at[indices].set(forms, mode="drop"))  # noqa: E731
    if not rows_held:
        return samples()
    rows = jnp.where(indices < rank, indices, rows_held)
    sketch = products.astype(state.range_.dtype)
    return jax.lax.switch(
        stage,
        [
            lambda: state._replace(range_=state.range_.at[rows].set(sketch, mode="drop")),
            lambda: state._replace(exact=state.exact + jnp.sum(forms)),
            samples,
        ],
    )


@functools.partial(
    jax.jit, static_argnames=("objective", "batched", "layout"), donate_argnames=("state",)
)
def trace_block(
    objective: compiled.Objective,
    params: PyTree,
    inputs: PyTree,
    key: jax.Array,
    state: TraceState,
    stage: jax.Array,
    indices: jax.Array,
    batched: bool,
    layout: Layout | None = None,
    rank: jax.Array | int | None = None,
) -> TraceState:
    """One block of `trace` in one program with one product site (`_vectors`, the products,
    `_kept`). Probe i is drawn from fold_in(key, i) at every stage (the sketch's from a key of
    its own), so the blocks never change the answer. `rank`, the sketch's rows in use (of the
    state's R; None: all), is an argument: a new count compiles nothing."""
    fixed, block = (key, state.range_.shape[0] if rank is None else rank), (stage, indices)

    def body(params: PyTree, inputs: PyTree, state: TraceState) -> TraceState:
        op = operator.hessian_operator(objective, params, inputs, layout)
        if not state.range_.shape[0]:  # Hutchinson: each probe multiplied and its form taken
            probe = functools.partial(layout_lib.probe, key, kind="rademacher", params=params,
                                      layout=layout)  # fmt: skip
            form = lambda i: jnp.sum((v := probe(i)) * op.matvec(v))  # noqa: E731
            forms = hvp.each_row(form, op.flat.size)(indices)
            return state._replace(samples=state.samples.at[indices].set(forms, mode="drop"))
        state, vectors = _vectors(params, state, fixed, block, layout)
        return _kept(state, fixed, block, vectors, op.rows(vectors))

    return compiled.maybe_batched(body, batched, params, inputs, state)


def _trace_fused(
    objective: compiled.Objective, params: PyTree, inputs: PyTree, state: TraceState,
    fixed: tuple, block: tuple, batched: bool, layout: Layout | None,
) -> TraceState:  # fmt: skip
    """`trace_block`, the sketch made orthonormal first by the host over a mesh of CPU devices."""
    (key, rank), (stage, indices) = fixed, block
    if stage == EXACT and indices[0] == 0 and layout is not None and layout.cpu_mesh:
        state = orthonormalised(state, batched, layout, rank)
    return trace_block(objective, params, inputs, key, state, stage, indices, batched, layout, rank)


TRACE = Step(_trace_fused, _vectors, _kept)


def trace_parts(
    source: Any, objective: compiled.Objective, key: jax.Array, num_probes: int, method: str,
    progress: blocks.Progress,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """(exact part, Hutchinson samples) with the probe axis last: the trace estimate is exact +
    mean(samples). Hutch++ sketches the range with a third of the products, takes tr(Q^T H Q)
    exactly with a third, and Hutchinson on the complement with the rest; each block run by the
    data object (`source`, `data.of`), the state staying on the device."""
    points, spread = source.points, source.layout
    dim, dtype = points[0].num_params, np.dtype(jax.tree.leaves(points[0].params)[0].dtype)
    rank, rest = hutchpp.split(num_probes, method)
    one_at_a_time = not rank and not source.listed and hvp.rows_mapped(dim)
    plan = _plan(source, max(rank, rest), "trace", progress, one_at_a_time)
    lead = (len(points),) if source.listed else ()
    padded = dim if spread is None else spread.padded
    whole = lambda count: -(-count // plan.size) * plan.size  # noqa: E731 (whole blocks)
    kept = operator.options_of(objective).storage or dtype  # the sketch's rows, as stored
    shapes = (((whole(rank), padded), kept), ((), dtype), ((whole(rest),), dtype))
    zeros = [np.zeros(lead + shape, np.dtype(d)) for shape, d in shapes]
    where = [None if spread is None else spread.sharding(1), None, None]
    state = TraceState(*(jax.device_put(x, w) for x, w in zip(zeros, where, strict=True)))
    schedule = [
        (stage, i, min(plan.size, count - i * plan.size))
        for stage, count in ((SKETCH, rank), (EXACT, rank), (REST, rest))
        for i in range(-(-count // plan.size))
    ]
    fixed = (key, np.int32(rank))

    def step(carry: Any, stage: int, block: int) -> Any:
        args = (np.int32(stage), plan.indices(block))
        return source.block(objective, TRACE, carry, fixed, args)

    carry = blocks.carried(schedule, source.start(state), step, "trace", progress)
    state = source.finish(TRACE, carry, fixed)
    return trees.host(state.exact), trees.host(state.samples)[..., :rest]


def _probe_vectors(
    params: PyTree, state: Any, fixed: tuple, indices: jax.Array, layout: Layout | None
) -> tuple[Any, jax.Array]:
    """`diagonal`'s Rademacher probes of `indices` (K, D)."""
    return state, probes(fixed[0], indices, "rademacher", params, layout)


def _diagonal_fused(
    objective: compiled.Objective, params: PyTree, inputs: PyTree, fixed: tuple,
    indices: jax.Array, batched: bool, layout: Layout | None,
) -> tuple[jax.Array, ...]:  # fmt: skip
    """A block of `diagonal` in one program (`diagonal_program`), as its leaves."""
    found = diagonal_program(objective, params, inputs, fixed[0], indices, batched, layout)
    return tuple(jax.tree.leaves(found))


DIAGONAL = Step(_diagonal_fused, _probe_vectors, lambda _, __, ___, v, hv: v * hv)


def _diagonal_one(
    objective: compiled.Objective,
    indices: jax.Array,
    key: jax.Array,
    layout: Layout | None,
    params: PyTree,
    inputs: PyTree,
) -> PyTree:
    """Samples v * Hv (K, D) of the probes `indices`; over a mesh as a pytree of the params'
    leaves stacked (K, ...), each sharded as its parameter (the flat samples lie in `layout`'s
    order)."""
    op = operator.hessian_operator(objective, params, inputs, layout)
    vectors = _probe_vectors(params, None, (key,), indices, layout)[1]
    samples = vectors * op.rows(vectors)
    return samples if layout is None else jax.vmap(layout.from_flat)(samples)


@functools.partial(jax.jit, static_argnames=("objective", "batched", "layout"))
def diagonal_program(
    objective: compiled.Objective,
    params: PyTree,
    inputs: PyTree,
    key: jax.Array,
    indices: jax.Array,
    batched: bool,
    layout: Layout | None = None,
) -> PyTree:
    """Samples v * Hv (K, D) of Hutchinson's diagonal estimator for the probes `indices` (K,),
    one vmapped program per block of `blocks.plan` (over a mesh, `_diagonal_one`'s stacked
    pytree); the indices are an argument, so a new number of probes compiles nothing."""
    body = functools.partial(_diagonal_one, objective, indices, key, layout)
    return compiled.maybe_batched(body, batched, params, inputs)


def diagonal_samples(
    source: Any, objective: compiled.Objective, key: jax.Array, num_probes: int
) -> np.ndarray:
    """v * Hv (num_probes, D) for each probe (a leading axis for a list of points), a block of
    probes at a time run by the data object (`source`, `data.of`)."""
    plan = _plan(source, num_probes, "diagonal")

    def block(indices: np.ndarray) -> tuple[Any, ...]:
        return source.outputs(objective, DIAGONAL, (key,), indices)

    found = blocks.run(plan, block, "diagonal", None, int(source.listed))
    if source.layout is not None:  # the stacked leaves, raveled row by row as ravel_pytree's
        found = (np.concatenate([leaf.reshape(num_probes, -1) for leaf in found], axis=1),)
    return found[0].astype(np.float64)


def _plan(
    source: Any, count: int, caller: str, progress: blocks.Progress = None,
    one_at_a_time: bool = False,
) -> blocks.Plan:  # fmt: skip
    """Blocks of `count` products: of the data's own size where it sets one (a stream's pass,
    `source.block_size`, or `sizes.bucket`'s size class of a smaller count), else what fits
    the memory policy (`blocks.plan`; products made one at a time in a block, `hvp.each_row`
    on the CPU, hold one product's memory)."""
    size = source.block_size and min(source.block_size, sizes.bucket(count))
    if not size and not one_at_a_time:
        mesh = mesh_of(source.layout)
        return blocks.plan(source.point, count, caller, 0.0, len(source.points), progress,
                           mesh=mesh)  # fmt: skip
    if not size:
        blocks.plan(source.point, 1, caller, 0.0, 1, progress, mesh=mesh_of(source.layout))
        size = min(sizes.bucket(count), blocks.MAPPED_BLOCK)
    return blocks.Plan(count, size, -(-count // size))


@functools.partial(jax.jit, static_argnames=("batched", "layout"), donate_argnames=("state",))
def orthonormalised(
    state: TraceState, batched: bool, layout: Layout, rank: jax.Array | int | None = None
) -> TraceState:
    """The sketch's rows made orthonormal in a program of their own, before the exact stage's
    first block, over a mesh of CPU devices (`Layout.cpu_mesh`: there no conditional holds a
    collective beside another); elsewhere `trace_block` does it in that block."""
    orthonormal = functools.partial(_orthonormal_range, layout=layout, rank=rank)
    return jax.vmap(orthonormal)(state) if batched else orthonormal(state)


def _orthonormal_range(
    state: TraceState, layout: Layout | None = None, rank: jax.Array | int | None = None
) -> TraceState:
    """The sketch's rows made orthonormal (`hutchpp.range_basis`, TSQR over a mesh), the rows
    past `rank` (zero, padding) kept zero: Householder's first r rows are those of the sketch's
    first r rows alone."""
    wide = jnp.promote_types(state.range_.dtype, jnp.float32)  # a stored sketch's QR in float32
    basis = hutchpp.range_basis(state.range_.astype(wide), layout).astype(state.range_.dtype)
    if rank is None:
        return state._replace(range_=basis)
    used = (jnp.arange(basis.shape[0]) < rank)[:, None]
    return state._replace(range_=jnp.where(used, basis, jnp.zeros((), basis.dtype)))


def mesh_of(spread: Layout | None) -> Mesh | None:
    """The mesh a layout spreads over (None: one device)."""
    return None if spread is None else spread.mesh
