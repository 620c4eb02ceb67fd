"""Curvature at a Point: gradient, Hessian-vector products, the dense Hessian, Lanczos spectra.

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
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal, overload

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jax.typing import DTypeLike

from landscape import _checks
from landscape.engine import config as config_lib
from landscape.point import Point, block_names, param_names, params_table
from landscape.probes import compiled
from landscape.typing import PyTree

Names = list[tuple[str, slice, tuple[int, ...]]]
BlockName = str | Iterable[str]  # a block name, or a list of them (a joint block)


def block_indices(names: Names, name: BlockName) -> np.ndarray:
    """Flat indices of the leaves called `name` or lying under `name/`, in leaf order; a list of
    names gives the concatenation of each one's indices."""
    if not isinstance(name, str):
        return np.concatenate([block_indices(names, n) for n in block_names(name, "block")])
    chosen = [
        np.arange(s.start, s.stop)
        for leaf, s, _ in names
        if leaf == name or leaf.startswith(name + "/")
    ]
    if not chosen:
        available = ", ".join(leaf for leaf, _, _ in names)
        raise KeyError(f"no parameter named {name!r}; available: {available}.")
    return np.concatenate(chosen)


NON_FINITE = "non-finite"
STATIONARITY_RULE = "sqrt(eps) max(1, |L|)"
_NO_SPECTRUM = (
    "eigenvalues not computed: a matrix with NaN or inf entries has no meaningful "
    "spectrum, so no curvature verdict is given (look for log(0), sqrt or log of a "
    "negative number, 0/0 or overflow in the loss at these parameters)"
)


def _check_tol(tol: float | None) -> None:
    if tol is not None:
        _checks.check_real(
            "tol", tol, low=0, meaning="an absolute eigenvalue threshold; None for the default"
        )


def _count_nonfinite(values: np.ndarray) -> str:
    nan = int(np.sum(np.isnan(values)))
    inf = int(np.sum(np.isinf(values)))
    return ", ".join(part for part in (f"{nan} NaN" * bool(nan), f"{inf} inf" * bool(inf)) if part)


def _nonfinite_vector_blocks(vector: np.ndarray, names: Names) -> dict[str, str]:
    """{leaf name: "2 NaN, 1 inf"} for the leaves of a flat vector holding non-finite entries."""
    return {
        leaf: _count_nonfinite(vector[s])
        for leaf, s, _ in names
        if not np.all(np.isfinite(vector[s]))
    }


def _nonfinite_matrix_blocks(matrix: np.ndarray, names: Names) -> dict[str, str]:
    """{"a" or "a × b": counts} for the (upper-triangular) blocks holding non-finite entries."""
    out = {}
    for i, (a, sa, _) in enumerate(names):
        for b, sb, _ in names[i:]:
            block = matrix[sa, sb]
            if not np.all(np.isfinite(block)):
                out[a if a == b else f"{a} × {b}"] = _count_nonfinite(block)
    return out


def _nonfinite_lines(
    gradient: Gradient, matrix_blocks: dict[str, str] | None = None, matrix_label: str = "Hessian"
) -> list[str]:
    """Where the non-finite numbers are: the loss, the gradient's blocks, the matrix's blocks."""
    lines = ["non-finite entries (NaN or inf)"]
    if not np.isfinite(gradient.loss):
        lines.append(f"  loss: {gradient.loss}")
    for leaf, counts in gradient.nonfinite_blocks().items():
        lines.append(f"  gradient block {leaf}: {counts}")
    for block, counts in (matrix_blocks or {}).items():
        lines.append(f"  {matrix_label} block {block}: {counts}")
    return lines


def _default_tol(eigenvalues: np.ndarray, dtype: DTypeLike) -> float:
    relative = max(1e-9, 100 * float(np.finfo(dtype).eps))
    return relative * float(np.max(np.abs(eigenvalues), initial=0.0))


def _verdict(eigenvalues: np.ndarray, tol: float) -> str:
    negative = int(np.sum(eigenvalues < -tol))
    positive = int(np.sum(eigenvalues > tol))
    zero = eigenvalues.size - negative - positive
    zero_modes = f"{zero} zero mode{'s' * (zero != 1)}"
    if negative and positive:
        return f"saddle ({negative} negative eigenvalue{'s' * (negative != 1)})"
    if negative:
        if zero:
            return f"degenerate maximum candidate (negative semi-definite with {zero_modes})"
        return "local maximum (negative definite)"
    if zero:
        return f"degenerate minimum candidate (positive semi-definite with {zero_modes})"
    return "local minimum (positive definite)"


