"""2-D slices of the loss: point + alpha u + beta v over a grid, with filter or block
normalisation of the directions (docs/notes/landscape_geometry.md §3, §6)."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np

from landscape.point import Point, as_points, param_names
from landscape.probes import results
from landscape.probes.geometry import (
    check_batch_size,
    check_direction,
    check_grid,
    direction_to,
    evaluate,
    flat_params,
)
from landscape.typing import PyTree

NORMALIZATIONS = (None, "filter", "block")


def _filter_rows(leaf: np.ndarray, mode: str) -> np.ndarray:
    """The leaf as (filters, entries): rows of a matrix leaf (its first axis) under "filter",
    one row (the whole leaf) for vectors and scalars, or for every leaf under "block"."""
    rows = leaf.shape[0] if mode == "filter" and leaf.ndim >= 2 else 1
    return np.asarray(leaf, np.float64).reshape(rows, -1)


def _normalised(
    direction: PyTree, params: PyTree, mode: str
) -> tuple[PyTree, dict[str, tuple[int, int]]]:
    """The direction with each filter (block) rescaled to the norm of the point's
    (docs/notes/landscape_geometry.md §3), and {leaf: (zero filters, filters)} where the point's
    filter is zero and the direction's is not: those keep their unnormalised entries
    (rescaling would zero them)."""
    names = param_names(params)
    leaves, treedef = jax.tree_util.tree_flatten(direction)
    out, kept = [], {}
    for (leaf_name, _, _), d, theta in zip(names, leaves, jax.tree.leaves(params), strict=True):
        d_rows, theta_rows = _filter_rows(d, mode), _filter_rows(np.asarray(theta), mode)
        d_norm = np.linalg.norm(d_rows, axis=1)
        theta_norm = np.linalg.norm(theta_rows, axis=1)
        scale = np.where(
            (theta_norm > 0) & (d_norm > 0), theta_norm / np.maximum(d_norm, 1e-300), 1.0
        )
        out.append((d_rows * scale[:, None]).reshape(d.shape).astype(d.dtype))
        zero = int(np.sum((theta_norm == 0) & (d_norm > 0)))
        if zero:
            kept[leaf_name] = (zero, theta_norm.size)
    return jax.tree_util.tree_unflatten(treedef, out), kept


def _fallback_note(mode: str, kept: dict[str, tuple[int, int]]) -> str:
    blocks = ", ".join(
        name if zero == total else f"{name} ({zero} of {total} filters)"
        for name, (zero, total) in kept.items()
    )
    return (
        f"normalize={mode!r}: the point is zero in {blocks}, where rescaling to "
        "the point's norm would zero the directions, so u and v keep their unnormalised entries "
        "there."
    )


def _slice_directions(
    point: Point, u: object, v: object, normalize: str | None
) -> tuple[PyTree, PyTree, tuple[str, ...], tuple[str, ...]]:
    """(u, v, notes, blocks kept unnormalised): checked, normalised, and not degenerate."""
    if normalize not in NORMALIZATIONS:
        raise ValueError(f"normalize = {normalize!r}: must be None, 'filter' or 'block'.")
    directions = {"u": check_direction("u", u, point), "v": check_direction("v", v, point)}
    for name, d in directions.items():
        if not np.any(flat_params(d)):
            raise ValueError(f"{name} is zero everywhere: the slice needs two non-zero directions.")
    kept: dict[str, tuple[int, int]] = {}
    if normalize is not None:
        for name, d in directions.items():
            directions[name], kept_here = _normalised(d, point.params, normalize)
            kept.update({k: max(kept.get(k, (0, 0)), z) for k, z in kept_here.items()})
    flat_u, flat_v = flat_params(directions["u"]), flat_params(directions["v"])
    for name, flat in (("u", flat_u), ("v", flat_v)):
        if not np.any(flat):
            raise ValueError(f"{name} became zero after normalize={normalize!r}: nothing to draw.")
    cosine = flat_u @ flat_v / (np.linalg.norm(flat_u) * np.linalg.norm(flat_v))
    if abs(cosine) > 1 - 1e-12:
        raise ValueError("u and v are parallel: they span a line, not a plane; choose another v.")
    notes = (_fallback_note(str(normalize), kept),) if kept else ()
    return directions["u"], directions["v"], notes, tuple(kept)


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class SliceResult:
    """The loss on point + alpha u + beta v: losses[i, j] at (alphas[i], betas[j])
    (docs/notes/landscape_geometry.md §3). u and v are the directions used (after normalisation);
    `notes` says where normalisation fell back to the unnormalised direction (`kept_blocks`)."""

    point: Point
    alphas: np.ndarray
    betas: np.ndarray
    losses: np.ndarray
    center_loss: float
    u: PyTree
    v: PyTree
    normalize: str | None
    notes: tuple[str, ...] = ()
    kept_blocks: tuple[str, ...] = ()

    def project(self, other: Point | PyTree) -> tuple[float, float, float]:
        """(alpha, beta, distance from the plane) of another point of the model: the least-squares
        coordinates of other - point in the basis (u, v)."""
        delta = flat_params(direction_to(self.point, other))
        basis = np.stack([flat_params(self.u), flat_params(self.v)], axis=1)
        coords, *_ = np.linalg.lstsq(basis, delta, rcond=None)
        return float(coords[0]), float(coords[1]), float(np.linalg.norm(delta - basis @ coords))

    @property
    def finite(self) -> bool:
        return bool(np.all(np.isfinite(self.losses)))

    def summary(self) -> dict[str, Any]:
        """One row: the point, D, the grid's size and ranges, the normalisation, the loss at the
        point and the grid's lowest and highest losses."""
        return results.point_row(
            self.point,
            self.point.num_params,
            self.losses.dtype,
            num_alphas=self.alphas.size,
            num_betas=self.betas.size,
            alpha_range=float(np.ptp(self.alphas)),
            beta_range=float(np.ptp(self.betas)),
            normalize=self.normalize or "none",
            center_loss=self.center_loss,
            min_loss=float(np.nanmin(self.losses)),
            max_loss=float(np.nanmax(self.losses)),
            finite=self.finite,
        )

    def __repr__(self) -> str:
        return (
            f"SliceResult({self.point.name!r}, {self.alphas.size} x {self.betas.size}, "
            f"loss in [{np.nanmin(self.losses):.4g}, {np.nanmax(self.losses):.4g}])"
        )

    def describe(self) -> str:
        """A few lines: the grid, the directions, the loss at the point, the grid's extremes."""
        flat_u, flat_v = flat_params(self.u), flat_params(self.v)
        cosine = flat_u @ flat_v / (np.linalg.norm(flat_u) * np.linalg.norm(flat_v))
        low = np.unravel_index(np.argmin(self.losses), self.losses.shape)
        high = np.unravel_index(np.argmax(self.losses), self.losses.shape)
        directions = "unnormalised" if self.normalize is None else f"{self.normalize}-normalised"
        lines = [
            f"2-D slice at {self.point.name or '<unnamed point>'}: loss at point + α u + β v",
            f"  α in [{self.alphas.min():.4g}, {self.alphas.max():.4g}] ({self.alphas.size}), "
            f"β in [{self.betas.min():.4g}, {self.betas.max():.4g}] ({self.betas.size})",
            f"  directions {directions}: |u| = {np.linalg.norm(flat_u):.4g}, "
            f"|v| = {np.linalg.norm(flat_v):.4g}, cos(u, v) = {cosine:.3g}",
            f"  loss at the point {self.center_loss:.10g}",
            f"  grid min {self.losses[low]:.6g} at (α, β) = ({self.alphas[low[0]]:.4g}, "
            f"{self.betas[low[1]]:.4g}); max {self.losses[high]:.6g} at "
            f"({self.alphas[high[0]]:.4g}, {self.betas[high[1]]:.4g})",
        ]
        return "\n".join(lines + [f"  note: {note}" for note in self.notes])


