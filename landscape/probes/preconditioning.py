"""The probes' `preconditioner=`: a point seen in the coordinates u of θ = θ0 + P^{-1/2} u, where
the loss's Hessian at u = 0 is P^{-1/2} H P^{-1/2}, whose top eigenvalue is the preconditioned
sharpness (Cohen et al., 2022; docs/notes/edge_of_stability.md). Every probe takes the view
as it takes any point: the matrix-free ones multiply by `operator.hessian_operator`'s congruence
(`hvp.preconditioned`), the dense ones differentiate the view's loss, the same matrix."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from landscape.core import data
from landscape.core import preconditioner as preconditioner_lib
from landscape.core.preconditioner import Preconditioned as Preconditioned
from landscape.core.preconditioner import preconditioned
from landscape.point import Point, as_points


def views(
    points: Sequence[Point], preconditioner: object, caller: str, matrix: str = "hessian"
) -> list[Point]:
    """The points themselves (preconditioner None), else each seen in the coordinates u of
    θ = θ0 + P^{-1/2} u at u = 0 (module docstring); one sentence for the Gauss-Newton matrix, a
    streamed dataset, or a preconditioner the params cannot take (`preconditioner.diagonal`)."""
    if preconditioner is None:
        return list(points)
    if matrix != "hessian":
        raise ValueError(
            f"{caller}: preconditioner= preconditions the loss's Hessian: give "
            "matrix='hessian' (the Gauss-Newton matrix takes no preconditioner)."
        )
    for point in points:
        data.of([point]).needs_memory(
            caller, "preconditioner=", "a streamed dataset takes no preconditioner"
        )
    return [_view(p, preconditioner, caller) for p in points]


def _view(point: Point, preconditioner: object, caller: str) -> Point:
    """`point` in the coordinates u: params zeros like θ0, inputs (inputs, θ0, P^{-1/2}), each
    leaf placed as the parameter lies (numpy, or a jax array with its sharding)."""
    diagonal = preconditioner_lib.diagonal(preconditioner, point.params, caller)
    inverse_sqrt = jax.tree.map(
        _placed_like, preconditioner_lib.inverse_sqrt(diagonal), point.params
    )
    zeros = jax.tree.map(lambda leaf: _placed_like(np.zeros(np.shape(leaf), leaf.dtype), leaf),
                         point.params)  # fmt: skip
    objective, inputs = point.shared
    meta = {k: v for k, v in point.meta.items() if k != "population"}  # the inputs are not slices
    return Point(
        zeros, name=point.name, meta=meta, objective=preconditioned(objective),
        inputs=(inputs, point.params, inverse_sqrt),
    )  # fmt: skip


def _placed_like(value: Any, leaf: Any) -> Any:
    """`value` as `leaf` lies: on its devices for a jax array, else as it is."""
    if isinstance(leaf, jax.Array) and not isinstance(value, jax.core.Tracer):
        return jax.device_put(np.asarray(value, leaf.dtype), leaf.sharding)
    return value


def through_views(
    caller: str,
    point: object,
    preconditioner: object,
    probe: Callable[[Any], Any],
    matrix: str = "hessian",
) -> Any:
    """probe(the view of `point`, or of each point of a list), its results given back their
    points: how every probe takes `preconditioner=` (`views`, `original`)."""
    points, listed = as_points(point, caller)
    seen = views(points, preconditioner, caller, matrix)
    found = probe(seen if listed else seen[0])
    if not listed:
        return original(found, points[0])
    return [original(f, p) for f, p in zip(found, points, strict=True)]


def original(found: Any, point: Point) -> Any:
    """A result found on a view, given back its point: its values are the preconditioned
    matrix's, its vectors and gradient in the coordinates u (the gradient is P^{-1/2} ∇L)."""
    if getattr(found, "point", point) is point:  # a product, or found on the point itself
        return found
    gradient = getattr(found, "gradient", None)
    changes: dict[str, Any] = {"point": point}
    if dataclasses.is_dataclass(gradient) and not isinstance(gradient, type):
        changes["gradient"] = dataclasses.replace(gradient, point=point)
    return dataclasses.replace(found, **changes)