def _not_stationary(gradient: Gradient) -> str:
    return (
        f"not stationary (|g| = {gradient.norm:.3e} > {STATIONARITY_RULE} = "
        f"{gradient.stationarity_tol():.3g}): no curvature verdict at a point that is not critical"
    )


def _name_width(names: Names) -> int:
    return max([len("name")] + [len(leaf) for leaf, _, _ in names]) + 2


def _numbers(values: Iterable[float]) -> str:
    return "  ".join(f"{v: .6g}" for v in values)


def _header(kind: str, gradient: Gradient, dtype: DTypeLike) -> list[str]:
    point = gradient.point
    loss_line = f"  loss           {gradient.loss:.12g}"
    expected = point.meta.get("expected_loss")
    if expected is not None:
        loss_line += f"   (expected {expected:.12g}, difference {gradient.loss - expected:.2e})"
    return [
        f"{kind} at {point.name or '<unnamed point>'}  (D = {gradient.vector.size}, {dtype})",
        loss_line,
        f"  gradient norm  {gradient.norm:.3e}",
        "",
        *("  " + line for line in params_table(point.params).splitlines()),
    ]


def _spectrum_lines(values: np.ndarray, tol: float, label: str) -> list[str]:
    negative = int(np.sum(values < -tol))
    positive = int(np.sum(values > tol))
    lines = [
        f"{label}: min {values[0]:.6g}, max {values[-1]:.6g}; negative {negative}, "
        f"zero {values.size - negative - positive}, positive {positive}  "
        f"(|λ| <= tol = {tol:.3g} counts as zero)"
    ]
    if values.size <= 10:
        return lines + [f"  all       {_numbers(values)}"]
    return lines + [f"  smallest  {_numbers(values[:5])}", f"  largest   {_numbers(values[-5:])}"]


def _verdict_lines(measured: str, point: Point) -> list[str]:
    lines = [f"verdict (measured)   {measured}"]
    if "prediction" in point.meta:
        lines.append(f"prediction (theory)  {point.meta['prediction']}")
    return lines


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class Gradient:
    """The gradient of the population loss at a point, labelled by parameter names."""

    point: Point
    tree: PyTree
    vector: np.ndarray
    names: Names
    loss: float

    @property
    def norm(self) -> float:
        return float(np.linalg.norm(self.vector))

    @property
    def finite(self) -> bool:
        """The loss and every gradient entry are finite numbers (no NaN, no inf)."""
        return bool(np.isfinite(self.loss) and np.all(np.isfinite(self.vector)))

    def nonfinite_blocks(self) -> dict[str, str]:
        """{block name: "n NaN, m inf"} for the blocks holding non-finite entries."""
        return _nonfinite_vector_blocks(self.vector, self.names)

    def verdict(self, tol: float | None = None) -> str:
        """ "non-finite" if the loss or an entry is NaN or inf; else, with `tol`, whether the
        gradient norm is <= tol ("stationary") or not; without `tol`, the norm."""
        _check_tol(tol)
        if not self.finite:
            return NON_FINITE
        bound = f"tol = {tol:.3g}" if tol is not None else STATIONARITY_RULE
        tol = self.stationarity_tol() if tol is None else tol
        if self.norm <= tol:
            return f"stationary (|g| = {self.norm:.3e} <= {bound} = {tol:.3g})"
        return f"not stationary (|g| = {self.norm:.3e} > {bound} = {tol:.3g})"

    def stationarity_tol(self) -> float:
        """The default bound on |g| for a stationary point: sqrt(eps) * max(1, |L|) in the
        gradient's dtype (1.5e-8 for float64, 3.5e-4 for float32, for a loss of order 1)."""
        eps = float(np.finfo(self.vector.dtype).eps)
        return float(np.sqrt(eps) * max(1.0, abs(self.loss)))

    @property
    def stationary(self) -> bool:
        """|g| within `stationarity_tol()` (and every number finite)."""
        return self.finite and self.norm <= self.stationarity_tol()

    def block(self, name: BlockName) -> np.ndarray:
        return self.vector[block_indices(self.names, name)]

    def block_norms(self) -> dict[str, float]:
        return {leaf: float(np.linalg.norm(self.vector[s])) for leaf, s, _ in self.names}

    def describe(self) -> str:
        width = _name_width(self.names)
        lines = _header("Gradient", self, self.vector.dtype)
        lines += ["", f"  {'name':<{width}}{'shape':<14}{'norm':>12}"]
        for leaf, s, shape in self.names:
            norm = float(np.linalg.norm(self.vector[s]))
            lines.append(f"  {leaf:<{width}}{str(shape):<14}{norm:>12.4e}")
        if not self.finite:
            lines += [""] + _nonfinite_lines(self)
            lines += [""] + _verdict_lines(self.verdict(), self.point)
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Gradient({self.point.name!r}, D={self.vector.size}, norm={self.norm:.3e})"


