"""How many loss evaluations of a point fit in memory at once: the bytes one evaluation holds,
read off its jaxpr without compiling anything (a compile for XLA's own count costs seconds on an
accelerator), against the memory this process may take (`landscape.core.memory`), so that
`slice_2d`, `path`, `bezier_path` and the matrix-free probes size their batches themselves
(docs/design/curvature.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend import core as jax_core

from landscape.core import data, memory
from landscape.point import Point

# on the CPU a larger batch of rows is no faster (docs/performance.md), and half the memory at
# once is what other processes, or a limit below the one read, leave no room for
CPU_BATCH_BYTES = 2.5e8
_LOSS_BYTES: dict[Any, float] = {}
_PROGRAM_BYTES: dict[Any, float] = {}
_RESIDUAL_BYTES: dict[Any, float] = {}


def one_evaluation(point: Point) -> tuple[Callable[..., Any], Any]:
    """(objective, inputs) of one loss evaluation, what memory and cost estimates trace: the
    point's `shared`, or over a streamed dataset its objective on one (the first) batch."""
    return data.of([point]).one_evaluation()


def _evaluation_key(point: Point) -> tuple[Callable[..., Any], Any, Any]:
    """(objective, inputs) of one evaluation and a key of the model and its shapes."""
    objective, inputs = one_evaluation(point)
    leaves, treedef = jax.tree.flatten((point.params, inputs))
    key = (objective, treedef, tuple((np.shape(x), str(jnp.result_type(x))) for x in leaves))
    return objective, inputs, key


def loss_bytes(point: Point) -> float:
    """Bytes one loss evaluation of `point` holds at once (`peak_bytes` of its jaxpr), once per
    model and shapes (over a streamed dataset, of one batch: the chunk's scan holds one)."""
    objective, inputs, key = _evaluation_key(point)
    if key not in _LOSS_BYTES:
        _LOSS_BYTES[key] = float(peak_bytes(jax.make_jaxpr(objective)(point.params, inputs).jaxpr))
    return _LOSS_BYTES[key]


def residual_bytes(point: Point, linearised: bool = True) -> float:
    """Bytes of what `point`'s loss keeps for its derivatives, less the parameters and data
    they include, once per model, shapes and layout: with `linearised`, the residuals of its
    gradient linearised at the point (`jax.linearize`, what a probe's products share: `hvp`),
    else of one evaluation's backward pass (`jax.vjp`, what a lone product keeps). Over
    several devices, a device's share of each as XLA lays it out (compiled, not run): a
    model split over an axis splits some of its activations. `blocks.activation_bytes` adds
    one evaluation's peak."""
    objective, inputs, key = _evaluation_key(point)
    spread = _spread(point.params)
    key = (key, linearised, tuple(str(x.sharding) for x in spread))
    if key not in _RESIDUAL_BYTES:

        def kept(params: Any, inputs: Any) -> Any:
            def loss(p: Any) -> Any:
                return objective(p, inputs)

            if linearised:
                return jax.linearize(jax.value_and_grad(loss), params)[1]
            return jax.vjp(loss, params)[1]

        jaxpr = jax.make_jaxpr(kept)(point.params, inputs).jaxpr
        sizes = [_nbytes(v) for v in jaxpr.outvars]
        if spread:  # each residual's bytes on one device, as XLA lays it out
            laid = jax.jit(kept).lower(point.params, inputs).compile().output_shardings
            sizes = [
                math.prod(sharding.shard_shape(v.aval.shape)) * np.dtype(v.aval.dtype).itemsize
                for sharding, v in zip(jax.tree.leaves(laid), jaxpr.outvars, strict=True)
            ]
        seen, total = {*jaxpr.invars, *jaxpr.constvars}, 0.0
        for v, size in zip(jaxpr.outvars, sizes, strict=True):
            if _is_var(v) and v not in seen:
                seen.add(v)
                total += size
        _RESIDUAL_BYTES[key] = total
    return _RESIDUAL_BYTES[key]


def _spread(params: Any) -> list[jax.Array]:
    """The parameters' leaves when some lie over several devices (none on one device)."""
    leaves = jax.tree.leaves(params)
    sharded = [len(getattr(getattr(x, "sharding", None), "device_set", ())) > 1 for x in leaves]
    return leaves if any(sharded) else []


def program_bytes(function: Callable[..., Any], args: tuple, key: Any) -> float:
    """Bytes `function(*args)` holds at once beyond its arguments (`peak_bytes` of its jaxpr),
    once per `key`."""
    if key not in _PROGRAM_BYTES:
        _PROGRAM_BYTES[key] = float(peak_bytes(jax.make_jaxpr(function)(*args).jaxpr))
    return _PROGRAM_BYTES[key]


def peak_bytes(jaxpr: jax_core.Jaxpr) -> int:
    """The most bytes of a jaxpr's values alive at once, each freed after its last use and each
    inner program (scan, cond, jit, custom rules) adding its own peak while it runs; its inputs
    are not counted. An estimate from above: XLA fuses chains of element-wise operations into
    one buffer."""
    last_use = {v: i for i, eqn in enumerate(jaxpr.eqns) for v in eqn.invars if _is_var(v)}
    last_use.update({v: len(jaxpr.eqns) for v in jaxpr.outvars if _is_var(v)})
    given, live, peak = {*jaxpr.invars, *jaxpr.constvars}, 0, 0
    for i, eqn in enumerate(jaxpr.eqns):
        inner = max((peak_bytes(sub) for sub in _inner_jaxprs(eqn.params)), default=0)
        made = sum(_nbytes(v) for v in eqn.outvars)
        peak, live = max(peak, live + inner + made), live + made
        done = {v for v in [*eqn.invars, *eqn.outvars] if _is_var(v) and last_use.get(v, i) <= i}
        live -= sum(_nbytes(v) for v in done if v not in given)
    return peak


def _is_var(v: Any) -> bool:
    return isinstance(v, jax_core.Var)


def _nbytes(v: Any) -> int:
    aval = v.aval
    shape, dtype = getattr(aval, "shape", None), getattr(aval, "dtype", None)
    if shape is None or dtype is None:
        return 0
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


def _inner_jaxprs(params: Any) -> list[Any]:
    """The jaxprs among an equation's parameters (jit, scan and while bodies, cond branches,
    custom rules), however nested in tuples."""
    found = []
    for value in params.values() if isinstance(params, dict) else params:
        if isinstance(value, jax_core.ClosedJaxpr):
            found.append(value.jaxpr)
        elif isinstance(value, jax_core.Jaxpr):
            found.append(value)
        elif isinstance(value, tuple | list):
            found.extend(_inner_jaxprs(value))
    return found


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
    a MemoryError in one sentence when not even one does. They fit in `memory.budget` of the
    memory free on the device and, on the CPU, in CPU_BATCH_BYTES. A row holds its parameters
    and one evaluation's bytes, or `row_bytes` where the caller measured more of its vmapped
    program per row."""
    available = memory.device_free_bytes() if available is None else available
    leaves = jax.tree.leaves(point.params)
    own = sum(np.size(x) * jnp.dtype(jnp.result_type(x)).itemsize for x in leaves)
    each, budget = max(loss_bytes(point) + own, row_bytes, 1.0), memory.budget(available)
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
