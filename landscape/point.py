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


def restrict(point: Point, names) -> Point:
    """The same loss as a function of the named blocks only, every other parameter held fixed.

    `names` are block names as in `param_names` (a name also selects the leaves under it). The
    restricted point's params are {name: array} for each selected leaf, so
    `hessian_at(restrict(point, ["b", "e"]))` is the (b, e) block of the Hessian, computed
    without the rest: what a paper-size model (D in the thousands, costly losses) can afford.
    """
    names = [names] if isinstance(names, str) else list(names)
    flat, treedef = jax.tree_util.tree_flatten(point.params)
    leaf_names = [name for name, _, _ in param_names(point.params)]
    chosen = [i for i, leaf in enumerate(leaf_names)
              if any(leaf == n or leaf.startswith(n + "/") for n in names)]
    if not chosen:
        raise KeyError(f"no parameter named {names}; available: {', '.join(leaf_names)}")

    def loss_fn(sub):
        leaves = list(flat)
        for i in chosen:
            leaves[i] = sub[leaf_names[i]]
        return point.loss_fn(jax.tree_util.tree_unflatten(treedef, leaves))

    meta = {k: v for k, v in point.meta.items() if k != "focus_blocks"}
    return Point({leaf_names[i]: flat[i] for i in chosen}, loss_fn,
                 name=f"{point.name} restricted to {', '.join(names)}", meta=meta)