def _check_point(point: object, caller: str) -> Point:
    """TypeError unless a Point whose params are floating-point arrays (at least one entry)."""
    point = _checks.require_point(point, caller)
    leaves = jax.tree_util.tree_leaves_with_path(point.params)
    for path, leaf in leaves:
        dtype = getattr(leaf, "dtype", None)
        dtype = np.asarray(leaf).dtype if dtype is None else dtype
        if not jnp.issubdtype(dtype, jnp.floating):
            name = jax.tree_util.keystr(path, simple=True, separator="/") or "params"
            raise TypeError(
                f"{caller}: parameter {name!r} has dtype {dtype}; every parameter "
                "must be a floating-point array (the loss is differentiated in it)."
            )
    if sum(int(np.size(leaf)) for _, leaf in leaves) == 0:
        raise ValueError(
            f"{caller}: {point.name or 'the point'} has no parameters (its params "
            "hold no array entries), so there is nothing to differentiate."
        )
    return point


PointOrPoints = Point | Sequence[Point]


def as_points(points: object, caller: str) -> tuple[list[Point], bool]:
    """(the points, whether a list was given): one Point, or a non-empty list of one model's."""
    if not isinstance(points, list | tuple):
        return [_check_point(points, caller)], False
    if not points:
        raise ValueError(f"{caller} got an empty list of points: give a Point or a list of them.")
    checked = [_check_point(p, caller) for p in points]
    _check_one_model(checked, caller)
    return checked, True


def _signature(tree: PyTree) -> tuple:
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    return treedef, tuple((np.shape(x), jnp.result_type(x)) for x in leaves)


def _check_one_model(points: list[Point], caller: str) -> None:
    """A list is one compiled call: its points share the objective and every shape."""
    objective, inputs = points[0].shared
    first = (_signature(points[0].params), _signature(inputs))
    for i, point in enumerate(points[1:], start=1):
        other, other_inputs = point.shared
        if other is not objective:
            what = "a different loss (objective)"
        elif _signature(point.params) != first[0]:
            what = "parameters of other names or shapes"
        elif _signature(other_inputs) != first[1]:
            what = "inputs of other shapes"
        else:
            continue
        raise ValueError(
            f"{caller}: the points of a list must be points of one model; point {i} "
            f"({point.name or 'unnamed'}) has {what} than point 0 ({points[0].name or 'unnamed'}). "
            "Call it once per model."
        )


def _program_arguments(points: list[Point], listed: bool) -> tuple[Any, PyTree, PyTree]:
    if listed:
        return compiled.stack(points)
    objective, inputs = points[0].shared
    return objective, points[0].params, inputs


def _row(tree: PyTree, i: int) -> PyTree:
    return jax.tree.map(lambda x: x[i], tree)


@overload
def gradient_at(point: Point) -> Gradient: ...


@overload
def gradient_at(point: Sequence[Point]) -> list[Gradient]: ...


def gradient_at(point: PointOrPoints) -> Gradient | list[Gradient]:
    """The exact gradient of the point's loss at its params; a list of points of one model gives
    a list, from one compiled call."""
    points, listed = as_points(point, "gradient_at")
    objective, params, inputs = _program_arguments(points, listed)
    loss, tree = compiled.value_and_grad(objective, params, inputs, batched=listed)
    if not listed:
        return _gradient(points[0], tree, loss)
    return [_gradient(p, _row(tree, i), loss[i]) for i, p in enumerate(points)]


