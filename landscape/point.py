"""Point: a parameter pytree with its pure population loss, a name and metadata; its blocks.

Paper packages return their constructed points (theta_pi, theta_star, ...) as `Point`s, so the
probes can judge any of them without knowing the model. The block helpers (`Names`,
`block_indices`, `as_points`) serve every probe.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar, cast, overload

import jax
import jax.numpy as jnp
import numpy as np

from landscape import _checks
from landscape.core import batches as batches_lib
from landscape.core.batches import MeanOverBatches, mean_over_batches
from landscape.typing import PyTree


@dataclasses.dataclass(frozen=True, eq=False)
class Point:
    """Parameters with the population loss they are judged by.

    Give the loss either as `loss_fn(params)`, or as `objective(params, inputs)` with its
    `inputs` (a pytree of arrays: sequences, weights, a chain's kernel, an evaluation batch). The
    second form lets points of one model share compiled programs: probes compile once per
    `objective` (the same function object) and take `inputs` as an argument, so a new (p, q) or
    a new batch costs no compile. `loss_fn` is then `objective` with `inputs` filled in. What a
    loss reads besides its arguments is fixed when it is traced: each Point made with `loss_fn`
    traces it afresh (its points by `with_params` share its programs), while an `objective` is
    traced once per function object; docs/guide/reliability.md.

    The parameters are floating-point arrays of one dtype (the probes' precision and tolerances);
    the loss returns one floating scalar, checked at a probe's first call.

    A dataset too large for one evaluation is given as `batches` instead of `inputs`: a pytree
    whose leaves share a leading axis of B equal batches, or those and a short last batch
    (`landscape.batches(data, size)`). The loss is then the mean over the batches of
    `objective(params, batch)`, each weighed by its examples; the loss, gradient and
    Hessian-vector products accumulate over the batches inside one compiled program, so memory is
    bounded by one batch (docs/guide/own_model.md).

    A loss that is a function of model outputs may also give `outputs(params, inputs) -> z` and
    `output_loss(z, inputs) -> scalar` with objective = output_loss ∘ outputs: the split the
    Gauss-Newton matrix needs (`landscape.ggn_at`, notes/landscape_geometry.md §7).

    Equality and hashing are by identity (params are arrays, which have no truth value).
    `meta` is free-form. Keys the engine reads: "prediction" (str), the theory's verdict, e.g.
    "local minimum (Thm 2)"; "expected_loss" (float), a closed-form value of the loss;
    "population" ("mean" or "sum"): the loss is the mean (sum) of its values on equal slices of
    the leading axis of every input leaf, so a large Hessian may be formed slice by slice.
    """

    params: PyTree
    loss_fn: Callable[[PyTree], jax.Array] = None  # type: ignore[assignment]  # from objective
    name: str = ""
    meta: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    objective: Callable[[PyTree, PyTree], jax.Array] | None = None
    inputs: PyTree = None
    outputs: Callable[[PyTree, PyTree], jax.Array] | None = None
    output_loss: Callable[[jax.Array, PyTree], jax.Array] | None = None
    batches: PyTree = None
    # loss_fn as an objective, made for this point (shared by its with_params points only)
    _own_objective: Callable[[PyTree, PyTree], jax.Array] | None = dataclasses.field(
        default=None, init=False, repr=False
    )

    def __post_init__(self) -> None:
        _check_split(self)
        if self.batches is not None:
            _check_batches(self)
        if self.objective is not None:
            if not callable(self.objective):
                raise TypeError(
                    f"objective = {self.objective!r}: must be a function (params, inputs) -> "
                    f"scalar loss, not {type(self.objective).__name__}."
                )
            if self.loss_fn is not None and not _derived(self.loss_fn):
                raise TypeError("give a Point either loss_fn(params) or objective(params, inputs).")
            _checks.check_signature(
                "objective",
                self.objective,
                2,
                "objective(params, inputs)",
                "a loss of the parameters alone is given as loss_fn(params)",
            )
            if self.inputs is None and self.batches is None:
                raise TypeError(
                    "objective is given without inputs: give the inputs objective(params, "
                    "inputs) reads (inputs=(), if none), or give loss_fn(params) instead."
                )
            objective, inputs = self.shared
            object.__setattr__(self, "loss_fn", functools.partial(_fill, objective, inputs))
        elif not callable(self.loss_fn):
            raise TypeError(
                f"loss_fn = {self.loss_fn!r}: must be a function params -> scalar "
                f"loss, not {type(self.loss_fn).__name__}."
            )
        else:
            _checks.check_signature(
                "loss_fn",
                self.loss_fn,
                1,
                "loss_fn(params)",
                "give objective(params, inputs) as objective= with inputs=, or a Track's "
                "loss(params, hparams) to result.point(run, loss), which fills in the run's "
                "hyperparameters",
            )
            object.__setattr__(self, "_own_objective", _ignoring_inputs(self.loss_fn))
        _check_one_dtype(self.params)
        if not isinstance(self.name, str):
            raise TypeError(
                f"name = {self.name!r}: must be a string, not {type(self.name).__name__}."
            )
        if not isinstance(self.meta, Mapping):
            raise TypeError(
                f"meta = {self.meta!r}: must be a mapping (a dict), not {type(self.meta).__name__}."
            )

    @property
    def shared(self) -> tuple[Callable[[PyTree, PyTree], jax.Array], PyTree]:
        """(objective, inputs): the loss as a function compiled programs can share, and its
        inputs; a point given by `loss_fn` alone shares nothing (its inputs are empty)."""
        if self.batches is not None:
            assert self.objective is not None  # _check_batches
            return mean_over_batches(self.objective), self.batches
        if self.objective is not None:
            return self.objective, self.inputs
        assert self._own_objective is not None  # set for every loss_fn point
        return self._own_objective, None

    def loss(self) -> float:
        objective, inputs = self.shared
        check_loss_output(self, "Point.loss")
        return batches_lib.mean_loss(objective, self.params, inputs, _jitted(objective))

    def with_params(
        self, params: PyTree, name: str | None = None, meta: Mapping[str, Any] | None = None
    ) -> Point:
        """The same loss at other parameters, sharing this point's compiled programs. It keeps
        this point's name and meta (its theory's prediction among them) unless `name` / `meta`
        are given: a point that is not the construction any more should say so (`renamed`)."""
        changes: dict[str, Any] = {"params": params}
        if name is not None:
            changes["name"] = name
        if meta is not None:
            changes["meta"] = meta
        return self._replaced(**changes)

    def renamed(self, name: str, meta: Mapping[str, Any] | None = None) -> Point:
        """The same point under another name, with `meta` (default: this point's meta without
        the theory's "prediction" and "expected_loss", which named the construction)."""
        if meta is None:
            meta = {k: v for k, v in self.meta.items() if k not in CONSTRUCTION_KEYS}
        return self._replaced(name=name, meta=meta)

    def _replaced(self, **changes: Any) -> Point:
        """`dataclasses.replace`, keeping a loss_fn point's own programs (the same loss)."""
        point = dataclasses.replace(self, **changes)
        if self.objective is None and "loss_fn" not in changes:
            object.__setattr__(point, "_own_objective", self._own_objective)
        return point

    @property
    def num_params(self) -> int:
        return sum(int(np.size(leaf)) for leaf in jax.tree_util.tree_leaves(self.params))

    @property
    def dtype(self) -> np.dtype:
        """The parameters' floating dtype, one for every floating leaf (`_check_one_dtype`);
        float64 for parameters with no floating leaf."""
        dtypes = [np.dtype(x.dtype) for x in jax.tree_util.tree_leaves(self.params)]
        floating = [d for d in dtypes if np.issubdtype(d, np.floating)]
        return floating[0] if floating else np.dtype(np.float64)


def _check_split(point: Point) -> None:
    """outputs and output_loss come together, with an objective they compose to."""
    given = [point.outputs is not None, point.output_loss is not None]
    if not any(given):
        return
    if not all(given):
        raise TypeError(
            "give a Point both outputs(params, inputs) and output_loss(z, inputs), or neither."
        )
    if point.objective is None:
        raise TypeError(
            "outputs and output_loss split an objective(params, inputs): give the objective too."
        )
    if not (callable(point.outputs) and callable(point.output_loss)):
        raise TypeError("outputs and output_loss must be functions.")


def _check_batches(point: Point) -> None:
    """batches come with an objective and without inputs, as leaves with one leading axis."""
    if point.objective is None:
        raise TypeError(
            "batches are the second argument of objective(params, batch): give objective= too "
            "(a loss_fn(params) has no batch to take)."
        )
    if point.inputs is not None:
        raise TypeError(
            "give a Point either inputs (one batch) or batches (a dataset in batches), not both."
        )
    check_not_listed("batches", point.batches)
    batches_lib.check_stacked(point.batches, "batches have")


def check_not_listed(name: str, batches: PyTree) -> None:
    """A list of batches (each a tuple or dict) is not a dataset in batches: one sentence."""
    if isinstance(batches, list) and len(batches) > 1:
        if all(isinstance(b, tuple | list | dict) for b in batches):
            raise TypeError(
                f"{name} is a list of {len(batches)} batches: stack them, landscape.batches((x, "
                "y), batch_size=256), or for a Point stream them, landscape.stream(batches)."
            )


def _fill(objective: Callable, inputs: PyTree, params: PyTree) -> jax.Array:
    return objective(params, inputs)


def _derived(loss_fn: Callable) -> bool:
    """loss_fn is the one a Point made from its objective (`dataclasses.replace` passes it)."""
    return isinstance(loss_fn, functools.partial) and loss_fn.func is _fill


# meta keys that describe a construction and its theory, not any point with its parameters
CONSTRUCTION_KEYS = ("prediction", "expected_loss", "focus_prediction")


def _ignoring_inputs(loss_fn: Callable) -> Callable[[PyTree, PyTree], jax.Array]:
    """loss_fn as an objective (params, inputs) -> loss: a new function object per call, so a
    new Point compiles (and reads what its loss reads) afresh."""

    def objective(params: PyTree, inputs: PyTree) -> jax.Array:
        return loss_fn(params)

    objective.loss_fn = loss_fn  # type: ignore[attr-defined]  # names it in error messages
    return objective


def _check_one_dtype(params: PyTree) -> None:
    """TypeError when the floating leaves of `params` have more than one dtype."""
    by_dtype: dict[str, list[str]] = {}
    for path, leaf in jax.tree_util.tree_leaves_with_path(params):
        name = jax.tree_util.keystr(path, simple=True, separator="/")
        _checks.check_not_a_python_number(name, leaf)  # its dtype would be x64's choice
        dtype = getattr(leaf, "dtype", None)
        if dtype is not None and jnp.issubdtype(dtype, jnp.floating):
            by_dtype.setdefault(np.dtype(dtype).name, []).append(repr(name or "params"))
    if len(by_dtype) > 1:
        mix = "; ".join(f"{d}: {', '.join(names[:3])}" for d, names in sorted(by_dtype.items()))
        widest = max(by_dtype, key=lambda d: np.dtype(d).itemsize)
        raise TypeError(
            f"params mixes floating dtypes ({mix}): a Point's parameters share one dtype, "
            "which sets the probes' precision and tolerances; cast them first, e.g. "
            f"jax.tree.map(lambda a: a.astype(jnp.{widest}), params)."
        )


@functools.lru_cache(maxsize=256)
def _jitted(objective: Callable) -> Callable:
    return jax.jit(objective)


def param_names(params: PyTree) -> list[tuple[str, slice, tuple[int, ...]]]:
    """(name, slice, shape) per leaf, in `ravel_pytree` order.

    The name is the leaf's key path joined with "/" ("Y", "e", "block_0/W_K"); the slice
    is where the leaf sits in `jax.flatten_util.ravel_pytree(params)[0]`. A Point stands for its
    params.
    """
    if isinstance(params, Point):
        params = params.params
    entries = []
    offset = 0
    for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
        shape = tuple(leaf.shape) if hasattr(leaf, "shape") else np.shape(leaf)  # shape-only too
        size = int(np.prod(shape, dtype=np.int64))
        name = jax.tree_util.keystr(path, simple=True, separator="/")
        entries.append((name, slice(offset, offset + size), shape))
        offset += size
    return entries


def block_names(names: str | Iterable[str], caller: str) -> list[str]:
    """`names` (a block name or a list of them) as a non-empty list of strings."""
    if isinstance(names, str):
        return [names]
    listed: list[str] | None
    try:
        listed = list(names)
    except TypeError:
        listed = None
    if listed is None or not all(isinstance(n, str) for n in listed):
        raise TypeError(
            f"{caller} expects a block name or a list of block names (strings, as in "
            f"landscape.param_names); got {names!r}."
        )
    names = listed
    if not names:
        raise ValueError(
            f"{caller} got an empty list of block names: name at least one block "
            "(as in landscape.param_names)."
        )
    return names


def params_table(params: PyTree) -> str:
    """The parameter table of a model (what `flax.linen.tabulate` reports per parameter): each
    leaf's name, shape, dtype and count, and the total. A Point stands for its params."""
    if isinstance(params, Point):
        params = params.params
    rows = [
        (
            name,
            str(shape),
            str(np.dtype(leaf.dtype)) if hasattr(leaf, "dtype") else "",
            s.stop - s.start,
        )
        for (name, s, shape), leaf in zip(
            param_names(params), jax.tree_util.tree_leaves(params), strict=True
        )
    ]
    width = max([len("parameter")] + [len(r[0]) for r in rows]) + 2
    lines = [f"{'parameter':<{width}}{'shape':<16}{'dtype':<10}{'count':>9}"]
    lines += [f"{n:<{width}}{shape:<16}{dtype:<10}{count:>9,}" for n, shape, dtype, count in rows]
    lines.append(f"{'total':<{width}}{'':<16}{'':<10}{sum(r[3] for r in rows):>9,}")
    return "\n".join(lines)


def restrict(point: Point, names: str | Iterable[str]) -> Point:
    """The same loss as a function of the named blocks only, every other parameter held fixed.

    `names` are block names as in `param_names` (a name also selects the leaves under it). The
    restricted point's params are {name: array} for each selected leaf, so
    `hessian_at(restrict(point, ["b", "e"]))` is the (b, e) block of the Hessian, computed
    without the rest: what a paper-size model (D in the thousands, costly losses) can afford.
    """
    require_point(point, "restrict")
    names = block_names(names, "restrict")
    flat, treedef = jax.tree_util.tree_flatten(point.params)
    leaf_names = [name for name, _, _ in param_names(point.params)]
    chosen = [
        i
        for i, leaf in enumerate(leaf_names)
        if any(leaf == n or leaf.startswith(n + "/") for n in names)
    ]
    if not chosen:
        raise KeyError(
            f"no parameter named {', '.join(map(repr, names))}; available: {', '.join(leaf_names)}."
        )

    objective, inputs = point.shared
    key = (treedef, tuple(leaf_names), tuple(chosen))
    has_split = point.outputs is not None and point.batches is None  # batches: loss only
    # its inputs carry the fixed leaves beside the population: no longer sliceable as one
    meta = {k: v for k, v in point.meta.items() if k not in ("focus_blocks", "population")}
    return Point(
        {leaf_names[i]: flat[i] for i in chosen},
        objective=_restricted(objective, *key),
        inputs=(tuple(flat), inputs),
        outputs=_restricted(point.outputs, *key) if has_split else None,
        output_loss=_on_inner_inputs(point.output_loss) if has_split else None,
        name=f"{point.name} restricted to {', '.join(names)}",
        meta=meta,
    )


@functools.lru_cache(maxsize=256)
def _restricted(
    function: Callable, treedef: Any, leaf_names: tuple[str, ...], chosen: tuple[int, ...]
) -> Callable[[Mapping[str, Any], Any], Any]:
    """function(params, inputs) as a function of the chosen leaves, the others (and the inner
    inputs) passed as inputs: one object per (function, blocks), so restricted points of one
    model share compiled programs too."""

    def restricted(sub: Mapping[str, Any], inputs: Any) -> Any:
        leaves, inner = list(inputs[0]), inputs[1]
        for i in chosen:
            leaves[i] = sub[leaf_names[i]]
        return function(jax.tree_util.tree_unflatten(treedef, leaves), inner)

    return restricted


@functools.lru_cache(maxsize=256)
def _on_inner_inputs(output_loss: Callable) -> Callable[[jax.Array, Any], jax.Array]:
    """output_loss(z, inner inputs) for a restricted point's (all leaves, inner) inputs."""
    return lambda z, inputs: output_loss(z, inputs[1])


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


def check_point(point: object, caller: str) -> Point:
    """TypeError unless a Point whose params are floating-point arrays (at least one entry)."""
    point = require_point(point, caller)
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
        _checks.refuse_half_precision(caller, dtype)
    if sum(int(np.size(leaf)) for _, leaf in leaves) == 0:
        raise ValueError(
            f"{caller}: {point.name or 'the point'} has no parameters (its params "
            "hold no array entries), so there is nothing to differentiate."
        )
    batches_lib.refuse_unless(point.batches, caller)
    check_loss_output(point, caller)
    if point.objective is None:  # a closure made afresh per point compiles every probe again
        _checks.note_fresh_loss(point.loss_fn, point._own_objective, caller)
    return point


_CHECKED: collections.OrderedDict[Any, None] = collections.OrderedDict()  # (objective, shapes)


def check_loss_output(point: Point, caller: str) -> None:
    """TypeError unless the point's loss returns one floating scalar: checked by tracing it once
    per objective and shapes (`jax.eval_shape`: nothing is compiled or computed)."""
    objective, inputs = point.shared
    inputs = batches_lib.traced_form(inputs)  # a stream's first batch
    key = (_loss_of(objective), _signature(point.params), _signature(inputs))
    if key in _CHECKED:
        return
    if isinstance(objective, MeanOverBatches):  # the objective itself, on one batch
        first = batches_lib.first_batch(inputs)
        out = jax.eval_shape(objective.per_batch, point.params, first)
    else:
        out = jax.eval_shape(objective, point.params, inputs)
    problem = not_a_scalar_loss(out)
    if problem is not None:
        given = "loss_fn" if point.objective is None else "objective"
        what, hint = problem
        raise TypeError(
            f"{caller}: {given} returned {what}: a Point's loss must return one floating-point "
            f"scalar ({hint})."
        )
    _CHECKED[key] = None
    if len(_CHECKED) > 512:
        _CHECKED.popitem(last=False)


def not_a_scalar_loss(out: Any) -> tuple[str, str] | None:
    """(what a loss returned, what to do) unless `out` (its `jax.eval_shape`) is one floating
    scalar; None when it is."""
    shape, dtype = getattr(out, "shape", None), getattr(out, "dtype", None)
    if shape == () and dtype is not None and jnp.issubdtype(dtype, jnp.floating):
        return None
    if isinstance(out, tuple | list):
        return f"a {type(out).__name__} of {len(out)}", "return the loss alone"
    if shape is not None:
        return f"an array of shape {shape} and dtype {dtype}", "reduce it, e.g. jnp.mean"
    return f"a {type(out).__name__}", "return a jax array"


PointOrPoints = Point | Sequence[Point]
Arguments = ParamSpec("Arguments")
Result = TypeVar("Result")


class EachPoint(Protocol[Arguments, Result]):
    """A probe of a Point, or of a list of points (one call): its result, or a list of them."""

    @overload
    def __call__(
        self, point: Point, /, *args: Arguments.args, **kwargs: Arguments.kwargs
    ) -> Result: ...

    @overload
    def __call__(
        self, point: Sequence[Point], /, *args: Arguments.args, **kwargs: Arguments.kwargs
    ) -> list[Result]: ...


def each_point(
    result: type[Result],
) -> Callable[[Callable[Concatenate[Any, Arguments], Any]], EachPoint[Arguments, Result]]:
    """The probe itself, typed as an `EachPoint` of `result`: a Point gives a `result`, a list
    of points a list of them (the two overloads every such probe has, written once)."""

    def typed(probe: Callable[Concatenate[Any, Arguments], Any]) -> EachPoint[Arguments, Result]:
        return cast(EachPoint[Arguments, Result], probe)

    return typed


def as_points(points: object, caller: str) -> tuple[list[Point], bool]:
    """(the points, whether a list was given): one Point, or a non-empty list of one model's."""
    if not isinstance(points, list | tuple):
        return [check_point(points, caller)], False
    if not points:
        raise ValueError(f"{caller} got an empty list of points: give a Point or a list of them.")
    checked = [check_point(p, caller) for p in points]
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
        dtypes = [jnp.result_type(*jax.tree.leaves(p.params)).name for p in (point, points[0])]
        if dtypes[0] != dtypes[1]:
            _checks.refuse_mixed_dtypes(caller, i, (point.name, points[0].name), dtypes)
        if _loss_of(other) is not _loss_of(objective):
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


def _loss_of(objective: Callable) -> Callable:
    """The user's function behind an objective: loss_fn for a point given by loss_fn."""
    return getattr(objective, "loss_fn", objective)


def require_point(point: object, caller: str) -> Point:
    """TypeError unless `point` is a landscape.Point."""
    if isinstance(point, Point):
        return point
    hint = ""
    if isinstance(point, dict):
        hint = " (wrap parameters and their loss as landscape.Point(params, loss_fn))"
    raise TypeError(
        f"{caller} expects a landscape.Point (e.g. landscape.markov.theta_pi(0.5, "
        f"0.8)); got {_checks.type_name(point)}{hint}."
    )