def slice_2d(
    point: Point,
    u: PyTree,
    v: PyTree,
    alphas: Any,
    betas: Any,
    normalize: str | None = None,
    *,
    batch_size: int | None = None,
) -> SliceResult:
    """The loss on point + alpha u + beta v over the grid alphas x betas, from one
    compiled call shared by every point of the model (docs/notes/landscape_geometry.md §3, §6).

    Args:
        point: a `Point`.
        u: a direction shaped like the params (e.g. `random_direction`, `direction_to`).
        v: a second direction.
        alphas: the grid along u.
        betas: the grid along v.
        normalize: None; "filter" rescales each filter (row of a matrix leaf; whole vectors
            and scalars) of u and v to the norm of the point's; "block" each leaf. Where the
            point is zero the direction is kept unnormalised and `notes` says so.
        batch_size: loss evaluations at once (None: as many as fit in memory).

    Returns:
        A `SliceResult`: the losses on the grid, the directions used, `project()`.
    """
    (point,), _ = as_points(point, "slice_2d")
    alphas, betas = check_grid("alphas", alphas), check_grid("betas", betas)
    u, v, notes, kept = _slice_directions(point, u, v, normalize)
    grid_a, grid_b = np.meshgrid(alphas, betas, indexing="ij")
    rows = np.concatenate([[0.0], grid_a.ravel()]), np.concatenate([[0.0], grid_b.ravel()])
    weights = np.stack([np.ones_like(rows[0]), rows[0], rows[1]], axis=1)
    batch_size = check_batch_size(batch_size)
    losses = evaluate(point, [point.params, u, v], weights, batch_size, "slice_2d")
    return SliceResult(
        point=point,
        alphas=alphas,
        betas=betas,
        losses=losses[1:].reshape(alphas.size, betas.size),
        center_loss=float(losses[0]),
        u=u,
        v=v,
        normalize=normalize,
        notes=notes,
        kept_blocks=kept,
    )
