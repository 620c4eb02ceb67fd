"""Stochastic estimates of the Hessian's spectrum, trace and diagonal at a Point, from HVPs alone.

spectral_density (stochastic Lanczos quadrature), trace (Hutchinson or Hutch++) and diagonal
(Hutchinson), each with its standard error over probes; one compiled, vmapped program per call,
shared by every point of one model. Details: docs/design/curvature.md.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, overload

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from landscape import _checks
from landscape.point import Point, as_points, param_names
from landscape.probes import compiled
from landscape.probes.estimates import (
    DiagonalEstimate,
    SpectralDensity,
    TraceEstimate,
    point_dtype,
)
from landscape.probes.lanczos import lanczos_from
from landscape.probes.uncertainty import (
    mean_and_stderr,
    rounding,
)
from landscape.typing import PyTree

if TYPE_CHECKING:  # matplotlib loads only when a figure is drawn
    pass

ProbeKind = Literal["rademacher", "gaussian"]
TraceMethod = Literal["hutchinson", "hutch++"]
Names = list[tuple[str, slice, tuple[int, ...]]]


# ---------------------------------------------------------------- compiled programs


def _probes(key: jax.Array, kind: str, num: int, dim: int, dtype: Any) -> jax.Array:
    """(num, dim) probes: Rademacher signs, or Gaussian vectors scaled to norm sqrt(dim)."""
    if kind == "rademacher":
        return jax.random.rademacher(key, (num, dim), dtype)
    gaussian = jax.random.normal(key, (num, dim), dtype)
    return gaussian * (math.sqrt(dim) / jnp.linalg.norm(gaussian, axis=1, keepdims=True))


def _slq_one(
    objective: compiled.Objective,
    num_probes: int,
    num_iters: int,
    probe: str,
    key: jax.Array,
    params: PyTree,
    inputs: PyTree,
) -> tuple[jax.Array, jax.Array]:
    flat = ravel_pytree(params)[0]
    matvec = compiled.flat_hvp(objective, params, inputs)
    probe_key, restart_key = jax.random.split(key)
    starts = _probes(probe_key, probe, num_probes, flat.size, flat.dtype)
    restart_keys = jax.random.split(restart_key, num_probes)
    return jax.vmap(lambda v, k: lanczos_from(matvec, v, num_iters, k))(starts, restart_keys)


@functools.partial(
    jax.jit, static_argnames=("objective", "num_probes", "num_iters", "probe", "batched")
)
def slq_program(
    objective: compiled.Objective,
    params: PyTree,
    inputs: PyTree,
    key: jax.Array,
    num_probes: int,
    num_iters: int,
    probe: str,
    batched: bool,
) -> tuple[jax.Array, jax.Array]:
    """(alphas (P, m), betas (P, m - 1)): Lanczos from each of P probes, one vmapped program."""
    body = functools.partial(_slq_one, objective, num_probes, num_iters, probe, key)
    return compiled.maybe_batched(body, batched, params, inputs)


def _quadratic_forms(matvec: Callable, vectors: jax.Array) -> jax.Array:
    return jnp.sum(vectors * jax.vmap(matvec)(vectors), axis=1)


def _trace_one(
    objective: compiled.Objective,
    num_probes: int,
    method: str,
    key: jax.Array,
    params: PyTree,
    inputs: PyTree,
) -> tuple[jax.Array, jax.Array]:
    """(exact part, Hutchinson samples): the trace estimate is exact + mean(samples)."""
    flat = ravel_pytree(params)[0]
    matvec = compiled.flat_hvp(objective, params, inputs)
    dim, dtype = flat.size, flat.dtype
    if method == "hutchinson":
        probes = _probes(key, "rademacher", num_probes, dim, dtype)
        return jnp.zeros((), dtype), _quadratic_forms(matvec, probes)
    sketch_key, probe_key = jax.random.split(key)
    rank = num_probes // 3
    sketch = jax.vmap(matvec)(_probes(sketch_key, "rademacher", rank, dim, dtype))  # (k, D)
    basis = jnp.linalg.qr(sketch.T)[0]  # (D, k), orthonormal columns
    exact = jnp.sum(_quadratic_forms(matvec, basis.T))  # tr(Q^T H Q)
    probes = _probes(probe_key, "rademacher", num_probes - 2 * rank, dim, dtype)
    rest = probes - (probes @ basis) @ basis.T  # (I - Q Q^T) g
    return exact, _quadratic_forms(matvec, rest)


@functools.partial(jax.jit, static_argnames=("objective", "num_probes", "method", "batched"))
def trace_program(
    objective: compiled.Objective,
    params: PyTree,
    inputs: PyTree,
    key: jax.Array,
    num_probes: int,
    method: str,
    batched: bool,
) -> tuple[jax.Array, jax.Array]:
    """(exact part, samples) of a Hutchinson or Hutch++ trace estimate, num_probes HVPs."""
    body = functools.partial(_trace_one, objective, num_probes, method, key)
    return compiled.maybe_batched(body, batched, params, inputs)


def _diagonal_one(
    objective: compiled.Objective, num_probes: int, key: jax.Array, params: PyTree, inputs: PyTree
) -> jax.Array:
    flat = ravel_pytree(params)[0]
    matvec = compiled.flat_hvp(objective, params, inputs)
    probes = _probes(key, "rademacher", num_probes, flat.size, flat.dtype)
    return probes * jax.vmap(matvec)(probes)


@functools.partial(jax.jit, static_argnames=("objective", "num_probes", "batched"))
def diagonal_program(
    objective: compiled.Objective,
    params: PyTree,
    inputs: PyTree,
    key: jax.Array,
    num_probes: int,
    batched: bool,
) -> jax.Array:
    """Samples v * Hv (P, D) of Hutchinson's diagonal estimator, one vmapped program."""
    body = functools.partial(_diagonal_one, objective, num_probes, key)
    return compiled.maybe_batched(body, batched, params, inputs)


