"""Datasets that stream: `Point(params, objective=f, batches=landscape.stream(loader))` is the
mean of f over an iterable of equal batches (a list, a loader, a function returning an iterator)
that never sits in memory at once. The host stacks `chunk` batches at a time and one compiled
program adds their loss, gradient and products to running sums: one pass over the data per
product (or block of products), as PyHessian's data-loader mode. The probes of TAKES take such
a point, each equal to the stacked form on the same data to rounding; docs/guide/own_model.md."""

from __future__ import annotations

import functools
import itertools
import math
import os
import reprlib
import time
import types
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from landscape import _checks
from landscape.core import hutchpp, krylov_schur_device, lanczos, memory
from landscape.core import layout as layout_lib
from landscape.core.krylov_schur import Outcome, Plan
from landscape.core.krylov_schur_device import Carry
from landscape.probes import operator
from landscape.typing import PyTree

TAKES = (
    "gradient_at",
    "hvp",
    "hvp_flat",
    "trace",
    "diagonal",
    "lanczos_spectrum",
    "spectral_density",
    "eigenpairs",
    "hessian_at",
    "ggn_at",
    "escape_directions",
    "path",
    "slice_2d",
    "random_direction",
    "direction_to",
    "Point.loss",
)
LONG_SECONDS = 10.0  # a streamed probe prints a line per pass once it has taken this long


class Stream:
    """An iterable of equal batches, read `chunk` batches at a time (`stream`)."""

    is_stream = True  # what point.py reads (it imports no probe)

    def __init__(self, source: Any, chunk: int) -> None:
        self.source, self.chunk, self.count = source, chunk, 0
        self._pending: Iterator[PyTree] | None = self._opened()  # the first pass's
        first = next(self._pending, None)
        if first is None:
            raise ValueError("landscape.stream: the dataset gave no batch.")
        self.first = jax.tree.map(np.asarray, first)
        self.spec = _spec(self.first)
        _check_numeric(self.first)

    def _opened(self) -> Iterator[PyTree]:
        """The first pass's iterator; a generator (or builtin iterator) is opened beside another,
        and the same one twice (shared, as lambda: g gives) refused before a batch is read."""
        one = self._fresh()
        if _one_shot(one) and self._fresh() is one:
            raise TypeError(_SPENT.format(what=_SHARED))
        return one

    def _fresh(self) -> Iterator[PyTree]:
        made = self.source() if callable(self.source) else self.source
        try:
            return iter(made)
        except TypeError:
            raise TypeError(
                "landscape.stream: the source function returned a value of type "
                f"{_checks.type_name(made)}, which is not iterable: give a function that "
                "returns an iterator over the batches (a generator function)."
            ) from None

    def batches(self) -> Iterator[PyTree]:
        """A fresh pass over the batches, each as numpy arrays (the first pass goes on from the
        batch read to learn their shapes)."""
        pending, self._pending = self._pending, None
        source = self._fresh() if pending is None else itertools.chain([self.first], pending)
        return (jax.tree.map(np.asarray, batch) for batch in source)

    def chunks(self) -> Iterator[tuple[PyTree, np.ndarray]]:
        """(`chunk` batches stacked, their weights): the last chunk padded with copies of its
        last batch of weight 0, so every chunk is one program's shapes; a dataset of fewer
        batches than `chunk` is one chunk of its own size, unpadded, from its first pass on."""
        count, group = 0, []
        for batch in self.batches():
            _check_equal(batch, self.spec, count)
            group.append(batch)
            count += 1
            if len(group) == self.chunk:
                yield _stacked(group, len(group))
                group = []
        if group:
            if not self.count and count < self.chunk:
                self.chunk = count
            yield _stacked(group + group[-1:] * (self.chunk - len(group)), len(group))
        if self.count and count != self.count:
            raise ValueError(
                f"landscape.stream: a pass gave {count} batches where the first gave "
                f"{self.count}: the dataset must be the same at every pass (every product reads "
                "it once)."
            )
        self.count = count

    def refuse_unless(self, caller: str) -> None:
        """One sentence for a probe that does not take a streamed dataset."""
        if caller not in TAKES:
            raise TypeError(
                f"{caller} does not take a streamed dataset yet ({', '.join(TAKES[:-1])} do): "
                "give the batches stacked, landscape.batches(data, batch_size), if they fit in "
                "memory."
            )

    def sums(
        self, objective: operator.Objective, params: PyTree, vectors: np.ndarray
    ) -> tuple[Any, ...]:
        """One pass: (mean loss, mean flat gradient, mean H V for the rows of `vectors`), each
        summed chunk by chunk on the device, divided on the host."""
        dim, dtype = vectors.shape[1], vectors.dtype
        totals = jax.device_put(tuple(np.zeros(s, dtype) for s in ((), (dim,), vectors.shape)))
        for chunk, weights in self.chunks():
            totals = chunk_sums(objective, params, chunk, weights.astype(dtype), vectors, totals)
        return tuple(np.asarray(t) / self.count for t in totals)

    def loss(self, objective: Any, params: PyTree) -> float:
        """The mean loss over one pass (`Point.loss`)."""
        vectors = np.zeros((0, _size(params)), _dtype(params))
        return float(self.sums(_per_batch(objective), params, vectors)[0])

    @property
    def dtype(self) -> np.dtype:
        """The first leaf's: a stream reads as one scalar leaf where points are compared."""
        return self.spec[1][0][1]

    shape = ()


