"""Certified extreme eigenpairs of the Hessian at a Point: `eigenpairs(point, k, which)`, the k
largest or smallest, each with its residual (`escape.py` checks the negative ones at second order).

Dense `eigh` for small D, Krylov-Schur (restarted Lanczos with locking) on exact HVPs above
(`eigen_search.py`), falling back to the dense solve when Lanczos does not certify the k values. The
method, its stopping rule and its tolerances: docs/design/curvature.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from landscape import _checks, trees
from landscape import point as point_lib
from landscape.core import compiled, data, eigen_search, operator
from landscape.point import Point
from landscape.probes import curvature, gauss_newton, gradient, preconditioning
from landscape.probes.pairs import Eigenpairs as Eigenpairs
from landscape.probes.pairs import lanczos_rtol as lanczos_rtol
from landscape.probes.pairs import multiplicity_rtol as multiplicity_rtol
from landscape.probes.pairs import negative_rtol as negative_rtol
from landscape.typing import Progress, PyTree

WHICH = ("largest", "smallest")
FALLBACK_BELOW = 6000  # hessian_at's max_dense_dim: the largest D a failed search solves densely


def _certified(
    point: Point,
    which: str,
    values: np.ndarray,
    flat_vectors: np.ndarray,
    extremes: tuple[float, float],
    gradient: gradient.Gradient | None = None,
    epsilons: np.ndarray | None = None,
) -> tuple[Eigenpairs, np.ndarray]:
    """The dense path's Eigenpairs, its residuals from fresh exact HVPs (one batched call with
    the losses along its vectors at `epsilons`, which it returns beside)."""
    steps = np.zeros(0, flat_vectors.dtype) if epsilons is None else epsilons
    source = data.of([point], False, "eigenpairs")
    products, losses = source.certify(point.shared[0], flat_vectors, steps)
    residuals = np.linalg.norm(np.asarray(products) - values[:, None] * flat_vectors, axis=1)
    vectors = trees.rows(trees.unravel_rows(point.params, flat_vectors))
    pairs = _pairs(point, which, values, vectors, residuals, "dense", extremes, gradient)
    return pairs, np.asarray(losses)


def _pairs(
    point: Point,
    which: str,
    values: np.ndarray,
    vectors: list[PyTree],
    residuals: np.ndarray,
    method: str,
    extremes: tuple[float, float],
    gradient: gradient.Gradient | None = None,
    lanczos: tuple[bool, int, int, float] | None = None,
) -> Eigenpairs:
    """An Eigenpairs; `lanczos` is (converged, HVPs, runs, tol) for the Lanczos path."""
    converged, num_hvps, runs, tol = lanczos or (True, point.num_params, 0, 0.0)
    return Eigenpairs(
        point=point, which=which, values=values, vectors=vectors, residuals=residuals,
        method=method, spectrum_min=extremes[0], spectrum_max=extremes[1],
        converged=converged, num_hvps=num_hvps, runs=runs, tol=tol, gradient=gradient,
    )  # fmt: skip


def _dense(
    points: list[Point],
    listed: bool,
    k: int,
    which: str,
    reason: str,
    progress: Progress,
    epsilons: np.ndarray | None = None,
) -> list[tuple[Eigenpairs, np.ndarray]]:
    size = max(points[0].num_params, 1)  # dense_below decides; hessian_at still checks memory
    spectra: list[tuple[np.ndarray, np.ndarray, gradient.Gradient | None]]
    if operator.is_ggn(points[0].shared[0]):  # G, formed densely (`eigenpairs(matrix="ggn")`)
        spectra = [(*gauss_newton.dense_spectrum(p), None) for p in points]
    else:  # H by hessian_at (over a stream too)
        hessians = (
            curvature.hessian_at(points, max_dense_dim=size, progress=progress)
            if listed
            else [curvature.hessian_at(points[0], max_dense_dim=size, progress=progress)]
        )
        spectra = [(h.eigenvalues, h.eigenvectors, h.gradient) for h in hessians]
    out = []
    for point, (values, vectors, grad) in zip(points, spectra, strict=True):
        finite = bool(np.all(np.isfinite(values)))  # NaN when non-finite
        wanted_first = np.argsort(-values if which == "largest" else values, kind="stable")
        chosen = wanted_first[:k] if finite else np.arange(k)
        extremes = (float(values[0]), float(values[-1]))  # eigh: ascending
        flat_vectors = vectors[:, chosen].T.copy()
        pairs, losses = _certified(
            point, which, values[chosen], flat_vectors, extremes, grad, epsilons
        )
        out.append((dataclasses.replace(pairs, reason=reason), losses))
    return out


def _lanczos_one(
    point: Point,
    k: int,
    which: str,
    ncv: int,
    key: jax.Array,
    tol: float,
    runs: int,
    progress: Progress = None,
    products: operator.ProductOptions | None = None,
) -> Eigenpairs:
    """`eigen_search.search` on one point: its pairs come with the residuals of fresh products
    (under `products`' search, the larger of those and of fresh exact products:
    `_exact_residuals`)."""
    found = eigen_search.search(point, k, which, ncv, key, tol, runs, progress, products)
    if not np.all(np.isfinite(found.values)):  # a product was not finite: NaN pairs
        nan = np.full(k, np.nan, point.dtype)
        searched = (False, found.num_hvps, found.runs, tol)
        pairs = _pairs(point, which, nan, [], nan.copy(), "lanczos", (np.nan,) * 2, None, searched)
        return dataclasses.replace(pairs, num_hvps_check=found.num_hvps_check)
    vectors = found.vectors
    if operator.with_options(point.shared[0], products) is not point.shared[0]:
        exact = _exact_residuals(point, found.values, vectors)
        found = found._replace(residuals=np.maximum(found.residuals, exact))
    grad = gradient.labelled(point, found.gradient, found.loss)
    pairs = _pairs(
        point, which, found.values, vectors, found.residuals, "lanczos",
        (found.low, found.high), grad, (found.converged, found.num_hvps, found.runs, tol),
    )  # fmt: skip
    return dataclasses.replace(
        pairs,
        num_hvps_check=found.num_hvps_check,
        num_hvps_residuals=found.num_hvps_residuals,
    )


def _exact_residuals(point: Point, values: np.ndarray, found: list[PyTree]) -> np.ndarray:
    """||H v - λ v|| of each found pair by a fresh exact product (`operator.products`), in the
    pair's dtype."""
    objective, inputs = point.shared
    vectors = trees.host_rows(found, point.num_params, values.dtype)
    exact = np.asarray(operator.products(objective, point.params, inputs, jnp.asarray(vectors)))
    return np.linalg.norm(exact - values[:, None] * vectors, axis=1).astype(values.dtype)


