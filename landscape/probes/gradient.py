"""The gradient at a point (or at a list of points of one model, in one compiled call) and
Hessian-vector products; the gradient decides whether a point is stationary."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from landscape import trees
from landscape.core import data, operator
from landscape.point import (
    BlockName,
    Names,
    Point,
    PointOrPoints,
    as_points,
    block_indices,
    check_point,
    each_point,
    param_names,
)
from landscape.probes import preconditioning
from landscape.probes.results import (
    NON_FINITE,
    STATIONARITY_RULE,
    Curvature,
    check_tol,
    count_nonfinite,
    header_lines,
    name_width,
    nonfinite_lines,
    nonfinite_vector_blocks,
    point_row,
    verdict_lines,
)
from landscape.typing import PyTree


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class Gradient:
    """The gradient of the population loss at a point, labelled by parameter names."""

    point: Point
    tree: PyTree
    names: Names
    loss: float

    @functools.cached_property
    def vector(self) -> np.ndarray:
        """The gradient (D,) on the host in `ravel_pytree`'s order (over a mesh the tree stays
        on the devices, split as the parameters; this copies it once, when asked)."""
        return trees.host_rows([self.tree], self.point.num_params, self.dtype)[0]

    @property
    def dtype(self) -> np.dtype:
        return trees.dtype(self.tree)

    @functools.cached_property
    def norm(self) -> float:
        return trees.norm(self.tree)

    @property
    def finite(self) -> bool:
        """The parameters, the loss and every gradient entry are finite numbers (no NaN, no
        inf): a point whose parameters are not is flagged, never judged."""
        return bool(
            np.isfinite(self.loss) and trees.all_finite(self.tree) and not self.nonfinite_params
        )

    def nonfinite_blocks(self) -> dict[str, str]:
        """{block name: "n NaN, m inf"} for the blocks holding non-finite entries."""
        return nonfinite_vector_blocks(self.vector, self.names)

    @functools.cached_property
    def nonfinite_params(self) -> dict[str, str]:
        """{parameter name: "n NaN, m inf"} for the point's leaves holding non-finite entries."""
        return nonfinite_parameters(self.point.params)

    def verdict(self, tol: float | None = None) -> str:
        """ "non-finite" if the loss or an entry is NaN or inf; else, with `tol`, whether the
        gradient norm is <= tol ("stationary") or not; without `tol`, the norm."""
        check_tol(tol)
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
        eps = float(np.finfo(self.dtype).eps)
        return float(np.sqrt(eps) * max(1.0, abs(self.loss)))

    @property
    def stationary(self) -> bool:
        """|g| within `stationarity_tol()` (and every number finite)."""
        return self.finite and self.norm <= self.stationarity_tol()

    def kind(self, tol: float | None = None) -> Curvature:
        """NON_FINITE, STATIONARY (|g| <= `tol`, default `stationarity_tol()`) or
        NOT_STATIONARY: the gradient alone says nothing of the curvature."""
        check_tol(tol)
        if not self.finite:
            return Curvature.NON_FINITE
        bound = self.stationarity_tol() if tol is None else tol
        return Curvature.STATIONARY if self.norm <= bound else Curvature.NOT_STATIONARY

    def summary(self) -> dict[str, Any]:
        """One row: the point, D, dtype, loss, gradient norm, the stationarity bound, kind."""
        return point_row(
            self.point,
            self.point.num_params,
            self.dtype,
            kind=self.kind().value,
            loss=self.loss,
            grad_norm=self.norm,
            grad_tol=self.stationarity_tol(),
            finite=self.finite,
        )

    def block(self, name: BlockName) -> np.ndarray:
        return self.vector[block_indices(self.names, name)]

    def block_norms(self) -> dict[str, float]:
        return {leaf: float(np.linalg.norm(self.vector[s])) for leaf, s, _ in self.names}

    def describe(self) -> str:
        width = name_width(self.names)
        lines = header_lines("Gradient", self, self.dtype)
        lines += ["", f"  {'name':<{width}}{'shape':<14}{'norm':>12}"]
        for leaf, s, shape in self.names:
            norm = float(np.linalg.norm(self.vector[s]))
            lines.append(f"  {leaf:<{width}}{str(shape):<14}{norm:>12.4e}")
        if not self.finite:
            lines += [""] + nonfinite_lines(self)
            lines += [""] + verdict_lines(self.verdict(), self.point)
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Gradient({self.point.name!r}, D={self.point.num_params}, norm={self.norm:.3e})"