_SPENT = (
    "landscape.stream: {what} is spent after one pass, and every product reads the data once: "
    "give a list, a loader that can be iterated again, or a function that returns a fresh "
    "iterator, e.g. landscape.stream(lambda: make_batches())."
)
_SHARED = "a source that gives the same iterator at every call (one generator, as lambda: g)"
_WHAT = (
    "landscape.stream takes an iterable of batches (a list, a loader, a function returning an "
    "iterator)"
)


def stream(batches: Iterable[PyTree] | Callable[[], Iterable[PyTree]], chunk: int = 8) -> Stream:
    """A dataset of equal batches that streams, for `Point(..., objective=f, batches=...)`.

    Args:
        batches: a list of batches (pytrees of numeric arrays of one shape and dtype), a loader
            that can be iterated again (a torch DataLoader, a grain or tf.data pipeline as
            numpy), or a function returning a fresh iterator (a generator function).
        chunk: batches stacked into each call of the compiled program (memory: one chunk; at
            most the dataset's batches).

    Returns:
        A `Stream`; the point's loss is the mean over its batches of f(params, batch).
    """
    _checks.check_int("chunk", chunk, 1, "batches per compiled call")
    if isinstance(batches, Iterator):  # a generator: one pass only
        raise TypeError(_SPENT.format(what="an iterator (a generator)"))
    if isinstance(batches, str | bytes | os.PathLike):
        raise TypeError(
            f"{_WHAT}, not a path ({batches!r}): load the file first, e.g. "
            "landscape.stream(list_of_batches) or landscape.batches(np.load(path), batch_size)."
        )
    if isinstance(batches, dict | tuple) or hasattr(batches, "shape"):
        raise TypeError(
            f"{_WHAT}; batches stacked on a leading axis go to Point(batches=...) as they are."
        )
    if not callable(batches) and not isinstance(batches, Iterable):
        raise TypeError(f"{_WHAT}, not a value of type {_checks.type_name(batches)}.")
    return Stream(batches, chunk)


def _one_shot(iterator: Iterator[PyTree]) -> bool:
    """A generator or a builtin iterator (a list's, map, zip, itertools'), which nothing resets
    and whose making reads nothing: a loader's own iterator may be its reset one (a torch
    DataLoader's persistent workers), and making one may start workers."""
    return isinstance(iterator, types.GeneratorType) or type(iterator).__module__ in (
        "builtins",
        "itertools",
    )


def _spec(batch: PyTree) -> tuple:
    leaves, treedef = jax.tree.flatten(batch)
    return treedef, tuple((np.shape(x), np.asarray(x).dtype) for x in leaves)


