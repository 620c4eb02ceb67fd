"""Point: a parameter pytree with its pure population loss, a name and metadata.

Paper packages return their constructed points (theta_pi, theta_star, ...) as `Point`s, so the
curvature engine can probe any of them without knowing the model.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

import jax
import numpy as np


@dataclasses.dataclass(frozen=True, eq=False)
class Point:
    """Parameters with the population loss they are judged by.

    Equality and hashing are by identity (params are arrays, which have no truth value).

    `meta` is free-form. Keys the engine reads: "prediction" (str), the theory's verdict, e.g.
    "local minimum (Thm 2)"; "expected_loss" (float), a closed-form value of the loss.
    """
    params: Any
    loss_fn: Callable[[Any], jax.Array]
    name: str = ""
    meta: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def loss(self) -> float:
        return float(jax.jit(self.loss_fn)(self.params))

    def with_params(self, params) -> "Point":
        return dataclasses.replace(self, params=params)

    @property
    def num_params(self) -> int:
        return sum(int(np.size(leaf)) for leaf in jax.tree_util.tree_leaves(self.params))


def param_names(params) -> list[tuple[str, slice, tuple]]:
    """(name, slice, shape) per leaf, in `ravel_pytree` order.

    The name is the leaf's key path joined with "/" ("Y", "layer0/W_Q", "blocks/0/W_K"); the slice
    is where the leaf sits in `jax.flatten_util.ravel_pytree(params)[0]`.
    """
    entries = []
    offset = 0
    for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
        size = int(np.size(leaf))
        name = jax.tree_util.keystr(path, simple=True, separator="/")
        entries.append((name, slice(offset, offset + size), tuple(np.shape(leaf))))
        offset += size
    return entries
