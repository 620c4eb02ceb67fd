"""Hutch++ and Hutchinson's trace at a point, one block of products a call: `trace_block`, every
stage of either method in one compiled program with one product site, the state between blocks
a `TraceState` on the device (Meyer, Musco, Musco and Woodruff 2021; `landscape.core.hutchpp`).
`spectra.trace` drives them; docs/design/curvature.md, "Stochastic spectra, traces and
diagonals"."""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from landscape.core import hutchpp, hvp
from landscape.core import layout as layout_lib
from landscape.core.hutchpp import EXACT
from landscape.core.layout import Layout
from landscape.probes import compiled, operator
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
    """One block of `trace`, every stage of either method in one program with one product
    site: SKETCH puts H g of the probes `indices` in the range rows, EXACT adds q^T H q of the
    range rows `indices` (orthonormalised at its first block), REST keeps g^T H g of the probes
    `indices` projected off the range. Probe i is drawn from fold_in(key, i) at every stage
    (the sketch's from a key of its own), so the blocks never change the answer. `rank`, the
    sketch's rows in use (of the state's R; None: all), is an argument: a new count compiles
    nothing."""

    def body(params: PyTree, inputs: PyTree, state: TraceState) -> TraceState:
        op = operator.hessian_operator(objective, params, inputs, layout)
        rows_held = state.range_.shape[0]
        sketched = rows_held if rank is None else rank
        kind = ("rademacher", params, layout)
        if not rows_held:  # Hutchinson: each probe drawn, multiplied and its form taken in turn
            form = lambda i: jnp.sum((v := layout_lib.probe(key, i, *kind)) * op.matvec(v))  # noqa: E731
            forms = hvp.each_row(form, op.flat.size)(indices)
            return state._replace(samples=state.samples.at[indices].set(forms, mode="drop"))
        sketch_key, probe_key = jax.random.split(key)
        first_exact = (stage == EXACT) & (indices[0] == 0)
        orthonormal = functools.partial(_orthonormal_range, layout=layout, rank=sketched)
        if layout is None or not layout.cpu_mesh:  # there the host calls `orthonormalised`
            state = jax.lax.cond(first_exact, orthonormal, lambda s: s, state)
        rows = state.range_[jnp.minimum(indices, rows_held - 1)].astype(op.flat.dtype)
        vectors = jax.lax.switch(
            stage,
            [
                lambda: probes(sketch_key, indices, *kind),
                lambda: jnp.where((indices < sketched)[:, None], rows, 0),
                lambda: hutchpp.projected(state.range_, probes(probe_key, indices, *kind)),
            ],
        )
        products = op.rows(vectors)
        forms = jnp.sum(vectors * products, axis=1)
        return jax.lax.switch(
            stage,
            [
                lambda: state._replace(
                    range_=state.range_.at[jnp.where(indices < sketched, indices, rows_held)].set(
                        products.astype(state.range_.dtype), mode="drop"
                    )
                ),
                lambda: state._replace(exact=state.exact + jnp.sum(forms)),
                lambda: state._replace(samples=state.samples.at[indices].set(forms, mode="drop")),
            ],
        )

    if not batched:
        return body(params, inputs, state)
    return jax.vmap(body)(params, inputs, state)


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
    basis = hutchpp.range_basis(state.range_.astype(wide), _mesh(layout)).astype(state.range_.dtype)
    if rank is None:
        return state._replace(range_=basis)
    used = (jnp.arange(basis.shape[0]) < rank)[:, None]
    return state._replace(range_=jnp.where(used, basis, jnp.zeros((), basis.dtype)))


def _mesh(spread: Layout | None) -> Mesh | None:
    return None if spread is None else spread.mesh