def _check_numeric(batch: PyTree) -> None:
    """One sentence for a first batch with a leaf that is no array of numbers (a string)."""
    for leaf in jax.tree.leaves(batch):
        if not (np.issubdtype(leaf.dtype, np.number) or leaf.dtype == np.bool_):
            raise TypeError(
                f"{_WHAT}, each a pytree of numeric arrays: its first batch holds a leaf of "
                f"dtype {leaf.dtype} ({reprlib.repr(leaf.tolist())})."
            )


def _check_equal(batch: PyTree, spec: tuple, index: int) -> None:
    """One sentence for a batch unlike the first (ragged: a last partial batch; or of other
    dtypes, or another structure)."""
    found = _spec(batch)
    if found == spec:
        return
    equal = "a streamed dataset's batches are equal (its loss is their mean)"
    if found[0] != spec[0]:
        raise ValueError(
            f"landscape.stream: batch {index} is {found[0]} where batch 0 is {spec[0]}: {equal}."
        )
    shapes = [s for s, _ in found[1]], [s for s, _ in spec[1]]
    if shapes[0] != shapes[1]:
        raise ValueError(
            f"landscape.stream: batch {index} has leaves {shapes[0]} where batch 0 has "
            f"{shapes[1]}: {equal}; drop the last partial batch (drop_last=True in a loader)."
        )
    raise ValueError(
        f"landscape.stream: batch {index} has leaves of dtypes {[str(d) for _, d in found[1]]} "
        f"where batch 0 has {[str(d) for _, d in spec[1]]}: {equal} and of one dtype (one "
        "compiled program adds them); cast them in the source."
    )


def _stacked(group: list[PyTree], real: int) -> tuple[PyTree, np.ndarray]:
    weights = (np.arange(len(group)) < real).astype(np.float64)
    return jax.tree.map(lambda *leaves: np.stack(leaves), *group), weights


def _size(params: PyTree) -> int:
    return sum(int(np.size(leaf)) for leaf in jax.tree.leaves(params))


def _dtype(params: PyTree) -> np.dtype:
    return np.dtype(jax.tree.leaves(params)[0].dtype)


def _per_batch(objective: Any) -> Any:
    """The objective of one batch: a point's is the mean over batches of it."""
    return getattr(objective, "per_batch", objective)


