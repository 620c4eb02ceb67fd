"""The dense Hessian at a Point (or at a list of points of one model, in one vmapped call).

Results keep the parameter names, so `H.block("e")` or `H.block("b", "e")` reads like the paper.
Block selection, focus blocks, the eigenvalue tolerance and non-finite results:
docs/design/curvature.md.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any, Literal, overload

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jax.sharding import Mesh

from landscape import _checks
from landscape.engine import memory
from landscape.point import (
    BlockName,
    Names,
    Point,
    PointOrPoints,
    as_points,
    block_indices,
    param_names,
)
from landscape.probes import compiled
from landscape.probes.gradient import Gradient, _program_arguments, gradient_at
from landscape.probes.lanczos import Spectrum, lanczos_spectrum
from landscape.probes.results import (
    NO_SPECTRUM,
    NON_FINITE,
    Curvature,
    check_tol,
    counts,
    curvature_kind,
    default_tol,
    format_numbers,
    header_lines,
    name_width,
    nonfinite_lines,
    nonfinite_matrix_blocks,
    point_row,
    spectrum_lines,
    verdict_lines,
    verdict_sentence,
)
from landscape.probes.stationarity import (
    NearStationary,
    check_grad_tol,
    check_rtol,
    near_stationary,
)
from landscape.typing import PyTree


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class Hessian:
    """The dense Hessian at a point (symmetrised), with named blocks and a cached spectrum."""

    matrix: np.ndarray
    names: Names
    point: Point
    gradient: Gradient
    _near: dict = dataclasses.field(default_factory=dict, init=False, repr=False, compare=False)

    def block(self, a: BlockName, b: BlockName | None = None) -> np.ndarray:
        """The (a, b) block; b defaults to a; each may be a name or a list of names."""
        rows = block_indices(self.names, a)
        cols = rows if b is None else block_indices(self.names, b)
        return self.matrix[np.ix_(rows, cols)]

    @property
    def finite(self) -> bool:
        """Every Hessian entry, the gradient and the loss are finite (no NaN, no inf)."""
        return bool(np.all(np.isfinite(self.matrix)) and self.gradient.finite)

    def nonfinite_blocks(self) -> dict[str, str]:
        """{"a" or "a × b": "n NaN, m inf"} for the blocks holding non-finite entries."""
        return nonfinite_matrix_blocks(self.matrix, self.names)

    @functools.cached_property
    def _eigh(self) -> tuple[np.ndarray, np.ndarray]:
        if not np.all(np.isfinite(self.matrix)):  # eigh on NaN/inf raises or returns garbage
            dim = self.matrix.shape[0]
            return (
                np.full(dim, np.nan, self.matrix.dtype),
                np.full((dim, dim), np.nan, self.matrix.dtype),
            )
        return np.linalg.eigh(self.matrix)

    @functools.cached_property
    def _block_extremes(self) -> dict[str, tuple[float, float] | None]:
        """{leaf: (λ_min, λ_max) of its diagonal block}, None where the block is non-finite."""
        return {
            leaf: block_extremes(self.matrix[s, s])
            if np.all(np.isfinite(self.matrix[s, s]))
            else None
            for leaf, s, _ in self.names
        }

    @property
    def eigenvalues(self) -> np.ndarray:
        """Ascending; all NaN (not computed) when the matrix has a non-finite entry."""
        return self._eigh[0]

    @property
    def eigenvectors(self) -> np.ndarray:
        """Columns, in the order of `eigenvalues`; all NaN when the matrix is non-finite."""
        return self._eigh[1]

    def _require_finite(self, what: str) -> None:
        if not np.all(np.isfinite(self.matrix)):
            blocks = "; ".join(f"{b}: {c}" for b, c in self.nonfinite_blocks().items())
            raise ValueError(
                f"{what} is undefined: the Hessian has NaN or inf entries ({blocks}), "
                "so its eigenvalues are not computed (verdict 'non-finite')."
            )

    def tolerance(self, tol: float | None = None) -> float:
        """`tol` if given, else the default relative tolerance (module docstring); NaN for a
        non-finite matrix."""
        check_tol(tol)
        return default_tol(self.eigenvalues, self.matrix.dtype) if tol is None else tol

    def num_negative(self, tol: float | None = None) -> int:
        self._require_finite("num_negative")
        return int(np.sum(self.eigenvalues < -self.tolerance(tol)))

    def num_zero(self, tol: float | None = None) -> int:
        self._require_finite("num_zero")
        return int(np.sum(np.abs(self.eigenvalues) <= self.tolerance(tol)))

    def num_positive(self, tol: float | None = None) -> int:
        self._require_finite("num_positive")
        return int(np.sum(self.eigenvalues > self.tolerance(tol)))

    @property
    def lambda_min(self) -> float:
        """The smallest eigenvalue (NaN for a non-finite matrix)."""
        return float(self.eigenvalues[0])

    @property
    def lambda_max(self) -> float:
        """The largest eigenvalue (NaN for a non-finite matrix)."""
        return float(self.eigenvalues[-1])

    def kind(self, tol: float | None = None, grad_tol: float | None = None) -> Curvature:
        """What the Hessian shows (`Curvature`): NON_FINITE; where |g| > grad_tol (default
        `Gradient.stationarity_tol`), the kind of the quadratic model's critical point when
        `near_stationary` trusts it, else NOT_STATIONARY; at a stationary point the kind of the
        spectrum, a focus block positive definite with zero elsewhere a MINIMUM
        (docs/design/curvature.md, notes/landscape_geometry.md §9)."""
        check_tol(tol)
        check_grad_tol(grad_tol)
        if not self.finite:
            return Curvature.NON_FINITE
        if not self._stationary(grad_tol):
            return self.near_stationary(tol, grad_tol).kind()
        tol = self.tolerance(tol)
        if self._focus_minimum(tol):
            return Curvature.MINIMUM
        return curvature_kind(self.eigenvalues, tol)

    def _stationary(self, grad_tol: float | None) -> bool:
        bound = self.gradient.stationarity_tol() if grad_tol is None else grad_tol
        return self.gradient.norm <= bound

    def verdict(self, tol: float | None = None, grad_tol: float | None = None) -> str:
        """`kind()` as a sentence, with the counts, the bound or the near-stationary check that
        decided it."""
        kind = self.kind(tol, grad_tol)
        if kind is Curvature.NON_FINITE:
            return NON_FINITE
        if not self._stationary(grad_tol):
            return self.near_stationary(tol, grad_tol).verdict()
        tol = self.tolerance(tol)
        focus = self._focus_minimum(tol)
        if focus:
            return (
                f"local minimum (PSD: positive definite on {', '.join(focus.names)}, zero "
                f"elsewhere; {self.point.meta.get('flat_argument', 'flat directions unchecked')})"
            )
        return verdict_sentence(self.eigenvalues, tol)

    def _focus_minimum(self, tol: float) -> FocusReport | None:
        """The focus report when it proves a minimum: no negative eigenvalue, the focus block
        positive definite and nothing outside it (the flat directions argued in meta)."""
        focus = self.focus_report(tol)
        if (
            focus
            and self.num_negative(tol) == 0
            and focus.lambda_min > tol
            and focus.outside <= tol
        ):
            return focus
        return None

    def near_stationary(
        self, tol: float | None = None, grad_tol: float | None = None, rtol: float | None = None
    ) -> NearStationary:
        """The Newton step to the critical point of the quadratic model in the non-flat
        directions, the loss there against the model's prediction, and that critical point's
        curvature (notes/landscape_geometry.md §9); `rtol` the model's allowed relative error."""
        tol = self.tolerance(tol)
        check_grad_tol(grad_tol)
        rtol = check_rtol(rtol)
        self._require_finite("near_stationary")
        key = (tol, grad_tol, rtol)
        if key not in self._near:
            eigen = (self.eigenvalues, self.eigenvectors)
            self._near[key] = near_stationary(
                self.point, self.matrix, eigen, self.gradient, tol, grad_tol, rtol
            )
        return self._near[key]

    def focus_report(self, tol: float | None = None) -> FocusReport | None:
        """The focus block's spectrum and the largest |entry| outside it (None without
        `meta["focus_blocks"]`)."""
        check_tol(tol)
        return self._focus

    @functools.cached_property
    def _focus(self) -> FocusReport | None:
        """`focus_report`'s numbers, computed once (they do not depend on the tolerance)."""
        names = self.point.meta.get("focus_blocks")
        if not names:
            return None
        inside = block_indices(self.names, list(names))
        outside = np.setdiff1d(np.arange(self.matrix.shape[0]), inside)
        block = self.matrix[np.ix_(inside, inside)]
        finite = bool(np.all(np.isfinite(block)))
        eigenvalues = (
            np.linalg.eigvalsh(block) if finite else np.full(inside.size, np.nan, self.matrix.dtype)
        )
        rows = self.matrix[outside]
        rest = (
            (np.abs(rows).max() if np.all(np.isfinite(rows)) else np.nan) if outside.size else 0.0
        )
        return FocusReport(self.point, list(names), eigenvalues, float(rest), finite)

    def summary(self, tol: float | None = None, grad_tol: float | None = None) -> dict[str, Any]:
        """One row: the point, D, dtype, kind, whether the point is stationary ("exact", "near"
        with its critical point `critical_distance` away, or "no"), loss, gradient norm, the
        extreme eigenvalues, the negative, zero and positive counts at the tolerance."""
        kind = self.kind(tol, grad_tol)
        near = (
            None
            if not self.finite or self._stationary(grad_tol)
            else self.near_stationary(tol, grad_tol)
        )
        stationary = "exact" if near is None else ("near" if near.trusted else "no")
        tol = self.tolerance(tol)
        finite_matrix = bool(np.all(np.isfinite(self.matrix)))
        negative, zero, positive = (
            counts(self.eigenvalues, tol) if finite_matrix else (np.nan, np.nan, np.nan)
        )
        return point_row(
            self.point,
            self.matrix.shape[0],
            self.matrix.dtype,
            kind=kind.value,
            stationary=stationary if self.finite else "non-finite",
            critical_distance=0.0 if near is None else near.distance,
            loss=self.gradient.loss,
            grad_norm=self.gradient.norm,
            lambda_min=self.lambda_min,
            lambda_max=self.lambda_max,
            num_negative=negative,
            num_zero=zero,
            num_positive=positive,
            tol=tol,
            finite=self.finite,
        )

    def describe(self, tol: float | None = None, grad_tol: float | None = None) -> str:
        """Loss, gradient norm, per-block eigenvalues and norms, spectrum, the near-stationary
        check where |g| > grad_tol, verdict and prediction."""
        tol = self.tolerance(tol)
        check_grad_tol(grad_tol)
        width = name_width(self.names)
        lines = header_lines("Hessian", self.gradient, self.matrix.dtype)
        lines += [
            "",
            "diagonal blocks",
            f"  {'name':<{width}}{'shape':<14}{'λ_min':>13}{'λ_max':>13}{'‖·‖_F':>13}",
        ]
        for leaf, s, shape in self.names:
            block, extremes = self.matrix[s, s], self._block_extremes[leaf]
            if extremes is None:
                lines.append(
                    f"  {leaf:<{width}}{str(shape):<14}{'non-finite':>13}{'':>13}"
                    f"{np.linalg.norm(block):>13.5g}"
                )
                continue
            lines.append(
                f"  {leaf:<{width}}{str(shape):<14}{extremes[0]:>13.5g}"
                f"{extremes[1]:>13.5g}{np.linalg.norm(block):>13.5g}"
            )
        if not self.finite:
            lines += [""] + nonfinite_lines(self.gradient, self.nonfinite_blocks())
            lines += [
                "",
                (
                    NO_SPECTRUM
                    if not np.all(np.isfinite(self.matrix))
                    else "the Hessian is finite but the loss or gradient is not, so no "
                    "curvature verdict is given"
                )
                + ".",
            ]
            lines += [""] + verdict_lines(self.verdict(), self.point)
            return "\n".join(lines)
        coupled = [
            (a, b, np.linalg.norm(self.matrix[sa, sb]))
            for (a, sa, _), (b, sb, _) in itertools.combinations(self.names, 2)
        ]
        coupled = [(a, b, norm) for a, b, norm in coupled if norm > tol]
        lines += ["", "off-diagonal blocks with ‖·‖_F > tol"]
        lines += [f"  {a} × {b}: {norm:.5g}" for a, b, norm in coupled] or ["  none"]
        focus = self.focus_report(tol)
        if focus:
            lines += [
                "",
                f"focus block ({', '.join(focus.names)})",
                f"  eigenvalues  {format_numbers(focus.eigenvalues)}",
            ]
            if "focus_prediction" in self.point.meta:
                lines.append(
                    f"  predicted    {format_numbers(self.point.meta['focus_prediction'])}"
                )
            lines.append(
                f"  max |H| outside the focus block (rows and columns): {focus.outside:.3g}"
            )
        lines += [""] + spectrum_lines(self.eigenvalues, tol, "spectrum")
        if not self._stationary(grad_tol):
            lines += [""] + self.near_stationary(tol, grad_tol).describe().splitlines()
        lines += [""] + verdict_lines(self.verdict(tol, grad_tol), self.point)
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (
            f"Hessian({self.point.name!r}, D={self.matrix.shape[0]}, dtype={self.matrix.dtype}, "
            f"kind={self.kind().value!r})"
        )


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class FocusReport:
    """The spectrum of a Hessian's focus block (`meta["focus_blocks"]`, e.g. the alpha block of
    Thm 2) and the largest |entry| in its other rows and columns. `eigenvalues` are NaN when the
    block holds a non-finite entry (`finite` False); `outside` is NaN when a row outside it does."""

    point: Point
    names: list[str]
    eigenvalues: np.ndarray
    outside: float
    finite: bool

    @property
    def lambda_min(self) -> float:
        return float(self.eigenvalues[0])

    @property
    def lambda_max(self) -> float:
        return float(self.eigenvalues[-1])

    def describe(self) -> str:
        return (
            f"focus block ({', '.join(self.names)}) at {self.point.name or '<unnamed point>'}: "
            f"eigenvalues {format_numbers(self.eigenvalues)}; max |H| outside {self.outside:.3g}"
        )

    def summary(self) -> dict[str, Any]:
        return point_row(
            self.point,
            self.eigenvalues.size,
            self.eigenvalues.dtype,
            focus="+".join(self.names),
            lambda_min=self.lambda_min,
            lambda_max=self.lambda_max,
            outside=self.outside,
            finite=self.finite,
        )

    def __repr__(self) -> str:
        return f"FocusReport({'+'.join(self.names)}, λ_min={self.lambda_min:.4g})"


