"""Stochastic estimates of the Hessian's spectrum, trace and diagonal at a Point, from HVPs alone.

spectral_density (stochastic Lanczos quadrature), trace (Hutchinson or Hutch++) and diagonal
(Hutchinson), each with its standard error over probes; one compiled, vmapped program per call,
shared by every point of one model. Details: docs/design/curvature.md.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, overload

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from landscape import _checks, trees
from landscape.core import hutchpp, hvp, lanczos, memory, ritz, three_term
from landscape.core import layout as layout_lib
from landscape.core.hutchpp import EXACT, REST, SKETCH
from landscape.core.layout import Layout
from landscape.point import Point, as_points, param_names
from landscape.probes import blocks, compiled, operator, stream
from landscape.probes.estimates import (
    DiagonalEstimate,
    SpectralDensity,
    TraceEstimate,
    point_dtype,
)
from landscape.probes.uncertainty import (
    mean_and_stderr,
    rounding,
)
from landscape.typing import PyTree

if TYPE_CHECKING:  # matplotlib loads only when a figure is drawn
    pass

ProbeKind = Literal["rademacher", "gaussian"]
TraceMethod = Literal["hutchinson", "hutch++"]


# ---------------------------------------------------------------- compiled programs
# One program per block of probes (blocks.py sizes the blocks), the same for every block: the
# probe of index i is drawn from fold_in(key, i), so the answer does not depend on the blocks.


def _probes(
    key: jax.Array, indices: jax.Array, kind: str, params: PyTree, layout: Layout | None
) -> jax.Array:
    """The probes of `indices` (K, D)."""
    return jax.vmap(lambda i: layout_lib.probe(key, i, kind, params, layout))(indices)


def _over_points(body: Callable, batched: bool, params: PyTree, inputs: PyTree, *rest: Any) -> Any:
    """body(params, inputs, *rest), vmapped over a list's points (params, inputs and each of
    `rest` that is a per-point array, marked by a leading axis; keys and indices are shared)."""
    if not batched:
        return body(params, inputs, *rest)
    return jax.vmap(body, in_axes=(0, 0) + (None,) * len(rest))(params, inputs, *rest)


@functools.partial(
    jax.jit,
    static_argnames=("objective", "num_iters", "probe", "batched", "layout", "basis", "storage"),
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
) -> tuple[jax.Array, jax.Array]:
    """(alphas (K, m), betas (K, m - 1)): Lanczos from each probe of `indices` (K,); over a mesh
    the vectors in `layout`. `basis="three"`: each run in three vectors of D (`three_term`, its
    vectors stored as `storage`), with no reorthogonalisation."""

    def body(params: PyTree, inputs: PyTree) -> tuple[jax.Array, jax.Array]:
        op = operator.hessian_operator(objective, params, inputs, layout)
        probe_key, restart_key = jax.random.split(key)
        starts = _probes(probe_key, indices, probe, params, layout)
        if basis == "three":
            short = functools.partial(three_term.run, op.matvec, num_iters=num_iters)
            found = jax.vmap(lambda v: three_term.extract(short(v, storage=storage)))(starts)
            return found.alphas, found.betas
        restarts = jax.vmap(lambda i: jax.random.fold_in(restart_key, i))(indices)
        project = None if layout is None else layout.clean
        one = functools.partial(
            lanczos.run, op.matvec, num_iters=num_iters, axis_name="probes", project=project
        )
        runs = jax.vmap(lambda v, k: lanczos.extract(one(v, key=k)), axis_name="probes")
        found = runs(starts, restarts)
        return found.alphas, found.betas

    return _over_points(body, batched, params, inputs)


class TraceState(NamedTuple):
    """`trace` between blocks: `range_` (R, D) the sketch H g, orthonormal rows Q once the exact
    stage begins (rows from the sketch's rank r on zero); `exact` () tr(Q^T H Q) so far;
    `samples` (M,) the Hutchinson forms of the probes projected off the range (all of a point's,
    R = 0, for plain Hutchinson). R and M are the rank and the rest padded to whole blocks, so
    the count is no shape of the program; the forms past the rest are cut on the host."""

    range_: jax.Array
    exact: jax.Array
    samples: jax.Array


@functools.partial(
    jax.jit, static_argnames=("objective", "batched", "layout"), donate_argnames=("state",)
)
def trace_block(
    objective: compiled.Objective,
    params: PyTree,
    inputs: PyTree,
    key: jax.Array,
    state: TraceState,
    stage: jax.Array,
    indices: jax.Array,
    batched: bool,
    layout: Layout | None = None,
    rank: jax.Array | int | None = None,
) -> TraceState:
    """One block of `trace`, every stage of either method in one program with one product
    site: SKETCH puts H g of the probes `indices` in the range rows, EXACT adds q^T H q of the
    range rows `indices` (orthonormalised at its first block), REST keeps g^T H g of the probes
    `indices` projected off the range. Probe i is drawn from fold_in(key, i) at every stage
    (the sketch's from a key of its own), so the blocks never change the answer. `rank`, the
    sketch's rows in use (of the state's R; None: all), is an argument: a new count compiles
    nothing."""

    def body(params: PyTree, inputs: PyTree, state: TraceState) -> TraceState:
        op = operator.hessian_operator(objective, params, inputs, layout)
        rows_held = state.range_.shape[0]
        sketched = rows_held if rank is None else rank
        kind = ("rademacher", params, layout)
        if not rows_held:  # Hutchinson: each probe drawn, multiplied and its form taken in turn
            form = lambda i: jnp.sum((v := layout_lib.probe(key, i, *kind)) * op.matvec(v))  # noqa: E731
            forms = hvp.each_row(form, op.flat.size)(indices)
            return state._replace(samples=state.samples.at[indices].set(forms, mode="drop"))
        sketch_key, probe_key = jax.random.split(key)
        first_exact = (stage == EXACT) & (indices[0] == 0)
        orthonormal = functools.partial(_orthonormal_range, layout=layout, rank=sketched)
        if layout is None or not layout.cpu_mesh:  # there the host calls `orthonormalised`
            state = jax.lax.cond(first_exact, orthonormal, lambda s: s, state)
        rows = state.range_[jnp.minimum(indices, rows_held - 1)]
        vectors = jax.lax.switch(
            stage,
            [
                lambda: _probes(sketch_key, indices, *kind),
                lambda: jnp.where((indices < sketched)[:, None], rows, 0),
                lambda: hutchpp.projected(state.range_, _probes(probe_key, indices, *kind)),
            ],
        )
        products = op.rows(vectors)
        forms = jnp.sum(vectors * products, axis=1)
        return jax.lax.switch(
            stage,
            [
                lambda: state._replace(
                    range_=state.range_.at[jnp.where(indices < sketched, indices, rows_held)].set(
                        products, mode="drop"
                    )
                ),
                lambda: state._replace(exact=state.exact + jnp.sum(forms)),
                lambda: state._replace(samples=state.samples.at[indices].set(forms, mode="drop")),
            ],
        )

    if not batched:
        return body(params, inputs, state)
    return jax.vmap(body)(params, inputs, state)


@functools.partial(jax.jit, static_argnames=("batched", "layout"), donate_argnames=("state",))
def orthonormalised(
    state: TraceState, batched: bool, layout: Layout, rank: jax.Array | int | None = None
) -> TraceState:
    """The sketch's rows made orthonormal in a program of their own, before the exact stage's
    first block, over a mesh of CPU devices (`Layout.cpu_mesh`: there no conditional holds a
    collective beside another); elsewhere `trace_block` does it in that block."""
    orthonormal = functools.partial(_orthonormal_range, layout=layout, rank=rank)
    return jax.vmap(orthonormal)(state) if batched else orthonormal(state)


def _orthonormal_range(
    state: TraceState, layout: Layout | None = None, rank: jax.Array | int | None = None
) -> TraceState:
    """The sketch's rows made orthonormal (`hutchpp.range_basis`, TSQR over a mesh), the rows
    past `rank` (zero, padding) kept zero: Householder's first r rows are those of the sketch's
    first r rows alone."""
    basis = hutchpp.range_basis(state.range_, _mesh(layout))
    if rank is None:
        return state._replace(range_=basis)
    used = (jnp.arange(basis.shape[0]) < rank)[:, None]
    return state._replace(range_=jnp.where(used, basis, jnp.zeros((), basis.dtype)))


def _diagonal_one(
    objective: compiled.Objective,
    indices: jax.Array,
    key: jax.Array,
    layout: Layout | None,
    params: PyTree,
    inputs: PyTree,
) -> PyTree:
    """Samples v * Hv (K, D) of the probes `indices`; over a mesh as a pytree of the params'
    leaves stacked (K, ...), each sharded as its parameter (the flat samples lie in `layout`'s
    order)."""
    op = operator.hessian_operator(objective, params, inputs, layout)
    probes = _probes(key, indices, "rademacher", params, layout)
    samples = probes * op.rows(probes)
    return samples if layout is None else jax.vmap(layout.from_flat)(samples)


@functools.partial(jax.jit, static_argnames=("objective", "batched", "layout"))
def diagonal_program(
    objective: compiled.Objective,
    params: PyTree,
    inputs: PyTree,
    key: jax.Array,
    indices: jax.Array,
    batched: bool,
    layout: Layout | None = None,
) -> PyTree:
    """Samples v * Hv (K, D) of Hutchinson's diagonal estimator for the probes `indices` (K,),
    one vmapped program per block of `blocks.plan` (over a mesh, `_diagonal_one`'s stacked
    pytree); the indices are an argument, so a new number of probes compiles nothing."""
    body = functools.partial(_diagonal_one, objective, indices, key, layout)
    return compiled.maybe_batched(body, batched, params, inputs)


# ---------------------------------------------------------------- public functions


def _arguments(points: list[Point], listed: bool) -> tuple[Any, PyTree, PyTree]:
    if listed:
        return compiled.stack(points)
    objective, inputs = points[0].shared
    return objective, points[0].params, inputs


def _check_probes(num_probes: object, low: int, what: str) -> int:
    return _checks.check_int("num_probes", num_probes, low, what)


def _spread(point: Point, listed: bool) -> Layout | None:
    """`layout.spread` of a point's params; None for a list of points (stacked on the host,
    unless split over a mesh: `_split_list`)."""
    return None if listed else layout_lib.spread(point.params, point.batches)


def _mesh(spread: Layout | None) -> Mesh | None:
    return None if spread is None else spread.mesh


def _split_list(points: list[Point], listed: bool) -> bool:
    """Whether a list's points lie split over a mesh: probed one at a time, each point's
    vectors in its layout (stacked, they would be `ravel_pytree`'s, whole on every device),
    one program serving them all."""
    return listed and layout_lib.spread(points[0].params) is not None


def _key(key: jax.Array | None) -> jax.Array:
    return _checks.key_or_default("key", key)


def _quadrature(alphas: np.ndarray, betas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights (P, m) from each probe's tridiagonal T in float64 (`ritz.quadrature`);
    NaN rows where T is not finite."""
    return ritz.quadrature(alphas.astype(np.float64), betas.astype(np.float64))


@overload
def spectral_density(
    point: Point,
    num_probes: int = 16,
    num_iters: int = 30,
    key: jax.Array | None = None,
    probe: ProbeKind = "rademacher",
    progress: blocks.Progress = print,
    matrix: operator.Matrix = "hessian",
    basis: str = "auto",
    storage: str | None = None,
) -> SpectralDensity: ...


@overload
def spectral_density(
    point: Sequence[Point],
    num_probes: int = 16,
    num_iters: int = 30,
    key: jax.Array | None = None,
    probe: ProbeKind = "rademacher",
    progress: blocks.Progress = print,
    matrix: operator.Matrix = "hessian",
    basis: str = "auto",
    storage: str | None = None,
) -> list[SpectralDensity]: ...


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
) -> SpectralDensity | list[SpectralDensity]:
    """The Hessian's eigenvalue density by stochastic Lanczos quadrature: the probes' Lanczos
    runs in memory-bounded blocks, one compiled program per model.

    Args:
        point: a `Point`, or a list of points of one model (one call).
        num_probes: probe vectors, at least 2; not a shape of the compiled program (blocks of
            `blocks.bucket`'s sizes), so a new count of the same block size compiles nothing.
        num_iters: Lanczos steps per probe, 1 <= num_iters <= D; a shape of the program (a
            full basis holds num_iters vectors), so a new num_iters compiles a new one.
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
        storage: "bfloat16" stores the three vectors in bfloat16, the arithmetic in the
            point's dtype (basis="three" only; None: the point's dtype).

    Returns:
        A `SpectralDensity` (a list for a list of points): `mass(lo, hi)` with its standard
        error, `mass_interval` with the quadrature's certified error, `density(grid, sigma)`;
        its `basis` says which was used.
    """
    points, listed = as_points(point, "spectral_density")
    num_probes = _check_probes(num_probes, 2, "SLQ probes; two or more for a standard error")
    dim = points[0].num_params
    num_iters = _checks.check_int(
        "num_iters", num_iters, 1, f"Lanczos steps, at most D = {dim}", high=dim
    )
    _checks.check_choice("probe", probe, ("rademacher", "gaussian"))
    three_term.check_basis(basis, storage)
    if _split_list(points, listed):  # a mesh's points one at a time, each in its layout
        return [spectral_density(p, num_probes, num_iters, key, probe, progress, matrix, basis,
                                 storage) for p in points]  # fmt: skip
    objective, params, inputs = _arguments(points, listed)
    objective = operator.for_matrix(points, objective, matrix, "spectral_density")
    if stream.streamed(points, listed, "spectral_density"):  # a pass over the data a step
        if basis == "three":
            raise ValueError(
                "spectral_density: basis='three' is not built for a streamed dataset: give "
                "basis='full' or 'auto' (a stream's runs keep their bases)."
            )
        found = stream.slq(points[0], objective, _key(key), num_probes, num_iters, probe, progress)
        return SpectralDensity(points[0], *_quadrature(*found), dim, probe, matrix)
    spread = _spread(points[0], listed)
    key, axis = _key(key), int(listed)
    basis = _slq_basis(points[0], basis, num_iters, len(points), _mesh(spread))
    kept = three_term.vector_bytes(dim, blocks.itemsize(points[0]), basis, num_iters, storage)
    plan = blocks.plan(
        points[0], num_probes, "spectral_density", kept, len(points), progress,
        hint="ask for fewer Lanczos steps (num_iters)", mesh=_mesh(spread),
    )  # fmt: skip

    def block(indices: np.ndarray) -> tuple[jax.Array, jax.Array]:
        return slq_block(objective, params, inputs, key, indices, num_iters, probe, listed,
                         spread, basis, storage)  # fmt: skip

    alphas, betas = blocks.run(plan, block, "spectral_density", progress, axis, "probes")
    runs = list(zip(alphas, betas, strict=True)) if listed else [(alphas, betas)]
    densities = [
        SpectralDensity(p, *_quadrature(a, b), dim, probe, matrix, basis)
        for p, (a, b) in zip(points, runs, strict=True)
    ]
    return densities if listed else densities[0]


