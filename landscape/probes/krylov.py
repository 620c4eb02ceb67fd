"""The program of `eigenpairs`' Krylov-Schur search (`landscape.core.krylov_schur` has the
search; `krylov_host` drives it on a point): `advance`, one call's products of the exact Hessian
and their vector work in one compiled program per model.
"""

from __future__ import annotations

import functools

import jax

from landscape.core import krylov_schur_device
from landscape.core.krylov_schur import Outcome, Plan
from landscape.core.layout import Layout
from landscape.probes import compiled, operator
from landscape.typing import PyTree


@functools.partial(
    jax.jit, static_argnames=("objective", "which", "layout"), donate_argnames=("vectors",)
)
def advance(
    objective: compiled.Objective,
    params: PyTree,
    inputs: PyTree,
    vectors: jax.Array,
    plan: Plan,
    key: jax.Array,
    which: str,
    layout: Layout | None = None,
) -> tuple[jax.Array, Outcome]:
    """`plan` on the exact Hessian at params, linearised once for every product of the call
    (`krylov_schur_device.run_call`). `vectors` (ncv, D) holds the k locked rows, then the
    basis's n rows: one buffer, changed in place (a rotation, then row writes), which no
    conditional passes through (XLA would copy it). Over a mesh the vectors lie in `layout`
    (each device's columns its own shards)."""
    layout = layout or Layout(None, (), "")  # one device: ravel_pytree's order, as `of` gives
    op = operator.hessian_operator(objective, params, inputs, layout if layout.mesh else None)
    point = (op.value, op.gradient)
    return krylov_schur_device.run_call(op.matvec, vectors, plan, key, which, layout, point)