@overload
def hessian_at(
    point: Point,
    method: Literal["dense"] = "dense",
    *,
    num_iters: int = 100,
    key: jax.Array | None = None,
    max_dense_dim: int = 6000,
    columns_per_batch: int | None = None,
    progress: Callable[[str], None] | None = print,
) -> Hessian: ...


@overload
def hessian_at(
    point: Point,
    method: Literal["lanczos"],
    *,
    num_iters: int = 100,
    key: jax.Array | None = None,
    max_dense_dim: int = 6000,
    columns_per_batch: int | None = None,
    progress: Callable[[str], None] | None = print,
) -> Spectrum: ...


@overload
def hessian_at(
    point: Sequence[Point],
    method: Literal["dense"] = "dense",
    *,
    num_iters: int = 100,
    key: jax.Array | None = None,
    max_dense_dim: int = 6000,
    columns_per_batch: int | None = None,
    progress: Callable[[str], None] | None = print,
) -> list[Hessian]: ...


@overload
def hessian_at(
    point: PointOrPoints,
    method: str,
    *,
    num_iters: int = 100,
    key: jax.Array | None = None,
    max_dense_dim: int = 6000,
    columns_per_batch: int | None = None,
    progress: Callable[[str], None] | None = print,
) -> Any: ...


def hessian_at(
    point: PointOrPoints,
    method: str = "dense",
    *,
    num_iters: int = 100,
    key: jax.Array | None = None,
    max_dense_dim: int = 6000,
    columns_per_batch: int | None = None,
    progress: Callable[[str], None] | None = print,
) -> Any:
    """The exact Hessian of the population loss at `point` (or at each of a list of points of
    one model, from one compiled, vmapped call; compiled once per model either way).

    method="dense": the (D, D) matrix in the params' dtype, for D <= max_dense_dim; its columns are
    computed `columns_per_batch` at a time (default: `default_columns_per_batch`).
    method="lanczos": a `Spectrum` from `num_iters` Lanczos steps (see `lanczos_spectrum`).
    Above D = CHUNKED_ABOVE a single point's matrix is formed in chunks, with its memory first
    and a progress line with the time left after each chunk (`progress=None`: silent).
    """
    points, listed = as_points(point, "hessian_at")
    if not isinstance(method, str) or method not in ("dense", "lanczos"):
        raise ValueError(f"method={method!r}: must be 'dense' or 'lanczos'.")
    _checks.check_int("num_iters", num_iters, 1, "the number of Lanczos steps")
    _checks.check_key("key", key)
    _checks.check_int(
        "max_dense_dim", max_dense_dim, 1, "the largest D for which a dense D x D Hessian is formed"
    )
    if columns_per_batch is None:
        columns_per_batch = default_columns_per_batch(points[0])
    _checks.check_int("columns_per_batch", columns_per_batch, 1, "Hessian columns computed at once")
    if method == "lanczos":
        spectra = [lanczos_spectrum(p, num_iters, key) for p in points]
        return spectra if listed else spectra[0]
    _check_dense_size(points, max_dense_dim, columns_per_batch)
    if not listed and points[0].num_params > CHUNKED_ABOVE:
        return _hessian_in_chunks(points[0], columns_per_batch, progress)
    objective, params, inputs = _program_arguments(points, listed)
    batching = (columns_per_batch, population_parts(points[0]))
    loss, grad, matrix = _dense_hessian(objective, params, inputs, batching, listed)
    if not listed:
        return _hessian(points[0], loss, grad, matrix)
    return [_hessian(p, loss[i], grad[i], matrix[i]) for i, p in enumerate(points)]


