"""The products over a streamed dataset (`datasets.Stream`): each product, Lanczos step, block of
probes (`rows`, what `data.Streamed` runs Hutch++'s and the diagonal's blocks with) or
Krylov-Schur call a pass over the data, summed by one compiled program per chunk; each equal to
the stacked form on the same data to rounding."""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from landscape.core import drive, krylov_schur_device, lanczos, memory
from landscape.core import layout as layout_lib
from landscape.core.krylov_schur import Outcome, Plan
from landscape.core.krylov_schur_device import Carry
from landscape.probes.datasets import dtype_of, per_batch
from landscape.typing import PyTree

LONG_SECONDS = 10.0  # a streamed probe prints a line per pass once it has taken this long


def value_and_gradient(point: Any, objective: Any) -> tuple[float, np.ndarray]:
    """The point's mean loss and flat gradient, one pass."""
    vectors = np.zeros((0, point.num_params), dtype_of(point.params))
    value, grad, _ = point.batches.sums(per_batch(objective), point.params, vectors)
    return float(value), grad


def product(point: Any, objective: Any, vector: np.ndarray) -> np.ndarray:
    """H v (or G v) for a flat v, one pass."""
    vectors = np.asarray(vector, dtype_of(point.params)).reshape(1, -1)
    return point.batches.sums(per_batch(objective), point.params, vectors)[2][0]


def on_each_pass(caller: str, progress: Any, total: int | None) -> Callable[[], None]:
    """Call after each pass: a progress line per pass once the call has taken LONG_SECONDS
    (`total` None: a search, whose passes are not known ahead)."""
    began, count = time.perf_counter(), [0]

    def done() -> None:
        count[0] += 1
        seconds = time.perf_counter() - began
        if progress and seconds > LONG_SECONDS and (total is None or count[0] < total):
            of = "" if total is None else f" of {total}"
            progress(f"{caller}: {count[0]}{of} passes over the data | {seconds:.1f} s")

    return done


def _normal_start(key: jax.Array, params: PyTree) -> tuple[Callable[[], jax.Array], jax.Array]:
    """(start, restart key) of `lanczos_spectrum`'s run from `key` (`layout.draw`)."""
    start_key, restart_key = jax.random.split(key)
    return lambda: layout_lib.draw("normal", start_key, params, None), restart_key


def tridiagonal(
    point: Any, objective: Any, key: jax.Array, num_iters: int, progress: Any
) -> tuple[np.ndarray, ...]:
    """(alphas, betas, loss, flat gradient) of Lanczos from `key`'s start, the core's steps
    host-driven (`drive.host_lanczos`), a pass over the data a product."""
    done = on_each_pass("lanczos_spectrum", progress, num_iters)
    passes: list[Any] = []

    def multiply(row: np.ndarray) -> np.ndarray:
        passes[:] = point.batches.sums(per_batch(objective), point.params, row[None])
        done()
        return passes[2][0]

    state = drive.host_lanczos(multiply, _normal_start, (key, point.params), num_iters)
    found = lanczos.extract(jax.device_get(state))  # numpy: sliced on the host, no program
    return np.asarray(found.alphas), np.asarray(found.betas), np.asarray(passes[0]), passes[1]


