"""Pytrees as flat numpy vectors on the host, in `jax.flatten_util.ravel_pytree`'s order: what
the probes' results hold, made without an eager jax operation (each would compile a program)."""

from __future__ import annotations

import jax
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