def _gradient(point: Point, tree: PyTree, loss: jax.Array) -> Gradient:
    vector = np.asarray(ravel_pytree(tree)[0])
    return Gradient(point, tree, vector, param_names(point.params), float(loss))


def hvp(point: Point) -> Callable[[PyTree], PyTree]:
    """v -> H v at the point (forward-over-reverse, compiled once per model); v is a pytree
    shaped like the params."""
    _check_point(point, "hvp")
    objective, inputs = point.shared
    return functools.partial(compiled.hvp, objective, point.params, inputs, batched=False)


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class Hessian:
    """The dense Hessian at a point (symmetrised), with named blocks and a cached spectrum."""

    matrix: np.ndarray
    names: Names
    point: Point
    gradient: Gradient

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
        return _nonfinite_matrix_blocks(self.matrix, self.names)

    @functools.cached_property
    def _eigh(self) -> tuple[np.ndarray, np.ndarray]:
        if not np.all(np.isfinite(self.matrix)):  # eigh on NaN/inf raises or returns garbage
            dim = self.matrix.shape[0]
            return (
                np.full(dim, np.nan, self.matrix.dtype),
                np.full((dim, dim), np.nan, self.matrix.dtype),
            )
        return np.linalg.eigh(self.matrix)

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
        _check_tol(tol)
        return _default_tol(self.eigenvalues, self.matrix.dtype) if tol is None else tol

    def num_negative(self, tol: float | None = None) -> int:
        self._require_finite("num_negative")
        return int(np.sum(self.eigenvalues < -self.tolerance(tol)))

    def num_zero(self, tol: float | None = None) -> int:
        self._require_finite("num_zero")
        return int(np.sum(np.abs(self.eigenvalues) <= self.tolerance(tol)))

    def verdict(self, tol: float | None = None) -> str:
        """A curvature verdict from the spectrum; "non-finite", or "not stationary" when the
        gradient is not small (`Gradient.stationarity_tol`), before any (module docstring)."""
        tol = self.tolerance(tol)
        if not self.finite:
            return NON_FINITE
        if not self.gradient.stationary:
            return _not_stationary(self.gradient)
        focus = self.focus_report(tol)
        if focus and self.num_negative(tol) == 0 and focus["min"] > tol and focus["outside"] <= tol:
            return (
                f"local minimum (PSD: positive definite on {', '.join(focus['names'])}, zero "
                f"elsewhere; {self.point.meta.get('flat_argument', 'flat directions unchecked')})"
            )
        return _verdict(self.eigenvalues, tol)

    def focus_report(self, tol: float | None = None) -> dict | None:
        """Spectrum of the focus block and the largest |entry| outside it (None without focus).

        "finite" says whether the focus block's entries are all finite; if not, its eigenvalues
        are NaN (not computed); "outside" is NaN when an entry outside the block is non-finite.
        """
        _check_tol(tol)
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
        return {
            "names": list(names),
            "eigenvalues": eigenvalues,
            "min": eigenvalues[0],
            "outside": float(rest),
            "finite": finite,
        }

    def describe(self, tol: float | None = None) -> str:
        """Loss, gradient norm, per-block eigenvalues and norms, spectrum, verdict and
        prediction."""
        tol = self.tolerance(tol)
        width = _name_width(self.names)
        lines = _header("Hessian", self.gradient, self.matrix.dtype)
        lines += [
            "",
            "diagonal blocks",
            f"  {'name':<{width}}{'shape':<14}{'λ_min':>13}{'λ_max':>13}{'‖·‖_F':>13}",
        ]
        for leaf, s, shape in self.names:
            block = self.matrix[s, s]
            if not np.all(np.isfinite(block)):
                lines.append(
                    f"  {leaf:<{width}}{str(shape):<14}{'non-finite':>13}{'':>13}"
                    f"{np.linalg.norm(block):>13.5g}"
                )
                continue
            block_eigenvalues = np.linalg.eigvalsh(block)
            lines.append(
                f"  {leaf:<{width}}{str(shape):<14}{block_eigenvalues[0]:>13.5g}"
                f"{block_eigenvalues[-1]:>13.5g}{np.linalg.norm(block):>13.5g}"
            )
        if not self.finite:
            lines += [""] + _nonfinite_lines(self.gradient, self.nonfinite_blocks())
            lines += [
                "",
                (
                    _NO_SPECTRUM
                    if not np.all(np.isfinite(self.matrix))
                    else "the Hessian is finite but the loss or gradient is not, so no "
                    "curvature verdict is given"
                )
                + ".",
            ]
            lines += [""] + _verdict_lines(self.verdict(), self.point)
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
                f"focus block ({', '.join(focus['names'])})",
                f"  eigenvalues  {_numbers(focus['eigenvalues'])}",
            ]
            if "focus_prediction" in self.point.meta:
                lines.append(f"  predicted    {_numbers(self.point.meta['focus_prediction'])}")
            lines.append(
                f"  max |H| outside the focus block (rows and columns): {focus['outside']:.3g}"
            )
        lines += [""] + _spectrum_lines(self.eigenvalues, tol, "spectrum")
        lines += [""] + _verdict_lines(self.verdict(tol), self.point)
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Hessian({self.point.name!r}, D={self.matrix.shape[0]}, dtype={self.matrix.dtype})"


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
    loss, grad, matrix = _dense_hessian(objective, params, inputs, columns_per_batch, listed)
    if not listed:
        return _hessian(points[0], loss, grad, matrix)
    return [_hessian(p, loss[i], grad[i], matrix[i]) for i, p in enumerate(points)]


