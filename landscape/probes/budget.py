"""How many loss evaluations of a point fit in memory at once: XLA's memory analysis of one
evaluation against the memory this process may take (`landscape.engine.memory`), so that
`slice_2d`, `path` and `bezier_path` pick their batch size themselves (docs/design/curvature.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from landscape.engine import memory
from landscape.point import Point

MEMORY_FRACTION = 0.5  # of the available memory, for the evaluations of one call
# On the CPU a larger batch of rows is no faster: a 61 x 61 Markov slice (D = 237, 2.8 MB a row)
# took 11.7-14.6 s in batches of 89 rows (250 MB) against 12.8-13.1 s in batches of 700 (loaded
# machine, alternated); one call asking for half the memory at once is what other processes on
# the machine, or a limit below the one read, leave no room for
CPU_BATCH_BYTES = 2.5e8
_LOSS_BYTES: dict[Any, float] = {}
_PROGRAM_BYTES: dict[Any, float] = {}


def loss_bytes(point: Point) -> float:
    """Bytes one loss evaluation of `point` holds at once (XLA's temporaries and output), from
    compiling the objective alone once per model and shapes; 0 where XLA gives no analysis."""
    objective, inputs = point.shared
    leaves, treedef = jax.tree.flatten((point.params, inputs))
    key = (objective, treedef, tuple((np.shape(x), str(jnp.result_type(x))) for x in leaves))
    if key not in _LOSS_BYTES:
        stats = jax.jit(objective).lower(point.params, inputs).compile().memory_analysis()
        _LOSS_BYTES[key] = (
            float(stats.temp_size_in_bytes + stats.output_size_in_bytes) if stats else 0.0
        )
    return _LOSS_BYTES[key]


def program_bytes(program: Callable[[], Any], key: Any) -> float:
    """Bytes a compiled program holds at once (XLA's temporaries and output), measured once per
    `key`: program() lowers it (jax.jit(f).lower(...)); 0 where XLA gives no analysis."""
    if key not in _PROGRAM_BYTES:
        stats = program().compile().memory_analysis()
        _PROGRAM_BYTES[key] = (
            float(stats.temp_size_in_bytes + stats.output_size_in_bytes) if stats else 0.0
        )
    return _PROGRAM_BYTES[key]


def rows_per_batch(
    point: Point,
    rows: int,
    caller: str,
    available: float | None = None,
    progress: Callable[[str], None] | None = None,
    row_bytes: float = 0.0,
) -> int | None:
    """None when all `rows` loss evaluations fit at once (one vmapped call), else as many as fit
    (a lax.map over batches of them, said through `progress` when memory is what limits them);
    a MemoryError in one sentence when not even one does. They fit in MEMORY_FRACTION of the
    memory free on the device and, on the CPU, in CPU_BATCH_BYTES. A row holds its parameters
    and one evaluation's bytes, or `row_bytes` where the caller measured more of its vmapped
    program per row."""
    available = memory.device_free_bytes() if available is None else available
    leaves = jax.tree.leaves(point.params)
    own = sum(np.size(x) * jnp.dtype(jnp.result_type(x)).itemsize for x in leaves)
    each, budget = max(loss_bytes(point) + own, row_bytes, 1.0), MEMORY_FRACTION * available
    cap = CPU_BATCH_BYTES if jax.default_backend() == "cpu" else math.inf
    if each * rows <= min(budget, cap):
        return None
    if each > budget:
        raise MemoryError(
            f"{caller}: one loss evaluation of {point.name or 'the point'} needs about "
            f"{memory.format_bytes(each)} but {memory.format_bytes(available)} of memory is "
            "available: judge the point by fewer sequences (a smaller population or batch)."
        )
    fit = int(min(budget, max(cap, each)) // each)
    if progress and each * rows > budget:
        progress(
            f"{caller}: {rows} loss evaluations need about {memory.format_bytes(each * rows)}; "
            f"{fit} at a time fit in half of the {memory.format_bytes(available)} available"
        )
    return fit
