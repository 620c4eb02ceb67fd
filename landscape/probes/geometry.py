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
from jax.flatten_util import ravel_pytree

from landscape import _checks
from landscape.engine import training
from landscape.point import Point, as_points, param_names
from landscape.probes import budget, compiled, results
from landscape.typing import PyTree

Objective = Callable[[PyTree, PyTree], jax.Array]
NORMALIZATIONS = (None, "filter", "block")
OPTIMIZERS = ("adam", "sgd")
FITTED_FRACTION = 0.25  # the last quarter of the Bézier fit's steps estimate its expected loss


# ----------------------------------------------------------------------------- the program


def _combine(controls: PyTree, weights_K: jax.Array) -> PyTree:
    """sum_k weights_K[k] controls[k], leaf by leaf (controls stacked on a leading K axis)."""
    return jax.tree.map(lambda c: jnp.tensordot(weights_K.astype(c.dtype), c, axes=1), controls)


@functools.partial(jax.jit, static_argnames=("objective", "batch_size"))
def _losses_at(
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


def _evaluate(
    point: Point,
    controls: Sequence[PyTree],
    weights_TK: np.ndarray,
    batch_size: int | None,
    caller: str,
) -> np.ndarray:
    """The losses of `point`'s model at the combinations weights_TK of `controls`; batch_size
    None: all rows at once if they fit in memory, else as many as fit (`budget.rows_per_batch`,
    a MemoryError in one sentence when not one does)."""
    if batch_size is None:
        batch_size = budget.rows_per_batch(point, len(weights_TK), caller)
    objective, inputs = point.shared
    weights = jnp.asarray(np.asarray(weights_TK, np.float64))
    return np.asarray(
        _losses_at(objective, compiled.stack_trees(*controls), inputs, weights, batch_size)
    )


# ----------------------------------------------------------------------------- checks


def _check_grid(name: str, values: Any, unit: bool = False) -> np.ndarray:
    """A non-empty 1-D array of finite real numbers (in [0, 1] when `unit`)."""
    arr = _checks.real_array(name, values, scalar=False)
    if arr is None or arr.ndim != 1 or arr.size == 0:
        shape = None if arr is None else arr.shape
        raise ValueError(f"{name} has shape {shape}: must be a non-empty 1-D array of numbers.")
    meaning = "the curve parameter t" if unit else "grid coordinates"
    low, high = (0.0, 1.0) if unit else (None, None)
    _checks.check_real(name, arr, low=low, high=high, scalar=False, meaning=meaning)
    return arr


def _check_batch_size(batch_size: object) -> int | None:
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


def _check_direction(name: str, direction: object, point: Point) -> PyTree:
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


def _flat(tree: PyTree) -> np.ndarray:
    return np.asarray(ravel_pytree(jax.tree.map(jnp.asarray, tree))[0], np.float64)


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
    ts = np.linspace(0.0, 1.0, 51) if ts is None else _check_grid("ts", ts)
    grid = np.concatenate([[0.0, 1.0], ts])
    weights = np.stack([1.0 - grid, grid], axis=1)
    losses = _evaluate(a, [a.params, b.params], weights, _check_batch_size(batch_size), "path")
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
    jitter = init_scale * np.linalg.norm(_flat(b.params) - _flat(a.params)) / np.sqrt(a.num_params)
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
    ts = np.linspace(0.0, 1.0, 51) if ts is None else _check_grid("ts", ts, unit=True)
    batch_size = _check_batch_size(batch_size)
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
    losses = _evaluate(a, controls, _bernstein(grid), batch_size, "bezier_path")
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
    keys = jax.random.split(key, len(leaves))
    drawn = [
        np.asarray(jax.random.normal(k, np.shape(x), jnp.result_type(x)))
        for x, k in zip(leaves, keys, strict=True)
    ]
    return jax.tree_util.tree_unflatten(treedef, drawn)


def direction_to(point: Point, other: Point | PyTree) -> PyTree:
    """other - point, leaf by leaf.

    Args:
        point: a `Point`.
        other: a `Point` of the same model, or a params pytree.

    Returns:
        A pytree like the params.
    """
    (point,), _ = as_points(point, "direction_to")
    target = _check_direction("other", other, point)
    return jax.tree.map(lambda y, x: y - np.asarray(x, y.dtype), target, point.params)


# ----------------------------------------------------------------------------- slices


def _filter_rows(leaf: np.ndarray, mode: str) -> np.ndarray:
    """The leaf as (filters, entries): rows of a matrix leaf (its first axis) under "filter",
    one row (the whole leaf) for vectors and scalars, or for every leaf under "block"."""
    rows = leaf.shape[0] if mode == "filter" and leaf.ndim >= 2 else 1
    return np.asarray(leaf, np.float64).reshape(rows, -1)


def _normalised(
    direction: PyTree, params: PyTree, mode: str
) -> tuple[PyTree, dict[str, tuple[int, int]]]:
    """The direction with each filter (block) rescaled to the norm of the point's
    (docs/notes/landscape_geometry.md §3), and {leaf: (zero filters, filters)} where the point's
    filter is zero and the direction's is not: those keep their unnormalised entries
    (rescaling would zero them)."""
    names = param_names(params)
    leaves, treedef = jax.tree_util.tree_flatten(direction)
    out, kept = [], {}
    for (leaf_name, _, _), d, theta in zip(names, leaves, jax.tree.leaves(params), strict=True):
        d_rows, theta_rows = _filter_rows(d, mode), _filter_rows(np.asarray(theta), mode)
        d_norm = np.linalg.norm(d_rows, axis=1)
        theta_norm = np.linalg.norm(theta_rows, axis=1)
        scale = np.where(
            (theta_norm > 0) & (d_norm > 0), theta_norm / np.maximum(d_norm, 1e-300), 1.0
        )
        out.append((d_rows * scale[:, None]).reshape(d.shape).astype(d.dtype))
        zero = int(np.sum((theta_norm == 0) & (d_norm > 0)))
        if zero:
            kept[leaf_name] = (zero, theta_norm.size)
    return jax.tree_util.tree_unflatten(treedef, out), kept


def _fallback_note(mode: str, kept: dict[str, tuple[int, int]]) -> str:
    blocks = ", ".join(
        name if zero == total else f"{name} ({zero} of {total} filters)"
        for name, (zero, total) in kept.items()
    )
    return (
        f"normalize={mode!r}: the point is zero in {blocks}, where rescaling to "
        "the point's norm would zero the directions, so u and v keep their unnormalised entries "
        "there."
    )


def _slice_directions(
    point: Point, u: object, v: object, normalize: str | None
) -> tuple[PyTree, PyTree, tuple[str, ...], tuple[str, ...]]:
    """(u, v, notes, blocks kept unnormalised): checked, normalised, and not degenerate."""
    if normalize not in NORMALIZATIONS:
        raise ValueError(f"normalize = {normalize!r}: must be None, 'filter' or 'block'.")
    directions = {"u": _check_direction("u", u, point), "v": _check_direction("v", v, point)}
    for name, d in directions.items():
        if not np.any(_flat(d)):
            raise ValueError(f"{name} is zero everywhere: the slice needs two non-zero directions.")
    kept: dict[str, tuple[int, int]] = {}
    if normalize is not None:
        for name, d in directions.items():
            directions[name], kept_here = _normalised(d, point.params, normalize)
            kept.update({k: max(kept.get(k, (0, 0)), z) for k, z in kept_here.items()})
    flat_u, flat_v = _flat(directions["u"]), _flat(directions["v"])
    for name, flat in (("u", flat_u), ("v", flat_v)):
        if not np.any(flat):
            raise ValueError(f"{name} became zero after normalize={normalize!r}: nothing to draw.")
    cosine = flat_u @ flat_v / (np.linalg.norm(flat_u) * np.linalg.norm(flat_v))
    if abs(cosine) > 1 - 1e-12:
        raise ValueError("u and v are parallel: they span a line, not a plane; choose another v.")
    notes = (_fallback_note(str(normalize), kept),) if kept else ()
    return directions["u"], directions["v"], notes, tuple(kept)


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class SliceResult:
    """The loss on point + alpha u + beta v: losses[i, j] at (alphas[i], betas[j])
    (docs/notes/landscape_geometry.md §3). u and v are the directions used (after normalisation);
    `notes` says where normalisation fell back to the unnormalised direction (`kept_blocks`)."""

    point: Point
    alphas: np.ndarray
    betas: np.ndarray
    losses: np.ndarray
    center_loss: float
    u: PyTree
    v: PyTree
    normalize: str | None
    notes: tuple[str, ...] = ()
    kept_blocks: tuple[str, ...] = ()

    def project(self, other: Point | PyTree) -> tuple[float, float, float]:
        """(alpha, beta, distance from the plane) of another point of the model: the least-squares
        coordinates of other - point in the basis (u, v)."""
        delta = _flat(direction_to(self.point, other))
        basis = np.stack([_flat(self.u), _flat(self.v)], axis=1)
        coords, *_ = np.linalg.lstsq(basis, delta, rcond=None)
        return float(coords[0]), float(coords[1]), float(np.linalg.norm(delta - basis @ coords))

    @property
    def finite(self) -> bool:
        return bool(np.all(np.isfinite(self.losses)))

    def summary(self) -> dict[str, Any]:
        """One row: the point, D, the grid's size and ranges, the normalisation, the loss at the
        point and the grid's lowest and highest losses."""
        return results.point_row(
            self.point,
            self.point.num_params,
            self.losses.dtype,
            num_alphas=self.alphas.size,
            num_betas=self.betas.size,
            alpha_range=float(np.ptp(self.alphas)),
            beta_range=float(np.ptp(self.betas)),
            normalize=self.normalize or "none",
            center_loss=self.center_loss,
            min_loss=float(np.nanmin(self.losses)),
            max_loss=float(np.nanmax(self.losses)),
            finite=self.finite,
        )

    def __repr__(self) -> str:
        return (
            f"SliceResult({self.point.name!r}, {self.alphas.size} x {self.betas.size}, "
            f"loss in [{np.nanmin(self.losses):.4g}, {np.nanmax(self.losses):.4g}])"
        )

    def describe(self) -> str:
        """A few lines: the grid, the directions, the loss at the point, the grid's extremes."""
        flat_u, flat_v = _flat(self.u), _flat(self.v)
        cosine = flat_u @ flat_v / (np.linalg.norm(flat_u) * np.linalg.norm(flat_v))
        low = np.unravel_index(np.argmin(self.losses), self.losses.shape)
        high = np.unravel_index(np.argmax(self.losses), self.losses.shape)
        how = "unnormalised" if self.normalize is None else f"{self.normalize}-normalised"
        lines = [
            f"2-D slice at {self.point.name or '<unnamed point>'}: loss at point + α u + β v",
            f"  α in [{self.alphas.min():.4g}, {self.alphas.max():.4g}] ({self.alphas.size}), "
            f"β in [{self.betas.min():.4g}, {self.betas.max():.4g}] ({self.betas.size})",
            f"  directions {how}: |u| = {np.linalg.norm(flat_u):.4g}, "
            f"|v| = {np.linalg.norm(flat_v):.4g}, cos(u, v) = {cosine:.3g}",
            f"  loss at the point {self.center_loss:.10g}",
            f"  grid min {self.losses[low]:.6g} at (α, β) = ({self.alphas[low[0]]:.4g}, "
            f"{self.betas[low[1]]:.4g}); max {self.losses[high]:.6g} at "
            f"({self.alphas[high[0]]:.4g}, {self.betas[high[1]]:.4g})",
        ]
        return "\n".join(lines + [f"  note: {note}" for note in self.notes])


def slice_2d(
    point: Point,
    u: PyTree,
    v: PyTree,
    alphas: Any,
    betas: Any,
    normalize: str | None = None,
    *,
    batch_size: int | None = None,
) -> SliceResult:
    """The loss on point + alpha u + beta v over the grid alphas x betas, from one
    compiled call shared by every point of the model (docs/notes/landscape_geometry.md §3, §6).

    Args:
        point: a `Point`.
        u: a direction shaped like the params (e.g. `random_direction`, `direction_to`).
        v: a second direction.
        alphas: the grid along u.
        betas: the grid along v.
        normalize: None; "filter" rescales each filter (row of a matrix leaf; whole vectors
            and scalars) of u and v to the norm of the point's; "block" each leaf. Where the
            point is zero the direction is kept unnormalised and `notes` says so.
        batch_size: loss evaluations at once (None: as many as fit in memory).

    Returns:
        A `SliceResult`: the losses on the grid, the directions used, `project()`.
    """
    (point,), _ = as_points(point, "slice_2d")
    alphas, betas = _check_grid("alphas", alphas), _check_grid("betas", betas)
    u, v, notes, kept = _slice_directions(point, u, v, normalize)
    grid_a, grid_b = np.meshgrid(alphas, betas, indexing="ij")
    rows = np.concatenate([[0.0], grid_a.ravel()]), np.concatenate([[0.0], grid_b.ravel()])
    weights = np.stack([np.ones_like(rows[0]), rows[0], rows[1]], axis=1)
    batch_size = _check_batch_size(batch_size)
    losses = _evaluate(point, [point.params, u, v], weights, batch_size, "slice_2d")
    return SliceResult(
        point=point,
        alphas=alphas,
        betas=betas,
        losses=losses[1:].reshape(alphas.size, betas.size),
        center_loss=float(losses[0]),
        u=u,
        v=v,
        normalize=normalize,
        notes=notes,
        kept_blocks=kept,
    )


# ----------------------------------------------------------------------------- figures
