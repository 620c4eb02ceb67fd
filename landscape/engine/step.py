"""One run's training step at module level: the `Problem` a paper package hands the engine,
the state, `train_step` (a minibatch gradient, the optimizer's direction, per-group learning
rates) and `train_chunk` (steps in `lax.scan`, a snapshot every `log_every`). The host loop that
vmaps them over runs is `training.py`; docs/design/training.md.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import optax

from landscape.engine import config as config_lib
from landscape.engine import track as track_lib
from landscape.engine.optimizers import direction, schedule
from landscape.typing import ArrayLike

Params = Any


HParams = dict[str, jax.Array]


METRICS_AT = ("current", "ema", "both")


CURRENT_PREFIX = "current_"


@dataclasses.dataclass(frozen=True)
class Problem:
    """What a paper package hands the engine.

    init: (key, hparams) -> params, for one run.
    loss: (params, key, hparams) -> (scalar loss, dict of scalar metrics); draws its batch from key.
    learning_rates: hparams -> a pytree that is a prefix of params (e.g. {"Y": lr_y, "Z": lr_z}).
    snapshot: (params, hparams) -> dict of arrays recorded every `log_every` steps (attention maps,
        entropies, ...). Scalars among them also go to metrics.jsonl.
    weight_decay_mask: params -> pytree of bools, the leaves weight decay applies to (default all),
        e.g. only Linear weights, as GPT-2 codebases do.
    log_grad_norm: record the minibatch gradient's global L2 norm at every step as the metric
        "grad_norm" (before the optimizer), e.g. for plateau/jump diagnostics.
    log_grad_zeros: record the fraction of gradient entries that are exactly zero at every step
        as the metric "grad_zero_fraction" (float16 flushes small gradients to zero: the
        underflows of a half-precision computation; see landscape/engine/precision.py).
    runs_per_group: on the CPU, at most this many runs are vmapped together (None: all); more
        runs go through a loop over groups of them, which keeps a memory-bound step's temporaries
        in cache (runs are independent, so the results are the same).
    run_bytes: one run's memory in a step, by shape arithmetic; off the CPU the groups hold as
        many runs as fit in the device's free memory (`backend.runs_per_group`; None: all).
    batch_size: set when the loss is a mean over `batch_size` examples that it passes through
        `batch_share`: then a single run may split its batch over devices (`sweeps.run` does so
        when it has one run and several devices). Each device draws the whole batch from the same
        key and keeps its share, and the loss, metrics and gradients are averaged over devices:
        the same numbers as on one device, up to rounding.
    loss_takes_step: the loss is called (params, key, hparams, step), step the int32 global step
        (0, 1, ...; continued on resume), e.g. to read a fixed corpus chunk after chunk, epoch
        after epoch, as the WikiText experiments do (scan_snap/text.py).
    """

    init: Callable[[jax.Array, HParams], Params]
    # (params, key, hparams) or, with loss_takes_step, (params, key, hparams, step)
    loss: Callable[..., tuple[jax.Array, dict[str, jax.Array]]]
    learning_rates: Callable[[HParams], Any]
    snapshot: Callable[[Params, HParams], dict[str, jax.Array]] = lambda params, hparams: {}
    weight_decay_mask: Callable[[Params], Any] | None = None
    log_grad_norm: bool = False
    log_grad_zeros: bool = False
    runs_per_group: int | None = None
    run_bytes: float | None = None
    batch_size: int | None = None
    loss_takes_step: bool = False


BATCH_AXIS = "batch"


_batch_shares = contextvars.ContextVar("batch_shares", default=1)


def batch_share(x_B: jax.Array) -> jax.Array:
    """This device's share of a batch (its leading axis) while `train` splits one run's batch over
    devices (see `Problem.batch_size`); x_B itself otherwise. Shares are equal and contiguous."""
    shares = _batch_shares.get()
    if shares == 1:
        return x_B
    size = x_B.shape[0] // shares
    return jax.lax.dynamic_slice_in_dim(x_B, jax.lax.axis_index(BATCH_AXIS) * size, size)


@contextlib.contextmanager
def _splitting_batch(shares: int) -> Iterator[None]:
    token = _batch_shares.set(shares)
    try:
        yield
    finally:
        _batch_shares.reset(token)


def batch_devices(problem: Problem, devices: Iterable[jax.Device]) -> list[jax.Device]:
    """The devices a single run of `problem` splits its batch over: the most of `devices` whose
    count divides `problem.batch_size` (one device, i.e. no split, without a batch_size)."""
    devices = list(devices)
    if problem.batch_size is None:
        return devices[:1]
    count = max(c for c in range(1, len(devices) + 1) if problem.batch_size % c == 0)
    return devices[:count]


def default_averaging() -> dict[str, Any]:
    """The `train` group's fields for where snapshots are measured (`train`'s metrics_at):
    every package's config has them."""
    return dict(
        metrics_at="current",  # current | ema | both (snapshots at a parameter EMA)
        ema_decay=0.999,
    )  # the EMA's decay (optax.ema, debiased)


