"""An algorithm run host-driven: the core's Lanczos (`lanczos.init`, `step`, `extract`, matfree's
shape), with a full basis or in three vectors (`three_term`), a step a call of one small
compiled program, the product brought by the host (a pass over a streamed dataset), where
`lanczos.run` and `three_term.run` take the same steps under one fori_loop. The operator's loop
over the data (curvlinops' shape) then stays outside the algorithm: the streamed
`lanczos_spectrum`, SLQ and tracker. docs/design/curvature.md, "One path"."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from landscape.core import lanczos, three_term

Draw = Callable[..., tuple[Callable[[], jax.Array], jax.Array]]


def host_lanczos(
    multiply: Callable[[np.ndarray], np.ndarray],
    draw: Draw,
    args: tuple,
    num_iters: int,
    static: tuple = (),
    rows: int | None = None,
    basis: str = "full",
) -> lanczos.Lanczos | three_term.ThreeTerm:
    """`lanczos.run` with `multiply` (a row (D,) on the host -> its product) in place of matvec,
    from draw(*args, *static) = (the start as a function, the restart key): the same steps, each
    one call of `_advance` (the first draws the start and `init`s the state), so a run is one
    program whatever `num_iters` (the basis has `rows` rows, default num_iters; the rows past
    the steps stay zero); a start (K, D) with K keys runs K runs together, `multiply` taking
    (K, D). basis="three": `three_term.run`'s steps (`_three_term`), each run in three vectors."""
    if basis == "three":
        return _three_term(multiply, draw, args, num_iters, static, rows or num_iters)
    start = jax.eval_shape(lambda *a: draw(*a, *static)[0](), *args)
    lead, dtype, rows = start.shape[:-1], start.dtype, rows or num_iters
    zeros = np.zeros(lead + (rows,), dtype)
    rows_of_d = np.zeros(lead + (rows, start.shape[-1]), dtype)
    state = lanczos.Lanczos(*jax.device_put((rows_of_d, zeros, zeros, np.zeros(lead, np.int32))))
    product = np.zeros(start.shape, dtype)
    for i in range(num_iters + 1):
        state, row = _advance(state, product, np.int32(i), draw, args, static)
        if i < num_iters:
            product = multiply(np.asarray(row))
    return state


@functools.partial(jax.jit, static_argnames=("draw", "static"), donate_argnames=("state",))
def _advance(
    state: lanczos.Lanczos, product: jax.Array, i: jax.Array, draw: Draw, args: tuple, static: Any
) -> tuple[lanczos.Lanczos, jax.Array]:
    """The state after the product of its current row (for i = 0: `init` from the drawn start)
    and the row to multiply next, each run's for K runs."""
    start, key = draw(*args, *static)
    num_iters, many = state.basis.shape[-2], product.ndim == 2
    init = functools.partial(lanczos.init, num_iters=num_iters)

    def begun() -> lanczos.Lanczos:
        return jax.vmap(init)(start()) if many else init(start())

    def stepped() -> lanczos.Lanczos:
        return (
            jax.vmap(lanczos.step)(state, product, key)
            if many
            else lanczos.step(state, product, key)
        )

    state = jax.lax.cond(i == 0, begun, stepped)
    return state, (jax.vmap(lanczos.current) if many else lanczos.current)(state)


def _three_term(
    multiply: Callable, draw: Draw, args: tuple, num_iters: int, static: tuple, rows: int
) -> three_term.ThreeTerm:
    """K runs in three vectors from the drawn starts (K, D): `num_iters` steps of one program
    (`_three_step`) after the one that draws the starts (`_three_begin`), T's rows `rows`."""
    state = _three_begin(draw, args, static, rows)
    for _ in range(num_iters):
        state = _three_step(state, multiply(np.asarray(state.current)))
    return state


@functools.partial(jax.jit, static_argnames=("draw", "static", "rows"))
def _three_begin(draw: Draw, args: tuple, static: Any, rows: int) -> three_term.ThreeTerm:
    """Each run's state before its first step, from the drawn starts (K, D)."""
    return jax.vmap(lambda v: three_term.init(v, rows))(draw(*args, *static)[0]())


@functools.partial(jax.jit, donate_argnames=("state",))
def _three_step(state: three_term.ThreeTerm, product: jax.Array) -> three_term.ThreeTerm:
    """Each run's state after the product (K, D) of its current vector."""
    return jax.vmap(three_term.step)(state, product.astype(state.current.dtype))
