"""Loss along paths and on planes between points of one model: straight lines and their barriers,
fitted quadratic Bézier curves (mode connectivity), and 2-D slices with filter normalisation.

    path, bezier_path, slice_2d, random_direction, direction_to, plot_path, plot_slice

Derivations: docs/notes/landscape_geometry.md; how the losses are computed and compiled:
docs/design/curvature.md.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from landscape import _checks
from landscape.core import budget, compiled, data
from landscape.engine import training
from landscape.point import Point, as_points, param_names
from landscape.trees import ravel_numpy
from landscape.typing import PyTree

Objective = Callable[[PyTree, PyTree], jax.Array]
OPTIMIZERS = ("adam", "sgd")
PROBE_ROWS = 8  # rows of the program whose memory sizes a grid's batches
FITTED_FRACTION = 0.25  # the last quarter of the Bézier fit's steps estimate its expected loss


# ----------------------------------------------------------------------------- the program


def _combine(controls: PyTree, weights_K: jax.Array) -> PyTree:
    """sum_k weights_K[k] controls[k], leaf by leaf (controls stacked on a leading K axis)."""
    return jax.tree.map(lambda c: jnp.tensordot(weights_K.astype(c.dtype), c, axes=1), controls)


def _losses(
    objective: Objective,
    controls: PyTree,
    inputs: PyTree,
    weights_TK: jax.Array,
    batch_size: int | None,
) -> jax.Array:
    """(T,) loss at sum_k weights_TK[t, k] controls[k] for every row t: vmapped over
    the rows, or `batch_size` rows at a time (lax.map, one program still) to bound memory
    (docs/notes/landscape_geometry.md §6)."""

    def one(weights_K: jax.Array) -> jax.Array:
        return objective(_combine(controls, weights_K), inputs)

    if batch_size is None:
        return jax.vmap(one)(weights_TK)
    return jax.lax.map(one, weights_TK, batch_size=batch_size)


_losses_at = jax.jit(_losses, static_argnames=("objective", "batch_size"))


def evaluate(
    point: Point,
    controls: Sequence[PyTree],
    weights_TK: np.ndarray,
    batch_size: int | None,
    caller: str,
) -> np.ndarray:
    """The losses of `point`'s model at the combinations weights_TK of `controls`; batch_size
    None: all rows at once if they fit in memory, else as many as fit (`budget.rows_per_batch`,
    a MemoryError in one sentence when not one does)."""
    source = data.of([point], False, caller)
    objective, inputs = source.one_evaluation()  # over a stream: one batch's
    weights = np.asarray(weights_TK, np.float64)
    stacked = compiled.stack_trees(*controls)
    if batch_size is None:
        each = _row_bytes(objective, stacked, inputs, weights)
        batch_size = budget.rows_per_batch(point, len(weights_TK), caller, row_bytes=each)
    return source.mean_of(_batch_losses, (stacked, weights), (batch_size,))


def _batch_losses(
    objective: Objective, batch: PyTree, controls: PyTree, weights_TK: jax.Array, size: Any
) -> jax.Array:
    """`_losses_at` on the inputs or one batch of them (`data`'s `mean_of` argument order)."""
    return _losses_at(objective, controls, batch, weights_TK, size)


def _row_bytes(
    objective: Objective, controls: PyTree, inputs: PyTree, weights: np.ndarray
) -> float:
    """Bytes per row of the vmapped loss program, measured on PROBE_ROWS rows (their parameters
    and activations side by side, which one evaluation alone does not show)."""
    rows = min(PROBE_ROWS, weights.shape[0])
    leaves, treedef = jax.tree.flatten((controls, inputs))
    shapes = tuple((np.shape(x), str(jnp.result_type(x))) for x in leaves)
    probe = weights[:rows]
    program = functools.partial(_losses, objective, batch_size=None)
    key = (objective, treedef, shapes, probe.shape)
    return budget.program_bytes(program, (controls, inputs, probe), key) / rows


# ----------------------------------------------------------------------------- checks


def check_grid(name: str, values: Any, unit: bool = False) -> np.ndarray:
    """A non-empty 1-D array of finite real numbers (in [0, 1] when `unit`)."""
    arr = _checks.real_array(name, values, scalar=False)
    if arr is None or arr.ndim != 1 or arr.size == 0:
        shape = None if arr is None else arr.shape
        raise ValueError(f"{name} has shape {shape}: must be a non-empty 1-D array of numbers.")
    meaning = "the curve parameter t" if unit else "grid coordinates"
    low, high = (0.0, 1.0) if unit else (None, None)
    _checks.check_real(name, arr, low=low, high=high, scalar=False, meaning=meaning)
    return arr


def check_batch_size(batch_size: object) -> int | None:
    if batch_size is None:
        return None
    meaning = "grid points per batch; None: as many as fit in memory"
    return _checks.check_int("batch_size", batch_size, 1, meaning)


def _same_inputs(a: Point, b: Point, caller: str) -> None:
    """The loss along a path is one loss: both ends must be judged by the same inputs."""
    ia, ib = a.shared[1], b.shared[1]
    if ia is ib:
        return
    same = all(
        np.array_equal(np.asarray(x), np.asarray(y))
        for x, y in zip(jax.tree.leaves(ia), jax.tree.leaves(ib), strict=True)
    )
    if not same:
        raise ValueError(
            f"{caller}: a and b are judged by different inputs (e.g. two chains (p, q) or two "
            "batches), so no single loss lies between them; give b as a.with_params(...)."
        )


def check_direction(name: str, direction: object, point: Point) -> PyTree:
    """`direction` (a pytree shaped like the point's params, or a Point standing for its
    params) as numpy arrays in the point's dtypes."""
    if isinstance(direction, Point):
        direction = direction.params
    names = param_names(point.params)
    p_leaves, treedef = jax.tree_util.tree_flatten(point.params)
    try:  # each leaf may be any array-like (a list too) where the point has an array
        leaves = treedef.flatten_up_to(direction)  # type: ignore[attr-defined]  # not in the stubs
    except (ValueError, TypeError):
        raise ValueError(
            f"{name} must be a pytree shaped like the point's params (leaves "
            f"{', '.join(n for n, _, _ in names)}); got {type(direction).__name__} "
            f"{jax.tree_util.tree_structure(direction)}."
        ) from None
    for (leaf_name, _, shape), leaf in zip(names, leaves, strict=True):
        if np.shape(leaf) != shape:
            raise ValueError(
                f"{name}[{leaf_name!r}] has shape {np.shape(leaf)}: must be {shape}, the point's."
            )
        _checks.check_real(f"{name}[{leaf_name!r}]", leaf, scalar=False, meaning="a direction")
    return jax.tree_util.tree_unflatten(
        treedef,
        [np.asarray(x, np.asarray(p).dtype) for x, p in zip(leaves, p_leaves, strict=True)],
    )


def flat_params(tree: PyTree) -> np.ndarray:
    """The leaves raveled in `ravel_pytree` order, in float64 (numpy: nothing compiled)."""
    return ravel_numpy(tree).astype(np.float64)


# ----------------------------------------------------------------------------- paths


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class PathResult:
    """The loss along a path from a (t = 0) to b (t = 1) (docs/notes/landscape_geometry.md §1-§2).

    shape: "line" ((1 - t) a + t b) or "bezier" ((1-t)^2 a + 2 t (1-t) m + t^2 b, m = midpoint);
    `endpoints` the names of a and b; `point` is a.
    barrier: max of the loss over the ts in [0, 1] (and both ends) minus max(L(a), L(b)): >= 0,
    and a lower bound of the barrier of the continuous path (a grid misses peaks between ts).
    train_losses: the Bézier fit's minibatch estimates of E_t L(phi(t)), one per step.
    """

    shape: str
    endpoints: tuple[str, str]
    ts: np.ndarray
    losses: np.ndarray
    loss_a: float
    loss_b: float
    barrier: float
    argmax_t: float
    midpoint: PyTree | None = None
    train_losses: np.ndarray | None = None
    num_ts: int = 0
    a: Point | None = None
    b: Point | None = None

    @property
    def point(self) -> Point | None:
        """The start a (t = 0)."""
        return self.a

    @property
    def finite(self) -> bool:
        return bool(np.all(np.isfinite(self.losses)) and np.isfinite(self.loss_a + self.loss_b))

    def summary(self) -> dict[str, Any]:
        """One row: the shape, both ends and their losses, the barrier and where it peaks (with
        the Bézier fit's expected loss and its standard error)."""
        fitted = self.fitted_loss() if self.train_losses is not None else (np.nan, np.nan)
        return dict(
            shape=self.shape,
            start=self.endpoints[0],
            end=self.endpoints[1],
            dim=self.a.num_params if self.a is not None else np.nan,
            loss_start=self.loss_a,
            loss_end=self.loss_b,
            barrier=self.barrier,
            argmax_t=self.argmax_t,
            num_ts=int(self.ts.size),
            fitted_loss=fitted[0],
            fitted_loss_stderr=fitted[1],
            finite=self.finite,
        )

    def __repr__(self) -> str:
        return (
            f"PathResult({self.shape}, {self.endpoints[0]!r} -> {self.endpoints[1]!r}, "
            f"barrier={self.barrier:.4g})"
        )

    def fitted_loss(self) -> tuple[float, float]:
        """(mean, standard error) of the minibatch estimates of E_t L(phi(t)) over the fit's
        last quarter of steps (each step draws fresh t's; m barely moves there). Bézier only."""
        if self.train_losses is None:
            raise ValueError("fitted_loss: a straight path has no fit; use bezier_path.")
        tail = self.train_losses[-max(1, int(len(self.train_losses) * FITTED_FRACTION)) :]
        stderr = float(np.std(tail, ddof=1) / np.sqrt(tail.size)) if tail.size > 1 else np.nan
        return float(np.mean(tail)), stderr

    def describe(self) -> str:
        """A few lines: the ends' losses, the peak and the barrier."""
        shape = "straight line" if self.shape == "line" else "quadratic Bézier curve (fitted m)"
        lines = [
            f"{shape} from {self.endpoints[0] or 'a'} (t = 0) to {self.endpoints[1] or 'b'} "
            "(t = 1)",
            f"  L(a) = {self.loss_a:.10g}, L(b) = {self.loss_b:.10g}",
            f"  barrier {self.barrier:.6g} at t = {self.argmax_t:.4g}  (max over {self.ts.size} "
            "ts in [0, 1] minus max(L(a), L(b)); a grid gives a lower bound)",
        ]
        if self.train_losses is not None:
            mean, stderr = self.fitted_loss()
            lines.append(
                f"  fitted E_t L(phi(t)) = {mean:.6g} ± {stderr:.2g} (minibatches of "
                f"{self.num_ts} t's, last quarter of {self.train_losses.size} steps)"
            )
        return "\n".join(lines)


def _path_result(
    shape: str, a: Point, b: Point, ts: np.ndarray, all_losses: np.ndarray, **extra: Any
) -> PathResult:
    """all_losses = [L(a), L(b), losses at ts...]: the barrier over the ts in [0, 1] and ends."""
    loss_a, loss_b, losses = float(all_losses[0]), float(all_losses[1]), all_losses[2:]
    inside = (ts >= 0) & (ts <= 1)
    candidates_t = np.concatenate([[0.0, 1.0], ts[inside]])
    candidates = np.concatenate([[loss_a, loss_b], losses[inside]])
    peak = int(np.argmax(candidates))
    return PathResult(
        shape=shape,
        endpoints=(a.name, b.name),
        ts=ts,
        losses=losses,
        loss_a=loss_a,
        loss_b=loss_b,
        barrier=float(candidates[peak] - max(loss_a, loss_b)),
        argmax_t=float(candidates_t[peak]),
        a=a,
        b=b,
        **extra,
    )


def _path_points(a: Point, b: Point, caller: str) -> None:
    as_points([a, b], caller)
    _same_inputs(a, b, caller)


def path(a: Point, b: Point, ts: Any = None, *, batch_size: int | None = None) -> PathResult:
    """The loss on the straight line (1 - t) a + t b, from one compiled call shared by
    every pair of points of the model (docs/notes/landscape_geometry.md §1, §6).

    Args:
        a: the start, a `Point`.
        b: the end, a `Point` of the same model and inputs.
        ts: where to evaluate (default 51 points in [0, 1]); ts outside [0, 1] extrapolate,
            but only those inside count for the barrier.
        batch_size: loss evaluations at once (None: as many as fit in memory).

    Returns:
        A `PathResult`: the losses, both ends' losses, the barrier and where it peaks.
    """
    _path_points(a, b, "path")
    ts = np.linspace(0.0, 1.0, 51) if ts is None else check_grid("ts", ts)
    grid = np.concatenate([[0.0, 1.0], ts])
    weights = np.stack([1.0 - grid, grid], axis=1)
    losses = evaluate(a, [a.params, b.params], weights, check_batch_size(batch_size), "path")
    return _path_result("line", a, b, ts, losses)


def _bernstein(ts: np.ndarray | jax.Array) -> Any:
    """(T, 3) weights of a, m, b on the quadratic Bézier curve at ts."""
    xp = jnp if isinstance(ts, jax.Array) else np
    return xp.stack([(1.0 - ts) ** 2, 2.0 * ts * (1.0 - ts), ts**2], axis=1)


def _bezier_problem(a: Point, b: Point, num_ts: int, init_scale: float) -> training.Problem:
    """The fit as a training problem (docs/notes/landscape_geometry.md §2): params m, init
    (a + b)/2 plus a jitter of init_scale |b - a| / sqrt(D) (a symmetric landscape has a saddle at
    m = (a + b)/2 exactly); loss = mean of L(phi(t)) over `num_ts` stratified t's drawn from
    the step's key."""
    objective, inputs = a.shared
    midpoint = jax.tree.map(lambda x, y: (jnp.asarray(x) + jnp.asarray(y)) / 2, a.params, b.params)
    jitter = (
        init_scale
        * np.linalg.norm(flat_params(b.params) - flat_params(a.params))
        / np.sqrt(a.num_params)
    )
    dtype = jax.tree.leaves(a.params)[0].dtype  # a point's parameters have one dtype

    def init(key: jax.Array, hp: training.HParams) -> PyTree:
        leaves, treedef = jax.tree_util.tree_flatten(midpoint)
        keys = jax.random.split(key, len(leaves))
        noisy = [
            x + (jitter * jax.random.normal(k, x.shape, x.dtype)).astype(x.dtype)
            for x, k in zip(leaves, keys, strict=True)
        ]
        return jax.tree_util.tree_unflatten(treedef, noisy)

    def loss(m: PyTree, key: jax.Array, hp: training.HParams) -> tuple[jax.Array, dict]:
        offsets = jax.random.uniform(key, (num_ts,), jnp.float32)  # float32: x64 on or off
        ts = (jnp.arange(num_ts) + offsets.astype(dtype)) / num_ts  # one t per stratum
        controls = compiled.stack_trees(a.params, m, b.params)
        return jnp.mean(_losses_at(objective, controls, inputs, _bernstein(ts), None)), {}

    return training.Problem(init=init, loss=loss, learning_rates=lambda hp: hp["lr"])


def _check_bezier_arguments(
    num_steps: int, lr: float, num_ts: int, optimizer: str, init_scale: float, key: object
) -> None:
    _checks.check_int("num_steps", num_steps, 1, "optimisation steps of the midpoint")
    _checks.check_real("lr", lr, low=0, low_open=True, meaning="the learning rate of m")
    _checks.check_int("num_ts", num_ts, 1, "t's drawn per step")
    _checks.check_choice("optimizer", optimizer, OPTIMIZERS)
    _checks.check_real("init_scale", init_scale, low=0, meaning="jitter of m's start / |b - a|")
    _checks.check_key("key", key)


def bezier_path(
    a: Point,
    b: Point,
    *,
    num_steps: int = 200,
    lr: float = 0.05,
    num_ts: int = 16,
    optimizer: str = "adam",
    init_scale: float = 1e-2,
    ts: Any = None,
    key: jax.Array | None = None,
    batch_size: int | None = None,
) -> PathResult:
    """The quadratic Bézier curve (1-t)^2 a + 2t(1-t) m + t^2 b with m trained to
    lower E_{t ~ U(0,1)} L(phi(t)) by the project's engine (Garipov et al. 2018;
    docs/notes/landscape_geometry.md §2), then the loss on `ts` and its barrier.

    Args:
        a: the start, a `Point`.
        b: the end, a `Point` of the same model and inputs.
        num_steps: training steps of m.
        lr: the learning rate.
        num_ts: t's drawn per step.
        optimizer: "adam" or "sgd".
        init_scale: the jitter of m's start (the midpoint of a and b).
        ts: where to evaluate the fitted curve (default 51 points in [0, 1]).
        key: seeds m's jitter and the t's (None: seed 0).
        batch_size: loss evaluations at once (None: as many as fit in memory).

    Returns:
        A `PathResult` with `midpoint` and the fit's losses (`fitted_loss()`).
    """
    _path_points(a, b, "bezier_path")
    _check_bezier_arguments(num_steps, lr, num_ts, optimizer, init_scale, key)
    ts = np.linspace(0.0, 1.0, 51) if ts is None else check_grid("ts", ts, unit=True)
    batch_size = check_batch_size(batch_size)
    seed = 0 if key is None else int(jax.random.randint(key, (), 0, 2**31 - 1, jnp.int32))
    optim = training.default_optim_config()
    optim.name = optimizer
    run = training.train(
        _bezier_problem(a, b, num_ts, float(init_scale)),
        optim,
        {"lr": np.asarray([lr], np.float64)},
        seeds=[seed],
        num_steps=num_steps,
        log_every=num_steps,
        progress=None,
    )
    midpoint = jax.tree.map(lambda x: np.asarray(x[0]), run.final_params)
    grid = np.concatenate([[0.0, 1.0], ts])
    controls = [a.params, midpoint, b.params]
    losses = evaluate(a, controls, _bernstein(grid), batch_size, "bezier_path")
    return _path_result(
        "bezier", a, b, ts, losses, midpoint=midpoint, train_losses=run.losses[0], num_ts=num_ts
    )


# ----------------------------------------------------------------------------- directions


def random_direction(point: Point, key: jax.Array) -> PyTree:
    """A direction shaped like the point's params with N(0, 1) entries.

    Args:
        point: a `Point`.
        key: a `jax.random` key.

    Returns:
        A pytree like the params, each leaf in its own dtype.
    """
    (point,), _ = as_points(point, "random_direction")
    _checks.check_key("key", key)
    if key is None:
        raise TypeError("key = None: random_direction needs a jax random key (jax.random.key(0)).")
    leaves, treedef = jax.tree_util.tree_flatten(point.params)
    shapes = tuple((np.shape(x), str(jnp.result_type(x))) for x in leaves)
    drawn = [np.asarray(x) for x in _normal_leaves(key, shapes)]
    return jax.tree_util.tree_unflatten(treedef, drawn)


@functools.partial(jax.jit, static_argnames=("shapes",))
def _normal_leaves(key: jax.Array, shapes: tuple) -> list[jax.Array]:
    """N(0, 1) arrays of `shapes` ((shape, dtype) each), one key of split(key) each: one
    program."""
    keys = jax.random.split(key, len(shapes))
    return [
        jax.random.normal(k, shape, dtype) for k, (shape, dtype) in zip(keys, shapes, strict=True)
    ]


def direction_to(point: Point, other: Point | PyTree) -> PyTree:
    """other - point, leaf by leaf.

    Args:
        point: a `Point`.
        other: a `Point` of the same model, or a params pytree.

    Returns:
        A pytree like the params.
    """
    (point,), _ = as_points(point, "direction_to")
    target = check_direction("other", other, point)
    return jax.tree.map(lambda y, x: y - np.asarray(x, y.dtype), target, point.params)
