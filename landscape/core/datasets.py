"""Datasets that stream: `Point(params, objective=f, batches=landscape.stream(loader))` is the
mean of f over an iterable of batches (a list, a loader, a function returning an iterator) that
never sits in memory at once, each batch's mean weighed by its examples (a loader's short last
batch too). The host stacks `chunk` batches of one shape at a time and one compiled program adds
their loss, gradient and products to running sums (`chunk_sums`): one pass over the data per
product (or block of products), as PyHessian's data-loader mode (docs/design/batches.md). The
probes of TAKES take such a point (their loops over it: `stream.py`); docs/guide/own_model.md."""

from __future__ import annotations

import functools
import itertools
import os
import reprlib
import types
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import jax
import numpy as np

from landscape import _checks
from landscape.core import operator
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


class Stream:
    """An iterable of batches, read `chunk` batches of one shape at a time (`stream`)."""

    is_stream = True  # what `core.batches.streams` reads (the core imports no probe)

    def __init__(self, source: Any, chunk: int) -> None:
        self.source, self.chunk, self.count, self.total = source, chunk, 0, 0.0
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
        """(up to `chunk` consecutive batches of one shape stacked, their weights n_k / n_0, a
        batch's examples over the first's): a chunk of the first batch's shape padded with
        copies of its last batch of weight 0, so all are one program's shapes; one of another
        shape (a short last batch) as it is; a dataset of fewer batches than `chunk`, all of one
        shape, is one chunk of its own size, unpadded, from its first pass on."""
        count, total = 0, 0.0
        group: list[PyTree] = []
        weights: list[float] = []
        for batch in self.batches():
            found = _spec(batch)
            if group and (found != _spec(group[0]) or len(group) == self.chunk):
                yield self._stacked(group, weights)
                group, weights = [], []
            weights.append(_weight(found, self.spec, count))
            group.append(batch)
            count, total = count + 1, total + weights[-1]
        if group:
            if not self.count and count == len(group) < self.chunk:
                self.chunk = count
            yield self._stacked(group, weights)
        if self.count and count != self.count:
            raise ValueError(
                f"landscape.stream: a pass gave {count} batches where the first gave "
                f"{self.count}: the dataset must be the same at every pass (every product reads "
                "it once)."
            )
        self.count, self.total = count, total

    def _stacked(self, group: list[PyTree], weights: list[float]) -> tuple[PyTree, np.ndarray]:
        """The group stacked with its weights, padded to `chunk` if of the first batch's shape."""
        pad = self.chunk - len(group) if _spec(group[0]) == self.spec else 0
        stacked = jax.tree.map(lambda *leaves: np.stack(leaves), *group, *group[-1:] * pad)
        return stacked, np.asarray(weights + [0.0] * pad, np.float64)

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
        summed chunk by chunk on the device, divided on the host by the sum of the weights."""
        dim, dtype = vectors.shape[1], vectors.dtype
        totals = jax.device_put(tuple(np.zeros(s, dtype) for s in ((), (dim,), vectors.shape)))
        for chunk, weights in self.chunks():
            totals = chunk_sums(objective, params, chunk, weights.astype(dtype), vectors, totals)
        return tuple(np.asarray(t) / self.total for t in totals)

    def loss(self, objective: Any, params: PyTree) -> float:
        """The mean loss over one pass (`Point.loss`)."""
        dim = sum(int(np.size(leaf)) for leaf in jax.tree.leaves(params))
        vectors = np.zeros((0, dim), dtype_of(params))
        return float(self.sums(per_batch(objective), params, vectors)[0])

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
    """A dataset in batches that streams, for `Point(..., objective=f, batches=...)`.

    Args:
        batches: a list of batches (pytrees of numeric arrays of one structure and dtypes,
            which may differ in their number of examples, the leading axis every leaf of a batch
            shares), a loader that can be iterated again (a torch DataLoader, a grain or tf.data
            pipeline as numpy), or a function returning a fresh iterator (a generator function).
        chunk: batches stacked into each call of the compiled program (memory: one chunk; at
            most the dataset's batches).

    Returns:
        A `Stream`; the point's loss is the mean over its batches of f(params, batch), each
        weighed by its examples: the mean over all examples for an f that is a mean over them.
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


def _weight(found: tuple, spec: tuple, index: int) -> float:
    """n_k / n_0, batch `index`'s examples over the first batch's (1 for a batch of its shape):
    one sentence for a batch that differs from the first in more than the leading axis its
    leaves share (another structure, dtypes, or an example's shape)."""
    if found == spec:
        return 1.0
    weighed = "a streamed dataset's batches may differ only in their number of examples"
    if found[0] != spec[0]:
        raise ValueError(
            f"landscape.stream: batch {index} is {found[0]} where batch 0 is {spec[0]}: {weighed}."
        )
    shapes = [s for s, _ in found[1]], [s for s, _ in spec[1]]
    sizes = [{s[0] if s else -1 for s in leaves} for leaves in shapes]
    if [s[1:] for s in shapes[0]] != [s[1:] for s in shapes[1]] or any(
        len(one) != 1 or -1 in one for one in sizes
    ):
        raise ValueError(
            f"landscape.stream: batch {index} has leaves {shapes[0]} where batch 0 has "
            f"{shapes[1]}: {weighed}, the leading axis every leaf of a batch shares (each "
            "batch's mean is weighed by it)."
        )
    if found[1] != tuple(zip(shapes[0], (d for _, d in spec[1]), strict=True)):
        raise ValueError(
            f"landscape.stream: batch {index} has leaves of dtypes "
            f"{[str(d) for _, d in found[1]]} where batch 0 has {[str(d) for _, d in spec[1]]}: "
            f"{weighed}, each leaf of one dtype (one compiled program adds them); cast them in "
            "the source."
        )
    return sizes[0].pop() / sizes[1].pop()


def dtype_of(params: PyTree) -> np.dtype:
    return np.dtype(jax.tree.leaves(params)[0].dtype)


def per_batch(objective: Any) -> Any:
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
