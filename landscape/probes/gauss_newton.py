"""The Gauss-Newton part of the Hessian, G = Jᵀ H_z J, and the remainder H - G.

`ggn_at(point)` needs a Point that carries the split of its loss into model outputs and an output
loss (`Point.outputs`, `Point.output_loss`; the Markov, n-gram and Scan and Snap points do). G is
positive semi-definite whenever the output loss is convex in the outputs (a cross-entropy of logits
is), so the negative curvature of a saddle lives in the remainder. See
notes/landscape_geometry.md §7.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from landscape import _checks
from landscape import point as point_lib
from landscape.core import batches as batches_lib
from landscape.core import blocks, compiled, data, operator
from landscape.point import Point
from landscape.probes import curvature, preconditioning, results
from landscape.typing import PyTree

Outputs = Callable[[PyTree, PyTree], jax.Array]
OutputLoss = Callable[[jax.Array, PyTree], jax.Array]


BATCHES = (0, True)  # parts for a dataset in batches (`Point(..., batches=...)`)


def _ggn_columns(
    outputs: Outputs,
    output_loss: OutputLoss,
    batching: tuple[int, compiled.Parts],
    params: PyTree,
    inputs: PyTree,
    first: jax.Array,
    count: int,
) -> tuple[jax.Array, jax.Array]:
    """(the loss through the split, columns first .. first + count - 1 of G (count, D)): column j
    is G e_j, `operator.ggn_operator`'s product (no forward mode through the model, so a model
    with hand-written backward passes works too). `batching`: (columns per vmapped batch,
    (slices of the population, mean)), as the Hessian's (`curvature.population_parts`), or
    BATCHES: `inputs` a dataset in batches, their mean."""
    columns_per_batch, parts = batching
    if parts[0] != 1:  # slices of the population, or BATCHES

        def one(piece: PyTree) -> tuple[jax.Array, jax.Array]:
            whole = (columns_per_batch, (1, True))
            return _ggn_columns(outputs, output_loss, whole, params, piece, first, count)

        if parts != BATCHES:
            return compiled.over_parts(one, inputs, parts)
        flat = ravel_pytree(params)[0]
        zeros = (jnp.zeros((), flat.dtype), jnp.zeros((count, flat.size), flat.dtype))
        return batches_lib.mean_over(one, inputs, zeros)
    op = operator.ggn_operator(outputs, output_loss, params, inputs)
    rows = first + jnp.arange(count)  # rows past D are zero vectors: zero columns, dropped
    basis = jax.nn.one_hot(rows, op.flat.size, dtype=op.flat.dtype)
    return op.value, jax.lax.map(op.matvec, basis, batch_size=min(count, columns_per_batch))


@functools.partial(
    jax.jit, static_argnames=("outputs", "output_loss", "count", "batched", "batching")
)
def ggn_matrix(
    outputs: Outputs,
    output_loss: OutputLoss,
    params: PyTree,
    inputs: PyTree,
    first: jax.Array,
    count: int,
    batched: bool,
    batching: tuple[int, compiled.Parts] = (64, (1, True)),
) -> tuple[jax.Array, jax.Array]:
    """(loss, `count` columns of G from `first`): one program for every chunk, compiled once per
    (outputs, output_loss), vmapped over points when batched."""
    body = functools.partial(_ggn_columns, outputs, output_loss, batching)
    return compiled.maybe_batched(lambda p, i: body(p, i, first, count), batched, params, inputs)


def _ggn_in_chunks(
    point: Point, progress: Callable[[str], None] | None
) -> tuple[jax.Array, np.ndarray]:
    """(loss, G) of one point: the whole matrix in one call up to curvature.CHUNKED_ABOVE
    parameters, else in about ten chunks with a progress line and the time left after each;
    columns batched and the population sliced as for the Hessian."""
    dim, inputs, parts = point.num_params, point.inputs, curvature.population_parts(point)
    if point.batches is not None:  # the batches' mean, weighed by their examples
        parts, inputs = BATCHES, point.batches
    batching = (curvature.default_columns_per_batch(point), parts)
    count = dim if dim <= curvature.CHUNKED_ABOVE else -(-dim // 10)

    def chunk(first: int) -> tuple[jax.Array, np.ndarray]:
        loss, ggn = ggn_matrix(
            point.outputs, point.output_loss, point.params, inputs, np.int32(first),
            count, False, batching,
        )  # fmt: skip
        return loss, np.asarray(ggn)

    if count == dim:
        return chunk(0)
    name = point.name or "the point"
    header = f"Gauss-Newton matrix of {name}: D = {dim}, in chunks of {count} columns"
    found = curvature.in_chunks(dim, count, chunk, progress, header)
    return found[-1][0], np.concatenate([ggn for _, ggn in found])[:dim]


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class GaussNewton:
    """G (the Gauss-Newton matrix), the Hessian H, and R = H - G at a point, with named blocks."""

    ggn: np.ndarray
    hessian: curvature.Hessian

    @property
    def names(self) -> point_lib.Names:
        return self.hessian.names

    @property
    def remainder(self) -> np.ndarray:
        """R = H - G: the outputs' curvature weighted by the loss's output gradient."""
        return self.hessian.matrix - self.ggn

    def block(self, a: str | list[str], b: str | list[str] | None = None) -> np.ndarray:
        """The (a, b) block of G (names as in `Hessian.block`)."""
        rows = point_lib.block_indices(self.names, a)
        cols = rows if b is None else point_lib.block_indices(self.names, b)
        return self.ggn[np.ix_(rows, cols)]

    @property
    def point(self) -> Point:
        return self.hessian.point

    @property
    def finite(self) -> bool:
        return bool(self.hessian.finite and np.all(np.isfinite(self.ggn)))

    @functools.cached_property
    def ggn_eigenvalues(self) -> np.ndarray:
        return np.linalg.eigvalsh(self.ggn)

    @functools.cached_property
    def remainder_eigenvalues(self) -> np.ndarray:
        return np.linalg.eigvalsh(self.remainder)

    def summary(self) -> dict[str, Any]:
        """One row: the point, D, H's kind and negative count, G's and R's extreme eigenvalues
        and negative counts at H's tolerance."""
        tol = self.hessian.tolerance()
        finite = self.finite
        g, r = (self.ggn_eigenvalues, self.remainder_eigenvalues) if finite else ([np.nan],) * 2
        return results.point_row(
            self.point,
            self.ggn.shape[0],
            self.ggn.dtype,
            kind=self.hessian.kind().value,
            num_negative=int(np.sum(self.hessian.eigenvalues < -tol)) if finite else np.nan,
            ggn_min=float(g[0]),
            ggn_max=float(g[-1]),
            ggn_negative=int(np.sum(np.asarray(g) < -tol)) if finite else np.nan,
            remainder_min=float(r[0]),
            remainder_max=float(r[-1]),
            tol=tol,
            finite=finite,
        )

    def __repr__(self) -> str:
        return (
            f"GaussNewton({self.point.name!r}, D={self.ggn.shape[0]}, "
            f"kind={self.hessian.kind().value!r})"
        )

    def describe(self) -> str:
        """G's spectrum (PSD check), H's negative eigenvalues, and where they come from."""
        tol = self.hessian.tolerance()
        h_neg = int(np.sum(self.hessian.eigenvalues < -tol))
        g_neg = int(np.sum(self.ggn_eigenvalues < -tol))
        g_min, g_max = self.ggn_eigenvalues[0], self.ggn_eigenvalues[-1]
        name = self.hessian.point.name or "the point"
        lines = [
            f"Gauss-Newton at {name}: D = {self.ggn.shape[0]}, tolerance {tol:.2e}",
            f"  G = JᵀH_zJ: eigenvalues in [{g_min:.6g}, {g_max:.6g}], "
            + ("positive semi-definite" if g_neg == 0 else f"{g_neg} negative (not PSD)"),
            f"  H: {h_neg} negative eigenvalue(s), smallest {self.hessian.eigenvalues[0]:.6g}",
            f"  R = H - G: eigenvalues in [{self.remainder_eigenvalues[0]:.6g}, "
            f"{self.remainder_eigenvalues[-1]:.6g}]",
        ]
        blind = [name for name, cols, _ in self.names if not np.any(self.ggn[cols])]
        if blind:
            lines.append(
                f"  G is zero in the rows of {', '.join(blind)}: the curvature there is all R"
            )
        if h_neg and not g_neg:
            lines.append(
                f"  H's {h_neg} negative direction(s) come from R, the part a positive "
                "semi-definite method (Gauss-Newton, K-FAC, Fisher) cannot see."
            )
        return "\n".join(lines)