def validate_averaging(cfg: ml_collections.ConfigDict) -> None:
    config_lib.require_choice(cfg, "train.metrics_at", METRICS_AT)
    config_lib.require_number(cfg, "train.ema_decay", low=0, high=1, low_open=True, high_open=True)


class TrainState(NamedTuple):
    params: Params
    opt_state: optax.OptState
    key: jax.Array
    average: optax.EmaState | None = None  # the parameters' EMA (metrics_at "ema" / "both")


def averaged_params(state: TrainState, decay: float) -> Params:
    """The debiased EMA of the parameters after `count` updates (optax.ema's output,
    m_t / (1 - decay^t)); the parameters themselves before the first update (t = 0)."""
    average = state.average
    assert average is not None, "the state keeps no average (metrics_at is 'current')"
    debiased = optax.tree.bias_correction(average.ema, decay, average.count)
    return jax.tree.map(
        lambda m, p: jnp.where(average.count > 0, m, p).astype(p.dtype),
        debiased,
        state.params,
    )


@dataclasses.dataclass(frozen=True)
class StepSpec:
    """The static parts of one run's training step: the problem, the optimizer's lr-free
    direction, the learning-rate multiplier, the snapshot cadence and where snapshots are
    measured. `init_state`, `train_step` and `train_chunk` take it first."""

    problem: Problem
    direction: optax.GradientTransformation
    lr_multiplier: optax.Schedule
    log_every: int = 1
    snapshots_per_chunk: int = 1
    metrics_at: str = "current"
    ema_decay: float = 0.999
    batch_shares: int = 1  # devices a single run's batch is split over (`batch_share`)
    params_every: int = 0  # keep the parameters every this many steps (0: never)
    track: track_lib.Track | None = None  # curvature tracked along training
    # opt_state -> the flat P^{-1/2} of Adam (track.preconditioned; `track.adam_inverse_sqrt`)
    preconditioner: Callable[[optax.OptState], jax.Array] | None = None

    def inverse_sqrt(self, state: TrainState) -> jax.Array | None:
        """The tracked preconditioner's P^{-1/2} at `state` (None unless track.preconditioned)."""
        return None if self.preconditioner is None else self.preconditioner(state.opt_state)

    @property
    def chunk_len(self) -> int:
        return self.snapshots_per_chunk * self.log_every

    @property
    def kept_per_chunk(self) -> int:
        """Parameter slots a chunk returns: its steps that are multiples of params_every (one
        slot, filled at the chunk's end or not at all, when params_every exceeds the chunk)."""
        return max(1, self.chunk_len // self.params_every) if self.params_every else 0

    @property
    def average(self) -> optax.GradientTransformation | None:
        """The parameters' EMA, when snapshots are measured at it."""
        return optax.ema(self.ema_decay) if self.metrics_at != "current" else None


def step_spec(
    problem: Problem,
    optim: ml_collections.ConfigDict,
    *,
    num_steps: int,
    log_every: int = 1,
    chunk_steps: int | None = None,
    metrics_at: str = "current",
    ema_decay: float = 0.999,
    dtype: Any = None,
    params_every: int = 0,
    track: track_lib.Track | None = None,
) -> StepSpec:
    """The step of `problem` under `optim` (its direction and schedule over `num_steps`); the
    chunk keeps the parameters every `params_every` steps and measures `track`.

    `dtype`: the parameters' dtype, in which the optimizer's scalars (Adam's bias corrections,
    the schedule) are computed, so that x64 on or off leaves a float32 run's arithmetic alone;
    None: from Python floats (in float64 with x64 on)."""
    sched = schedule(optim, num_steps)
    preconditioner = None
    if track is not None and track.preconditioned:
        if optim.name not in ("adam", "adamw"):
            raise ValueError(
                f"track.preconditioned needs optim.name 'adam' or 'adamw' (Adam's own diagonal "
                f"is the preconditioner), not {optim.name!r}."
            )
        preconditioner = functools.partial(
            track_lib.adam_inverse_sqrt, b2=float(optim.b2), eps=float(optim.eps)
        )
    return StepSpec(
        problem,
        direction(optim, problem.weight_decay_mask, dtype),
        sched if dtype is None else lambda step: sched(jnp.asarray(step, dtype)),
        log_every,
        _snapshots_per_chunk(num_steps // log_every, log_every, chunk_steps, params_every),
        metrics_at,
        ema_decay,
        params_every=params_every,
        track=track,
        preconditioner=preconditioner,
    )


def run_keys(seed: ArrayLike) -> tuple[jax.Array, jax.Array]:
    """A run's (init key, data key): `jax.random.key(seed)` split in two, so runs with the same
    seed share initial weights and batches (common random numbers)."""
    init_key, data_key = jax.random.split(jax.random.key(seed))
    return init_key, data_key


def init_state(spec: StepSpec, seed: jax.Array, hp: HParams) -> TrainState:
    """One run's state: `problem.init` at the run's init key (`run_keys`), the data key kept."""
    init_key, data_key = run_keys(seed)
    params = spec.problem.init(init_key, hp)
    average = spec.average
    return TrainState(
        params, spec.direction.init(params), data_key, average.init(params) if average else None
    )


def snapshot_at(spec: StepSpec, state: TrainState, hp: HParams) -> dict[str, jax.Array]:
    """The problem's snapshot at the parameters `spec.metrics_at` names (current, EMA, both)."""
    if spec.average is None:
        return spec.problem.snapshot(state.params, hp)
    out = spec.problem.snapshot(averaged_params(state, spec.ema_decay), hp)
    if spec.metrics_at == "both":
        current = spec.problem.snapshot(state.params, hp)
        out.update({CURRENT_PREFIX + k: v for k, v in current.items()})
    return out


def first_records(
    spec: StepSpec, state: TrainState, hp: HParams
) -> tuple[dict[str, jax.Array], dict[str, jax.Array]]:
    """(snapshot, tracked metrics) at step 0, before any update."""
    return snapshot_at(spec, state, hp), track_lib.measure_at(
        spec.track, state.params, hp, jnp.int32(0), spec.inverse_sqrt(state)
    )


def _checked_loss(loss: Callable[..., Any]) -> Callable[..., Any]:
    """`problem.loss` with its output checked while it is traced (no cost at run time): a
    (scalar, dict) pair, as `Problem` says."""

    def checked(*args: Any) -> tuple[jax.Array, dict[str, jax.Array]]:
        out = loss(*args)
        if not (isinstance(out, tuple) and len(out) == 2):
            raise TypeError(
                f"problem.loss returned {_described(out)}: a Problem's loss must return a pair "
                "(scalar loss, dict of scalar metrics), e.g. `return loss, {}`."
            )
        value, metrics = out
        if jnp.shape(value) != () or not isinstance(metrics, Mapping):
            raise TypeError(
                f"problem.loss returned ({_described(value)}, {_described(metrics)}): a Problem's "
                "loss must return a pair (scalar loss, dict of scalar metrics), e.g. "
                "`return loss, {}`."
            )
        return value, dict(metrics)

    return checked


def _described(value: Any) -> str:
    """A short description of a returned value: an array's shape and dtype, else its type."""
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return f"an array of shape {tuple(value.shape)} and dtype {value.dtype}"
    if isinstance(value, tuple):
        return f"a tuple of {len(value)}"
    return f"a {type(value).__name__}"


def train_step(
    spec: StepSpec, state: TrainState, step: jax.Array, hp: HParams
) -> tuple[TrainState, tuple[jax.Array, dict[str, jax.Array]]]:
    """One update: the minibatch gradient (batch drawn from the state's key), the optimizer's
    direction, then `-lr_group * schedule(step) * direction` per parameter group."""
    problem = spec.problem
    key, batch_key = jax.random.split(state.key)
    with _splitting_batch(spec.batch_shares):
        (loss, metrics), grads = jax.value_and_grad(_checked_loss(problem.loss), has_aux=True)(
            state.params, batch_key, hp, *((step,) if problem.loss_takes_step else ())
        )
    if spec.batch_shares > 1:  # each device's loss is the mean over its share: average them
        loss, metrics, grads = jax.lax.pmean((loss, metrics, grads), BATCH_AXIS)
    if problem.log_grad_norm:
        metrics = {**metrics, "grad_norm": optax.tree.norm(grads)}
    if problem.log_grad_zeros:
        metrics = {**metrics, "grad_zero_fraction": grad_zero_fraction(grads)}
    updates, opt_state = spec.direction.update(grads, state.opt_state, state.params)
    updates = _scaled(updates, problem.learning_rates(hp), -spec.lr_multiplier(step))
    params = optax.apply_updates(state.params, updates)
    average = spec.average
    averaged = average.update(params, state.average)[1] if average else None
    return TrainState(params, opt_state, key, averaged), (loss, metrics)


def _scaled(updates: Params, learning_rates: Any, scale: jax.Array) -> Params:
    """scale * lr * update, each group of `updates` with its own learning rate."""

    def group_scaled(lr: jax.Array, group: Params) -> Params:
        return jax.tree.map(lambda u: (scale * lr * u).astype(u.dtype), group)

    return jax.tree.map(group_scaled, learning_rates, updates)


class Chunk(NamedTuple):
    """What `train_chunk` returns for one run."""

    state: TrainState
    losses: jax.Array  # (steps,)
    metrics: dict[str, jax.Array]  # (steps,) each
    snapshots: dict[str, jax.Array]  # (S, ...) each
    tracked: dict[str, jax.Array]  # (S,) each: NaN at snapshots that are not tracked steps
    kept: Params  # (spec.kept_per_chunk, ...) each leaf: the parameters at params_every steps


def train_chunk(spec: StepSpec, state: TrainState, first_step: jax.Array, hp: HParams) -> Chunk:
    """`spec.snapshots_per_chunk * spec.log_every` steps from `first_step`, a snapshot (and the
    tracked metrics, `spec.track`) after every `log_every`, the parameters kept in a buffer at
    the multiples of `spec.params_every` (they come back with the chunk's outputs)."""

    def between_snapshots(carry: tuple, start: jax.Array) -> tuple[tuple, Any]:
        state, kept = carry
        state, (loss, metrics) = jax.lax.scan(
            lambda s, t: train_step(spec, s, t, hp), state, start + jnp.arange(spec.log_every)
        )
        end = start + spec.log_every
        tracked = track_lib.measure_at(spec.track, state.params, hp, end, spec.inverse_sqrt(state))
        kept = _keep(spec, kept, state.params, first_step, end)
        return (state, kept), (loss, metrics, snapshot_at(spec, state, hp), tracked)

    slots = spec.kept_per_chunk
    kept = jax.tree.map(lambda p: jnp.repeat(p[None], slots, axis=0), state.params)  # varies
    # over a shard_map's runs as the body's output does (scan refuses a carry that does not)
    starts = first_step + spec.log_every * jnp.arange(spec.snapshots_per_chunk)
    (state, kept), (loss, metrics, snaps, tracked) = jax.lax.scan(
        between_snapshots, (state, kept), starts
    )

    def flat(x: jax.Array) -> jax.Array:
        return x.reshape((-1,) + x.shape[2:])

    return Chunk(state, flat(loss), jax.tree.map(flat, metrics), snaps, tracked, kept)


def _keep(
    spec: StepSpec, kept: Params, params: Params, first_step: jax.Array, end: jax.Array
) -> Params:
    """The buffer with `params` in its slot when `end` is a multiple of params_every (slot j
    holds step first_step + (j + 1) params_every, or the chunk's end)."""
    every = spec.params_every
    if not every:
        return kept
    slot = (end - first_step - 1) // every

    def put() -> Params:
        return jax.tree.map(
            lambda b, p: jax.lax.dynamic_update_index_in_dim(b, p, slot, 0), kept, params
        )

    return jax.lax.cond(end % every == 0, put, lambda: kept)


def kept_steps(spec: StepSpec, first_step: int) -> list[int]:
    """The steps whose parameters a chunk from `first_step` keeps, in slot order."""
    every = spec.params_every
    if not every:
        return []
    first = (first_step // every + 1) * every
    return list(range(first, first_step + spec.chunk_len + 1, every))


def grad_zero_fraction(grads: Params) -> jax.Array:
    """Fraction of the gradient's entries that are exactly zero (float16 underflows)."""
    leaves = jax.tree.leaves(grads)
    zeros = jnp.sum(jnp.stack([jnp.sum(g == 0) for g in leaves]))
    return zeros.astype(jnp.float32) / sum(g.size for g in leaves)


def _nested(a: int, b: int) -> bool:
    return a % b == 0 or b % a == 0


def _snapshots_per_chunk(
    num_snapshots: int, log_every: int, chunk_steps: int | None, params_every: int = 0
) -> int:
    """Snapshots per compiled chunk: a divisor of num_snapshots, about chunk_steps / log_every;
    with params_every, one whose steps are a multiple or a divisor of params_every (so a
    chunk's kept parameters fill fixed slots)."""
    if chunk_steps is None:  # about ten progress lines per run
        target = max(1, round(num_snapshots / 10))
    else:
        if chunk_steps % log_every:
            raise ValueError(
                f"chunk_steps = {chunk_steps} must be a multiple of log_every = {log_every}."
            )
        target = chunk_steps // log_every
    divisors = [d for d in range(1, num_snapshots + 1) if num_snapshots % d == 0]
    if params_every:
        divisors = [d for d in divisors if _nested(d * log_every, params_every)]
    return min(divisors, key=lambda d: (abs(d - target), d))
