"""Pytrees as flat numpy vectors on the host, in `jax.flatten_util.ravel_pytree`'s order, made
without an eager jax operation (each would compile a program); what the probes' results hold
(`kept`: a leaf split over several devices stays there, docs/guide/split_model.md); and the inner
products of pytrees as vectors of D that a recurrence on them takes (`tree_vdot`, `tree_norm`), a
lone array being a pytree of one leaf."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from landscape.typing import PyTree


def ravel_numpy(tree: PyTree) -> np.ndarray:
    """The leaves of `tree` raveled into one numpy vector (D,) in `ravel_pytree` order, on the
    host: nothing is compiled (an eager `ravel_pytree` compiles a program per leaf shape)."""
    leaves = [np.ravel(np.asarray(leaf)) for leaf in jax.tree.leaves(tree)]
    return np.concatenate(leaves) if leaves else np.zeros(0)


def unravel_numpy(like: PyTree, flat: np.ndarray) -> PyTree:
    """`flat` (D,) in `ravel_pytree` order as a pytree shaped like `like`, with numpy leaves."""
    return jax.tree.map(lambda x: x[0, ...], unravel_rows(like, np.asarray(flat)[None]))


def on_several_devices(x: object) -> bool:
    """Whether `x` is a jax.Array over several devices (a result keeps it where it lies)."""
    return isinstance(x, jax.Array) and len(x.sharding.device_set) > 1


def kept(tree: PyTree) -> PyTree:
    """`tree` as a probe's result holds it: each leaf on one device as numpy, a leaf over
    several devices left there as it lies (copied to the host only when asked: `host`)."""
    return jax.tree.map(lambda x: x if on_several_devices(x) else np.asarray(x), tree)


def rows(stacked: PyTree) -> list[PyTree]:
    """The pytrees along the leading axis of `stacked` (leaves (N, ...)): numpy views, or
    slices left on their devices."""
    leaves, treedef = jax.tree.flatten(stacked)
    count = leaves[0].shape[0] if leaves else 0
    return [jax.tree.unflatten(treedef, [x[i] for x in leaves]) for i in range(count)]


def host_rows(vectors: list[PyTree], dim: int, dtype: np.typing.DTypeLike) -> np.ndarray:
    """The pytrees as rows (N, D) of one numpy array in `ravel_pytree` order, filled a leaf at
    a time from wherever they lie (the rows held once on the host)."""
    out = np.empty((len(vectors), dim), dtype)
    for i, tree in enumerate(vectors):
        start = 0
        for leaf in jax.tree.leaves(tree):
            size = int(np.prod(np.shape(leaf), dtype=np.int64))
            out[i, start : start + size] = host(leaf).ravel()
            start += size
    return out


def norm(tree: PyTree) -> float:
    """The 2-norm of a pytree as a vector of D: on the host for numpy leaves (numpy's norm of
    the raveled vector); a leaf over several devices summed there."""
    leaves = jax.tree.leaves(tree)
    if not any(on_several_devices(x) for x in leaves):
        return float(np.linalg.norm(ravel_numpy(tree)))
    squares = [jnp.vdot(x, x).real if on_several_devices(x) else np.vdot(x, x).real for x in leaves]
    return float(np.sqrt(sum(float(s) for s in squares)))


def all_finite(tree: PyTree) -> bool:
    """Whether every entry of the pytree is finite, each leaf checked where it lies."""
    return all(
        bool(jnp.isfinite(x).all() if on_several_devices(x) else np.isfinite(np.asarray(x)).all())
        for x in jax.tree.leaves(tree)
    )


def dtype(tree: PyTree) -> np.dtype:
    """The dtype of the pytree raveled (`ravel_numpy`'s): its leaves' common one."""
    dtypes = [np.dtype(x.dtype) for x in jax.tree.leaves(tree)]
    return np.result_type(*dtypes) if dtypes else np.dtype(np.float64)


def unravel_rows(like: PyTree, rows: np.ndarray) -> PyTree:
    """`rows` (N, D) in `ravel_pytree` order as a pytree like `like` with numpy leaves (N, ...)."""
    leaves, treedef = jax.tree.flatten(like)
    rows, parts, offset = np.asarray(rows), [], 0
    for leaf in leaves:
        shape = np.shape(leaf)
        size = int(np.prod(shape, dtype=np.int64))
        parts.append(rows[:, offset : offset + size].reshape((rows.shape[0], *shape)))
        offset += size
    return jax.tree.unflatten(treedef, parts)


def host(x: object) -> np.ndarray:
    """`x` on the host as numpy. A jax.Array over several processes' devices (jax.distributed)
    comes whole to every process: a replicated one read from a local copy, a sharded one
    gathered from the others (`process_allgather`)."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        if x.is_fully_replicated:
            return np.asarray(x.addressable_data(0))
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(x)


def tree_vdot(a: PyTree, b: PyTree) -> jax.Array:
    """The inner product of two pytrees of one structure as vectors of D: each leaf's products
    summed over all its axes (not `jnp.vdot`, whose flattening gathers a leaf split by columns
    whole), then the leaves' sums (one leaf: its sum alone)."""
    leaves = zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    dots = [jnp.sum(x * y) for x, y in leaves]
    return dots[0] if len(dots) == 1 else sum(dots[1:], dots[0])


def tree_norm(a: PyTree) -> jax.Array:
    """The 2-norm of a pytree as a vector of D (one leaf: `jnp.linalg.norm` of it)."""
    norms = [jnp.linalg.norm(x) for x in jax.tree.leaves(a)]
    return norms[0] if len(norms) == 1 else jnp.linalg.norm(jnp.stack(norms))


def tree_astype(a: PyTree, dtype: object) -> PyTree:
    """Every leaf of `a` as `dtype` (a leaf already of it unchanged)."""
    return jax.tree.map(lambda x: x.astype(dtype), a)