def eigenpairs(
    point: Point | Sequence[Point],
    k: int = 6,
    which: str = "smallest",
    *,
    dense_below: int = 3000,
    ncv: int | None = None,
    key: jax.Array | None = None,
    max_restarts: int | None = None,
    fallback_below: int = FALLBACK_BELOW,
    progress: Progress = print,
    rtol: float | None = None,
    matrix: operator.Matrix = "hessian",
    storage: str | None = None,
    finite_difference: float | None = None,
    preconditioner: object = None,
) -> Any:
    """The k smallest (by default, k = 6) or largest eigenpairs of the Hessian at `point`, each
    certified by its residual ||H v - λ v|| (a fresh exact HVP); repeated eigenvalues come with
    their multiplicity. `which="largest"` for the top ones.

    Args:
        point: a `Point`, or a list of points of one model (compiled once per model).
        k: how many eigenpairs.
        which: "smallest" or "largest".
        dense_below: at D <= dense_below, numpy's eigh of the exact Hessian; above it,
            Krylov-Schur (restarted Lanczos with locking) on exact HVPs.
        ncv: the vectors of D the search holds, the k found included (default
            `eigen_search.default_ncv(k)`, max(2k + 1, 20), lowered to what fits in memory):
            more vectors, fewer runs.
        key: the Lanczos start's key (default `jax.random.key(0)`).
        max_restarts: Lanczos runs at most (default 5 (2k + 10)); a run adds about half the
            search's vectors.
        fallback_below: a search that did not certify the k values is replaced by the dense
            solve when D <= fallback_below.
        progress: the dense Hessian's lines, a memory line when the search must hold fewer
            vectors, and a line per Lanczos run after 10 s (None: silent).
        rtol: the accuracy asked of Lanczos: a Ritz pair is accepted at residual <= rtol *
            scale. The default, `lanczos_rtol` (1.2e-5 in float32, 1e-10 in float64), is the
            certified answer; rtol=1e-3 is about PyHessian's accuracy, in fewer products.
            Every result reports its residuals whatever rtol.
        matrix: "hessian", or "ggn" for the Gauss-Newton matrix G = Jᵀ H_z J of a point that
            carries `outputs` and `output_loss` (dense: G formed as `ggn_at` does).
        storage: "bfloat16": the search holds its ncv vectors in bfloat16 (half their memory
            in float32) and multiplies them as kept, the products and sums in the point's
            dtype (`operator.ProductOptions`); rtol's default becomes twice bfloat16's eps.
            The dense path (D <= dense_below) ignores it.
        finite_difference: a step ε > 0 for central differences of the gradient in place of
            the exact products (None: exact); the dense path ignores it. Either option's pairs
            report the larger of the search's residual and a fresh exact product's.
        preconditioner: None, or P's diagonal (a pytree like the params, or optax Adam's
            state): the eigenpairs of P^{-1/2} H P^{-1/2}, its top value the preconditioned
            sharpness (`landscape.adam_preconditioner`), its vectors in P's coordinates.

    Returns:
        An `Eigenpairs` (a list for a list of points), whose `method` and `reason` say how
        the values were found.
    """
    points, listed = point_lib.as_points(point, "eigenpairs")
    search = settings(points, k, which, dense_below, ncv, key, rtol, max_restarts, fallback_below)
    products = operator.product_options("eigenpairs", points, matrix, storage, finite_difference)
    search = search._replace(products=products)
    seen = preconditioning.views(points, preconditioner, "eigenpairs", matrix)
    views = gauss_newton.matrix_points(seen, matrix, "eigenpairs")
    found = [pairs for pairs, _ in solve(views, listed, k, which, search, progress)]
    pairs_of = zip(found, points, strict=True)
    found = [preconditioning.original(gauss_newton.of_point(f, p, matrix), p) for f, p in pairs_of]
    return found if listed else found[0]


