"""A point over a streamed dataset (`datasets.Stream`): `Streamed`, the data object `data.of`
gives for it, answers what `data.Memory` answers with each product, Lanczos step, block of
probes or Krylov-Schur call a pass over the data, summed by one compiled program per chunk;
each equal to the stacked form on the same data to rounding. Its vectors lie in
`ravel_pytree`'s order on one device."""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from landscape.core import drive, krylov_schur_device, memory, sizes
from landscape.core import layout as layout_lib
from landscape.core.compiled import Objective, batch_losses_along, rows_like
from landscape.core.datasets import dtype_of, per_batch
from landscape.core.krylov_schur import Outcome, Plan
from landscape.core.krylov_schur_device import Carry
from landscape.core.layout import Layout
from landscape.point import Point
from landscape.trees import ravel_numpy, unravel_numpy
from landscape.typing import PyTree

LONG_SECONDS = 10.0  # a streamed probe prints a line per pass once it has taken this long
BLOCK = 16  # products of one pass at most (trace, diagonal, spectral_density)


class Streamed:
    """A `landscape.stream`: each quantity a pass over the source, its vectors in
    `ravel_pytree`'s order on one device."""

    def __init__(self, point: Point) -> None:
        self.point, self.points, self.listed, self.layout = point, [point], False, None
        self.block_size: int | None = BLOCK  # the products of one pass

    def sums(self, objective: Objective, vectors: np.ndarray) -> tuple[Any, Any, Any]:
        """(mean loss, flat gradient, H v for each row of `vectors`), one pass."""
        return self.point.batches.sums(per_batch(objective), self.point.params, vectors)

    def one_evaluation(self) -> tuple[Objective, PyTree]:
        """The objective of one batch and the first batch."""
        objective, inputs = self.point.shared
        return per_batch(objective), inputs.first

    def _loss_and_flat_gradient(self, objective: Objective) -> tuple[float, np.ndarray]:
        """The point's mean loss and flat gradient, one pass."""
        vectors = np.zeros((0, self.point.num_params), dtype_of(self.point.params))
        value, grad, _ = self.sums(objective, vectors)
        return float(value), grad

    def value_and_gradient(self) -> tuple[np.ndarray, PyTree]:
        value, vector = self._loss_and_flat_gradient(self.point.shared[0])
        return np.asarray(value), unravel_numpy(self.point.params, vector)

    def product_tree(self, objective: Objective, v: PyTree, eps: float | None) -> PyTree:
        return unravel_numpy(self.point.params, self.product_flat(objective, ravel_numpy(v), eps))

    def product_flat(self, objective: Objective, v: Any, eps: float | None) -> Any:
        """H v (or G v) for a flat v, one pass."""
        row = np.asarray(np.asarray(v).reshape(-1), dtype_of(self.point.params)).reshape(1, -1)
        return self.sums(objective, row)[2][0].reshape(np.shape(v))

    def needs_memory(self, caller: str, what: str, instead: str) -> None:
        """One sentence for `what` (an option of the products), built for data in memory."""
        raise ValueError(
            f"{caller}: {what} needs the data in memory (one batch or Point(..., "
            f"batches=...)); {instead}."
        )

    def formed(
        self, objective: Objective, columns: int, progress: Any, caller: str, whole: Callable
    ) -> list[tuple[Any, Any, Any]]:
        """(mean loss, flat gradient, the D x D matrix) of H (or G): `columns` of its columns a
        pass, as products of unit vectors (`whole`, the in-memory programs, unused)."""
        dim, dtype = self.point.num_params, dtype_of(self.point.params)
        columns = min(columns, dim)
        done = on_each_pass(caller, progress, math.ceil(dim / columns))
        matrix = np.zeros((dim, dim), dtype)
        for low in range(0, dim, columns):
            units = np.eye(columns, dim, low, dtype)  # rows past D are zero: one program's shapes
            loss, gradient, products = self.sums(objective, units)
            matrix[low : low + columns] = products[: dim - low]
            done()
        return [(float(loss), gradient, matrix)]

    def tridiagonal(
        self, objective: Objective, key: jax.Array, num_iters: int, progress: Any, check: Callable
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, PyTree]:
        """(alphas, betas, loss, gradient pytree) of Lanczos from `key`'s start, the core's steps
        host-driven (`drive.host_lanczos`), a pass over the data a product; its memory one
        chunk's (`check`, the in-memory program's plan, unused)."""
        done = on_each_pass("lanczos_spectrum", progress, num_iters)
        passes: list[Any] = []

        def multiply(row: np.ndarray) -> np.ndarray:
            passes[:] = self.sums(objective, row[None])
            done()
            return passes[2][0]

        rows = sizes.basis_rows(num_iters, self.point.num_params)
        arguments = (key, self.point.params)
        state = drive.host_lanczos(multiply, _normal_start, arguments, num_iters, rows=rows)
        alphas, betas = (np.asarray(x) for x in jax.device_get((state.alphas, state.betas)))
        gradient = unravel_numpy(self.point.params, passes[1])
        loss = np.asarray(passes[0])
        return alphas[:num_iters], betas[: num_iters - 1], loss, gradient

    def slq(
        self, objective: Objective, key: jax.Array, num_probes: int, num_iters: int,
        probe: str, basis: str, progress: Any, whole: Callable,
    ) -> tuple[list[tuple[np.ndarray, np.ndarray]], str]:  # fmt: skip
        """SLQ's probes and Lanczos runs (the stacked form's), a group of runs advanced together
        a step a pass over the data (`whole`, the in-memory blocks, unused): each run's basis
        kept (basis "full", or "auto" where a group's bases, group x m x D, fit the memory
        policy), or its last two vectors (`three_term`: "three", or "auto" where not even one
        basis fits)."""
        dim, dtype = self.point.num_params, dtype_of(self.point.params)
        rows = sizes.basis_rows(num_iters, dim)
        each = rows * dim * np.dtype(dtype).itemsize  # a run's basis
        fit = int(memory.budget() // each)
        if basis == "auto":
            basis = "full" if fit >= 1 else "three"
        if basis == "full" and fit < 1:
            raise MemoryError(
                f"spectral_density: one probe's Lanczos basis ({memory.format_bytes(each)}) does "
                "not fit in half the free memory; ask for fewer Lanczos steps (num_iters), or "
                "basis='three'."
            )
        fit = fit if basis == "full" else BLOCK
        groups = math.ceil(num_probes / min(BLOCK, num_probes, fit))
        # equal groups of a `sizes.bucket` size (one program for the counts of its class),
        # the last padded
        group = min(sizes.bucket(math.ceil(num_probes / groups)), BLOCK, fit)
        done = on_each_pass("spectral_density", progress, num_iters * math.ceil(num_probes / group))
        found = []
        for low in range(0, num_probes, group):
            indices = np.arange(low, low + group, dtype=np.int32)  # past num_probes: cut below
            multiply = functools.partial(self.rows, objective, done=done)
            arguments = (key, indices, self.point.params)
            state = drive.host_lanczos(
                multiply, _probe_starts, arguments, num_iters, (probe,), rows, basis
            )
            found.append([np.asarray(state.alphas), np.asarray(state.betas)])
        alphas, betas = (np.concatenate(parts)[:num_probes] for parts in zip(*found, strict=True))
        return [(alphas[:, :num_iters], betas[:, : num_iters - 1])], basis

    def rows(
        self, objective: Objective, vectors: np.ndarray, done: Callable = lambda: None
    ) -> np.ndarray:
        """H v (or G v) for each row of `vectors`, in passes of BLOCK rows (the last padded with
        zeros), `done()` after each."""
        size = min(BLOCK, len(vectors))
        padded = np.concatenate([vectors, np.zeros((-len(vectors) % size, vectors.shape[1]))])
        out = []
        for low in range(0, len(padded), size):
            out.append(self.sums(objective, padded[low : low + size].astype(vectors.dtype))[2])
            done()
        return np.concatenate(out)[: len(vectors)]

    def start(self, state: Any) -> Between:
        """What `block` carries: the state, no block yet."""
        return Between(state, None, None, None)

    def block(
        self, objective: Objective, step: Any, carry: Between, fixed: tuple, args: tuple
    ) -> Between:
        """One block of a probe (`traces.Step`): one program keeps the last block's products
        (`step.kept`) and gives this block's vectors (`step.vectors`), multiplied in a pass
        over the data (`rows`)."""
        if carry.last is None:  # the first block: zero vectors and products keep nothing
            zeros = np.zeros((len(args[1]), self.point.num_params), dtype_of(self.point.params))
            carry = Between(carry.state, args, zeros, zeros)
        state, vectors = _split(step, self.point.params, *carry, fixed, args)
        return Between(state, args, vectors, self.rows(objective, np.asarray(vectors)))

    def finish(self, step: Any, carry: Between, fixed: tuple) -> Any:
        """The state after the last block's products (`step.kept`)."""
        return _split(step, self.point.params, *carry, fixed, carry.last)[0]

    def outputs(
        self, objective: Objective, step: Any, fixed: tuple, indices: np.ndarray
    ) -> tuple[Any, ...]:
        """A block's vectors (`step.vectors`, one program), their products in a pass over the
        data, and `step.kept` of both on the host."""
        vectors = np.asarray(_vectors_of(step, self.point.params, fixed, indices))
        products = self.rows(objective, vectors)
        return (step.kept(None, fixed, indices, vectors, products),)

    def searcher(self, advance: Callable, progress: Any) -> tuple[Callable, Layout | None]:
        """`eigen_search.advance` over a stream (its arguments and results): the call's products one
        at a time, each one pass over the data, between two small programs that do the call's
        vector work on the device as `advance` does (`krylov_schur_device.begin`, then its
        `step` while the carry says the call goes on)."""
        done = on_each_pass("eigenpairs", progress, None)

        def streamed_advance(
            objective: Any, params: PyTree, _: Any, vectors: jax.Array, plan: Plan,
            key: jax.Array, which: str, __: Any,
        ) -> tuple[jax.Array, Outcome]:  # fmt: skip
            zero = np.zeros((), plan.proj.dtype)  # the vectors may be held as bits
            carry, v = _krylov_begin(vectors, plan, key, zero)
            passes = None
            while bool(carry.product_due):
                passes = self.sums(objective, np.asarray(v)[None])
                carry, v = _krylov_step(carry, plan, key, v, passes[2][0], which)
                done()
            loss, gradient = passes[:2] if passes else self._loss_and_flat_gradient(objective)
            return carry.vectors, carry.outcome._replace(loss=np.asarray(loss), gradient=gradient)

        return streamed_advance, None

    def certify(
        self, objective: Objective, vectors: np.ndarray, epsilons: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """A pass for the products, one for the losses."""
        products = self.rows(objective, vectors)
        directions = rows_like(self.point.params, vectors)
        return products, self.mean_of(batch_losses_along, (self.point.params, directions, epsilons))

    def mean_of(self, fn: Callable, args: tuple, static: tuple = ()) -> np.ndarray:
        """The mean over the stream's batches of fn(objective, batch, *args, *static) (an array:
        losses at other parameters, `geometry.evaluate`, `compiled.losses_along`), in one pass;
        `fn` a module-level function and `static` hashable, so one program serves every call."""
        objective, batches = per_batch(self.point.shared[0]), self.point.batches
        shape = jax.eval_shape(
            lambda batch, *args: fn(objective, batch, *args, *static), batches.first, *args
        )
        total = jnp.zeros(shape.shape, shape.dtype)
        for chunk, weights in batches.chunks():
            weights = weights.astype(shape.dtype)
            total = _chunk_total(objective, fn, static, chunk, weights, args, total)
        return np.asarray(total) / batches.total  # the weights, n_k / n_0, summed


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


def _probe_starts(
    key: jax.Array, indices: jax.Array, params: PyTree, kind: str
) -> tuple[Callable[[], jax.Array], jax.Array]:
    """(the probes `indices`, drawn as `spectral_density` draws them, their runs' restart keys)."""
    probe_key, restart_key = jax.random.split(key)
    starts = lambda: jax.vmap(  # noqa: E731
        lambda i: layout_lib.probe(probe_key, i, kind, params, None)
    )(indices)
    return starts, jax.vmap(lambda i: jax.random.fold_in(restart_key, i))(indices)


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


_ONE = layout_lib.Layout(None, (), "")  # one device (a stream's vectors are ravel_pytree's)


@functools.partial(jax.jit, donate_argnames=("vectors",))
def _krylov_begin(
    vectors: jax.Array, plan: Plan, key: jax.Array, zero: jax.Array
) -> tuple[Carry, jax.Array]:
    """A search call's carry (its loss and gradient come from the passes) and its first vector."""
    gradient = jnp.zeros(vectors.shape[1], zero.dtype)
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