def _dense_hessian(
    objective: Callable, params: PyTree, inputs: PyTree, columns_per_batch: int, listed: bool
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """`compiled.hessian`, run once more on a fresh executable when its matrix alone is
    non-finite: on XLA:CPU about 1 compile in 100 of a batched-column Hessian program gave an
    executable that returns NaN on every call while a fresh one of the same HLO is finite
    (docs/design/curvature.md, "A rare bad executable"). Says so in a warning."""
    loss, grad, matrix = compiled.hessian(objective, params, inputs, columns_per_batch, listed)
    if not (_all_finite(loss, grad) and not _all_finite(matrix)):
        return loss, grad, matrix
    compiled.hessian.clear_cache()  # type: ignore[attr-defined]  # jitted functions have it
    loss, grad, matrix = compiled.hessian(objective, params, inputs, columns_per_batch, listed)
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
    objective, inputs = point.shared
    cost = jax.jit(objective).lower(point.params, inputs).cost_analysis() or {}
    cost = cost[0] if isinstance(cost, list) else cost  # older jax: one dict per program
    moved = float(cost.get("bytes accessed", 0.0))
    return int(min(256, max(1, COLUMN_BYTES // max(moved, 1.0))))


CHUNKED_ABOVE = 1024  # a dense Hessian of more parameters is formed in chunks, with progress


def _hessian_in_chunks(
    point: Point, columns_per_batch: int, progress: Callable[[str], None] | None
) -> Hessian:
    """A large dense Hessian chunk by chunk (one compiled program for every chunk), with an
    estimate of memory at the start and a progress line with the time left after each chunk."""
    objective, inputs = point.shared
    dim = point.num_params
    count = max(columns_per_batch, -(-dim // 10))  # about ten progress lines
    itemsize = np.dtype(ravel_pytree(point.params)[0].dtype).itemsize
    if progress:
        progress(
            f"dense Hessian of {point.name or 'the point'}: D = {dim}, "
            f"{config_lib.format_bytes(dim * dim * itemsize)} for the matrix, {dim} "
            f"Hessian-vector products in chunks of {count}"
        )
    start, chunks = time.perf_counter(), []
    for first in range(0, dim, count):
        chunks.append(
            np.asarray(
                compiled.hessian_columns(
                    objective, point.params, inputs, jnp.int32(first), columns_per_batch, count
                )
            )
        )
        done, seconds = min(first + count, dim), time.perf_counter() - start
        if progress:
            left = seconds / done * (dim - done)
            progress(f"  columns {done}/{dim} | {seconds:.1f} s | about {left:.0f} s left")
    gradient = gradient_at(point)
    matrix = np.concatenate(chunks)[:dim]
    return Hessian(0.5 * (matrix + matrix.T), param_names(point.params), point, gradient)


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
    available = config_lib.available_memory_bytes()
    if needed > available:
        raise MemoryError(
            f"{len(points)} dense Hessian(s) of D = {dim} need about "
            f"{config_lib.format_bytes(needed)} but {config_lib.format_bytes(available)} is "
            "available: pass fewer points at once, or use method='lanczos'."
        )


def _hessian(point: Point, loss: jax.Array, grad: jax.Array, matrix: jax.Array) -> Hessian:
    unravel = ravel_pytree(point.params)[1]
    vector = np.asarray(grad)
    gradient = Gradient(point, unravel(grad), vector, param_names(point.params), float(loss))
    dense = np.asarray(matrix)
    return Hessian(0.5 * (dense + dense.T), param_names(point.params), point, gradient)


LanczosState = tuple[jax.Array, jax.Array, jax.Array]  # (basis V, alphas, betas)


def lanczos(
    matvec: Callable[[jax.Array], jax.Array],
    dim: int,
    num_iters: int,
    key: jax.Array,
    dtype: DTypeLike,
) -> tuple[jax.Array, jax.Array]:
    """`lanczos_from` a random start vector drawn from `key` (dim and num_iters static)."""
    if not 1 <= num_iters <= dim:
        raise ValueError(f"num_iters = {num_iters}: must be between 1 and dim = {dim}.")
    start_key, restart_key = jax.random.split(key)
    start = jax.random.normal(start_key, (dim,), dtype)
    return lanczos_from(matvec, start, num_iters, restart_key)


def lanczos_from(
    matvec: Callable[[jax.Array], jax.Array], start: jax.Array, num_iters: int, key: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Lanczos tridiagonalisation of a symmetric operator from `start` (any non-zero vector),
    with full reorthogonalisation.

    Returns T's diagonal `alphas` (num_iters,) and off-diagonal `betas` (num_iters - 1,), where
    T = V^T A V and V's orthonormal columns span the Krylov space of `start` (the first column).
    If the Krylov space is exhausted early, the next vector is a fresh random one (from `key`)
    orthogonal to V and that beta is 0, so T's eigenvalues stay eigenvalues of A and Gauss
    quadrature weights stay exact. Jittable and vmappable with `num_iters` static; keeps V in
    memory (num_iters * dim numbers).
    """
    dim, dtype = start.shape[0], start.dtype
    dot = functools.partial(jnp.matmul, precision=jax.lax.Precision.HIGHEST)
    eps = jnp.finfo(dtype).eps

    def orthogonalise(basis: jax.Array, w: jax.Array) -> jax.Array:
        w = w - dot(basis.T, dot(basis, w))  # twice: one pass loses orthogonality in rounding
        return w - dot(basis.T, dot(basis, w))

    def fresh_direction(basis: jax.Array, i: jax.Array) -> jax.Array:
        w = orthogonalise(basis, jax.random.normal(jax.random.fold_in(key, i), (dim,), dtype))
        return w / jnp.linalg.norm(w)

    def step(i: jax.Array, state: LanczosState) -> LanczosState:
        basis, alphas, betas = state
        v = basis[i]
        av = matvec(v)
        w = orthogonalise(basis, av)  # rows after i are still zero
        beta = jnp.linalg.norm(w)
        exhausted = beta <= 100 * eps * jnp.linalg.norm(av)
        next_v = jax.lax.cond(exhausted, fresh_direction, lambda *_: w / beta, basis, i)
        basis = basis.at[i + 1].set(next_v, mode="drop")
        alphas = alphas.at[i].set(dot(v, av))
        betas = betas.at[i].set(jnp.where(exhausted, 0, beta))
        return basis, alphas, betas

    basis = jnp.zeros((num_iters, dim), dtype).at[0].set(start / jnp.linalg.norm(start))
    state = (basis, jnp.zeros(num_iters, dtype), jnp.zeros(num_iters, dtype))
    _, alphas, betas = jax.lax.fori_loop(0, num_iters, step, state)
    return alphas, betas[:-1]


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class Spectrum:
    """Lanczos estimate of the Hessian spectrum at a point.

    `ritz_values` (ascending) lie inside [λ_min, λ_max] and the extreme ones converge first;
    `weights` (squared first components of the Ritz vectors, summing to 1) make the spectral
    density estimate sum_j weights[j] * delta(λ - ritz_values[j]).
    """

    point: Point
    ritz_values: np.ndarray
    weights: np.ndarray
    gradient: Gradient

    @property
    def min(self) -> float:
        return float(self.ritz_values[0])

    @property
    def max(self) -> float:
        return float(self.ritz_values[-1])

    @property
    def finite(self) -> bool:
        """The Ritz values, the gradient and the loss are finite (no NaN, no inf)."""
        return bool(np.all(np.isfinite(self.ritz_values)) and self.gradient.finite)

    def tolerance(self, tol: float | None = None) -> float:
        """`tol` if given, else the default relative tolerance (module docstring)."""
        _check_tol(tol)
        return _default_tol(self.ritz_values, self.ritz_values.dtype) if tol is None else tol

    def verdict(self, tol: float | None = None) -> str:
        """What the Ritz values prove: negative curvature if one is below -tol, else nothing;
        "non-finite" if the Hessian-vector products (or the loss, or the gradient) were NaN/inf."""
        tol = self.tolerance(tol)
        if not self.finite:
            return NON_FINITE
        if not self.gradient.stationary:
            return _not_stationary(self.gradient)
        smallest = f"Lanczos: smallest Ritz value λ_min={self.min:.6g}"
        if self.min < -tol:
            consequence = "saddle" if self.max > tol else "not a minimum"
            return f"{smallest}; negative curvature found → {consequence}"
        return (
            f"{smallest}; no negative Ritz value below -{tol:.3g} found (not a proof of a minimum)"
        )

    def describe(self, tol: float | None = None) -> str:
        tol = self.tolerance(tol)
        lines = _header("Hessian spectrum (Lanczos)", self.gradient, self.ritz_values.dtype)
        lines += [f"  iterations     {self.ritz_values.size}", ""]
        if not self.finite:
            lines += _nonfinite_lines(self.gradient)
            if not np.all(np.isfinite(self.ritz_values)):
                lines.append(
                    "  Hessian-vector products: NaN or inf (the Lanczos tridiagonal "
                    "matrix is non-finite)"
                )
            lines += [
                "",
                "Ritz values not computed: Hessian-vector products with NaN or inf "
                "entries have no meaningful spectrum, so no curvature verdict is given."
                if not np.all(np.isfinite(self.ritz_values))
                else "Ritz values are finite, but the loss or gradient is not, so no curvature "
                "verdict is given.",
            ]
            lines += [""] + _verdict_lines(self.verdict(), self.point)
            return "\n".join(lines)
        lines += _spectrum_lines(self.ritz_values, tol, "Ritz values")
        lines += [""] + _verdict_lines(self.verdict(tol), self.point)
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (
            f"Spectrum({self.point.name!r}, D={self.gradient.vector.size}, "
            f"iterations={self.ritz_values.size}, min={self.min:.4g}, max={self.max:.4g})"
        )


@functools.partial(jax.jit, static_argnames=("objective", "num_iters"))
def _tridiagonal(
    objective: compiled.Objective, params: PyTree, inputs: PyTree, key: jax.Array, num_iters: int
) -> tuple[jax.Array, jax.Array]:
    flat = ravel_pytree(params)[0]
    matvec = compiled.flat_hvp(objective, params, inputs)
    return lanczos(matvec, flat.size, num_iters, key, flat.dtype)


def lanczos_spectrum(point: Point, num_iters: int = 100, key: jax.Array | None = None) -> Spectrum:
    """Ritz values of the Hessian at `point` from Lanczos on exact HVPs; no D x D matrix is formed.

    num_iters is capped at D; key defaults to jax.random.key(0), so repeated calls agree.
    """
    _check_point(point, "lanczos_spectrum")
    _checks.check_int("num_iters", num_iters, 1, "the number of Lanczos steps")
    _checks.check_key("key", key)
    num_iters = min(num_iters, point.num_params)
    key = jax.random.key(0) if key is None else key
    objective, inputs = point.shared
    tridiagonal = _tridiagonal(objective, point.params, inputs, key, num_iters)
    alphas, betas = (np.asarray(a) for a in tridiagonal)
    if not (np.all(np.isfinite(alphas)) and np.all(np.isfinite(betas))):
        nan = np.full(num_iters, np.nan, alphas.dtype)  # eigh on NaN/inf: garbage or an error
        return Spectrum(point, nan, nan.copy(), gradient_at(point))
    ritz_values, ritz_vectors = np.linalg.eigh(
        np.diag(alphas) + np.diag(betas, 1) + np.diag(betas, -1)
    )
    return Spectrum(point, ritz_values, ritz_vectors[0] ** 2, gradient_at(point))