class Settings(NamedTuple):
    """The checked knobs of a search (`eigenpairs`' arguments)."""

    dense_below: int
    ncv: int | None
    key: jax.Array
    rtol: float | None
    max_restarts: int | None
    fallback_below: int
    products: operator.ProductOptions = operator.ProductOptions()


def settings(
    points: list[Point],
    k: int,
    which: str,
    dense_below: int,
    ncv: int | None,
    key: jax.Array | None,
    rtol: float | None,
    max_restarts: int | None,
    fallback_below: int,
) -> Settings:
    """`eigenpairs`' arguments checked, one sentence per mistake."""
    _checks.check_int("k", k, 1, "the number of eigenpairs")
    _checks.check_choice("which", which, WHICH)
    _checks.check_int("dense_below", dense_below, 0, "the largest D solved densely")
    if rtol is not None:
        meaning = "relative Ritz residual; at 1 any vector's residual passes"
        _checks.check_real(
            "rtol", rtol, low=0, high=1, low_open=True, high_open=True, meaning=meaning
        )
    if max_restarts is not None:
        _checks.check_int("max_restarts", max_restarts, 1, "the most Lanczos runs")
    if k > points[0].num_params:
        raise ValueError(
            f"k = {k}: must be at most D = {points[0].num_params}, the number of parameters of "
            f"{points[0].name or 'the point'}."
        )
    if ncv is not None:  # the k found, a Krylov vector and the next Lanczos vector
        _checks.check_int(
            "ncv", ncv, k + 2, f"the vectors the search holds, at least k + 2 = {k + 2}"
        )
    _checks.check_int("fallback_below", fallback_below, 0, "the largest D solved densely")
    key = _checks.key_or_default("key", key)
    return Settings(dense_below, ncv, key, rtol, max_restarts, fallback_below)


