"""The dense Hessian at a Point (or at a list of points of one model, in one vmapped call).

Results keep the parameter names, so `H.block("e")` or `H.block("b", "e")` reads like the paper.
Block selection, focus blocks, the eigenvalue tolerance and non-finite results:
docs/design/curvature.md.
"""

from __future__ import annotations

import functools
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any, Literal, overload

import jax
import numpy as np
from jax.sharding import Mesh

from landscape import _checks
from landscape.core import blocks, compiled, data, memory
from landscape.core.budget import one_evaluation
from landscape.point import Point, PointOrPoints, as_points, param_names
from landscape.probes.gradient import labelled
from landscape.probes.hessian import Hessian
from landscape.probes.lanczos import Spectrum, lanczos_spectrum
from landscape.trees import all_finite, unravel_numpy
from landscape.typing import Progress, PyTree


@overload
def hessian_at(
    point: Point,
    method: Literal["dense"] = "dense",
    *,
    max_dense_dim: int = 6000,
    columns_per_batch: int | None = None,
    progress: Progress = print,
) -> Hessian: ...


@overload
def hessian_at(
    point: Sequence[Point],
    method: Literal["dense"] = "dense",
    *,
    max_dense_dim: int = 6000,
    columns_per_batch: int | None = None,
    progress: Progress = print,
) -> list[Hessian]: ...


@overload
def hessian_at(
    point: Point, method: Literal["lanczos"], *, num_iters: int = 100, key: jax.Array | None = None
) -> Spectrum: ...


@overload
def hessian_at(
    point: Sequence[Point],
    method: Literal["lanczos"],
    *,
    num_iters: int = 100,
    key: jax.Array | None = None,
) -> list[Spectrum]: ...


def hessian_at(
    point: PointOrPoints,
    method: str = "dense",
    *,
    num_iters: int = 100,
    key: jax.Array | None = None,
    max_dense_dim: int = 6000,
    columns_per_batch: int | None = None,
    progress: Progress = print,
) -> Hessian | Spectrum | list[Hessian] | list[Spectrum]:
    """The exact Hessian of the population loss at `point`, compiled once per model.

    Above D = 1024 (`CHUNKED_ABOVE`) a single point's matrix is formed in chunks (over slices of
    its population where `meta["population"]` says how), with its memory first and a progress
    line with the time left after each chunk. Verdicts: docs/design/curvature.md.

    Args:
        point: a `Point`, or a list of points of one model (one vmapped call).
        method: "dense", the (D, D) matrix in the params' dtype; or "lanczos", a `Spectrum`.
        num_iters: Lanczos steps (method="lanczos").
        key: the Lanczos start vector's key (default `jax.random.key(0)`).
        max_dense_dim: the largest D for which a dense matrix is formed.
        columns_per_batch: Hessian columns computed at once (default: from XLA's cost estimate
            of one loss, `default_columns_per_batch`).
        progress: where progress lines go (None: silent).

    Returns:
        A `Hessian` (a list for a list of points; a `Spectrum` for method="lanczos") with its
        blocks, spectrum, `kind()`, `verdict()`, `near_stationary()` and `summary()`.
    """
    points, listed = as_points(point, "hessian_at")
    if not isinstance(method, str) or method not in ("dense", "lanczos"):
        raise ValueError(f"method={method!r}: must be 'dense' or 'lanczos'.")
    _checks.check_int("num_iters", num_iters, 1, "the number of Lanczos steps")
    _checks.check_key("key", key)
    _checks.check_int(
        "max_dense_dim", max_dense_dim, 1, "the largest D for which a dense D x D Hessian is formed"
    )
    if columns_per_batch is None:
        columns_per_batch = default_columns_per_batch(points[0])
    _checks.check_int("columns_per_batch", columns_per_batch, 1, "Hessian columns computed at once")
    if method == "lanczos":
        spectra = [lanczos_spectrum(p, num_iters, key) for p in points]
        return spectra if listed else spectra[0]
    _check_dense_size(points, max_dense_dim, columns_per_batch)
    source = data.of(points, listed, "hessian_at")
    whole = functools.partial(_in_memory, points, listed, columns_per_batch, progress)
    found = source.formed(points[0].shared[0], columns_per_batch, progress, "hessian_at", whole)
    hessians = [_hessian(p, *parts) for p, parts in zip(points, found, strict=True)]
    return hessians if listed else hessians[0]


