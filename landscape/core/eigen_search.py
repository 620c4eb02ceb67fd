"""`eigenpairs`' Krylov-Schur search on a point (the search itself, its decisions and a call's
vector work, is the core's: `landscape.core.krylov_schur`): `advance`, a call's products of the
exact Hessian in one compiled program per model; `search`, which drives the core's search over it
(over a streamed dataset its steps host-driven, `stream.Streamed.searcher`), prints a line per run
once the search takes long, and returns what it found in `ravel_pytree`'s order.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from landscape import trees
from landscape.core import (
    blocks,
    compiled,
    data,
    krylov_schur,
    krylov_schur_device,
    memory,
    operator,
    orthonormal,
)
from landscape.core import layout as layout_lib
from landscape.core.krylov_schur import Outcome, Plan, State
from landscape.core.layout import Layout
from landscape.point import Point
from landscape.typing import Progress, PyTree


def default_ncv(k: int) -> int:
    """The vectors of D a search holds by default, the k locked ones included: ARPACK's
    max(2k + 1, 20), and at least k + 8 (a basis of 8 rows past the locked pairs)."""
    return max(2 * k + 1, 20, k + 8)


def lanczos_search_bytes(dim: int, ncv: int, itemsize: int, stored: int | None = None) -> float:
    """What a search holds beside one Hessian-vector product (`blocks.product_bytes`): its ncv
    vectors (`stored` bytes an entry, default `itemsize`), a restart's block of them and its
    rotation (an eighth together, in `itemsize`; stored narrower, the block read back too) and
    three vectors of a step's work."""
    return (ncv * _vector_bytes(itemsize, stored) + 3 * itemsize) * dim


def _vector_bytes(itemsize: int, stored: int | None) -> float:
    """A search's bytes an entry per vector it holds: the vector, and its share of a restart's
    block (read back from a narrower storage, then rotated, in `itemsize`)."""
    stored = itemsize if stored is None else stored
    block = 2 * itemsize + (stored if stored < itemsize else 0)
    return stored + block / orthonormal.ROTATION_CHUNKS


def fitted_ncv(
    point: Point, k: int, ncv: int, given: bool, progress: Progress, stored: int | None = None
) -> int:
    """ncv, lowered to what fits in the memory free for this call on each device (down to k + 4,
    said through `progress`; a given ncv is never raised); a MemoryError in one sentence when
    not even that fits; `stored` bytes an entry of the vectors (default the point's). Over a
    mesh a device holds its slice of each vector (`layout`) and the gradient each call's
    linearisation gives as the parameters lie (`device_param_bytes`)."""
    dim, itemsize = point.num_params, blocks.itemsize(point)
    spread = layout_lib.of(point.params)
    share = spread.padded / spread.slices  # a vector's entries on one device
    free = memory.budget()
    gradient = blocks.device_param_bytes(point) if spread.devices > 1 else 0.0
    room = free - blocks.product_bytes(point, devices=spread.devices) - gradient
    fits = int((room / share - 3 * itemsize) / _vector_bytes(itemsize, stored))
    smallest = min(k + 4, dim + k)
    if fits < smallest:
        blocks.plan(
            point,
            1,
            "eigenpairs",
            lanczos_search_bytes(dim, smallest, itemsize, stored),
            progress=progress,
            hint="ask for a smaller k",
            mesh=spread.mesh,
        )  # fmt: skip (raises: not one search fits)
    if fits < ncv and progress:
        why = "asked for" if given else "by default"
        progress(
            f"eigenpairs: {ncv} Lanczos vectors ({why}) need about "
            f"{memory.format_bytes(lanczos_search_bytes(round(share), ncv, itemsize, stored))}"
            f"{f' on each of {spread.devices} devices' if spread.devices > 1 else ''}; "
            f"the search holds {fits} (ncv={fits}), in more runs"
        )
    return max(min(ncv, fits), smallest)


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


LONG_SECONDS = 10.0  # a search prints a line per run once it has taken this long


class Found(NamedTuple):
    """What a search found: the k pairs, most wanted first, each with its exact residual
    (certified when `converged`), the extreme Ritz values seen, the runs and products, the
    point's loss and gradient; `num_hvps_check` of the products (in `num_hvps` too) went
    to the multiplicity check, the fresh phases begun with the k pairs locked, and
    `num_hvps_residuals` to the candidates' exact residuals outside it. The vectors (a
    list) and the gradient are pytrees like the parameters: numpy on one device, over a mesh
    left on the devices as the parameters lie (`trees.kept`)."""

    values: np.ndarray
    vectors: list[PyTree]
    residuals: np.ndarray
    low: float
    high: float
    converged: bool
    runs: int
    num_hvps: int
    loss: float
    gradient: PyTree
    num_hvps_check: int = 0
    num_hvps_residuals: int = 0