def _slq_basis(point: Point, basis: str, num_iters: int, points: int, mesh: Mesh | None) -> str:
    """`basis` itself, or for "auto": "full" where one probe's full basis and its product fit
    the memory policy (a device's share over a mesh), else "three"."""
    if basis != "auto":
        return basis
    full = three_term.vector_bytes(point.num_params, blocks.itemsize(point), "full", num_iters)
    each = points * blocks.product_bytes(point, full, 1 if mesh is None else mesh.size)
    return "full" if each <= memory.budget(memory.device_free_bytes()) else "three"


@overload
def trace(
    point: Point,
    num_probes: int = 32,
    key: jax.Array | None = None,
    method: str = "hutch++",
    progress: blocks.Progress = print,
    matrix: operator.Matrix = "hessian",
) -> TraceEstimate: ...


@overload
def trace(
    point: Sequence[Point],
    num_probes: int = 32,
    key: jax.Array | None = None,
    method: str = "hutch++",
    progress: blocks.Progress = print,
    matrix: operator.Matrix = "hessian",
) -> list[TraceEstimate]: ...


def trace(
    point: Point | Sequence[Point],
    num_probes: int = 32,
    key: jax.Array | None = None,
    method: str = "hutch++",
    progress: blocks.Progress = print,
    matrix: operator.Matrix = "hessian",
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

    Returns:
        A `TraceEstimate` (a list for a list of points): the value and its standard error.
    """
    points, listed = as_points(point, "trace")
    _checks.check_choice("method", method, ("hutchinson", "hutch++"))
    low = 2 if method == "hutchinson" else 4
    num_probes = _check_probes(
        num_probes, low, f"HVPs; {method} needs {low} or more for a standard error"
    )
    if _split_list(points, listed):  # a mesh's points one at a time, each in its layout
        return [trace(p, num_probes, key, method, progress, matrix) for p in points]
    objective, params, inputs = _arguments(points, listed)
    objective = operator.for_matrix(points, objective, matrix, "trace")
    if stream.streamed(points, listed, "trace"):  # a pass over the data a block of products
        parts = stream.trace_parts(points[0], objective, _key(key), num_probes, method, progress)
    else:
        parts = _trace_parts(
            points, listed, (objective, params, inputs), _key(key), num_probes, method, progress
        )
    exact, samples = parts
    exact, samples = np.asarray(exact, np.float64), np.asarray(samples, np.float64)
    dim = points[0].num_params

    def estimate(p: Point, exact_part: np.ndarray, row: np.ndarray) -> TraceEstimate:
        scale = abs(exact_part) + np.mean(np.abs(row))  # sums of D products each
        mean, stderr = mean_and_stderr(row, rounding(point_dtype(p), dim, scale))
        value = float(exact_part + mean)
        return TraceEstimate(
            p, value, float(stderr), method, num_probes, dim, float(exact_part), matrix, row
        )

    if not listed:
        return estimate(points[0], exact, samples)
    return [estimate(p, exact[i], samples[i]) for i, p in enumerate(points)]


def _trace_parts(
    points: list[Point],
    listed: bool,
    arguments: tuple[Any, PyTree, PyTree],
    key: jax.Array,
    num_probes: int,
    method: str,
    progress: blocks.Progress,
) -> tuple[np.ndarray, np.ndarray]:
    """(exact part, Hutchinson samples) with the probe axis last: the trace estimate is exact +
    mean(samples). Hutch++ sketches the range with a third of the products, takes tr(Q^T H Q)
    exactly with a third, and Hutchinson on the complement with the rest; every block is one
    call of `trace_block`, the state staying on the device."""
    objective, params, inputs = arguments
    dim, dtype = points[0].num_params, np.dtype(jax.tree.leaves(points[0].params)[0].dtype)
    rank, rest = hutchpp.split(num_probes, method)
    spread = _spread(points[0], listed)
    if not rank and not listed and hvp.rows_mapped(dim):  # a block holds one product
        blocks.plan(points[0], 1, "trace", 0.0, 1, progress, mesh=_mesh(spread))
        size = min(blocks.bucket(num_probes), blocks.MAPPED_BLOCK)
        plan = blocks.Plan(num_probes, size, -(-num_probes // size))
    else:
        plan = blocks.plan(
            points[0], max(rank, rest), "trace", 0.0, len(points), progress,
            mesh=_mesh(spread),
        )  # fmt: skip
    lead = (len(points),) if listed else ()
    padded = dim if spread is None else spread.padded
    whole = lambda count: -(-count // plan.size) * plan.size  # noqa: E731 (whole blocks)
    zeros = [np.zeros(lead + shape, dtype) for shape in ((whole(rank), padded), (), (whole(rest),))]
    where = [None if spread is None else spread.sharding(1), None, None]
    state = TraceState(*(jax.device_put(x, w) for x, w in zip(zeros, where, strict=True)))
    stages = [(SKETCH, rank), (EXACT, rank), (REST, rest)]
    schedule = [
        (stage, i, min(plan.size, count - i * plan.size))
        for stage, count in stages
        for i in range(-(-count // plan.size))
    ]

    def step(state: TraceState, stage: int, block: int) -> TraceState:
        indices = plan.indices(block)
        if stage == EXACT and indices[0] == 0 and spread is not None and spread.cpu_mesh:
            state = orthonormalised(state, listed, spread, np.int32(rank))
        return trace_block(
            objective, params, inputs, key, state, np.int32(stage), indices, listed, spread,
            np.int32(rank),
        )  # fmt: skip

    state = blocks.carried(schedule, state, step, "trace", progress)
    return trees.host(state.exact), trees.host(state.samples)[..., :rest]


def _diagonal_estimate(point: Point, samples: np.ndarray) -> DiagonalEstimate:
    dtype, dim = point_dtype(point), samples.shape[1]  # each sample sums D products
    values, stderr = mean_and_stderr(samples, rounding(dtype, dim, np.abs(samples).mean(0)))
    names = param_names(point.params)
    traces = {}
    for leaf, s, _ in names:
        sums = samples[:, s].sum(axis=1)
        mean, err = mean_and_stderr(sums, rounding(dtype, dim, np.abs(sums).mean()))
        traces[leaf] = (float(mean), float(err))
    return DiagonalEstimate(point, values, stderr, names, samples.shape[0], traces)


@overload
def diagonal(
    point: Point, num_probes: int = 32, key: jax.Array | None = None
) -> DiagonalEstimate: ...


@overload
def diagonal(
    point: Sequence[Point], num_probes: int = 32, key: jax.Array | None = None
) -> list[DiagonalEstimate]: ...


def diagonal(
    point: Point | Sequence[Point], num_probes: int = 32, key: jax.Array | None = None
) -> DiagonalEstimate | list[DiagonalEstimate]:
    """diag(H) by Hutchinson's estimator, the mean of v * Hv over Rademacher probes, in
    memory-bounded blocks of one compiled program (a new `num_probes` of the same block size
    compiles nothing: `blocks.bucket`).

    Args:
        point: a `Point`, or a list of points of one model.
        num_probes: probes, at least 2.
        key: the probes' key (default `jax.random.key(0)`).

    Returns:
        A `DiagonalEstimate` (a list for a list of points): per-entry values and standard
        errors with named blocks, and each block's trace.
    """
    points, listed = as_points(point, "diagonal")
    num_probes = _check_probes(num_probes, 2, "Rademacher probes; two or more for a stderr")
    if _split_list(points, listed):  # a mesh's points one at a time, each in its layout
        return [diagonal(p, num_probes, key) for p in points]
    objective, params, inputs = _arguments(points, listed)
    if stream.streamed(points, listed, "diagonal"):  # a pass over the data a block of probes
        samples = stream.diagonal_samples(points[0], objective, _key(key), num_probes, print)
        return _diagonal_estimate(points[0], samples.astype(np.float64))
    spread, key = _spread(points[0], listed), _key(key)
    plan = blocks.plan(points[0], num_probes, "diagonal", 0.0, len(points), mesh=_mesh(spread))

    def block(indices: np.ndarray) -> tuple[jax.Array, ...]:
        found = diagonal_program(objective, params, inputs, key, indices, listed, spread)
        return tuple(jax.tree.leaves(found))

    found = blocks.run(plan, block, "diagonal", None, int(listed))
    if spread is not None:  # the stacked leaves, raveled row by row in ravel_pytree's order
        found = (np.concatenate([leaf.reshape(num_probes, -1) for leaf in found], axis=1),)
    samples = found[0].astype(np.float64)
    if not listed:
        return _diagonal_estimate(points[0], samples)
    return [_diagonal_estimate(p, samples[i]) for i, p in enumerate(points)]