def _in_memory(
    points: list[Point], listed: bool, columns_per_batch: int, progress: Any
) -> list[tuple[Any, Any, Any]]:
    """(loss, flat gradient, H) of each point: one program (a list's vmapped), or above
    CHUNKED_ABOVE chunk by chunk."""
    if not listed and points[0].num_params > CHUNKED_ABOVE:
        return [_hessian_in_chunks(points[0], columns_per_batch, progress)]
    arguments = compiled.arguments(points, listed)
    batching = (columns_per_batch, population_parts(points[0]))
    loss, grad, matrix = (np.asarray(x) for x in _dense_hessian(*arguments, batching, listed))
    if not listed:
        return [(loss, grad, matrix)]
    return [(loss[i], grad[i], matrix[i]) for i in range(len(points))]


def _dense_hessian(
    objective: Callable,
    params: PyTree,
    inputs: PyTree,
    batching: tuple[int, compiled.Parts],
    listed: bool,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """`compiled.hessian`, run once more on a fresh executable when its matrix alone is
    non-finite: on XLA:CPU about 1 compile in 100 of a batched-column Hessian program gave an
    executable that returns NaN on every call while a fresh one of the same HLO is finite
    (docs/design/curvature.md, "A rare bad executable"). Says so in a warning."""
    arguments = (objective, params, inputs, batching[0], listed, batching[1])
    loss, grad, matrix = compiled.hessian(*arguments)
    if not (all_finite((loss, grad)) and not all_finite(matrix)):
        return loss, grad, matrix
    compiled.hessian.clear_cache()  # type: ignore[attr-defined]  # jitted functions have it
    loss, grad, matrix = compiled.hessian(*arguments)
    again = "finite" if all_finite(matrix) else "non-finite"
    warnings.warn(
        "hessian_at: the compiled Hessian program returned non-finite entries at a finite loss "
        f"and gradient; a fresh compile of it gave {again} ones (a rare XLA:CPU fault, "
        "docs/design/curvature.md: 'A rare bad executable').",
        RuntimeWarning,
        stacklevel=3,
    )
    return loss, grad, matrix


COLUMN_BYTES = 16 * 2**20  # memory traffic of one batch of Hessian columns, about a cache's


def default_columns_per_batch(point: Point) -> int:
    """Hessian columns per vmapped batch: as many as keep a batch's memory traffic (XLA's cost
    estimate of one loss evaluation, a column's share) under COLUMN_BYTES, from 1 (a population
    loss over many sequences) to 256 (docs/performance.md)."""
    return int(min(256, max(1, COLUMN_BYTES // max(_bytes_moved(point), 1.0))))


def _bytes_moved(point: Point) -> float:
    """XLA's estimate of the bytes one loss evaluation of the point reads and writes."""
    objective, inputs = one_evaluation(point)
    cost = jax.jit(objective).lower(point.params, inputs).cost_analysis() or {}
    cost = cost[0] if isinstance(cost, list) else cost  # older jax: one dict per program
    return float(cost.get("bytes accessed", 0.0))


def population_parts(point: Point) -> compiled.Parts:
    """(slices, mean): where `point.meta["population"]` says the loss is the "mean" (or "sum")
    of its values on equal slices of the leading axis of every input leaf, the fewest such
    slices whose loss moves at most COLUMN_BYTES, so that a large Hessian's columns are formed
    slice by slice in cache ((1, True): the whole population at once; docs/design/curvature.md,
    "Large Hessians")."""
    rule, leaves = point.meta.get("population"), jax.tree.leaves(point.shared[1])
    sizes = {np.shape(x)[0] if np.ndim(x) else 0 for x in leaves}
    if rule not in ("mean", "sum") or len(sizes) != 1 or 0 in sizes:
        return 1, True
    size, wanted = sizes.pop(), int(np.ceil(_bytes_moved(point) / COLUMN_BYTES))
    wanted = min(max(1, wanted), size)  # past one example a slice: one example each
    return next(d for d in range(wanted, size + 1) if size % d == 0), rule == "mean"


CHUNKED_ABOVE = 1024  # a dense Hessian of more parameters is formed in chunks, with progress


def _hessian_in_chunks(
    point: Point, columns_per_batch: int, progress: Progress
) -> tuple[float, np.ndarray, np.ndarray]:
    """A large dense Hessian chunk by chunk (one compiled program for every chunk, each device of
    the process computing its own chunk at once), its memory said first (`in_chunks`)."""
    dim, devices, parts = point.num_params, jax.local_devices(), population_parts(point)
    count = max(columns_per_batch, -(-dim // 10))  # about ten chunks
    sliced = f", over {parts[0]} slices of the population" if parts[0] > 1 else ""
    header = (
        f"dense Hessian of {point.name or 'the point'}: D = {dim}, "
        f"{memory.format_bytes(dim * dim * blocks.itemsize(point))} for the matrix, {dim} "
        f"Hessian-vector products in chunks of {count} on {len(devices)} device(s){sliced}"
    )
    batching = (columns_per_batch, parts)
    chunk = functools.partial(_chunks_from, point, count=count, batching=batching, devices=devices)
    found = in_chunks(dim, count * len(devices), chunk, progress, header)
    loss, grad, _ = found[0]
    return loss, grad, np.concatenate([columns for _, _, columns in found])[:dim]


def in_chunks(
    dim: int, step: int, chunk: Callable[[int], Any], progress: Progress, header: str
) -> list[Any]:
    """chunk(first) for first = 0, step, 2 step, ... below dim: `header` first, then a line with
    the columns done and the time left after each (through `progress`)."""
    if progress:
        progress(header)
    start, found = time.perf_counter(), []
    for first in range(0, dim, step):
        found.append(chunk(first))
        done, seconds = min(first + step, dim), time.perf_counter() - start
        if progress:
            left = seconds / done * (dim - done)
            progress(f"  columns {done}/{dim} | {seconds:.1f} s | about {left:.0f} s left")
    return found


def _chunks_from(
    point: Point,
    first: int,
    count: int,
    batching: tuple[int, compiled.Parts],
    devices: list[jax.Device],
) -> tuple[float, np.ndarray, np.ndarray]:
    """(loss, flat gradient, Hessian columns first .. first + count * len(devices) - 1): one
    chunk on each device (`compiled.hessian_columns_on_devices`), or one chunk on one device;
    `batching`: (columns per vmapped batch, `population_parts`)."""
    objective, inputs = point.shared
    columns_per_batch, parts = batching
    if len(devices) == 1:
        loss, grad, columns = compiled.hessian_columns(
            objective, point.params, inputs, np.int32(first), columns_per_batch, count, parts
        )
        return float(loss), np.asarray(grad), np.asarray(columns)
    mesh = Mesh(np.asarray(devices), ("columns",))
    firsts = np.asarray(first + count * np.arange(len(devices)), np.int32)
    losses, grads, columns = compiled.hessian_columns_on_devices(
        objective, point.params, inputs, firsts, columns_per_batch, count, mesh, parts
    )
    grad = np.asarray(grads)[0]
    return float(np.asarray(losses)[0]), grad, np.asarray(columns).reshape(-1, point.num_params)


def _check_dense_size(points: list[Point], max_dense_dim: int, columns_per_batch: int) -> None:
    """Refuse a dense Hessian above max_dense_dim, or one whose matrices would not fit in memory,
    before anything is formed."""
    point, dim = points[0], points[0].num_params
    if dim > max_dense_dim:
        raise ValueError(
            f"{point.name or 'The point'} has D = {dim} parameters, above max_dense_dim = "
            f"{max_dense_dim} for a dense D x D Hessian; use hessian_at(point, "
            f"method='lanczos') for its spectrum (or hvp(point) for products), or raise "
            f"max_dense_dim."
        )
    needed = 3 * len(points) * dim * dim * blocks.itemsize(point)  # matrix, host copy, H + H^T
    available = memory.available_memory_bytes()
    if needed > available:
        raise MemoryError(
            f"{len(points)} dense Hessian(s) of D = {dim} need about "
            f"{memory.format_bytes(needed)} but {memory.format_bytes(available)} is "
            "available: pass fewer points at once, or use method='lanczos'."
        )


def _hessian(point: Point, loss: Any, grad: Any, matrix: Any) -> Hessian:
    gradient = labelled(point, unravel_numpy(point.params, np.asarray(grad)), loss)
    dense = np.asarray(matrix)
    return Hessian(0.5 * (dense + dense.T), param_names(point.params), point, gradient)
