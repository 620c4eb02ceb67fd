"""Many Hessian-vector products in memory-bounded blocks, with progress: the host side of the
matrix-free probes (trace, spectral_density, diagonal).

`plan` sizes one block by what one product holds against the memory free for this call, rounded
to one of a few sizes (`bucket`), so a new count of the same size class compiles nothing; `run`
calls the one block program per block (the last padded), with progress lines
(docs/design/curvature.md, "At the size of real models").
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh

from landscape import trees
from landscape.core import budget, memory
from landscape.core import layout as layout_lib
from landscape.core.sizes import bucket, bucket_below
from landscape.point import Point
from landscape.typing import Progress

LONG_SECONDS = 10.0  # a call prints a line per block once it has taken this long
LARGE_SHARE = 0.1  # a call taking more of the free memory at once says so first
CPU_BLOCK_BYTES = 2.5e8  # on the CPU a larger block is no faster (docs/performance.md)
# products made one at a time inside a block (`hvp.each_row` on the CPU) hold one product's
# memory whatever the block: a Hutchinson trace takes this many a block (one of `bucket`'s
# sizes), each block one linearisation and a progress line
MAPPED_BLOCK = 24


def product_bytes(
    point: Point,
    vector_bytes: float = 0.0,
    devices: int = 1,
    as_parameters: int = 0,
    linearised: bool = True,
) -> float:
    """Bytes one Hessian-vector product of `point` holds at once, estimated: the model's
    activations (`activation_bytes`: of a probe's product, or not `linearised`, of `hvp`'s),
    v and H v flat, one of them as the parameters lie, and the largest leaf once more (its
    H v is the sum of two matrix products, both alive), plus `vector_bytes` that the probe
    keeps per vector (a Lanczos basis). Over a mesh of `devices`, a device's: its slice of
    H v flat and of the kept vectors (`Layout.slices`: held axes hold them alike), H v as the
    parameters lie (`device_param_bytes`), the blocks of v it gathers whole
    (`Layout.gathered`) and the largest block it holds whole once more (a split block's sum
    XLA forms in place), without `as_parameters` only the larger of the two (XLA reuses the
    gathered blocks for that sum), a device's share of the activations as XLA lays them out
    (`activation_bytes`), and `as_parameters` more vectors as the parameters lie (a run that
    cuts its flat vector into the leaves for each product, which XLA keeps through its loop).
    docs/guide/foundation_scale.md has it against XLA's own count, over tanh MLPs of 2 to 16
    layers, transformers and meshes."""
    size = itemsize(point)
    flat_bytes = point.num_params * size
    if devices == 1:
        largest = max((math.prod(np.shape(x)) for x in jax.tree.leaves(point.params)), default=0)
        activations = activation_bytes(point, linearised)
        return activations + 3.0 * flat_bytes + largest * size + vector_bytes
    lay = layout_lib.of(point.params)
    flat = (flat_bytes + vector_bytes) / lay.slices
    pytrees = (1 + as_parameters) * device_param_bytes(point)
    whole = (
        lay.gathered + lay.largest_whole if as_parameters else max(lay.gathered, lay.largest_whole)
    )
    whole *= size
    return activation_bytes(point, linearised) + flat + pytrees + whole


def activation_bytes(point: Point, linearised: bool = True) -> float:
    """A product's share of the model's activations: what the loss keeps for its derivatives
    (`budget.residual_bytes`: the residuals of the gradient linearised once for a probe's
    products, or not `linearised`, of one backward pass, `hvp`'s) and one evaluation's peak
    (`budget.loss_bytes`), the tangents' working set. docs/guide/foundation_scale.md has it
    against XLA's count on MLPs and transformers."""
    return budget.residual_bytes(point, linearised) + budget.loss_bytes(point)


def device_param_bytes(point: Point) -> float:
    """The most bytes of the parameters one device holds, each leaf's shard as it lies (a
    replicated leaf whole): a product's v and H v as pytrees take as much on each device."""
    total = 0.0
    for leaf in jax.tree_util.tree_leaves(point.params):
        sharding = getattr(leaf, "sharding", None)
        shape = sharding.shard_shape(leaf.shape) if sharding is not None else np.shape(leaf)
        total += math.prod(shape) * np.dtype(leaf.dtype).itemsize
    return total


def _on_each(mesh: Mesh | None) -> str:
    """' on each of the mesh's N devices (axes)', or nothing on one device."""
    if mesh is None:
        return ""
    axes = " x ".join(f"{name} {size}" for name, size in mesh.shape.items())
    return f" on each of the mesh's {mesh.size} devices ({axes})"


def itemsize(point: Point) -> int:
    """Bytes per parameter entry (the params' dtype)."""
    leaves = jax.tree_util.tree_leaves(point.params)
    return int(np.dtype(leaves[0].dtype).itemsize) if leaves else 8


@dataclasses.dataclass(frozen=True)
class Plan:
    """`count` products as `blocks` equal blocks of `size`, one of `bucket`'s sizes (the last
    padded)."""

    count: int
    size: int
    blocks: int

    def indices(self, block: int) -> np.ndarray:
        """The probe indices of one block (past `count`: padding, dropped after)."""
        return np.arange(block * self.size, (block + 1) * self.size, dtype=np.int32)


def plan(
    point: Point,
    count: int,
    caller: str,
    vector_bytes: float = 0.0,
    points: int = 1,
    progress: Progress = None,
    free: float | None = None,
    hint: str = "give the point its data in smaller batches (Point(..., "
    "batches=landscape.batches(data, n)))",
    mesh: Mesh | None = None,
    as_parameters: int = 0,
) -> Plan:
    """Blocks for `count` products of `points` points at once that fit the call's share of the
    free memory (`memory.budget`, and CPU_BLOCK_BYTES on the CPU), each of one of `bucket`'s
    sizes (the last padded): `count` is no shape of the block program; a line through `progress`
    when they must be split by memory or take more than LARGE_SHARE of it, a MemoryError in one
    sentence when not even one product fits. Over a `mesh` the bytes are a device's
    (`product_bytes`, `as_parameters` its vectors held as the parameters lie), and the
    sentence names the mesh."""
    if progress is not None and not callable(progress):
        raise TypeError(
            f"{caller}: progress = {progress!r}: must be a function of one line (print) or None."
        )
    free = memory.device_free_bytes() if free is None else free
    devices = 1 if mesh is None else mesh.size
    each = points * product_bytes(point, vector_bytes, devices, as_parameters)
    fit = int(memory.budget(free) // max(each, 1.0))
    on_cpu = jax.default_backend() == "cpu"
    fit_cache = max(1, int(CPU_BLOCK_BYTES // max(each, 1.0))) if on_cpu else count
    if fit < 1:
        raise MemoryError(
            f"{caller}: one Hessian-vector product of {point.name or 'the point'} "
            f"{'and its Lanczos vectors ' if vector_bytes else ''}needs about "
            f"{memory.format_bytes(each)}{_on_each(mesh)} but {memory.format_bytes(free)} is "
            f"free: {hint}."
        )
    # a size class of the count, or what fits (rounded down to a size class): the count only
    # sets the number of blocks, so a new count of the same class is the same program
    size = min(bucket(count), bucket_below(min(fit, fit_cache) if on_cpu else fit))
    blocks = math.ceil(count / size)
    by_memory = fit < min(fit_cache, count)  # split for memory, not only for the CPU's cache
    at_once = (
        f"about {memory.format_bytes(each * size)} at once, of {memory.format_bytes(free)} free"
    )
    if progress and by_memory:
        progress(
            f"{caller}: {count} products need about {memory.format_bytes(each * count)}; "
            f"{blocks} blocks of {size} ({at_once})"
        )
    elif progress and each * size > LARGE_SHARE * free:
        progress(f"{caller}: {at_once}")
    return Plan(count, size, blocks)


def run(
    plan: Plan,
    block: Callable[[np.ndarray], tuple[Any, ...]],
    caller: str,
    progress: Progress = None,
    axis: int = 0,
    counted: str = "products",
) -> tuple[np.ndarray, ...]:
    """`block(indices)` for each block of `plan`, its outputs concatenated along `axis` (the probe
    axis) and cut to `count`; a progress line per block once the call has taken LONG_SECONDS,
    counting the plan's items as `counted` says (SLQ's are probes of many products each)."""
    start, parts = time.perf_counter(), []
    for i in range(plan.blocks):
        parts.append(tuple(trees.host(x) for x in block(plan.indices(i))))
        seconds = time.perf_counter() - start
        if progress and seconds > LONG_SECONDS and i + 1 < plan.blocks:
            left = seconds / (i + 1) * (plan.blocks - i - 1)
            done = min((i + 1) * plan.size, plan.count)
            progress(
                f"{caller}: {done} of {plan.count} {counted} | {seconds:.1f} s | about "
                f"{left:.0f} s left"
            )
    joined = (np.concatenate(column, axis=axis) for column in zip(*parts, strict=True))
    return tuple(np.take(x, np.arange(plan.count), axis=axis) for x in joined)


def carried(
    schedule: list[tuple[int, int, int]],
    state: Any,
    step: Callable[[Any, int, int], Any],
    caller: str,
    progress: Progress = None,
) -> Any:
    """state = step(state, stage, block) for each (stage, block, products) of `schedule`, the
    state kept on the device between blocks (a probe whose stages feed each other: Hutch++); a
    progress line per block once the call has taken LONG_SECONDS."""
    start, total, done = time.perf_counter(), sum(n for _, _, n in schedule), 0
    for i, (stage, block, products) in enumerate(schedule):
        state = step(state, stage, block)
        done += products
        if progress and time.perf_counter() - start > LONG_SECONDS and i + 1 < len(schedule):
            jax.block_until_ready(state)
            seconds = time.perf_counter() - start
            progress(
                f"{caller}: {done} of {total} products | {seconds:.1f} s | about "
                f"{seconds / done * (total - done):.0f} s left"
            )
    return state
