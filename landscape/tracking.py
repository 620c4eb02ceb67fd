"""Curvature from any training loop: `tracker(loss)` gives pure `init` and `update` functions
(optax's style), jittable inside a user's own step or `lax.scan`; each update is one Lanczos run
of `num_iters` Hessian-vector products started warm from the last measurement's Ritz vectors,
which the state carries with its key. The engine's `Track` measures with the same core
(`landscape.core`: `hvp.loss_operator`, `lanczos.run`, `ritz.ritz`); over a streamed dataset
the same steps run host-driven (`drive.host_lanczos`). docs/guide/own_loop.md;
docs/design/curvature.md for the Lanczos run."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from landscape import _checks
from landscape import point as point_lib
from landscape.core import batches as batches_lib
from landscape.core import drive, hvp, lanczos, operator, ritz
from landscape.core import layout as layout_lib
from landscape.core import preconditioner as preconditioner_lib
from landscape.core.layout import Layout
from landscape.typing import PyTree


class Measurement(NamedTuple):
    """One measurement of the loss's Hessian at the parameters: `top_k` (k,) the largest Ritz
    values (descending, top_k[0] = `lambda_max`), `residuals` (k,) their residual estimates
    |β s_last| = ||H y - θ y||, the smallest Ritz value `lambda_min` with its own, the loss and
    the gradient norm. Ritz values lie inside the spectrum; θ ± residual holds an eigenvalue.
    A residual is at least the rounding level eps num_iters max|θ| of the parameters' dtype
    (`rounding_floor`): below it, |β s_last| is rounding, not the residual."""

    lambda_max: jax.Array
    lambda_min: jax.Array
    top_k: jax.Array
    residuals: jax.Array
    lambda_min_residual: jax.Array
    loss: jax.Array
    grad_norm: jax.Array

    @property
    def lambda_max_residual(self) -> jax.Array:
        """The residual estimate of `lambda_max`."""
        return self.residuals[..., 0]


class TrackerState(NamedTuple):
    """What a tracker carries between measurements: `vectors` (k + 1, D), the last top-k Ritz
    vectors and the bottom one, flat in `ravel_pytree` order, or over a mesh (`tracker(like=)`)
    in its flat layout, split over the devices (zeros before the first: a cold start); `key`,
    the next start's noise; `measured`, the measurements taken."""

    vectors: jax.Array | np.ndarray
    key: jax.Array
    measured: jax.Array | np.ndarray


@dataclasses.dataclass(frozen=True)
class Settings:
    """A tracker's static settings (module docstring; `tracker` checks them)."""

    num_iters: int
    k: int
    noise: float
    in_batches: bool
    layout: Layout | None = None
    storage: str | None = None


class Tracker(NamedTuple):
    """`init(params, key) -> state` and `update(state, params, *inputs, preconditioner=None)
    -> (Measurement, state)`: pure functions; `update` is one compiled program per loss,
    settings and shapes (from Python, a RecompileWarning when inputs of a third shape compile
    it again). With a diagonal `preconditioner` P (a pytree like the params, or optax Adam's
    state at this step: `landscape.adam_preconditioner`), it measures P^{-1/2} H P^{-1/2}, whose
    λ_max is the preconditioned sharpness (docs/notes/edge_of_stability.md)."""

    init: Callable[[PyTree, jax.Array], TrackerState]
    update: Callable[..., tuple[Measurement, TrackerState]]


