"""Stochastic estimates of the Hessian's spectrum, trace and diagonal at a Point, from HVPs alone.

spectral_density (stochastic Lanczos quadrature), trace (Hutchinson or Hutch++) and diagonal
(Hutchinson), each with its standard error over probes; one compiled, vmapped program per call,
shared by every point of one model. Details: docs/design/curvature.md.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, Literal

import jax
import numpy as np
from jax.sharding import Mesh

from landscape import _checks
from landscape.core import (
    blocks,
    compiled,
    data,
    lanczos,
    memory,
    operator,
    ritz,
    sizes,
    three_term,
)
from landscape.core import layout as layout_lib
from landscape.core.layout import Layout
from landscape.core.three_vectors import on_pytrees, runs_in_three_vectors
from landscape.point import Point, as_points, each_point, param_names
from landscape.probes import preconditioning, traces
from landscape.probes.estimates import (
    DiagonalEstimate,
    SpectralDensity,
    TraceEstimate,
)
from landscape.probes.traces import probes as _probes
from landscape.probes.uncertainty import (
    mean_and_stderr,
    rounding,
)
from landscape.typing import PyTree

ProbeKind = Literal["rademacher", "gaussian"]
TraceMethod = Literal["hutchinson", "hutch++"]


# ---------------------------------------------------------------- compiled programs
# One program per block of probes (blocks.py sizes the blocks), the same for every block: the
# probe of index i is drawn from fold_in(key, i), so the answer does not depend on the blocks.


@functools.partial(
    jax.jit,
    static_argnames=(
        "objective",
        "num_iters",
        "probe",
        "batched",
        "layout",
        "basis",
        "storage",
        "pytrees",
    ),
)
def slq_block(
    objective: compiled.Objective,
    params: PyTree,
    inputs: PyTree,
    key: jax.Array,
    indices: jax.Array,
    num_iters: int,
    probe: str,
    batched: bool,
    layout: Layout | None = None,
    basis: str = "full",
    storage: str | None = None,
    steps: jax.Array | None = None,
    pytrees: bool | None = None,
) -> tuple[jax.Array, jax.Array]:
    """(alphas (K, m), betas (K, m - 1)): Lanczos from each probe of `indices` (K,), `steps`
    of them (default m = num_iters; an argument, T's rows past `steps` zero); over a mesh the
    vectors in `layout`, each run's kept vectors stored as `storage`. `basis="three"`: each run
    in three vectors of D (`three_term`), with no reorthogonalisation, its products on pytrees
    where `pytrees` (`three_vectors.runs_in_three_vectors`)."""

    def body(params: PyTree, inputs: PyTree) -> tuple[jax.Array, jax.Array]:
        op = operator.hessian_operator(objective, params, inputs, layout)
        probe_key, restart_key = jax.random.split(key)
        starts = _probes(probe_key, indices, probe, params, layout)
        if basis == "three":
            found = runs_in_three_vectors(
                objective, params, inputs, layout, starts, num_iters, storage, op.matvec, steps,
                pytrees,
            )  # fmt: skip
            return found.alphas, found.betas
        restarts = jax.vmap(lambda i: jax.random.fold_in(restart_key, i))(indices)
        project = None if layout is None else layout.clean
        one = functools.partial(
            lanczos.run, op.matvec, num_iters=num_iters, axis_name="probes", project=project,
            storage=storage, steps=steps,
        )  # fmt: skip
        runs = jax.vmap(lambda v, k: lanczos.extract(one(v, key=k)), axis_name="probes")
        found = runs(starts, restarts)
        return found.alphas, found.betas

    return compiled.maybe_batched(body, batched, params, inputs)


# ---------------------------------------------------------------- public functions


def _split_list(points: list[Point], listed: bool) -> bool:
    """Whether a list's points lie split over a mesh: probed one at a time, each point's
    vectors in its layout (stacked, they would be `ravel_pytree`'s, whole on every device),
    one program serving them all."""
    return listed and layout_lib.spread(points[0].params) is not None


def _quadrature(alphas: np.ndarray, betas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights (P, m) from each probe's tridiagonal T in float64 (`ritz.quadrature`);
    NaN rows where T is not finite."""
    return ritz.quadrature(alphas.astype(np.float64), betas.astype(np.float64))


@each_point(SpectralDensity)
def spectral_density(
    point: Point | Sequence[Point],
    num_probes: int = 16,
    num_iters: int = 30,
    key: jax.Array | None = None,
    probe: ProbeKind = "rademacher",
    progress: blocks.Progress = print,
    matrix: operator.Matrix = "hessian",
    basis: str = "auto",
    storage: str | None = None,
    finite_difference: float | None = None,
    preconditioner: object = None,
) -> SpectralDensity | list[SpectralDensity]:
    """The Hessian's eigenvalue density by stochastic Lanczos quadrature: the probes' Lanczos
    runs in memory-bounded blocks, one compiled program per model.

    Args:
        point: a `Point`, or a list of points of one model (one call).
        num_probes: probe vectors, at least 2; not a shape of the compiled program (blocks of
            `core.sizes.bucket`'s sizes), so a new count of the same block size compiles nothing.
        num_iters: Lanczos steps per probe, 1 <= num_iters <= D: an argument of the program,
            which keeps `core.sizes.basis_rows` rows of T (and of a full basis).
        key: the probes' key (default `jax.random.key(0)`).
        probe: "rademacher" or "gaussian" (normalised).
        progress: a memory line when the probes must run in blocks, and a line per block once
            the call has taken 10 s (None: silent).
        matrix: "hessian", or "ggn" for the Gauss-Newton matrix G = Jᵀ H_z J of a point that
            carries `outputs` and `output_loss` (`operator.ggn_operator`).
        basis: "full" keeps each run's Lanczos basis (num_iters vectors of D, fully
            reorthogonalised); "three" keeps three vectors of D and lets ghosts of converged
            values share their weight (`landscape.core.three_term`); "auto": full where one
            probe's basis fits the memory policy, else three.
        storage: "bfloat16" stores each run's vectors (its basis, or its three vectors) in
            bfloat16, the products and sums in the point's dtype (`operator.ProductOptions`).
        finite_difference: a step ε > 0 for central differences of the gradient in place of
            the exact products (`operator.finite_difference_operator`; None: exact).
        preconditioner: None, or P's diagonal (a pytree like the params, or optax Adam's
            state): the density of P^{-1/2} H P^{-1/2} (`landscape.adam_preconditioner`).

    Returns:
        A `SpectralDensity` (a list for a list of points): `mass(lo, hi)` with its standard
        error, `mass_interval` with the quadrature's certified error, `density(grid, sigma)`;
        its `basis` says which was used.
    """
    points, listed = as_points(point, "spectral_density")
    if preconditioner is not None:  # the points in P's coordinates (`preconditioning`)
        return preconditioning.through_views(
            "spectral_density", point, preconditioner,
            lambda seen: spectral_density(seen, num_probes, num_iters, key, probe, progress,
                                          "hessian", basis, storage, finite_difference),
            matrix,
        )  # fmt: skip
    num_probes = _checks.check_int(
        "num_probes", num_probes, 2, "SLQ probes; two or more for a standard error"
    )
    dim = points[0].num_params
    num_iters = _checks.check_int(
        "num_iters", num_iters, 1, f"Lanczos steps, at most D = {dim}", high=dim
    )
    _checks.check_choice("probe", probe, ("rademacher", "gaussian"))
    three_term.check_basis(basis)
    options = operator.product_options("spectral_density", points, matrix, storage,
                                       finite_difference)  # fmt: skip
    if _split_list(points, listed):  # a mesh's points one at a time, each in its layout
        return [spectral_density(p, num_probes, num_iters, key, probe, progress, matrix, basis,
                                 storage, finite_difference) for p in points]  # fmt: skip
    objective, params, inputs = compiled.arguments(points, listed)
    objective = operator.for_matrix(points, objective, matrix, "spectral_density", options)
    source = data.of(points, listed, "spectral_density")
    key = _checks.key_or_default("key", key)
    whole = functools.partial(
        _slq_in_memory, points, listed, (objective, params, inputs), key, num_probes, num_iters,
        probe, basis, storage, progress,
    )  # fmt: skip
    runs, basis = source.slq(objective, key, num_probes, num_iters, probe, basis, progress, whole)
    densities = [
        SpectralDensity(p, *_quadrature(a, b), dim, probe, matrix, basis)
        for p, (a, b) in zip(points, runs, strict=True)
    ]
    return densities if listed else densities[0]


def _slq_in_memory(
    points: list[Point],
    listed: bool,
    arguments: tuple[Any, PyTree, PyTree],
    key: jax.Array,
    num_probes: int,
    num_iters: int,
    probe: str,
    basis: str,
    storage: str | None,
    progress: blocks.Progress,
) -> tuple[list[tuple[np.ndarray, np.ndarray]], str]:
    """(each point's (alphas, betas), the basis used): the probes' runs in blocks that fit the
    memory policy, each block one program (`slq_block`)."""
    objective, params, inputs = arguments
    # a list's points are stacked on the host (unless split over a mesh: `_split_list`)
    spread = None if listed else layout_lib.spread(points[0].params, points[0].batches)
    axis, dim = int(listed), points[0].num_params
    basis = _slq_basis(points[0], basis, num_iters, len(points), traces.mesh_of(spread), storage)
    # T (and the full basis) keeps `basis_rows` rows, the steps an argument; in three vectors
    # over CPU devices num_iters of each, its odd last step no conditional (`Layout.cpu_mesh`)
    static = basis == "three" and spread is not None and spread.cpu_mesh
    rows = num_iters if static else sizes.basis_rows(num_iters, dim)
    steps = None if static else np.int32(num_iters)
    pytrees = basis == "three" and _on_pytrees(points[0], objective, spread, storage, rows)
    kept = three_term.vector_bytes(dim, blocks.itemsize(points[0]), basis, rows, storage, pytrees)
    as_parameters = three_term.AS_PARAMETERS if basis == "three" else 0
    plan = blocks.plan(
        points[0], num_probes, "spectral_density", kept, len(points), progress,
        hint="ask for fewer Lanczos steps (num_iters)", mesh=traces.mesh_of(spread),
        as_parameters=as_parameters,
    )  # fmt: skip

    def block(indices: np.ndarray) -> tuple[jax.Array, jax.Array]:
        return slq_block(objective, params, inputs, key, indices, rows, probe, listed,
                         spread, basis, storage, steps, pytrees)  # fmt: skip

    alphas, betas = blocks.run(plan, block, "spectral_density", progress, axis, "probes")
    alphas, betas = alphas[..., :num_iters], betas[..., : num_iters - 1]
    return (list(zip(alphas, betas, strict=True)) if listed else [(alphas, betas)]), basis


def _on_pytrees(
    point: Point, objective: Any, spread: Layout | None, storage: str | None, rows: int
) -> bool:
    """Whether the three-vector runs take their products on pytrees: on one device wherever
    they may (`on_pytrees`); over a mesh only where one run on flat vectors would not fit the
    memory policy, since pytrees hold less there but take longer a step on the CPU
    (docs/guide/foundation_scale.md, "The estimate against XLA")."""
    may = on_pytrees(objective, storage)
    if not may or spread is None:
        return may
    flat = three_term.vector_bytes(point.num_params, blocks.itemsize(point), "three", rows, storage)
    each = blocks.product_bytes(point, flat, spread.devices, three_term.AS_PARAMETERS)
    return each > memory.budget(memory.device_free_bytes())


def _slq_basis(
    point: Point, basis: str, num_iters: int, points: int, mesh: Mesh | None, storage: Any
) -> str:
    """`basis` itself, or for "auto": "full" where one probe's full basis (of `storage`) and
    its product fit the memory policy (a device's share over a mesh), else "three"."""
    if basis != "auto":
        return basis
    size = blocks.itemsize(point)
    rows = sizes.basis_rows(num_iters, point.num_params)
    full = three_term.vector_bytes(point.num_params, size, "full", rows, storage)
    each = points * blocks.product_bytes(point, full, 1 if mesh is None else mesh.size)
    return "full" if each <= memory.budget(memory.device_free_bytes()) else "three"


@each_point(TraceEstimate)
def trace(
    point: Point | Sequence[Point],
    num_probes: int = 32,
    key: jax.Array | None = None,
    method: str = "hutch++",
    progress: blocks.Progress = print,
    matrix: operator.Matrix = "hessian",
    storage: str | None = None,
    finite_difference: float | None = None,
    preconditioner: object = None,
) -> TraceEstimate | list[TraceEstimate]:
    """tr(H) (or tr(G), `matrix="ggn"`) from `num_probes` HVPs, in memory-bounded blocks of one
    compiled program.

    The standard error is the spread of the Hutchinson samples, floored at the rounding level:
    with few of them (under ~10) it can understate the error.

    Args:
        point: a `Point`, or a list of points of one model.
        num_probes: HVPs in all (hutchinson: >= 2; hutch++: >= 4, a third to sketch the
            range, a third on it, the rest for Hutchinson on its complement); not a shape of
            the compiled program, so a new count of the same block size compiles nothing.
        key: the probes' key (default `jax.random.key(0)`).
        method: "hutch++" or "hutchinson".
        progress: a memory line when the products must run in blocks, and a line per block
            once the call has taken 10 s (None: silent).
        matrix: "hessian", or "ggn" for the trace of the Gauss-Newton matrix of a point that
            carries `outputs` and `output_loss`.
        storage: "bfloat16" keeps Hutch++'s sketch and probes in bfloat16, the products and
            sums in the point's dtype (`operator.ProductOptions`; None: the point's dtype).
        finite_difference: a step ε > 0 for central differences of the gradient in place of
            the exact products (None: exact).
        preconditioner: None, or P's diagonal (a pytree like the params, or optax Adam's
            state): the trace of P^{-1/2} H P^{-1/2} (`landscape.adam_preconditioner`).

    Returns:
        A `TraceEstimate` (a list for a list of points): the value and its standard error.
    """
    points, listed = as_points(point, "trace")
    if preconditioner is not None:  # the points in P's coordinates (`preconditioning`)
        return preconditioning.through_views(
            "trace", point, preconditioner,
            lambda seen: trace(seen, num_probes, key, method, progress, "hessian", storage,
                               finite_difference),
            matrix,
        )  # fmt: skip
    _checks.check_choice("method", method, ("hutchinson", "hutch++"))
    low = 2 if method == "hutchinson" else 4
    meaning = f"HVPs; {method} needs {low} or more for a standard error"
    num_probes = _checks.check_int("num_probes", num_probes, low, meaning)
    options = operator.product_options("trace", points, matrix, storage, finite_difference)
    if _split_list(points, listed):  # a mesh's points one at a time, each in its layout
        return [trace(p, num_probes, key, method, progress, matrix, storage, finite_difference)
                for p in points]  # fmt: skip
    objective = operator.for_matrix(points, points[0].shared[0], matrix, "trace", options)
    source = data.of(points, listed, "trace")
    key = _checks.key_or_default("key", key)
    exact, samples = traces.trace_parts(source, objective, key, num_probes, method, progress)
    exact, samples = np.asarray(exact, np.float64), np.asarray(samples, np.float64)
    dim = points[0].num_params

    def estimate(p: Point, exact_part: np.ndarray, row: np.ndarray) -> TraceEstimate:
        scale = abs(exact_part) + np.mean(np.abs(row))  # sums of D products each
        mean, stderr = mean_and_stderr(row, rounding(p.dtype, dim, scale))
        value = float(exact_part + mean)
        return TraceEstimate(
            p, value, float(stderr), method, num_probes, dim, float(exact_part), matrix, row
        )

    if not listed:
        return estimate(points[0], exact, samples)
    return [estimate(p, exact[i], samples[i]) for i, p in enumerate(points)]


def _diagonal_estimate(point: Point, samples: np.ndarray) -> DiagonalEstimate:
    dtype, dim = point.dtype, samples.shape[1]  # each sample sums D products
    values, stderr = mean_and_stderr(samples, rounding(dtype, dim, np.abs(samples).mean(0)))
    names = param_names(point.params)
    traces = {}
    for leaf, s, _ in names:
        sums = samples[:, s].sum(axis=1)
        mean, err = mean_and_stderr(sums, rounding(dtype, dim, np.abs(sums).mean()))
        traces[leaf] = (float(mean), float(err))
    return DiagonalEstimate(point, values, stderr, names, samples.shape[0], traces)


@each_point(DiagonalEstimate)
def diagonal(
    point: Point | Sequence[Point],
    num_probes: int = 32,
    key: jax.Array | None = None,
    storage: str | None = None,
    finite_difference: float | None = None,
    preconditioner: object = None,
) -> DiagonalEstimate | list[DiagonalEstimate]:
    """diag(H) by Hutchinson's estimator, the mean of v * Hv over Rademacher probes, in
    memory-bounded blocks of one compiled program (a new `num_probes` of the same block size
    compiles nothing: `core.sizes.bucket`).

    Args:
        point: a `Point`, or a list of points of one model.
        num_probes: probes, at least 2.
        key: the probes' key (default `jax.random.key(0)`).
        storage: "bfloat16" keeps the probes in bfloat16 (Rademacher signs: exact, so the
            answer is float32's; `operator.ProductOptions`).
        finite_difference: a step ε > 0 for central differences of the gradient (None: exact).
        preconditioner: None, or P's diagonal (a pytree like the params, or optax Adam's
            state): the diagonal of P^{-1/2} H P^{-1/2} (`landscape.adam_preconditioner`).

    Returns:
        A `DiagonalEstimate` (a list for a list of points): per-entry values and standard
        errors with named blocks, and each block's trace.
    """
    points, listed = as_points(point, "diagonal")
    if preconditioner is not None:  # the points in P's coordinates (`preconditioning`)
        return preconditioning.through_views(
            "diagonal", point, preconditioner,
            lambda seen: diagonal(seen, num_probes, key, storage, finite_difference),
        )  # fmt: skip
    num_probes = _checks.check_int(
        "num_probes", num_probes, 2, "Rademacher probes; two or more for a stderr"
    )
    options = operator.product_options("diagonal", points, "hessian", storage, finite_difference)
    if _split_list(points, listed):  # a mesh's points one at a time, each in its layout
        return [diagonal(p, num_probes, key, storage, finite_difference) for p in points]
    objective = operator.with_options(points[0].shared[0], options)
    source = data.of(points, listed, "diagonal")
    key = _checks.key_or_default("key", key)
    samples = traces.diagonal_samples(source, objective, key, num_probes)
    if not listed:
        return _diagonal_estimate(points[0], samples)
    return [_diagonal_estimate(p, samples[i]) for i, p in enumerate(points)]
