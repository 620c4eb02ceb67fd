"""How many loss evaluations of a point fit in memory at once: XLA's memory analysis of one
evaluation against the memory this process may take (`landscape.engine.memory`), so that
`slice_2d`, `path` and `bezier_path` pick their batch size themselves (docs/design/curvature.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from landscape.engine import memory
from landscape.point import Point

MEMORY_FRACTION = 0.5  # of the available memory, for the evaluations of one call
_LOSS_BYTES: dict[Any, float] = {}


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


def rows_per_batch(
    point: Point,
    rows: int,
    caller: str,
    available: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> int | None:
    """None when all `rows` loss evaluations fit in MEMORY_FRACTION of the available memory (one
    vmapped call), else as many as fit (a lax.map over batches of them, said through `progress`);
    a MemoryError in one sentence when not even one does."""
    available = memory.available_memory_bytes() if available is None else available
    each, budget = loss_bytes(point), MEMORY_FRACTION * available
    if each * rows <= budget:
        return None
    if each > budget:
        raise MemoryError(
            f"{caller}: one loss evaluation of {point.name or 'the point'} needs about "
            f"{memory.format_bytes(each)} but {memory.format_bytes(available)} of memory is "
            "available: judge the point by fewer sequences (a smaller population or batch)."
        )
    fit = int(budget // max(each, 1.0))
    if progress:
        progress(
            f"{caller}: {rows} loss evaluations need about {memory.format_bytes(each * rows)}; "
            f"{fit} at a time fit in half of the {memory.format_bytes(available)} available"
        )
    return fit