def tracker(
    loss: Callable[..., jax.Array],
    num_iters: int = 10,
    k: int = 1,
    noise: float = 0.1,
    in_batches: bool = False,
    like: PyTree = None,
    storage: str | None = None,
) -> Tracker:
    """A curvature tracker for any training loop: λ_max, λ_min and the top-k Ritz values of the
    Hessian of `loss` at the parameters, each with its residual, from `num_iters` products.

    Args:
        loss: loss(params, *inputs) -> scalar; `update` passes it the inputs it is given (a
            batch, an evaluation set), so a new batch costs no compile; or, called from Python
            with a `landscape.stream` alone, each of its batches (a pass over it a product).
        num_iters: Lanczos steps (Hessian-vector products) per measurement, at most D.
        k: the largest Ritz values reported (and their vectors kept), fewer than num_iters.
        noise: the next start is the sum of the kept Ritz vectors (unit norm) plus Gaussian
            noise of about this norm; 0 with a seed: a pure warm start (new directions then
            enter only through the kept vectors' products).
        in_batches: the inputs are a dataset in batches (leaves with a leading axis of B,
            or those and a short last batch, `landscape.batches`): the loss is the mean of
            loss(params, batch) over them, each weighed by its examples, with memory for one
            batch.
        like: parameters split over a mesh as the tracked ones will be (jax arrays with
            NamedShardings): the kept vectors and the Lanczos basis then lie split like them
            (docs/guide/split_model.md); None: flat in `ravel_pytree` order.
        storage: "bfloat16" stores the Lanczos basis in bfloat16, the products and sums in
            the params' dtype; the residuals' floor is then bfloat16's (`rounding_floor`).

    Returns:
        A `Tracker`: `init(params, key)` and `update(state, params, *inputs)`, pure and
        jittable; called from Python, `update` compiles once per loss and shapes.
    """
    if not callable(loss):
        raise TypeError(f"loss = {loss!r}: must be a function (params, *inputs) -> scalar loss.")
    _checks.check_int("num_iters", num_iters, 2, "Lanczos steps per measurement")
    _checks.check_int("k", k, 1, f"top Ritz values, fewer than num_iters = {num_iters}")
    if k >= num_iters:
        raise ValueError(f"k = {k}: must be fewer than num_iters = {num_iters} Lanczos steps.")
    _checks.check_real("noise", noise, low=0, meaning="the start's noise against its unit seed")
    _checks.check_bool("in_batches", in_batches)
    if storage is not None:
        _checks.check_choice("tracker: storage", storage, lanczos.STORAGES)
    layout = _layout_like(like)
    settings = Settings(num_iters, k, float(noise), in_batches, layout, storage)
    return Tracker(
        functools.partial(init, settings), functools.partial(checked_update, loss, settings)
    )


def init(settings: Settings, params: PyTree, key: jax.Array) -> TrackerState:
    """The state before the first measurement: no kept vectors (numpy zeros: nothing compiles
    when called from Python), the key and no measurement taken."""
    dim, dtype = flat_shape(params, settings.num_iters)
    if not isinstance(key, jax.Array) or not jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        raise TypeError(f"key = {key!r}: must be a jax.random.key(seed).")
    if settings.layout is None:
        return TrackerState(np.zeros((settings.k + 1, dim), dtype), key, np.int32(0))
    _check_split_like(params, settings.layout)
    zeros = np.zeros((settings.k + 1, settings.layout.padded), dtype)
    return TrackerState(jax.device_put(zeros, settings.layout.sharding(1)), key, np.int32(0))


def _layout_like(like: PyTree) -> layout_lib.Layout | None:
    """The layout of `tracker(like=)`; one sentence for a tree that is not split over a mesh."""
    if like is None:
        return None
    found = layout_lib.spread(like)
    if found is None:
        raise TypeError(
            "tracker: like must be the parameters split over a mesh of several devices (jax "
            "arrays with NamedShardings over one mesh, each leaf dividing evenly); on one device "
            "leave like=None."
        )
    return found


def _check_split_like(params: PyTree, layout: layout_lib.Layout) -> None:
    """One sentence for parameters shaped or split otherwise than `like` (split checked where
    the parameters are concrete arrays, not inside a traced function)."""
    leaves, treedef = jax.tree.flatten(params)
    shapes = tuple(tuple(np.shape(leaf)) for leaf in leaves)
    if treedef != layout.treedef or shapes != layout.shapes:
        raise ValueError(
            f"tracker.init: params have leaves of shapes {list(shapes)} where like has "
            f"{list(layout.shapes)}: give like the parameters the tracker will measure."
        )
    if any(isinstance(leaf, jax.core.Tracer) for leaf in leaves):
        return
    specs = tuple(getattr(getattr(leaf, "sharding", None), "spec", None) for leaf in leaves)
    meshes = {getattr(getattr(leaf, "sharding", None), "mesh", None) for leaf in leaves}
    if specs != layout.specs or meshes != {layout.mesh}:
        raise ValueError(
            f"tracker.init: params lie split as {list(specs)} where like lies as "
            f"{list(layout.specs)} over its mesh: give like the parameters as they will be split "
            "(jax.device_put them with like's shardings)."
        )