@point_lib.each_point(GaussNewton)
def ggn_at(
    point: Point | Sequence[Point],
    *,
    progress: Callable[[str], None] | None = print,
    max_dense_dim: int = 6000,
) -> GaussNewton | list[GaussNewton]:
    """The Gauss-Newton matrix G and the remainder R = H - G at a point whose loss is
    `output_loss(outputs(params))` (notes/landscape_geometry.md §7).

    Args:
        point: a `Point` with `outputs` and `output_loss`, or a list of points of one model
            (one compiled call).
        progress: progress lines with the time left, above D = CHUNKED_ABOVE (None: silent).
        max_dense_dim: the largest D for which the dense D x D matrices G and H are formed.

    Returns:
        A `GaussNewton` (a list for a list of points): G, the Hessian, R and their spectra.
    """
    points, listed = point_lib.as_points(point, "ggn_at")
    first = operator.check_split(
        points, "ggn_at", " (the Markov, n-gram and Scan and Snap points carry the split)"
    )
    _checks.check_int("max_dense_dim", max_dense_dim, 1, "the largest D formed densely")
    dim = first.num_params
    if dim > max_dense_dim:
        gigabytes = 2 * dim * dim * blocks.itemsize(first) / 1e9
        raise ValueError(
            f"ggn_at forms G and H as dense D x D matrices, and {first.name or 'the point'} has "
            f"D = {dim} > max_dense_dim = {max_dense_dim}: pass ggn_at(point, max_dense_dim="
            f"{dim}) if {gigabytes:.3g} GB fit, or probe G matrix-free: trace, spectral_density "
            "or lanczos_spectrum with matrix='ggn' (and H with eigenpairs)."
        )
    if listed and first.batches is not None:
        raise ValueError("ggn_at: give the points of a dataset in batches one at a time.")
    source = data.of(points, listed, "ggn_at")
    hessians = (
        curvature.hessian_at(points, progress=None, max_dense_dim=max_dense_dim)
        if listed
        else [curvature.hessian_at(first, progress=progress, max_dense_dim=max_dense_dim)]
    )
    split = operator.for_matrix(points, first.shared[0], "ggn", "ggn_at")
    columns = curvature.default_columns_per_batch(first)
    whole = functools.partial(_in_memory, points, listed, progress)
    found = source.formed(split, columns, progress, "ggn_at", whole)
    out = [_result(h, float(loss), ggn) for h, (loss, _, ggn) in zip(hessians, found, strict=True)]
    return out if listed else out[0]