def nonfinite_parameters(params: PyTree) -> dict[str, str]:
    """{leaf name: "n NaN, m inf"} for the leaves of `params` holding non-finite entries, read
    on the host (no program; a leaf split over processes: this process's shards)."""
    found = {}
    for path, leaf in jax.tree_util.tree_leaves_with_path(params):
        if isinstance(leaf, jax.core.Tracer):
            continue
        if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
            values = np.concatenate([np.ravel(s.data) for s in leaf.addressable_shards])
        else:
            values = np.asarray(leaf)
        if not np.all(np.isfinite(values)):
            name = jax.tree_util.keystr(path, simple=True, separator="/") or "params"
            found[name] = count_nonfinite(values)
    return found


def _row(tree: PyTree, i: int) -> PyTree:
    return jax.tree.map(lambda x: x[i], tree)


@each_point(Gradient)
def gradient_at(point: PointOrPoints) -> Gradient | list[Gradient]:
    """The exact gradient of the point's loss at its params.

    Args:
        point: a `Point`, or a list of points of one model (one compiled call for all).

    Returns:
        A `Gradient` (a list of them for a list of points): the labelled vector, its norm, the
        loss, `kind()` (stationary or not) and `summary()`.
    """
    points, listed = as_points(point, "gradient_at")
    loss, tree = data.of(points, listed, "gradient_at").value_and_gradient()
    if not listed:
        return labelled(points[0], tree, loss)
    return [labelled(p, _row(tree, i), loss[i]) for i, p in enumerate(points)]


def labelled(point: Point, tree: PyTree, loss: Any) -> Gradient:
    """The `Gradient` of a loss and gradient pytree found at `point`, labelled by its names:
    its leaves kept where they lie (`trees.kept`)."""
    return Gradient(point, trees.kept(tree), param_names(point.params), float(loss))


def hvp(
    point: Point,
    matrix: operator.Matrix = "hessian",
    finite_difference: float | None = None,
    preconditioner: object = None,
) -> Callable[[Any], Any]:
    """v -> H v at the point (forward-over-reverse, compiled once per model), or G v.

    Args:
        point: a `Point`.
        matrix: "hessian", or "ggn" for the Gauss-Newton matrix G = Jᵀ H_z J of a point that
            carries `outputs` and `output_loss`.
        finite_difference: None for the exact product; a step ε > 0 for the central difference
            (∇L(θ + h v) - ∇L(θ - h v)) / (2h), h = ε / |v|, the product PyTorch's FSDP tools
            use, to measure its bias (`operator.finite_difference_operator`; the Hessian only,
            data in memory).
        preconditioner: None, or P's diagonal (a pytree like the params, or optax Adam's
            state): v -> P^{-1/2} H P^{-1/2} v (`landscape.adam_preconditioner`).

    Returns:
        A function of v: a pytree shaped like the params (H v is then one too) or a flat
        vector of all D parameters in `ravel_pytree` order (as `param_names` lists them; H v is
        then flat), in the params' dtype; a wrong shape or dtype is named in one sentence.
    """
    point, source, objective, eps = _product_site(
        point, matrix, finite_difference, preconditioner, "hvp"
    )
    params = point.params
    structure = jax.tree.structure(params)
    dim, dtype = point.num_params, jnp.result_type(*jax.tree.leaves(params))

    def product(v: Any) -> Any:
        if jax.tree.structure(v) == structure:  # type: ignore[operator]  # PyTreeDef has ==
            _check_tangent_leaves(v, params)
            return source.product_tree(objective, v, eps)
        if np.ndim(v) == 1 and not isinstance(v, list | tuple | dict):
            return source.product_flat(objective, _flat_vector(v, dim, dtype), eps)
        raise TypeError(
            f"hvp: v has tree structure {jax.tree.structure(v)}: must be a pytree shaped like "
            f"the params ({structure}) or a flat vector of D = {dim} entries (ravel_pytree order)."
        )

    return product