def flat_shape(params: PyTree, num_iters: int) -> tuple[int, np.dtype]:
    """(D, dtype) of the flat parameters; one sentence for parameters the tracker cannot take."""
    leaves = jax.tree.leaves(params)
    dtypes = {np.dtype(jnp.result_type(leaf)) for leaf in leaves}
    if not leaves or len(dtypes) != 1 or not jnp.issubdtype(next(iter(dtypes)), jnp.floating):
        raise TypeError(
            f"params have dtypes {sorted(d.name for d in dtypes)}: the tracker needs "
            "floating-point parameters of one dtype (cast them first)."
        )
    dtype = dtypes.pop()
    _checks.refuse_half_precision("tracker", dtype)
    dim = sum(math.prod(np.shape(leaf)) for leaf in leaves)
    if num_iters > dim:
        raise ValueError(f"num_iters = {num_iters} exceeds D = {dim}, the number of parameters.")
    return dim, dtype


def warm_start(
    vectors: jax.Array, key: jax.Array, noise: float, draw: Callable[[jax.Array], jax.Array]
) -> jax.Array:
    """The kept Ritz vectors' sum at unit norm plus N(0, noise² I / D) (their sum is zero before
    the first measurement: a random start); `draw(key)` gives N(0, I) in the vectors' layout."""
    seed = jnp.sum(vectors, axis=0)
    norm = jnp.linalg.norm(seed)
    seed = seed / jnp.where(norm > 0, norm, 1)
    scale = jnp.where(norm > 0, noise, 1.0) / math.sqrt(vectors.shape[1])
    return seed + scale.astype(seed.dtype) * draw(key)


def update(
    loss: Callable[..., jax.Array],
    settings: Settings,
    state: TrackerState,
    params: PyTree,
    *inputs: PyTree,
    inverse_sqrt: PyTree = None,
) -> tuple[Measurement, TrackerState]:
    """One measurement at `params` (module docstring) and the state for the next: a state
    holding non-finite vectors (a measurement at NaN parameters) starts the next one afresh.
    With `inverse_sqrt` = P^{-1/2} (a pytree like the params), of P^{-1/2} H P^{-1/2}
    (`hvp.preconditioned`; Cohen et al., 2022), the loss and gradient norm still the loss's."""
    dim, _ = flat_shape(params, settings.num_iters)
    _check_state_fits(settings, state, dim)
    _check_loss_output(loss, settings, params, inputs)
    layout = settings.layout
    flat, unravel = operator.flattened(params, layout)
    ravel = layout.to_flat if layout else None
    value, grad, matvec = hvp.loss_operator(loss, flat, unravel, inputs, settings.in_batches, ravel)
    if inverse_sqrt is not None:
        scale = operator.flattened(inverse_sqrt, layout)[0]
        matvec = hvp.preconditioned(matvec, scale.astype(flat.dtype))
    start, key, restart_key = _started(settings, state, params, flat.dtype)
    project = None if layout is None else layout.clean
    run = lanczos.run(
        matvec, start, settings.num_iters, restart_key, project=project, storage=settings.storage
    )
    return _measured(settings, run, value, grad, state, key, flat.dtype)