@functools.partial(jax.jit, static_argnames=("objective",), donate_argnames=("totals",))
def chunk_sums(
    objective: operator.Objective,
    params: PyTree,
    chunk: PyTree,
    weights: jax.Array,
    vectors: jax.Array,
    totals: tuple[jax.Array, jax.Array, jax.Array],
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """`totals` plus the chunk's sums over its batches (leading axis) of weight x (loss, flat
    gradient, H V): each batch linearised once (its G for a Gauss-Newton split)."""

    def add(total: tuple, item: tuple) -> tuple[tuple, None]:
        batch, weight = item
        op = operator.hessian_operator(objective, params, batch)
        terms = (op.value.astype(weight.dtype), op.gradient, op.rows(vectors))
        return tuple(t + weight * x for t, x in zip(total, terms, strict=True)), None

    return jax.lax.scan(add, totals, (chunk, weights))[0]


# ---------------------------------------------------------------- the probes over a stream


def streamed(points: list[Any], listed: bool, caller: str) -> bool:
    """Whether the points' data stream (one sentence for a list of such points)."""
    if not getattr(points[0].batches, "is_stream", False):
        return False
    if listed:
        raise TypeError(f"{caller}: give points over a streamed dataset one at a time.")
    return True


def value_and_gradient(point: Any, objective: Any) -> tuple[float, np.ndarray]:
    """The point's mean loss and flat gradient, one pass."""
    vectors = np.zeros((0, point.num_params), _dtype(point.params))
    value, grad, _ = point.batches.sums(_per_batch(objective), point.params, vectors)
    return float(value), grad


def product(point: Any, objective: Any, vector: np.ndarray) -> np.ndarray:
    """H v (or G v) for a flat v, one pass."""
    vectors = np.asarray(vector, _dtype(point.params)).reshape(1, -1)
    return point.batches.sums(_per_batch(objective), point.params, vectors)[2][0]


def _passes(caller: str, progress: Any, total: int | None) -> Callable[[], None]:
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


def _advanced(
    state: lanczos.Lanczos,
    product: jax.Array,
    i: jax.Array,
    start: Callable[[], jax.Array],
    restart_key: jax.Array,
) -> tuple[lanczos.Lanczos, jax.Array]:
    """The core's Lanczos step given the product of its current row, or for i = 0 its init from
    `start()`; and the row to multiply next."""
    num_iters = state.basis.shape[0]
    state = jax.lax.cond(
        i == 0,
        lambda: lanczos.init(start(), num_iters),
        lambda: lanczos.step(state, product, restart_key),
    )
    return state, lanczos.current(state)


def _zero_runs(lead: tuple[int, ...], num_iters: int, dim: int, dtype: Any) -> lanczos.Lanczos:
    """Lanczos states of no step yet, on the device, to be donated to the first advance."""
    zeros = np.zeros(lead + (num_iters,), dtype)
    basis = np.zeros(lead + (num_iters, dim), dtype)
    return lanczos.Lanczos(*jax.device_put((basis, zeros, zeros, np.zeros(lead, np.int32))))


@functools.partial(jax.jit, donate_argnames=("state",))
def _lanczos_advance(
    state: lanczos.Lanczos, product: jax.Array, i: jax.Array, key: jax.Array, params: PyTree
) -> tuple[lanczos.Lanczos, jax.Array]:
    """`_advanced` from the start drawn as `lanczos_spectrum` draws it (`layout.draw`)."""
    start_key, restart_key = jax.random.split(key)
    start = lambda: layout_lib.draw("normal", start_key, params, None)  # noqa: E731
    return _advanced(state, product, i, start, restart_key)


def tridiagonal(
    point: Any, objective: Any, key: jax.Array, num_iters: int, progress: Any
) -> tuple[np.ndarray, ...]:
    """(alphas, betas, loss, flat gradient) of Lanczos from `key`'s start, a pass a product."""
    dim, dtype = point.num_params, _dtype(point.params)
    state = _zero_runs((), num_iters, dim, dtype)
    product, done = np.zeros(dim, dtype), _passes("lanczos_spectrum", progress, num_iters)
    for i in range(num_iters + 1):
        state, row = _lanczos_advance(state, product, np.int32(i), key, point.params)
        if i < num_iters:
            rows = np.asarray(row)[None]
            loss, grad, products = point.batches.sums(_per_batch(objective), point.params, rows)
            product = products[0]
            done()
    found = lanczos.extract(jax.device_get(state))  # numpy: sliced on the host, no program
    return np.asarray(found.alphas), np.asarray(found.betas), np.asarray(loss), grad


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
    dim, dtype = point.num_params, _dtype(point.params)
    each = num_iters * dim * np.dtype(dtype).itemsize  # a run's basis
    fit = int(memory.budget() // each)
    if fit < 1:
        raise MemoryError(
            f"spectral_density: one probe's Lanczos basis ({memory.format_bytes(each)}) does not "
            "fit in half the free memory; ask for fewer Lanczos steps (num_iters)."
        )
    groups = math.ceil(num_probes / min(BLOCK, num_probes, fit))
    group = math.ceil(num_probes / groups)  # equal groups (one program), the last padded
    done = _passes("spectral_density", progress, num_iters * math.ceil(num_probes / group))
    found = []
    for low in range(0, num_probes, group):
        indices = np.arange(low, low + group, dtype=np.int32)  # past num_probes: cut below
        state = _zero_runs((group,), num_iters, dim, dtype)
        products = np.zeros((group, dim), dtype)
        for i in range(num_iters + 1):
            step = np.int32(i)
            state, rows = _slq_advance(state, products, step, key, indices, point.params, kind)
            if i < num_iters:
                products = _products(point, objective, np.asarray(rows), done)
        found.append([np.asarray(state.alphas), np.asarray(state.betas)[:, :-1]])
    alphas, betas = (np.concatenate(parts)[:num_probes] for parts in zip(*found, strict=True))
    return alphas, betas


@functools.partial(jax.jit, static_argnames=("kind",), donate_argnames=("state",))
def _slq_advance(
    state: lanczos.Lanczos,
    products: jax.Array,
    i: jax.Array,
    key: jax.Array,
    indices: jax.Array,
    params: PyTree,
    kind: str,
) -> tuple[lanczos.Lanczos, jax.Array]:
    """`_advanced` for each probe's run, from the probes drawn as `spectral_density` draws them."""
    probe_key, restart_key = jax.random.split(key)

    def one(state: lanczos.Lanczos, product: jax.Array, index: jax.Array) -> tuple:
        start = lambda: layout_lib.probe(probe_key, index, kind, params, None)  # noqa: E731
        return _advanced(state, product, i, start, jax.random.fold_in(restart_key, index))

    return jax.vmap(one)(state, products, indices)


BLOCK = 16  # products of one pass at most (trace, spectral_density)


@functools.partial(jax.jit, static_argnames=("size",))
def _probe_rows(
    key: jax.Array, stage: jax.Array, first: jax.Array, params: PyTree, size: int
) -> jax.Array:
    """Rademacher probes first, ..., first + size - 1 as `trace` draws them
    (`layout.draw`): from the key (stage 0, Hutchinson), or from its split's first (1, Hutch++'s
    sketch) or second (2)."""
    keys = jnp.stack([jax.random.key_data(k) for k in (key, *jax.random.split(key))])
    chosen = jax.random.wrap_key_data(keys[stage], impl=jax.random.key_impl(key))
    indices = first + jnp.arange(size)
    return jax.vmap(
        lambda i: layout_lib.draw("rademacher", jax.random.fold_in(chosen, i), params, None)
    )(indices)


def _products(point: Any, objective: Any, vectors: np.ndarray, done: Callable) -> np.ndarray:
    """H v for each row of `vectors`, in passes of BLOCK rows (the last padded with zeros)."""
    size = min(BLOCK, len(vectors))
    padded = np.concatenate([vectors, np.zeros((-len(vectors) % size, vectors.shape[1]))])
    out = []
    for low in range(0, len(padded), size):
        rows = padded[low : low + size].astype(vectors.dtype)
        out.append(point.batches.sums(_per_batch(objective), point.params, rows)[2])
        done()
    return np.concatenate(out)[: len(vectors)]


def _probes(key: jax.Array, stage: int, count: int, params: PyTree) -> np.ndarray:
    size = min(BLOCK, count)
    blocks = [
        np.asarray(_probe_rows(key, np.int32(stage), np.int32(low), params, size))
        for low in range(0, count, size)
    ]
    return np.concatenate(blocks)[:count]


def trace_parts(
    point: Any, objective: Any, key: jax.Array, num_probes: int, method: str, progress: Any
) -> tuple[np.ndarray, np.ndarray]:
    """(exact part, Hutchinson samples) of `trace` over a stream: its probes, stages and
    arithmetic, each block of products one pass over the data."""
    rank, rest = hutchpp.split(num_probes, method)
    total = sum(math.ceil(n / min(BLOCK, max(n, 1))) for n in (rank, rank, rest) if n)
    done = _passes("trace", progress, total)
    if not rank:
        return np.zeros(()), _forms(point, objective, key, 0, rest, None, done)
    sketch = _products(point, objective, _probes(key, 1, rank, point.params), done)
    range_ = hutchpp.range_basis(sketch)  # as `trace` makes its sketch's (on the host)
    exact = np.sum(range_ * _products(point, objective, range_, done))
    return exact, _forms(point, objective, key, 2, rest, range_, done)


def _forms(
    point: Any,
    objective: Any,
    key: jax.Array,
    stage: int,
    count: int,
    range_: np.ndarray | None,
    done: Callable,
) -> np.ndarray:
    """g^T H g for the `count` probes of `stage` (projected off the rows of `range_`), a block of
    BLOCK at a time: drawn, multiplied in one pass and reduced to its forms, so the host holds
    one block's vectors (all the probes at once held 5 arrays of count x D: 2.6 GB at D = 10^6)."""
    size = min(BLOCK, count)
    forms = []
    for low in range(0, count, size):
        rows = _probe_rows(key, np.int32(stage), np.int32(low), point.params, size)
        probes = np.asarray(rows) * (np.arange(size) < count - low)[:, None]  # past count: 0
        if range_ is not None:
            probes = hutchpp.projected(range_, probes)
        products = _products(point, objective, probes, done)  # one shape: one program
        forms.append(np.sum(probes * products, axis=1)[: count - low])
    return np.concatenate(forms)


# ---------------------------------------------------------------- eigenpairs, dense, diagonal


def searcher(point: Any, progress: Any) -> Callable[..., tuple[jax.Array, Outcome]]:
    """`krylov.advance` over a stream (its arguments and results): the call's products one at a
    time, each one pass over the data, between two small programs that do the call's vector
    work on the device as `advance` does (`krylov_schur_device.begin`, then its `step` while
    the carry says the call goes on)."""
    done = _passes("eigenpairs", progress, None)

    def advance(
        objective: Any, params: PyTree, _: Any, vectors: jax.Array, plan: Plan,
        key: jax.Array, which: str, __: Any,
    ) -> tuple[jax.Array, Outcome]:  # fmt: skip
        zero = np.zeros((), vectors.dtype)
        carry, v = _krylov_begin(vectors, plan, key, zero)
        passes = None
        while bool(carry.going):
            passes = point.batches.sums(_per_batch(objective), params, np.asarray(v)[None])
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
    dim, dtype = point.num_params, _dtype(point.params)
    columns = min(columns, dim)
    done = _passes(caller, progress, math.ceil(dim / columns))
    matrix = np.zeros((dim, dim), dtype)
    for low in range(0, dim, columns):
        units = np.eye(columns, dim, low, dtype)  # rows past D are zero: one program's shapes
        loss, gradient, products = point.batches.sums(_per_batch(objective), point.params, units)
        matrix[low : low + columns] = products[: dim - low]
        done()
    return float(loss), gradient, matrix


def products(point: Any, objective: Any, vectors: np.ndarray) -> np.ndarray:
    """H v (or G v) for each row of `vectors`, BLOCK rows a pass (the certificates of a dense
    solve over a stream)."""
    return _products(point, objective, vectors, lambda: None)


def diagonal_samples(
    point: Any, objective: Any, key: jax.Array, count: int, progress: Any
) -> np.ndarray:
    """v * Hv (count, D) for `diagonal`'s Rademacher probes (drawn as the stacked form draws
    them), BLOCK probes a pass."""
    size = min(BLOCK, count)
    done = _passes("diagonal", progress, math.ceil(count / size))
    samples = []
    for low in range(0, count, size):
        indices = np.arange(low, low + size, dtype=np.int32)
        probes = np.asarray(_diagonal_probes(key, indices, point.params))
        samples.append(probes * _products(point, objective, probes, done))
    return np.concatenate(samples)[:count]


@jax.jit
def _diagonal_probes(key: jax.Array, indices: jax.Array, params: PyTree) -> jax.Array:
    return jax.vmap(lambda i: layout_lib.probe(key, i, "rademacher", params, None))(indices)


# ---------------------------------------------------------------- losses at other parameters


def mean_of(point: Any, fn: Callable, args: tuple, static: tuple = ()) -> np.ndarray:
    """The mean over the stream's batches of fn(objective, batch, *args, *static) (an array:
    losses at other parameters, `geometry.evaluate`, `eigen.losses_along`), in one pass; `fn`
    a module-level function and `static` hashable, so one program serves every call."""
    objective = _per_batch(point.shared[0])
    shape = jax.eval_shape(
        lambda batch, *args: fn(objective, batch, *args, *static), point.batches.first, *args
    )
    total = jnp.zeros(shape.shape, shape.dtype)
    for chunk, weights in point.batches.chunks():
        weights = weights.astype(shape.dtype)
        total = _chunk_total(objective, fn, static, chunk, weights, args, total)
    return np.asarray(total) / point.batches.count


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