def solve(
    points: list[Point],
    listed: bool,
    k: int,
    which: str,
    search: Settings,
    progress: Progress,
    epsilons: np.ndarray | None = None,
) -> list[tuple[Eigenpairs, np.ndarray | None]]:
    """Each point's Eigenpairs, and where `epsilons` are given, `losses_along` its vectors
    (`escape_directions`' check): dense, or Krylov-Schur with the dense fallback."""
    dim = points[0].num_params
    if dim <= search.dense_below:
        reason = (
            f"dense: D = {dim} <= dense_below = {search.dense_below} (dense_below=0 for Lanczos)"
        )
        return list(_dense(points, listed, k, which, reason, progress, epsilons))
    dtype = jax.tree.leaves(points[0].params)[0].dtype
    given = search.ncv is not None
    storage = search.products.storage
    stored = None if storage is None else jnp.dtype(storage).itemsize
    ncv = eigen_search.fitted_ncv(
        points[0], k, search.ncv or eigen_search.default_ncv(k), given, progress, stored
    )
    rtol = lanczos_rtol(dtype) if search.rtol is None else search.rtol
    if search.rtol is None and storage:  # the floor of vectors kept so
        rtol = max(rtol, 2 * float(jnp.finfo(storage).eps))
    runs = 5 * (2 * k + 10) if search.max_restarts is None else search.max_restarts
    reason = f"Lanczos: D = {dim} > dense_below = {search.dense_below}"
    out: list[tuple[Eigenpairs, np.ndarray | None]] = []
    for point in points:
        found = _lanczos_one(
            point, k, which, ncv, search.key, rtol, runs, progress, search.products
        )
        found = _fallback(found, reason, search.fallback_below, progress)
        losses = None
        if epsilons is not None and found.finite:  # the second program of escape_directions
            directions = compiled.stacked_like(point.params, found.vectors)
            arguments = (point.params, directions, epsilons)
            losses = data.of([point]).mean_of(compiled.batch_losses_along, arguments)
        out.append((found, losses))
    return out


def _fallback(
    found: Eigenpairs, reason: str, fallback_below: int, progress: Progress
) -> Eigenpairs:
    """`found` with its reason, or, when Lanczos did not certify the k values and D <=
    fallback_below, the dense solve in its place, saying why (a cluster of eigenvalues much
    closer together than the spectrum is wide can need more runs than max_restarts allows)."""
    dim = found.point.num_params
    if found.converged and found.finite:
        return dataclasses.replace(found, reason=reason)
    if not found.finite:
        why = (
            f"{reason}; product {found.num_hvps} (of H or G with a vector) was not finite "
            "(NaN or inf): the search ended there"
        )
    elif dim > fallback_below:
        reached = float(np.max(found.residuals)) / max(found.scale, np.finfo(np.float64).tiny)
        why = (
            f"{reason}; not converged at rtol = {found.tol:.2g}, and D > fallback_below = "
            f"{fallback_below}: the residuals reached {reached:.2g} x scale"
        )
        if reached < 1e-2:  # stalled near rounding, not far off: say what would accept them
            why += f" (rtol={10 ** np.ceil(np.log10(reached)):.0e} accepts values this accurate)"
    else:
        why = (
            f"dense fallback: Lanczos did not certify the {found.values.size} {found.which} in "
            f"{found.runs} runs ({found.num_hvps} HVPs), and D = {dim} <= fallback_below = "
            f"{fallback_below}"
        )
    if progress:
        progress(f"eigenpairs: {why}")
    if not found.finite or dim > fallback_below:
        return dataclasses.replace(found, reason=why)
    return _dense([found.point], False, found.values.size, found.which, why, progress)[0][0]