def _started(
    settings: Settings, state: TrackerState, params: PyTree, dtype: Any
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(the run's warm start, the next state's key, the run's restart key) (`warm_start`)."""
    key, start_key, restart_key = jax.random.split(state.key, 3)

    def draw(key: jax.Array) -> jax.Array:  # the same vector in every layout
        return layout_lib.draw("normal", key, params, settings.layout)

    start = warm_start(finite_or_zeros(state.vectors, dtype), start_key, settings.noise, draw)
    return start, key, restart_key


def _measured(
    settings: Settings,
    run: lanczos.Lanczos,
    value: jax.Array,
    grad: jax.Array,
    state: TrackerState,
    key: jax.Array,
    dtype: Any,
) -> tuple[Measurement, TrackerState]:
    """The Measurement of a finished run (its top k and bottom Ritz pairs, `ritz.ritz`) and the
    state that keeps their vectors."""
    k, m = settings.k, settings.num_iters
    kept = tuple(range(m - 1, m - 1 - k, -1)) + (0,)  # the top k, descending, then the bottom
    found = ritz.ritz(lanczos.extract(run), kept)
    top = found.values[np.asarray(kept[:-1])]
    floor = rounding_floor(found.values, m, settings.storage)
    residuals = jnp.maximum(found.residuals, floor)
    measurement = Measurement(
        top[0], found.values[0], top, residuals[np.asarray(kept[:-1])],
        residuals[0], value, jnp.linalg.norm(grad),
    )  # fmt: skip
    vectors = finite_or_zeros(found.vectors, dtype)
    return measurement, TrackerState(vectors, key, state.measured + 1)


def rounding_floor(values: jax.Array, num_iters: int, storage: str | None = None) -> jax.Array:
    """The rounding level of a Ritz residual after `num_iters` Lanczos steps: eps num_iters
    max|θ| in the values' dtype (|β s_last| falls to 1e-9 or 0 in float32 where ||H y - θ y||
    of the rounded vector stays near 4 eps max|θ|)."""
    eps = float(jnp.finfo(storage or values.dtype).eps)  # a basis stored narrower: its eps
    return eps * num_iters * jnp.max(jnp.abs(values))


def finite_or_zeros(vectors: jax.Array | np.ndarray, dtype: Any) -> jax.Array:
    """`vectors` as `dtype`, or zeros (a cold start) where any entry is NaN or inf."""
    vectors = jnp.asarray(vectors, dtype)
    return jnp.where(jnp.all(jnp.isfinite(vectors)), vectors, jnp.zeros_like(vectors))


_update_program = jax.jit(update, static_argnames=("loss", "settings"))


def checked_update(
    loss: Callable[..., jax.Array],
    settings: Settings,
    state: TrackerState,
    params: PyTree,
    *inputs: PyTree,
    preconditioner: object = None,
) -> tuple[Measurement, TrackerState]:
    """`Tracker.update`: its arguments checked (one sentence each), then the compiled `update`;
    called from Python, a RecompileWarning once inputs of a third shape compile it again. A
    `preconditioner` (`Tracker`) is taken as P^{-1/2} (`core.preconditioner`)."""
    state = _check_state_type(state)
    if _streamed(settings, inputs, preconditioner):  # a pass over the data a product
        return _streamed_update(loss, settings, state, params, inputs[0])
    _check_inputs(settings, inputs)
    scale = None
    if preconditioner is not None:
        diagonal = preconditioner_lib.diagonal(preconditioner, params, "tracker.update")
        scale = preconditioner_lib.inverse_sqrt(diagonal)
    measured = _update_program(loss, settings, state, params, *inputs, inverse_sqrt=scale)
    _note_shapes(loss, settings, (state, params, inputs))  # shapes that compiled
    return measured


def _stream_start(
    state: TrackerState, params: PyTree, settings: Settings, dtype: Any
) -> tuple[Callable[[], jax.Array], jax.Array]:
    """(the warm start as a function, the restart key): `drive.host_lanczos`'s draw."""
    return lambda: _started(settings, state, params, dtype)[0], jax.random.split(state.key, 3)[2]


@functools.partial(jax.jit, static_argnames=("settings", "dtype"))
def _stream_measured(
    settings: Settings, run: lanczos.Lanczos, value: Any, grad: Any, state: Any, dtype: Any
) -> tuple[Measurement, TrackerState]:
    """`_measured` of a streamed run, the next state's key split as `_started` splits it."""
    key = jax.random.split(state.key, 3)[0]
    return _measured(settings, run, value, grad, state, key, dtype)


def _streamed_update(
    loss: Callable[..., jax.Array],
    settings: Settings,
    state: TrackerState,
    params: PyTree,
    data: Any,
) -> tuple[Measurement, TrackerState]:
    """`update` over a streamed dataset (`landscape.stream`, the mean of loss(params, batch)
    over its batches): the same warm start, Lanczos steps and Ritz pairs, the steps host-driven
    (`drive.host_lanczos`), each product one pass over the data (`Stream.sums`)."""
    dim, dtype = flat_shape(params, settings.num_iters)
    _check_state_fits(settings, state, dim)
    _check_loss_output(loss, dataclasses.replace(settings, in_batches=False), params, (data.first,))
    passes: list[Any] = []

    def multiply(row: np.ndarray) -> np.ndarray:
        passes[:] = data.sums(loss, params, row[None].astype(dtype))
        return passes[2][0]

    run = drive.host_lanczos(
        multiply, _stream_start, (state, params), settings.num_iters, (settings, dtype)
    )
    return _stream_measured(settings, run, passes[0], passes[1], state, dtype)


def _streamed(settings: Settings, inputs: tuple, preconditioner: object) -> bool:
    """Whether the inputs are one streamed dataset; one sentence for a stream among other
    inputs, over a mesh (`like=`) or with a preconditioner."""
    where = [i for i, given in enumerate(inputs) if batches_lib.streams(given)]
    if not where:
        return False
    if len(inputs) > 1:
        raise TypeError(
            f"tracker.update: inputs[{where[0]}] is a streamed dataset (landscape.stream), which "
            "the loss takes alone: give it as the only input, loss(params, batch) then the "
            "loss of one of its batches."
        )
    if settings.storage is not None:
        raise TypeError(
            "tracker.update: storage= stores an in-memory run's basis, and a streamed "
            "dataset's run keeps its own in the params' dtype: give a dataset in batches "
            "(landscape.batches(data, size)) with tracker(..., in_batches=True)."
        )
    if settings.layout is not None or preconditioner is not None:
        raise TypeError(
            "tracker.update: a streamed dataset's vectors are ravel_pytree's on one device and "
            "take no preconditioner: give a dataset in batches (landscape.batches(data, size)) "
            "with tracker(..., in_batches=True) for like= or preconditioner=."
        )
    return True


def _check_state_type(state: object) -> TrackerState:
    """The state as a TrackerState (a restored plain tuple of its three fields too)."""
    if isinstance(state, TrackerState):
        return state
    if isinstance(state, tuple | list) and len(state) == 3:
        return TrackerState(*state)
    raise TypeError(
        f"tracker.update: state is {_checks.type_name(state)}: give it the TrackerState that "
        "tracker.init (or the last update) returned, then the params and the loss's inputs."
    )


def _check_inputs(settings: Settings, inputs: tuple) -> None:
    """One sentence for inputs `update` cannot pass to the loss: with in_batches anything but
    one dataset whose leaves share a leading axis of batches."""
    if not settings.in_batches:
        return
    if len(inputs) != 1:
        raise TypeError(
            f"tracker.update: in_batches=True takes one input, the dataset in batches "
            f"(landscape.batches((x, y), size)), not {len(inputs)}: pass them as one pytree."
        )
    point_lib.check_not_listed("tracker.update: inputs[0]", inputs[0])
    holder = "tracker.update: with in_batches=True the dataset's leaves have"
    batches_lib.check_stacked(inputs[0], holder)


def _check_state_fits(settings: Settings, state: TrackerState, dim: int) -> None:
    """One sentence for a state made for other parameters or by another tracker."""
    rows, width = (tuple(np.shape(state.vectors)) + (0, 0))[:2]
    expected = dim if settings.layout is None else settings.layout.padded
    if np.ndim(state.vectors) != 2 or width != expected:
        raise ValueError(
            f"tracker.update: state holds vectors of shape {np.shape(state.vectors)} where params "
            f"have D = {dim}: give update the state tracker.init made for these parameters "
            "(not another model's, and params with the same leaves as at init)."
        )
    if rows != settings.k + 1:
        raise ValueError(
            f"tracker.update: state keeps {rows} vectors where this tracker keeps k + 1 = "
            f"{settings.k + 1}: give update the state this tracker's init made."
        )


def _check_loss_output(
    loss: Callable[..., jax.Array], settings: Settings, params: PyTree, inputs: tuple
) -> None:
    """One sentence unless the loss returns one floating scalar (traced once, no compute)."""
    if settings.in_batches and len(inputs) == 1:
        inputs = (batches_lib.first_batch(inputs[0]),)
    problem = point_lib.not_a_scalar_loss(jax.eval_shape(loss, params, *inputs))
    if problem is not None:
        what, hint = problem
        raise TypeError(
            f"tracker: loss returned {what}: the tracker's loss(params, *inputs) must return "
            f"one floating-point scalar ({hint})."
        )


def _note_shapes(loss: Callable[..., jax.Array], settings: Settings, arguments: tuple) -> None:
    """From Python: a RecompileWarning, once per loss and settings, when `update` meets
    arguments of a `_checks.FRESH_LOSSES`-th shape (each compiles it again)."""
    if any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves(arguments)):
        return  # inside the user's own jit or vmap: their program is compiled once
    shapes = [np.shape(x) for x in jax.tree.leaves(arguments[2])]
    _checks.note_fresh(
        (loss, settings),
        point_lib._signature(arguments),
        lambda count: (
            f"tracker.update: {count} shapes of its arguments so far (now inputs of "
            f"shapes {shapes}), each compiling update afresh: give update inputs of one shape "
            "(batches of one size: drop or pad the last one)."
        ),
    )