def search(
    point: Point,
    k: int,
    which: str,
    ncv: int,
    key: jax.Array,
    rtol: float,
    max_runs: int,
    progress: Callable[[str], None] | None = None,
    products: operator.ProductOptions | None = None,
) -> Found:
    """Krylov-Schur (`krylov_schur`) on one point, at most `max_runs` runs, holding `ncv`
    vectors of D; NaN pairs when a product was not finite (the search ends at it). One
    program: `advance` (over a streamed dataset, `stream.Streamed.searcher`'s two, a pass over
    the data a product); its products as `products` say (`operator.ProductOptions`)."""
    objective, inputs = point.shared
    objective = operator.with_options(objective, products)
    call, lay = data.of([point], False, "eigenpairs").searcher(advance, progress)
    dim, dtype = point.num_params, point.dtype
    settings = krylov_schur.Settings(k, min(ncv - k, dim + 1), dim, which, rtol, max_runs)
    padded = dim if lay is None else lay.padded
    where = None if lay is None else lay.sharding(1)
    storage = orthonormal.held_dtype(dtype, products.storage if products else None)
    held = [jax.device_put(np.zeros((k + settings.rows, padded), storage), where)]

    def on_device(plan: Plan) -> Outcome:
        held[0], outcome = call(objective, point.params, inputs, held[0], plan, key, which, lay)
        return outcome._replace(  # the decisions' numbers, alike in every process
            **{f: trees.host(x) for f, x in outcome._asdict().items() if f != "gradient"}
        )

    report = _reporter(progress, settings)
    state, outcome = krylov_schur.drive(settings, on_device, dtype, report)
    if not state.finite:  # NaN pairs, with the runs and products made
        nan = np.full(k, np.nan, dtype)
        nans = trees.rows(trees.unravel_rows(point.params, np.full((k, dim), np.nan, dtype)))
        return Found(
            nan, nans, nan, np.nan, np.nan, False, state.runs, state.products, np.nan,
            trees.unravel_numpy(point.params, np.full(dim, np.nan, dtype)), state.check_products,
            state.residual_products,
        )  # fmt: skip
    values, residuals, order = krylov_schur.ordered(settings, state)
    found, gradient = _as_parameters(held[0], outcome.gradient, order, lay, point.params)
    return Found(
        values.astype(dtype), found, residuals.astype(dtype),
        state.low, state.high, state.converged, state.runs, state.products,
        float(outcome.loss), gradient, state.check_products, state.residual_products,
    )  # fmt: skip


def _reporter(
    progress: Callable[[str], None] | None, settings: krylov_schur.Settings
) -> Callable[[State], None] | None:
    """A line through `progress` after each run once the search has taken LONG_SECONDS."""
    if progress is None:
        return None
    began = time.perf_counter()

    def after(state: State) -> None:
        seconds = time.perf_counter() - began
        if seconds > LONG_SECONDS:
            progress(
                f"eigenpairs: Lanczos run {state.runs} of at most {settings.max_runs} | "
                f"{len(state.values)} of {settings.k} accepted | {state.products} products | "
                f"{seconds:.1f} s"
            )

    return after


def _as_parameters(
    vectors: jax.Array,
    gradient: jax.Array,
    order: np.ndarray,
    layout: Layout | None,
    params: PyTree,
) -> tuple[list[PyTree], PyTree]:
    """The locked rows in `order` as pytrees and the gradient as a pytree, both like the
    parameters: on one device unravelled on the host; over a mesh unflattened on the devices
    a row at a time (`_row`, one program whatever k) and left there, split as the parameters.
    Rows stored narrower come back in the gradient's dtype."""
    if layout is None:
        rows = np.asarray(vectors)[order]
        rows = rows.view(jnp.bfloat16) if rows.dtype == np.uint16 else rows  # `held_dtype`
        rows = trees.unravel_rows(params, rows.astype(gradient.dtype))
        return trees.rows(rows), trees.unravel_numpy(params, np.asarray(gradient))
    rows = [trees.kept(_row(vectors, np.int32(i), gradient.dtype, layout)) for i in order]
    return rows, trees.kept(_tree(gradient, layout))


@functools.partial(jax.jit, static_argnames=("dtype", "layout"))
def _row(vectors: jax.Array, index: jax.Array, dtype: Any, layout: Layout) -> PyTree:
    """Row `index` of `vectors` in `dtype` as a pytree laid out as the parameters."""
    return layout.from_flat(orthonormal.widened(vectors[index], dtype))


@functools.partial(jax.jit, static_argnames=("layout",))
def _tree(flat: jax.Array, layout: Layout) -> PyTree:
    """A flat vector as a pytree laid out as the parameters."""
    return layout.from_flat(flat)