def _in_memory(
    points: list[Point], listed: bool, progress: Callable[[str], None] | None
) -> list[tuple[Any, None, np.ndarray]]:
    """(loss, None, G) of each point: `_ggn_in_chunks`, or a list's in one vmapped program."""
    if not listed:
        loss, ggn = _ggn_in_chunks(points[0], progress)
        return [(loss, None, ggn)]
    first = points[0]
    _, params, inputs = compiled.stack(points)
    losses, ggns = ggn_matrix(
        first.outputs, first.output_loss, params, inputs, np.int32(0), first.num_params, True
    )
    return [(losses[i], None, np.asarray(ggns[i])) for i in range(len(points))]


def _result(hessian: curvature.Hessian, loss: float, ggn: np.ndarray) -> GaussNewton:
    """Check the split reproduces the point's loss, then symmetrise G."""
    if not np.isclose(loss, hessian.gradient.loss, rtol=1e-6, atol=1e-9):
        raise ValueError(
            f"ggn_at: output_loss(outputs(params)) = {loss:.10g} but the point's loss is "
            f"{hessian.gradient.loss:.10g}; the split must compose to the objective."
        )
    return GaussNewton(0.5 * (ggn + ggn.T), hessian)


def matrix_points(points: list[Point], matrix: str, caller: str) -> list[Point]:
    """The points, or for matrix="ggn" views of them whose objective is their Gauss-Newton
    split: every program built on `operator.hessian_operator` then multiplies by G."""
    objective = operator.for_matrix(points, points[0].shared[0], matrix, caller)
    if not operator.is_ggn(objective):
        return points
    split = getattr(objective, "per_batch", objective)
    return [dataclasses.replace(p, objective=split) for p in points]


def of_point(found: Any, point: Point, matrix: str) -> Any:
    """A result found on `matrix_points`' view, given back its point and saying its matrix."""
    if matrix == "hessian":
        return found
    return dataclasses.replace(preconditioning.original(found, point), matrix=matrix)


def dense_spectrum(point: Point) -> tuple[np.ndarray, np.ndarray]:
    """(eigenvalues ascending, eigenvectors as columns) of G formed densely; NaN when it is not
    finite."""
    source = data.of([point], False, "eigenpairs")
    columns = curvature.default_columns_per_batch(point)
    whole = functools.partial(_in_memory, [point], False, None)
    ((_, _, ggn),) = source.formed(point.shared[0], columns, None, "eigenpairs", whole)
    if not np.all(np.isfinite(ggn)):
        return np.full(len(ggn), np.nan, ggn.dtype), np.full(ggn.shape, np.nan, ggn.dtype)
    return np.linalg.eigh(0.5 * (ggn + ggn.T))
