"""An algorithm run host-driven: the core's Lanczos (`lanczos.init`, `step`, `extract`, matfree's
shape) a step a call of one small compiled program, the product brought by the host (a pass
over a streamed dataset), where `lanczos.run` takes the same steps under one fori_loop. The
operator's loop over the data (curvlinops' shape) then stays outside the algorithm: the
tracker's and `lanczos_spectrum`'s streamed runs. docs/design/curvature.md, "One path"."""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import numpy as np

from landscape.core import lanczos


def _begin_one(start: jax.Array, num_iters: int) -> tuple[lanczos.Lanczos, jax.Array]:
    state = lanczos.init(start, num_iters)
    return state, lanczos.current(state)


def _advance_one(
    state: lanczos.Lanczos, product: jax.Array, key: jax.Array
) -> tuple[lanczos.Lanczos, jax.Array]:
    state = lanczos.step(state, product, key)
    return state, lanczos.current(state)


@functools.partial(jax.jit, static_argnames=("num_iters",))
def _begin(start: jax.Array, num_iters: int) -> tuple[lanczos.Lanczos, jax.Array]:
    """The state before the first step and its current row (each run's for a (K, D) start)."""
    if start.ndim == 2:
        return jax.vmap(_begin_one, in_axes=(0, None))(start, num_iters)
    return _begin_one(start, num_iters)


@functools.partial(jax.jit, donate_argnames=("state",))
def _advance(
    state: lanczos.Lanczos, product: jax.Array, key: jax.Array
) -> tuple[lanczos.Lanczos, jax.Array]:
    """The state after one step and its current row (each run's for K runs)."""
    if product.ndim == 2:
        return jax.vmap(_advance_one)(state, product, key)
    return _advance_one(state, product, key)


def host_lanczos(
    multiply: Callable[[np.ndarray], np.ndarray], start: jax.Array, key: jax.Array, num_iters: int
) -> lanczos.Lanczos:
    """`lanczos.run(matvec, start, num_iters, key)` with `multiply` (a row (D,) on the host ->
    its product) in place of matvec: the same steps, each one call of `_advance`; for a start
    (K, D) and K keys, K runs advanced together, `multiply` taking their rows (K, D)."""
    state, row = _begin(start, num_iters)
    for _ in range(num_iters):
        state, row = _advance(state, multiply(np.asarray(row)), key)
    return state
