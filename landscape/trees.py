"""Pytrees as flat numpy vectors on the host, in `jax.flatten_util.ravel_pytree`'s order: what
the probes' results hold, made without an eager jax operation (each would compile a program);
and the inner products of pytrees as vectors of D that a recurrence on them takes (`tree_vdot`,
`tree_norm`), a lone array being a pytree of one leaf."""

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
    leaves, treedef = jax.tree.flatten(like)
    flat, parts, offset = np.asarray(flat), [], 0
    for leaf in leaves:
        shape = np.shape(leaf)
        size = int(np.prod(shape, dtype=np.int64))
        parts.append(flat[offset : offset + size].reshape(shape))
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
    """The inner product of two pytrees of one structure as vectors of D: the leaves' vdots
    summed (one leaf: its vdot alone)."""
    dots = [jnp.vdot(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)]
    return dots[0] if len(dots) == 1 else sum(dots[1:], dots[0])


def tree_norm(a: PyTree) -> jax.Array:
    """The 2-norm of a pytree as a vector of D (one leaf: `jnp.linalg.norm` of it)."""
    norms = [jnp.linalg.norm(x) for x in jax.tree.leaves(a)]
    return norms[0] if len(norms) == 1 else jnp.linalg.norm(jnp.stack(norms))


def tree_astype(a: PyTree, dtype: object) -> PyTree:
    """Every leaf of `a` as `dtype` (a leaf already of it unchanged)."""
    return jax.tree.map(lambda x: x.astype(dtype), a)