def slq(
    point: Any,
    objective: Any,
    key: jax.Array,
    num_probes: int,
    num_iters: int,
    kind: str,
    progress: Any,
) -> tuple[np.ndarray, np.ndarray]:
    """(alphas (K, m), betas (K, m - 1)) of `spectral_density` over a stream: its probes and
    Lanczos runs (the stacked form's), a group of runs advanced together, a pass over the data
    a step; a group's bases (group x m x D) fit half the free memory."""
    dim, dtype = point.num_params, dtype_of(point.params)
    each = num_iters * dim * np.dtype(dtype).itemsize  # a run's basis
    fit = int(memory.budget() // each)
    if fit < 1:
        raise MemoryError(
            f"spectral_density: one probe's Lanczos basis ({memory.format_bytes(each)}) does not "
            "fit in half the free memory; ask for fewer Lanczos steps (num_iters)."
        )
    groups = math.ceil(num_probes / min(BLOCK, num_probes, fit))
    group = math.ceil(num_probes / groups)  # equal groups (one program), the last padded
    done = on_each_pass("spectral_density", progress, num_iters * math.ceil(num_probes / group))
    found = []
    for low in range(0, num_probes, group):
        indices = np.arange(low, low + group, dtype=np.int32)  # past num_probes: cut below
        multiply = functools.partial(rows, point, objective, done=done)
        arguments = (key, indices, point.params)
        state = drive.host_lanczos(multiply, _probe_starts, arguments, num_iters, (kind,))
        found.append([np.asarray(state.alphas), np.asarray(state.betas)[:, :-1]])
    alphas, betas = (np.concatenate(parts)[:num_probes] for parts in zip(*found, strict=True))
    return alphas, betas


def _probe_starts(
    key: jax.Array, indices: jax.Array, params: PyTree, kind: str
) -> tuple[Callable[[], jax.Array], jax.Array]:
    """(the probes `indices`, drawn as `spectral_density` draws them, their runs' restart keys)."""
    probe_key, restart_key = jax.random.split(key)
    starts = lambda: jax.vmap(  # noqa: E731
        lambda i: layout_lib.probe(probe_key, i, kind, params, None)
    )(indices)
    return starts, jax.vmap(lambda i: jax.random.fold_in(restart_key, i))(indices)


BLOCK = 16  # products of one pass at most (trace, diagonal, spectral_density)


def rows(
    point: Any, objective: Any, vectors: np.ndarray, done: Callable = lambda: None
) -> np.ndarray:
    """H v (or G v) for each row of `vectors`, in passes of BLOCK rows (the last padded with
    zeros), `done()` after each."""
    size = min(BLOCK, len(vectors))
    padded = np.concatenate([vectors, np.zeros((-len(vectors) % size, vectors.shape[1]))])
    out = []
    for low in range(0, len(padded), size):
        block = padded[low : low + size].astype(vectors.dtype)
        out.append(point.batches.sums(per_batch(objective), point.params, block)[2])
        done()
    return np.concatenate(out)[: len(vectors)]


# ---------------------------------------------------------------- eigenpairs, dense, diagonal


def searcher(point: Any, progress: Any) -> Callable[..., tuple[jax.Array, Outcome]]:
    """`krylov.advance` over a stream (its arguments and results): the call's products one at a
    time, each one pass over the data, between two small programs that do the call's vector
    work on the device as `advance` does (`krylov_schur_device.begin`, then its `step` while
    the carry says the call goes on)."""
    done = on_each_pass("eigenpairs", progress, None)

    def advance(
        objective: Any, params: PyTree, _: Any, vectors: jax.Array, plan: Plan,
        key: jax.Array, which: str, __: Any,
    ) -> tuple[jax.Array, Outcome]:  # fmt: skip
        zero = np.zeros((), vectors.dtype)
        carry, v = _krylov_begin(vectors, plan, key, zero)
        passes = None
        while bool(carry.going):
            passes = point.batches.sums(per_batch(objective), params, np.asarray(v)[None])
            carry, v = _krylov_step(carry, plan, key, v, passes[2][0], which)
            done()
        loss, gradient = passes[:2] if passes else value_and_gradient(point, objective)
        return carry.vectors, carry.outcome._replace(loss=np.asarray(loss), gradient=gradient)

    return advance


_ONE = layout_lib.Layout(None, (), "")  # one device (a stream's vectors are ravel_pytree's)


@functools.partial(jax.jit, donate_argnames=("vectors",))
def _krylov_begin(
    vectors: jax.Array, plan: Plan, key: jax.Array, zero: jax.Array
) -> tuple[Carry, jax.Array]:
    """A search call's carry (its loss and gradient come from the passes) and its first vector."""
    gradient = jnp.zeros(vectors.shape[1], vectors.dtype)
    carry = krylov_schur_device.begin(vectors, plan, key, (zero, gradient), _ONE)
    return carry, krylov_schur_device.next_vector(plan, carry)


@functools.partial(jax.jit, static_argnames=("which",), donate_argnames=("carry",))
def _krylov_step(
    carry: Carry, plan: Plan, key: jax.Array, v: jax.Array, product: jax.Array, which: str
) -> tuple[Carry, jax.Array]:
    """The carry after the product of its next vector v (the last call's), and the vector
    after it."""
    carry = krylov_schur_device.step(plan, key, which, _ONE, carry, v, product)
    return carry, krylov_schur_device.next_vector(plan, carry)


def dense(
    point: Any, objective: Any, columns: int, progress: Any, caller: str
) -> tuple[float, np.ndarray, np.ndarray]:
    """(mean loss, flat gradient, the D x D matrix) of H (or G) over a stream: `columns` of its
    columns a pass, as products of unit vectors."""
    dim, dtype = point.num_params, dtype_of(point.params)
    columns = min(columns, dim)
    done = on_each_pass(caller, progress, math.ceil(dim / columns))
    matrix = np.zeros((dim, dim), dtype)
    for low in range(0, dim, columns):
        units = np.eye(columns, dim, low, dtype)  # rows past D are zero: one program's shapes
        loss, gradient, products = point.batches.sums(per_batch(objective), point.params, units)
        matrix[low : low + columns] = products[: dim - low]
        done()
    return float(loss), gradient, matrix


# ---------------------------------------------------------------- losses at other parameters


def mean_of(point: Any, fn: Callable, args: tuple, static: tuple = ()) -> np.ndarray:
    """The mean over the stream's batches of fn(objective, batch, *args, *static) (an array:
    losses at other parameters, `geometry.evaluate`, `eigen.losses_along`), in one pass; `fn`
    a module-level function and `static` hashable, so one program serves every call."""
    objective = per_batch(point.shared[0])
    shape = jax.eval_shape(
        lambda batch, *args: fn(objective, batch, *args, *static), point.batches.first, *args
    )
    total = jnp.zeros(shape.shape, shape.dtype)
    for chunk, weights in point.batches.chunks():
        weights = weights.astype(shape.dtype)
        total = _chunk_total(objective, fn, static, chunk, weights, args, total)
    return np.asarray(total) / point.batches.total  # the weights, n_k / n_0, summed


@functools.partial(
    jax.jit, static_argnames=("objective", "fn", "static"), donate_argnames=("total",)
)
def _chunk_total(
    objective: Any,
    fn: Callable,
    static: tuple,
    chunk: PyTree,
    weights: jax.Array,
    args: tuple,
    total: jax.Array,
) -> jax.Array:
    """`total` plus the chunk's sum over its batches of weight x fn(objective, batch, ...)."""

    def add(total: jax.Array, item: tuple) -> tuple[jax.Array, None]:
        batch, weight = item
        return total + weight * fn(objective, batch, *args, *static), None

    return jax.lax.scan(add, total, (chunk, weights))[0]