# ---------------------------------------------------------------- results


# ---------------------------------------------------------------- public functions


def _arguments(points: list[Point], listed: bool) -> tuple[Any, PyTree, PyTree]:
    if listed:
        return compiled.stack(points)
    objective, inputs = points[0].shared
    return objective, points[0].params, inputs


def _check_probes(num_probes: object, low: int, what: str) -> int:
    return _checks.check_int("num_probes", num_probes, low, what)


def _key(key: jax.Array | None) -> jax.Array:
    _checks.check_key("key", key)
    return jax.random.key(0) if key is None else key


def _quadrature(alphas: np.ndarray, betas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights (P, m) from each probe's tridiagonal T; NaN rows where T is not finite."""
    alphas, betas = alphas.astype(np.float64), betas.astype(np.float64)
    good = np.all(np.isfinite(alphas), axis=1) & np.all(np.isfinite(betas), axis=1)
    m = alphas.shape[1]
    tridiagonal = np.zeros(alphas.shape + (m,))
    rows = np.arange(m)
    tridiagonal[:, rows, rows] = np.where(good[:, None], alphas, 0.0)
    tridiagonal[:, rows[:-1], rows[1:]] = np.where(good[:, None], betas, 0.0)
    tridiagonal[:, rows[1:], rows[:-1]] = tridiagonal[:, rows[:-1], rows[1:]]
    nodes, vectors = np.linalg.eigh(tridiagonal)
    weights = vectors[:, 0, :] ** 2
    nodes[~good], weights[~good] = np.nan, np.nan
    return nodes, weights


@overload
def spectral_density(
    point: Point,
    num_probes: int = 16,
    num_iters: int = 30,
    key: jax.Array | None = None,
    probe: ProbeKind = "rademacher",
) -> SpectralDensity: ...


@overload
def spectral_density(
    point: Sequence[Point],
    num_probes: int = 16,
    num_iters: int = 30,
    key: jax.Array | None = None,
    probe: ProbeKind = "rademacher",
) -> list[SpectralDensity]: ...


def spectral_density(
    point: Point | Sequence[Point],
    num_probes: int = 16,
    num_iters: int = 30,
    key: jax.Array | None = None,
    probe: ProbeKind = "rademacher",
) -> SpectralDensity | list[SpectralDensity]:
    """The Hessian's eigenvalue density by stochastic Lanczos quadrature, in one
    compiled call.

    Args:
        point: a `Point`, or a list of points of one model (one call).
        num_probes: probe vectors, at least 2.
        num_iters: Lanczos steps per probe, 1 <= num_iters <= D.
        key: the probes' key (default `jax.random.key(0)`).
        probe: "rademacher" or "gaussian" (normalised).

    Returns:
        A `SpectralDensity` (a list for a list of points): `mass(lo, hi)` with its standard
        error, `mass_interval` with the quadrature's certified error, `density(grid, sigma)`.
    """
    points, listed = as_points(point, "spectral_density")
    num_probes = _check_probes(num_probes, 2, "SLQ probes; two or more for a standard error")
    dim = points[0].num_params
    num_iters = _checks.check_int(
        "num_iters", num_iters, 1, f"Lanczos steps, at most D = {dim}", high=dim
    )
    _checks.check_choice("probe", probe, ("rademacher", "gaussian"))
    objective, params, inputs = _arguments(points, listed)
    alphas, betas = slq_program(
        objective, params, inputs, _key(key), num_probes, num_iters, probe, listed
    )
    alphas, betas = np.asarray(alphas), np.asarray(betas)
    if not listed:
        return SpectralDensity(points[0], *_quadrature(alphas, betas), dim, probe)
    return [
        SpectralDensity(p, *_quadrature(alphas[i], betas[i]), dim, probe)
        for i, p in enumerate(points)
    ]


@overload
def trace(
    point: Point, num_probes: int = 32, key: jax.Array | None = None, method: str = "hutch++"
) -> TraceEstimate: ...


@overload
def trace(
    point: Sequence[Point],
    num_probes: int = 32,
    key: jax.Array | None = None,
    method: str = "hutch++",
) -> list[TraceEstimate]: ...


def trace(
    point: Point | Sequence[Point],
    num_probes: int = 32,
    key: jax.Array | None = None,
    method: str = "hutch++",
) -> TraceEstimate | list[TraceEstimate]:
    """tr(H) from `num_probes` HVPs in one compiled call.

    The standard error is the spread of the Hutchinson samples, floored at the rounding level:
    with few of them (under ~10) it can understate the error.

    Args:
        point: a `Point`, or a list of points of one model.
        num_probes: HVPs in all (hutchinson: >= 2; hutch++: >= 4, a third to sketch the
            range, a third on it, the rest for Hutchinson on its complement).
        key: the probes' key (default `jax.random.key(0)`).
        method: "hutch++" or "hutchinson".

    Returns:
        A `TraceEstimate` (a list for a list of points): the value and its standard error.
    """
    points, listed = as_points(point, "trace")
    _checks.check_choice("method", method, ("hutchinson", "hutch++"))
    low = 2 if method == "hutchinson" else 4
    num_probes = _check_probes(
        num_probes, low, f"HVPs; {method} needs {low} or more for a standard error"
    )
    objective, params, inputs = _arguments(points, listed)
    exact, samples = trace_program(objective, params, inputs, _key(key), num_probes, method, listed)
    exact, samples = np.asarray(exact, np.float64), np.asarray(samples, np.float64)
    dim = points[0].num_params

    def estimate(p: Point, exact_part: np.ndarray, row: np.ndarray) -> TraceEstimate:
        scale = abs(exact_part) + np.mean(np.abs(row))  # sums of D products each
        mean, stderr = mean_and_stderr(row, rounding(point_dtype(p), dim, scale))
        value = float(exact_part + mean)
        return TraceEstimate(p, value, float(stderr), method, num_probes, dim, float(exact_part))

    if not listed:
        return estimate(points[0], exact, samples)
    return [estimate(p, exact[i], samples[i]) for i, p in enumerate(points)]


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
    one compiled call.

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
    objective, params, inputs = _arguments(points, listed)
    samples = np.asarray(
        diagonal_program(objective, params, inputs, _key(key), num_probes, listed), np.float64
    )
    if not listed:
        return _diagonal_estimate(points[0], samples)
    return [_diagonal_estimate(p, samples[i]) for i, p in enumerate(points)]