def hvp_flat(
    point: Point,
    matrix: operator.Matrix = "hessian",
    finite_difference: float | None = None,
    preconditioner: object = None,
) -> tuple[np.ndarray, Callable[[Any], jax.Array]]:
    """The Hessian (or G) as a flat operator, for solvers that work on vectors (scipy, CG).

    Args:
        point: a `Point`.
        matrix: "hessian", or "ggn" for the Gauss-Newton matrix G = Jᵀ H_z J of a point that
            carries `outputs` and `output_loss`.
        finite_difference: None for the exact product; a step ε > 0 for the central difference
            of the gradient over a step of norm ε along v (as `hvp`).
        preconditioner: None, or P's diagonal: P^{-1/2} H P^{-1/2} in place of H (as `hvp`).

    Returns:
        (x0, matvec): the flat params (D,) in `ravel_pytree` order and v (D,) or (D, 1) -> H v
        of the same shape, compiled once per model. A real v of any dtype is cast to the
        params' (scipy's `LinearOperator` probes its operator with an int8 vector), so
        `LinearOperator((D, D), matvec, dtype=x0.dtype)` serves `scipy.sparse.linalg.eigsh`.
    """
    _, source, objective, eps = _product_site(
        point, matrix, finite_difference, preconditioner, "hvp_flat"
    )
    x0 = trees.ravel_numpy(point.params)  # the point's own params, with a preconditioner too

    def matvec(v: Any) -> jax.Array:
        shape = np.shape(v)
        if shape not in ((x0.size,), (x0.size, 1)):
            raise ValueError(
                f"v has shape {shape}: must be ({x0.size},) or ({x0.size}, 1), one entry per "
                "parameter."
            )
        v_dtype = np.dtype(getattr(v, "dtype", None) or np.asarray(v).dtype)
        if not (np.issubdtype(v_dtype, np.floating) or np.issubdtype(v_dtype, np.integer)):
            raise TypeError(
                f"v has dtype {v_dtype}: must be real numbers (cast to the params' dtype, "
                f"{x0.dtype})."
            )
        return source.product_flat(objective, _as_params_dtype(v, x0.dtype), eps)

    return x0, matvec


def _product_site(
    point: Point, matrix: str, finite_difference: Any, preconditioner: object, caller: str
) -> tuple[Point, Any, Any, float | None]:
    """(the point, its data object, the objective for `matrix`, the finite-difference step or
    None) of `hvp` and `hvp_flat`, checked as every probe checks them
    (`operator.product_options`); with a preconditioner, the point in P's coordinates
    (`preconditioning`), where the matrix is the Hessian."""
    check_point(point, caller)
    if preconditioner is not None:
        point = preconditioning.views([point], preconditioner, caller, matrix)[0]
        matrix = "hessian"
    options = operator.product_options(caller, [point], matrix, None, finite_difference)
    objective = operator.for_matrix([point], point.shared[0], matrix, caller)
    return point, data.of([point], False, caller), objective, options.finite_difference


def _as_params_dtype(v: Any, dtype: Any) -> Any:
    """v in the params' dtype without an eager jax operation: a jax array of that dtype as it
    is (it stays on its device), anything else through numpy."""
    if isinstance(v, jax.Array) and v.dtype == dtype:
        return v
    return np.asarray(v, dtype)


def _flat_vector(v: Any, dim: int, dtype: Any) -> Any:
    """v as a (D,) array of the params' dtype; one sentence naming v otherwise."""
    v_dtype = getattr(v, "dtype", None)
    if v_dtype is None:
        v = np.asarray(v)
        v_dtype = v.dtype if v.dtype != np.float64 else dtype  # a list of floats: the params'
    if np.shape(v) != (dim,):
        raise ValueError(f"v has shape {np.shape(v)}: must be ({dim},), one entry per parameter.")
    if not jnp.issubdtype(v_dtype, jnp.floating) or jnp.dtype(v_dtype) != jnp.dtype(dtype):
        raise TypeError(f"v has dtype {v_dtype}: must be the params' dtype, {dtype}.")
    return _as_params_dtype(v, dtype)


def _check_tangent_leaves(v: PyTree, params: PyTree) -> None:
    """Each leaf of v has its parameter's shape and dtype."""
    for (path, leaf), param in zip(
        jax.tree_util.tree_leaves_with_path(v), jax.tree.leaves(params), strict=True
    ):
        name = jax.tree_util.keystr(path, simple=True, separator="/") or "v"
        if np.shape(leaf) != np.shape(param):
            raise ValueError(
                f"v[{name!r}] has shape {np.shape(leaf)}: must be {np.shape(param)}, the "
                "parameter's shape."
            )
        leaf_dtype, param_dtype = jnp.result_type(leaf), jnp.result_type(param)
        if leaf_dtype != param_dtype:
            raise TypeError(
                f"v[{name!r}] has dtype {leaf_dtype}: must be the parameter's dtype, {param_dtype}."
            )