def _dense_hessian(
    objective: Callable,
    params: PyTree,
    inputs: PyTree,
    batching: tuple[int, compiled.Parts],
    listed: bool,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """`compiled.hessian`, run once more on a fresh executable when its matrix alone is
    non-finite: on XLA:CPU about 1 compile in 100 of a batched-column Hessian program gave an
    executable that returns NaN on every call while a fresh one of the same HLO is finite
    (docs/design/curvature.md, "A rare bad executable"). Says so in a warning."""
    columns_per_batch, parts = batching
    loss, grad, matrix = compiled.hessian(
        objective, params, inputs, columns_per_batch, listed, parts
    )
    if not (_all_finite(loss, grad) and not _all_finite(matrix)):
        return loss, grad, matrix
    compiled.hessian.clear_cache()  # type: ignore[attr-defined]  # jitted functions have it
    loss, grad, matrix = compiled.hessian(
        objective, params, inputs, columns_per_batch, listed, parts
    )
    again = "finite" if _all_finite(matrix) else "non-finite"
    warnings.warn(
        "hessian_at: the compiled Hessian program returned non-finite entries at a finite loss "
        f"and gradient; a fresh compile of it gave {again} ones (a rare XLA:CPU fault, "
        "docs/design/curvature.md: 'A rare bad executable').",
        RuntimeWarning,
        stacklevel=3,
    )
    return loss, grad, matrix


def _all_finite(*arrays: jax.Array) -> bool:
    return all(bool(np.all(np.isfinite(np.asarray(a)))) for a in arrays)


COLUMN_BYTES = 16 * 2**20  # memory traffic of one batch of Hessian columns, about a cache's


def default_columns_per_batch(point: Point) -> int:
    """Hessian columns per vmapped batch: as many as keep a batch's memory traffic (XLA's cost
    estimate of one loss evaluation, a column's share) under COLUMN_BYTES, at least 1 and at most
    256. A population loss over many sequences gets 1 (theta_pi at N = 10 moves ~50 MB a loss:
    one column at a time ran 237 columns in 1.5 s, 256 at once in 5.0 s); a small loss gets more."""
    return int(min(256, max(1, COLUMN_BYTES // max(_bytes_moved(point), 1.0))))


def _bytes_moved(point: Point) -> float:
    """XLA's estimate of the bytes one loss evaluation of the point reads and writes."""
    objective, inputs = point.shared
    cost = jax.jit(objective).lower(point.params, inputs).cost_analysis() or {}
    cost = cost[0] if isinstance(cost, list) else cost  # older jax: one dict per program
    return float(cost.get("bytes accessed", 0.0))


def population_parts(point: Point) -> compiled.Parts:
    """(slices, mean): where `point.meta["population"]` says the loss is the "mean" (or "sum")
    of its values on equal slices of the leading axis of every input leaf, the fewest such
    slices whose loss moves at most COLUMN_BYTES, so that a large Hessian's columns are formed
    slice by slice in cache ((1, True): the whole population at once). On the n-gram Fig. 3
    point (4096 sequences, 200 MB a loss) 16 slices took a column from 38 ms to 1.2 ms x 16."""
    rule, leaves = point.meta.get("population"), jax.tree.leaves(point.shared[1])
    sizes = {np.shape(x)[0] if np.ndim(x) else 0 for x in leaves}
    if rule not in ("mean", "sum") or len(sizes) != 1 or 0 in sizes:
        return 1, True
    size, wanted = sizes.pop(), int(np.ceil(_bytes_moved(point) / COLUMN_BYTES))
    return next(d for d in range(max(1, wanted), size + 1) if size % d == 0), rule == "mean"


CHUNKED_ABOVE = 1024  # a dense Hessian of more parameters is formed in chunks, with progress


def _hessian_in_chunks(
    point: Point, columns_per_batch: int, progress: Callable[[str], None] | None
) -> Hessian:
    """A large dense Hessian chunk by chunk (one compiled program for every chunk, each device of
    the process computing its own chunk at once), with an estimate of memory at the start and a
    progress line with the time left after each round of chunks."""
    dim, devices, parts = point.num_params, jax.local_devices(), population_parts(point)
    count = max(columns_per_batch, -(-dim // 10))  # about ten chunks
    itemsize = np.dtype(ravel_pytree(point.params)[0].dtype).itemsize
    if progress:
        sliced = f", over {parts[0]} slices of the population" if parts[0] > 1 else ""
        progress(
            f"dense Hessian of {point.name or 'the point'}: D = {dim}, "
            f"{memory.format_bytes(dim * dim * itemsize)} for the matrix, {dim} "
            f"Hessian-vector products in chunks of {count} on {len(devices)} device(s){sliced}"
        )
    start, chunks = time.perf_counter(), []
    for first in range(0, dim, count * len(devices)):
        chunks.append(_chunks_from(point, first, count, (columns_per_batch, parts), devices))
        done, seconds = min(first + count * len(devices), dim), time.perf_counter() - start
        if progress:
            left = seconds / done * (dim - done)
            progress(f"  columns {done}/{dim} | {seconds:.1f} s | about {left:.0f} s left")
    gradient = gradient_at(point)
    matrix = np.concatenate(chunks)[:dim]
    return Hessian(0.5 * (matrix + matrix.T), param_names(point.params), point, gradient)


def _chunks_from(
    point: Point,
    first: int,
    count: int,
    batching: tuple[int, compiled.Parts],
    devices: list[jax.Device],
) -> np.ndarray:
    """Hessian columns first .. first + count * len(devices) - 1 ((count * devices, D)): one
    chunk on each device (`compiled.hessian_columns_on_devices`), or one chunk on one device;
    `batching`: (columns per vmapped batch, `population_parts`)."""
    objective, inputs = point.shared
    columns_per_batch, parts = batching
    if len(devices) == 1:
        columns = compiled.hessian_columns(
            objective, point.params, inputs, jnp.int32(first), columns_per_batch, count, parts
        )
        return np.asarray(columns)
    mesh = Mesh(np.asarray(devices), ("columns",))
    firsts = jnp.asarray(first + count * np.arange(len(devices)), jnp.int32)
    columns = compiled.hessian_columns_on_devices(
        objective, point.params, inputs, firsts, columns_per_batch, count, mesh, parts
    )
    return np.asarray(columns).reshape(-1, point.num_params)


LANCZOS_BLOCKS_ABOVE = 512  # a larger diagonal block's extremes come from ARPACK, not eigvalsh


def block_extremes(block: np.ndarray) -> tuple[float, float]:
    """(λ_min, λ_max) of a symmetric block: eigvalsh up to LANCZOS_BLOCKS_ABOVE rows; above,
    ARPACK's Lanczos to machine precision (tol=0), about 5x faster than eigvalsh at 2048 rows
    (the n-gram Fig. 3 model's A1), eigvalsh again should ARPACK not converge."""
    if block.shape[0] <= LANCZOS_BLOCKS_ABOVE:
        values = np.linalg.eigvalsh(block)
        return float(values[0]), float(values[-1])
    # scipy ships no type stubs here; imported where needed (0.8 s): large blocks only
    import scipy.sparse.linalg  # type: ignore[import-untyped]  # no stubs installed

    try:
        low, high = (
            float(scipy.sparse.linalg.eigsh(block, 1, which=w, tol=0, return_eigenvectors=False)[0])
            for w in ("SA", "LA")
        )
    except scipy.sparse.linalg.ArpackNoConvergence:
        values = np.linalg.eigvalsh(block)
        return float(values[0]), float(values[-1])
    return low, high


def _check_dense_size(points: list[Point], max_dense_dim: int, columns_per_batch: int) -> None:
    """Refuse a dense Hessian above max_dense_dim, or one whose matrices would not fit in memory,
    before anything is formed."""
    point, dim = points[0], points[0].num_params
    if dim > max_dense_dim:
        raise ValueError(
            f"{point.name or 'The point'} has D = {dim} parameters, above max_dense_dim = "
            f"{max_dense_dim} for a dense D x D Hessian; use hessian_at(point, "
            f"method='lanczos') for its spectrum (or hvp(point) for products), or raise "
            f"max_dense_dim."
        )
    itemsize = np.dtype(jax.tree.leaves(point.params)[0].dtype).itemsize
    needed = 3 * len(points) * dim * dim * itemsize  # the matrix, its copy to host, H + H^T
    available = memory.available_memory_bytes()
    if needed > available:
        raise MemoryError(
            f"{len(points)} dense Hessian(s) of D = {dim} need about "
            f"{memory.format_bytes(needed)} but {memory.format_bytes(available)} is "
            "available: pass fewer points at once, or use method='lanczos'."
        )


def _hessian(point: Point, loss: jax.Array, grad: jax.Array, matrix: jax.Array) -> Hessian:
    unravel = ravel_pytree(point.params)[1]
    vector = np.asarray(grad)
    gradient = Gradient(point, unravel(grad), vector, param_names(point.params), float(loss))
    dense = np.asarray(matrix)
    return Hessian(0.5 * (dense + dense.T), param_names(point.params), point, gradient)
