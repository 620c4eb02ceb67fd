"""Optimizers and compiled training runs, shared by every paper package.

A paper package describes its training problem as a `Problem`; `train` runs any number of runs at
once (a vmapped run axis, `lax.scan` chunks, Python looping only over chunks), with swept numbers
traced in `hparams` and learning rates applied outside optax (PyTorch semantics, per group).
See docs/design/training.md.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import contextvars
import dataclasses
import functools
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from landscape import point as point_lib
from landscape.engine import config as config_lib
from landscape.typing import ArrayLike

Params = Any
HParams = dict[str, jax.Array]

OPTIMIZERS = ("sgd", "adam", "adamw")
SCHEDULES = ("constant", "warmup_cosine", "onecycle")
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
    runs_per_group: at most this many runs are vmapped together (None: all); more runs go
        through a loop over groups of them, which keeps a memory-bound step's temporaries in cache
        (runs are independent, so the results are the same).
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
    batch_size: int | None = None
    loss_takes_step: bool = False


# ----------------------------------------------------------------------------- batch splitting

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


# ----------------------------------------------------------------------------- optimizers


def default_optim_config() -> ml_collections.ConfigDict:
    """Every optimizer field, with PyTorch's defaults. Learning rates belong to the package."""
    return ml_collections.ConfigDict(
        dict(
            name="sgd",  # sgd | adam | adamw
            momentum=0.0,  # SGD heavy ball, PyTorch semantics (dampening 0)
            nesterov=False,
            weight_decay=0.0,  # sgd/adam: L2 added to the gradient; adamw: decoupled
            b1=0.9,
            b2=0.999,
            eps=1e-8,
            schedule="constant",  # constant | warmup_cosine | onecycle (multiplies every lr)
            warmup_steps=0,
            initial_lr_fraction=0.0,  # warmup_cosine, onecycle: lr at step 0 / peak lr
            final_lr_fraction=0.0,  # warmup_cosine, onecycle: lr at the last step / peak lr
            clip_norm=0.0,  # > 0: clip the gradient's global L2 norm to this first
            # (torch.nn.utils.clip_grad_norm_); 0: no clipping
        )
    )


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


def validate_optim(cfg: ml_collections.ConfigDict, prefix: str = "optim") -> None:
    o = cfg[prefix]
    config_lib.require_choice(cfg, f"{prefix}.name", OPTIMIZERS)
    config_lib.require_choice(cfg, f"{prefix}.schedule", SCHEDULES)
    config_lib.require_number(cfg, f"{prefix}.momentum", low=0, high=1, high_open=True)
    config_lib.require_number(cfg, f"{prefix}.weight_decay", low=0)
    config_lib.require_number(cfg, f"{prefix}.b1", low=0, high=1, high_open=True)
    config_lib.require_number(cfg, f"{prefix}.b2", low=0, high=1, high_open=True)
    config_lib.require_number(cfg, f"{prefix}.eps", low=0, low_open=True)
    config_lib.require_number(cfg, f"{prefix}.warmup_steps", low=0, integer=True)
    config_lib.require_number(cfg, f"{prefix}.initial_lr_fraction", low=0, high=1)
    config_lib.require_number(cfg, f"{prefix}.final_lr_fraction", low=0, high=1)
    config_lib.require_number(cfg, f"{prefix}.clip_norm", low=0)
    if o.nesterov:
        config_lib.require(
            o.name == "sgd" and o.momentum > 0,
            f"{prefix}.nesterov",
            o.nesterov,
            "False unless optim.name is 'sgd' with momentum > 0",
        )


def direction(
    optim: ml_collections.ConfigDict, decay_mask: Callable[[Params], Any] | None = None
) -> optax.GradientTransformation:
    """The optimizer without its learning rate (updates are -lr * schedule * direction), after
    clipping the gradient's global norm when optim.clip_norm > 0 (PyTorch clips before the step)."""
    clip = [optax.clip_by_global_norm(optim.clip_norm)] if optim.get("clip_norm", 0.0) else []
    decay = (
        [optax.add_decayed_weights(optim.weight_decay, mask=decay_mask)]
        if optim.weight_decay
        else []
    )
    if optim.name == "sgd":
        trace = (
            [optax.trace(decay=optim.momentum, nesterov=optim.nesterov)] if optim.momentum else []
        )
        rest = decay + trace
    elif optim.name == "adam":  # PyTorch Adam: weight decay is an L2 term in the gradient
        rest = decay + [optax.scale_by_adam(b1=optim.b1, b2=optim.b2, eps=optim.eps)]
    else:  # AdamW: decoupled decay, scaled by lr as in PyTorch
        rest = [optax.scale_by_adam(b1=optim.b1, b2=optim.b2, eps=optim.eps)] + decay
    return optax.chain(*clip, *rest) if clip or rest else optax.identity()


def schedule(optim: ml_collections.ConfigDict, num_steps: int) -> optax.Schedule:
    """Multiplier of every learning rate at a step (1 at the peak).

    warmup_cosine: optax's linear warm-up over `warmup_steps` (peak at step warmup_steps), then a
    cosine to final_lr_fraction at num_steps. onecycle: PyTorch's OneCycleLR(anneal_strategy="cos",
    cycle_momentum=False, total_steps=num_steps, pct_start=warmup_steps / num_steps), as the Markov
    authors trained (notes/markov.md §13): a cosine *warm-up* too, peak at step warmup_steps - 1,
    and the cosine down reaches final_lr_fraction at the last step, num_steps - 1.
    """
    if optim.schedule == "constant":
        return lambda step: jnp.ones((), jnp.float32)
    if optim.schedule == "onecycle":
        return onecycle(
            optim.initial_lr_fraction, optim.final_lr_fraction, optim.warmup_steps, num_steps
        )
    return optax.warmup_cosine_decay_schedule(
        init_value=optim.initial_lr_fraction,
        peak_value=1.0,
        warmup_steps=optim.warmup_steps,
        decay_steps=max(num_steps, optim.warmup_steps + 1),
        end_value=optim.final_lr_fraction,
    )


def onecycle(initial: float, final: float, warmup_steps: int, num_steps: int) -> optax.Schedule:
    """torch.optim.lr_scheduler.OneCycleLR's multiplier (two phases, cosine annealing): from
    `initial` at step 0 up to 1 at step e = warmup_steps - 1 along a half cosine, then down to
    `final` at step num_steps - 1 along another; e <= 0 starts at the peak."""
    peak_step = float(warmup_steps - 1)
    last = float(max(num_steps - 1, peak_step + 1))

    def anneal(start: float, end: float, fraction: jax.Array) -> jax.Array:
        """PyTorch's _annealing_cos."""
        return end + (start - end) / 2.0 * (jnp.cos(jnp.pi * fraction) + 1.0)

    def multiplier(step: ArrayLike) -> jax.Array:
        step = jnp.asarray(step, jnp.float32)
        up = anneal(initial, 1.0, step / max(peak_step, 1.0))
        down = anneal(1.0, final, jnp.clip((step - peak_step) / (last - peak_step), 0.0, 1.0))
        return jnp.where(step <= peak_step, up, down) if peak_step > 0 else down

    return multiplier


# ----------------------------------------------------------------------------- runs


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


class NonFiniteLossError(FloatingPointError):
    """A run's loss became NaN or infinite; the records up to that chunk were written."""

    def __init__(self, message: str, step: int):
        super().__init__(message)
        self.step = step


class Interrupted(Exception):
    """Training stopped at a chunk boundary on request (`request_stop`, e.g. Ctrl-C or SIGTERM);
    the records so far and a checkpoint were written, so `--resume` continues from `step`."""

    def __init__(self, message: str, step: int):
        super().__init__(message)
        self.step = step


_stop = threading.Event()
_in_loop = threading.Event()


def request_stop() -> bool:
    """Ask a running `train` to stop at its next chunk boundary. Returns False when no training
    loop is running (nothing would see the request; the caller should stop at once instead)."""
    _stop.set()
    return _in_loop.is_set()


def clear_stop() -> None:
    _stop.clear()


@dataclasses.dataclass
class RunResult:
    """What `train` returns; every array has the run axis R first."""

    hparams: dict[str, np.ndarray]
    seeds: np.ndarray
    losses: np.ndarray  # (R, steps): batch loss at each step, before its update
    metrics: dict[str, np.ndarray]  # (R, steps) each: the loss function's scalar metrics
    snapshot_steps: np.ndarray  # (S,): 0, log_every, ..., num_steps
    snapshots: dict[str, np.ndarray]  # (R, S, ...) each
    final_params: Params  # pytree of (R, ...) arrays
    first_nonfinite_step: np.ndarray  # (R,): -1 where the loss stayed finite
    compile_seconds: float
    run_seconds: float
    initial_params: Params = None  # pytree of (R, ...) arrays: `problem.init` at `run_keys`
    backend: str = ""  # jax.default_backend() of the program
    device_count: int = 0  # devices visible to JAX (jax.device_count())
    program_devices: int = 0  # devices this program's runs (or one run's batch) were laid over

    @property
    def num_runs(self) -> int:
        return len(self.seeds)

    def arrays(self, prefix: str = "", complete: bool = False) -> dict[str, np.ndarray]:
        """The result as arrays.npz entries: losses, seeds, snapshot_steps,
        first_nonfinite_step, each hyperparameter ("optim.lr" -> "optim_lr") and each snapshot
        ("snapshot_<name>"), every name after `prefix` (e.g. "cell1_"). complete: also each
        per-step metric ("metric_<name>", e.g. metric_grad_norm) and the initial and final
        parameters ("initial_params/<leaf name>", "final_params/<leaf name>")."""
        arrays = {
            "losses": self.losses,
            "seeds": self.seeds,
            "snapshot_steps": self.snapshot_steps,
            "first_nonfinite_step": self.first_nonfinite_step,
        }
        arrays.update({k.replace(".", "_"): v for k, v in self.hparams.items()})
        arrays.update({f"snapshot_{k}": v for k, v in self.snapshots.items()})
        if complete:
            arrays.update({f"metric_{k}": v for k, v in self.metrics.items()})
            for which in ("initial", "final"):
                params = self.params(which)
                for (name, _, _), leaf in zip(
                    point_lib.param_names(params), jax.tree.leaves(params), strict=True
                ):
                    arrays[f"{which}_params" + (f"/{name}" if name else "")] = np.asarray(leaf)
        return {prefix + k: v for k, v in arrays.items()}

    def run_index(self, run: int | Mapping[str, float]) -> int:
        """The index of a run: an int, or {hyperparameter or "seed": value} naming one run."""
        if not isinstance(run, Mapping):
            if not 0 <= int(run) < self.num_runs:
                raise IndexError(f"run {run}: this result has runs 0 .. {self.num_runs - 1}.")
            return int(run)
        columns = {**self.hparams, "seed": self.seeds}
        unknown = set(run) - set(columns)
        if unknown:
            raise KeyError(f"{sorted(unknown)} name no column of this result ({sorted(columns)}).")
        match = np.ones(self.num_runs, bool)
        for name, value in run.items():
            match &= np.isclose(np.asarray(columns[name], np.float64), value)
        if match.sum() != 1:
            raise KeyError(f"{dict(run)} matches {int(match.sum())} runs, not one.")
        return int(np.flatnonzero(match)[0])

    def params(self, which: str = "final", run: int | Mapping[str, float] | None = None) -> Params:
        """The "initial" or "final" parameters: every run's (R first), or one run's."""
        if which not in ("initial", "final"):
            raise ValueError(f"which = {which!r}: must be 'initial' or 'final'.")
        params = self.initial_params if which == "initial" else self.final_params
        if params is None:
            raise ValueError("this result keeps no initial parameters (made before they were).")
        if run is None:
            return params
        index = self.run_index(run)
        return jax.tree.map(lambda x: np.asarray(x[index]), params)

    def point(
        self,
        run: int | Mapping[str, float],
        loss: Callable[[Params], jax.Array] | tuple[Callable[[Params, Any], jax.Array], Any],
        which: str = "final",
        dtype: Any = None,
    ) -> point_lib.Point:
        """One run's initial or final parameters as a `Point` for the probes (hessian_at, ...).

        `loss` is loss_fn(params) -> scalar, or an (objective, inputs) pair, objective(params,
        inputs) -> scalar (points of one model then share compiled programs). `run` is an index
        or {hyperparameter or "seed": value}, e.g. {"lr": 0.1, "seed": 2}. `dtype`: the
        floating parameters cast to it (e.g. float64 for curvature, with x64 on).
        """
        index = self.run_index(run)
        setting = ", ".join(
            [f"{k}={float(v[index]):g}" for k, v in self.hparams.items()]
            + [f"seed {int(self.seeds[index])}"]
        )

        def cast(x: np.ndarray) -> jax.Array:
            floating = dtype is not None and jnp.issubdtype(x.dtype, jnp.floating)
            return jnp.asarray(x, dtype if floating else None)

        params = jax.tree.map(cast, self.params(which, index))
        name = f"run {index} ({setting}), {which}"
        if isinstance(loss, tuple):
            objective, inputs = loss
            return point_lib.Point(params, name=name, objective=objective, inputs=inputs)
        return point_lib.Point(params, loss, name=name)


def run_timing(results: list[RunResult]) -> dict[str, Any]:
    """Compile and run seconds and the number of runs of several programs' results."""
    return {
        "compile_seconds": sum(r.compile_seconds for r in results),
        "run_seconds": sum(r.run_seconds for r in results),
        "runs": sum(r.num_runs for r in results),
    }


# ----------------------------------------------------------------------------- one run's step


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
) -> StepSpec:
    """The step of `problem` under `optim` (its direction and schedule over `num_steps`)."""
    return StepSpec(
        problem,
        direction(optim, problem.weight_decay_mask),
        schedule(optim, num_steps),
        log_every,
        _snapshots_per_chunk(num_steps // log_every, log_every, chunk_steps),
        metrics_at,
        ema_decay,
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


def train_step(
    spec: StepSpec, state: TrainState, step: jax.Array, hp: HParams
) -> tuple[TrainState, tuple[jax.Array, dict[str, jax.Array]]]:
    """One update: the minibatch gradient (batch drawn from the state's key), the optimizer's
    direction, then `-lr_group * schedule(step) * direction` per parameter group."""
    problem = spec.problem
    key, batch_key = jax.random.split(state.key)
    with _splitting_batch(spec.batch_shares):
        (loss, metrics), grads = jax.value_and_grad(problem.loss, has_aux=True)(
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


def train_chunk(
    spec: StepSpec, state: TrainState, first_step: jax.Array, hp: HParams
) -> tuple[TrainState, jax.Array, dict[str, jax.Array], dict[str, jax.Array]]:
    """`spec.snapshots_per_chunk * spec.log_every` steps from `first_step`, a snapshot after
    every `log_every`: (state, losses (steps,), metrics (steps,) each, snapshots (S, ...))."""

    def between_snapshots(state: TrainState, start: jax.Array) -> tuple[TrainState, Any]:
        state, (loss, metrics) = jax.lax.scan(
            lambda s, t: train_step(spec, s, t, hp), state, start + jnp.arange(spec.log_every)
        )
        return state, (loss, metrics, snapshot_at(spec, state, hp))

    starts = first_step + spec.log_every * jnp.arange(spec.snapshots_per_chunk)
    state, (loss, metrics, snaps) = jax.lax.scan(between_snapshots, state, starts)

    def flat(x: jax.Array) -> jax.Array:
        return x.reshape((-1,) + x.shape[2:])

    return state, flat(loss), jax.tree.map(flat, metrics), snaps


# ----------------------------------------------------------------------------- the host loop


def train(
    problem: Problem,
    optim: ml_collections.ConfigDict,
    hparams: dict[str, Any],
    seeds: Any,
    *,
    num_steps: int,
    log_every: int,
    chunk_steps: int | None = None,
    sharding: jax.sharding.Sharding | None = None,
    batch_over: list | None = None,
    on_nonfinite: str = "stop",
    progress: Callable[[str], None] | None = print,
    workdir: Any = None,
    record_tags: dict[str, Any] | None = None,
    hparam_dtype: Any = None,
    metrics_at: str = "current",
    ema_decay: float = 0.999,
) -> RunResult:
    """Train R runs at once (R = len(seeds)); hparams maps names to arrays of shape (R,).

    Each run starts from `init_state` and takes `train_step`s, `train_chunk` by `train_chunk`
    (one compiled program, vmapped over runs); Python only loops over chunks. `log_every` is the
    snapshot cadence; `chunk_steps` (a multiple of it) the cadence of progress lines, non-finite
    checks, stop requests, checkpoints and streamed records. `on_nonfinite`: "stop" raises
    `NonFiniteLossError` naming the step (after writing the records so far); "mark" carries on
    and reports the first bad step per run. `record_tags`: extra metrics.jsonl columns.
    `sharding` spreads the runs over devices; `batch_over` splits a single run's batch over
    devices instead (`batch_devices`). `hparam_dtype`: the dtype hyperparameters are traced in
    (records keep the numbers as given). `metrics_at`: snapshots at the "current" parameters,
    their debiased "ema" (`optax.ema(ema_decay)`), or "both" (current ones prefixed "current_").

    With a `workdir`, the state is checkpointed every `workdir.checkpoint_seconds` at a chunk
    boundary, at the end and on `request_stop` (then `Interrupted`); a checkpoint already there
    is continued from, bit-identically. Over several processes each boundary takes one decision
    for all (`_agree`); process 0 writes.
    """
    _check_train_arguments(num_steps, log_every, on_nonfinite, metrics_at, ema_decay)
    spec = step_spec(
        problem,
        optim,
        num_steps=num_steps,
        log_every=log_every,
        chunk_steps=chunk_steps,
        metrics_at=metrics_at,
        ema_decay=ema_decay,
    )
    runs = _place_runs(problem, hparams, seeds, sharding, batch_over, hparam_dtype)
    spec = dataclasses.replace(spec, batch_shares=runs.shares)
    t_start = time.perf_counter()
    state, first_snapshot, chunk = _compile(spec, runs)
    initial_params = jax.tree.map(lambda x: np.array(_on_host(x)), state.params)  # copies:
    # the chunk donates the state's buffers
    host = _Host(
        runs,
        num_steps,
        spec.snapshots_per_chunk * log_every,
        on_nonfinite,
        progress,
        workdir,
        time.perf_counter() - t_start,
    )
    _check_compiled_memory(chunk, 1 if runs.sharding is None else len(runs.sharding.device_set))
    host.start(first_snapshot, log_every, record_tags or {})
    start, state = host.resume(state)
    host.t_run = host.last_save = time.perf_counter()
    _in_loop.set()
    try:
        for first_step in range(start, num_steps, host.chunk_len):
            state, loss, chunk_metrics, chunk_snaps = chunk(
                state, jnp.int32(first_step), runs.hparams
            )
            done = host.record(first_step, loss, chunk_metrics, chunk_snaps)
            host.save_or_stop(done, state)
    finally:
        _in_loop.clear()
    jax.block_until_ready(state)
    return host.result(state, log_every, initial_params)


def _check_train_arguments(
    num_steps: int, log_every: int, on_nonfinite: str, metrics_at: str, ema_decay: float
) -> None:
    if num_steps % log_every:
        raise ValueError(f"num_steps = {num_steps} must be a multiple of log_every = {log_every}.")
    if on_nonfinite not in ("stop", "mark"):
        raise ValueError(f"on_nonfinite = {on_nonfinite!r}: must be 'stop' or 'mark'.")
    if metrics_at not in METRICS_AT:
        raise ValueError(f"metrics_at = {metrics_at!r}: must be one of {METRICS_AT}.")
    if not 0 < ema_decay < 1:
        raise ValueError(f"ema_decay = {ema_decay!r}: must be in (0, 1).")


class _Runs(NamedTuple):
    """The runs as the compiled program sees them: padded to a multiple of the devices."""

    seeds: np.ndarray  # (R padded,) int64
    given_hparams: dict[str, np.ndarray]  # (R,) each, the numbers as given
    seeds_dev: jax.Array  # (R padded,) uint32, laid out by `sharding`
    hparams: dict[str, jax.Array]  # (R padded,) each, traced in hparam_dtype
    sharding: jax.sharding.Sharding | None
    shares: int  # devices one run's batch is split over
    num_runs: int  # R, the real runs


def _place_runs(
    problem: Problem,
    hparams: dict[str, Any],
    seeds: Any,
    sharding: jax.sharding.Sharding | None,
    batch_over: list | None,
    hparam_dtype: Any,
) -> _Runs:
    seeds = np.asarray(seeds, np.int64)
    num_runs = len(seeds)
    shares = 1
    if batch_over is not None and len(batch_over) > 1:
        shares, sharding = len(batch_over), _batch_sharding(problem, batch_over, sharding, num_runs)
    hparams = {k: np.asarray(v) for k, v in hparams.items()}
    given_hparams = dict(hparams)  # the numbers as given, for records and result
    if hparam_dtype is not None:
        hparams = {k: v.astype(hparam_dtype) for k, v in hparams.items()}
    if shares == 1 and sharding is not None:  # pad R to a multiple of the device count
        pad = -num_runs % len(sharding.device_set)
        hparams = {k: np.concatenate([v, np.repeat(v[-1:], pad)]) for k, v in hparams.items()}
        seeds = np.concatenate([seeds, np.repeat(seeds[-1:], pad)])

    def put(x: Any) -> jax.Array:
        return _to_devices(x, sharding)

    seeds_dev = put(np.asarray(seeds, np.uint32))
    return _Runs(
        seeds, given_hparams, seeds_dev, jax.tree.map(put, hparams), sharding, shares, num_runs
    )


def _batch_sharding(
    problem: Problem, batch_over: list, sharding: Any, num_runs: int
) -> NamedSharding:
    if sharding is not None or num_runs != 1 or problem.batch_size is None:
        raise ValueError(
            "batch_over splits the batch of a single run of a problem with a "
            "batch_size, without a run sharding."
        )
    if problem.batch_size % len(batch_over):
        raise ValueError(
            f"batch_size = {problem.batch_size} does not split over {len(batch_over)} devices."
        )
    return NamedSharding(Mesh(np.asarray(batch_over), (BATCH_AXIS,)), P())


def _compile(spec: StepSpec, runs: _Runs) -> tuple[TrainState, dict[str, jax.Array], Any]:
    """The runs' initial states and first snapshots, and the compiled chunk. Every input and
    output has the run axis first: pinned to the sharding (if any) so the compiled chunk keeps
    runs spread over devices from one call to the next."""
    sharding = runs.sharding
    pinned: dict[str, Any] = {} if sharding is None else dict(out_shardings=sharding)
    init = jax.jit(jax.vmap(functools.partial(init_state, spec)), **pinned)
    init_lowered = init.lower(runs.seeds_dev, runs.hparams)
    chunk_lowered = _chunk_program(spec, runs).lower(
        init_lowered.out_info, jnp.int32(0), runs.hparams
    )
    # XLA compiles the chunk (most of the compile time) on a second thread while this one
    # compiles and runs init and the first snapshot: the same programs, sooner.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        chunk = pool.submit(chunk_lowered.compile)
        state = init_lowered.compile()(runs.seeds_dev, runs.hparams)
        snapshot = jax.vmap(functools.partial(snapshot_at, spec))
        first_snapshot = jax.jit(snapshot, **pinned)(state, runs.hparams)
        return state, first_snapshot, chunk.result()


def _chunk_program(spec: StepSpec, runs: _Runs) -> Any:
    """The jitted chunk: runs vmapped (in groups), per device; the state donated."""
    sharding = runs.sharding
    pinned: dict[str, Any] = {}
    if sharding is not None:
        pinned = dict(out_shardings=sharding, in_shardings=(sharding, None, sharding))
    chunk_runs = jax.vmap(functools.partial(train_chunk, spec), in_axes=(0, None, 0))
    return jax.jit(
        _per_device(_grouped(chunk_runs, spec.problem.runs_per_group), sharding, runs.shares > 1),
        donate_argnums=0,
        **pinned,
    )


@dataclasses.dataclass
class _Host:
    """The host's side of a run between chunks: what it keeps, records, checks and saves."""

    runs: _Runs
    num_steps: int
    chunk_len: int
    on_nonfinite: str
    progress: Callable[[str], None] | None
    workdir: Any
    compile_seconds: float
    losses: list = dataclasses.field(default_factory=list)
    metrics: list = dataclasses.field(default_factory=list)
    snaps: list = dataclasses.field(default_factory=list)
    first_bad: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, int))
    recorder: _Recorder | None = None
    checkpoint: Any = None
    elapsed: float = 0.0  # run seconds of earlier processes (a resumed run)
    t_run: float = 0.0
    last_save: float = 0.0

    def seconds(self) -> float:
        return self.elapsed + time.perf_counter() - self.t_run

    def start(self, first_snapshot: dict[str, jax.Array], log_every: int, tags: dict) -> None:
        runs = self.runs
        self.snaps = [jax.tree.map(lambda x: _on_host(x)[:, None], first_snapshot)]
        self.first_bad = np.full(len(runs.seeds), -1)
        if self.workdir:
            self.recorder = _Recorder(
                self.workdir, runs.given_hparams, runs.seeds, log_every, runs.num_runs, tags
            )
            # several processes (jax.distributed): process 0 writes the checkpoints and the
            # records (experiments/cli.py); every process reads the same checkpoint on --resume
            self.checkpoint = self.workdir.next_checkpoint()

    def resume(self, state: TrainState) -> tuple[int, TrainState]:
        """The step to start from and the state there: a checkpoint's (--resume), or 0."""
        checkpoint = self.checkpoint
        if checkpoint is None or _latest_step_everywhere(checkpoint) is None:
            if self.recorder:
                self.recorder.write_rows(0, None, self.snaps[0])
            return 0, state
        start, state, host = checkpoint.restore(_saveable(state))
        self.losses = [host["losses"]]
        self.metrics = [_unprefix(host, "metrics/")]
        self.snaps = [_unprefix(host, "snapshots/")]
        self.first_bad, self.elapsed = host["first_bad"], float(host["run_seconds"])
        if self.progress:
            self.progress(f"resumed at step {start}/{self.num_steps} from {checkpoint.path}")
        return start, _device_state(state, self.runs.sharding)

    def record(self, first_step: int, loss: Any, metrics: Any, snaps: Any) -> int:
        """Keep a chunk's numbers, stream its rows, print progress, stop at a non-finite loss;
        returns the steps done."""
        loss = _on_host(loss)
        self.losses.append(loss)
        self.metrics.append(jax.tree.map(_on_host, metrics))
        self.snaps.append(jax.tree.map(_on_host, snaps))
        bad = ~np.isfinite(loss)
        newly_bad = bad.any(axis=1) & (self.first_bad < 0)
        self.first_bad[newly_bad] = first_step + bad[newly_bad].argmax(axis=1)
        newly_bad[self.runs.num_runs :] = False  # padding runs are never reported
        done = first_step + self.chunk_len
        if self.recorder:
            self.recorder.write_rows(first_step, loss, self.snaps[-1])
        if self.progress:
            n = self.runs.num_runs
            line = _progress_line(
                done, self.num_steps, loss[:n], self.first_bad[:n], self.seconds()
            )
            self.progress(line)
        if self.on_nonfinite == "stop" and newly_bad.any():
            self._stop_at_nonfinite(int(np.flatnonzero(newly_bad)[0]), done)
        return done

    def _stop_at_nonfinite(self, run: int, done: int) -> None:
        where = ""
        if self.workdir is not None:
            where = f"; records up to step {done} are in {self.workdir.path}"
        given = self.runs.given_hparams
        setting = ", ".join(f"{k}={float(v[run]):g}" for k, v in given.items())
        if self.recorder:
            self.recorder.save_partial(self.losses, self.snaps)
        raise NonFiniteLossError(
            f"The loss became non-finite at step {self.first_bad[run]} in run {run} "
            f"(seed {self.runs.seeds[run]}{', ' + setting if setting else ''}){where}.",
            step=int(self.first_bad[run]),
        )

    def save_or_stop(self, done: int, state: TrainState) -> None:
        """At a chunk boundary: checkpoint when due, and stop when asked to."""
        stop = _stop.is_set() and done < self.num_steps
        save = self.checkpoint is not None and (
            done == self.num_steps
            or stop
            or time.perf_counter() - self.last_save >= self.workdir.checkpoint_seconds
        )
        if jax.process_count() > 1:
            save, stop = _agree(save, stop)
        if save:  # over several processes every one gathers, process 0 writes
            self.checkpoint.save(done, _saveable(state), self.arrays(done == self.num_steps))
            self.last_save = time.perf_counter()
        if stop:
            if self.recorder:
                self.recorder.save_partial(self.losses, self.snaps)
            raise Interrupted(f"Stopped at step {done}/{self.num_steps}", step=done)

    def arrays(self, complete: bool) -> dict[str, np.ndarray]:
        """The host's records as a checkpoint's arrays."""

        def cat(parts: list) -> np.ndarray:
            return np.concatenate(parts, axis=1)

        losses, metrics, snaps = self.losses, self.metrics, self.snaps
        return {
            "losses": cat(losses) if losses else np.zeros((len(self.runs.seeds), 0), np.float32),
            **{
                f"metrics/{k}": cat([m[k] for m in metrics])
                for k in (metrics[0] if metrics else {})
            },
            **{f"snapshots/{k}": cat([x[k] for x in snaps]) for k in snaps[0]},
            "first_bad": self.first_bad,
            "metrics_bytes": np.int64(self.workdir.metrics_bytes()),
            "complete": np.bool_(complete),
            "compile_seconds": np.float64(self.compile_seconds),
            "run_seconds": np.float64(self.seconds()),
        }

    def result(self, state: TrainState, log_every: int, initial_params: Params) -> RunResult:
        run_seconds = self.seconds()

        def real(x: Any) -> np.ndarray:
            return _on_host(x)[: self.runs.num_runs]

        def joined(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
            return {k: real(np.concatenate([p[k] for p in parts], axis=1)) for k in parts[0]}

        return RunResult(
            hparams={k: real(v) for k, v in self.runs.given_hparams.items()},
            seeds=real(self.runs.seeds),
            losses=real(np.concatenate(self.losses, axis=1)),
            metrics=joined(self.metrics),
            snapshot_steps=np.arange(0, self.num_steps + 1, log_every),
            snapshots=joined(self.snaps),
            final_params=jax.tree.map(real, state.params),
            first_nonfinite_step=real(self.first_bad),
            compile_seconds=self.compile_seconds,
            run_seconds=run_seconds,
            initial_params=jax.tree.map(real, initial_params),
            backend=jax.default_backend(),
            device_count=jax.device_count(),
            program_devices=1 if self.runs.sharding is None else len(self.runs.sharding.device_set),
        )


def _check_compiled_memory(compiled: jax.stages.Compiled, num_devices: int) -> None:
    """Refuse a program whose buffers (XLA's memory analysis, on every device) exceed the memory
    available, before its first step: one sentence instead of an allocation failure."""
    try:
        analysis = compiled.memory_analysis()
    except Exception:  # not every backend reports it
        return
    if analysis is None:
        return
    per_device = (
        analysis.temp_size_in_bytes
        + analysis.argument_size_in_bytes
        + analysis.output_size_in_bytes
        - analysis.alias_size_in_bytes
    )
    needed, available = per_device * num_devices, config_lib.available_memory_bytes()
    if needed > available:
        raise config_lib.ConfigError(
            f"the compiled training program needs {config_lib.format_bytes(needed)} (XLA's "
            f"memory analysis) but {config_lib.format_bytes(available)} is available: lower the "
            "batch size, the sequence length or the number of runs per program."
        )


def _saveable(state: TrainState) -> TrainState:
    """The state as numpy arrays, the typed data keys as their raw key data (for orbax)."""
    return jax.tree.map(_on_host, state._replace(key=jax.random.key_data(state.key)))


def _device_state(state: TrainState, sharding: jax.sharding.Sharding | None) -> TrainState:
    state = jax.tree.map(lambda x: _to_devices(x, sharding), state)
    return state._replace(key=jax.random.wrap_key_data(state.key))


def _agree(save: bool, stop: bool) -> tuple[bool, bool]:
    """Over several processes, one decision at a chunk boundary: save when process 0's clock
    says so (every process gathers the state, process 0 writes it), stop when any process was
    asked to (a SIGTERM reaching one process stops them all at the same step)."""
    from jax.experimental import multihost_utils

    wants = np.asarray(multihost_utils.process_allgather(np.array([save, stop], np.int32)))
    return bool(wants[0, 0]), bool(wants[:, 1].any())


def _latest_step_everywhere(checkpoint: Any) -> int | None:
    """The checkpoint's latest step, which every process must see alike (they restore it
    together): a process that sees another one is told so in one sentence."""
    step = checkpoint.latest_step()
    if jax.process_count() == 1:
        return step
    from jax.experimental import multihost_utils

    seen = np.asarray(multihost_utils.process_allgather(np.int64(-1 if step is None else step)))
    if len(set(seen.tolist())) > 1:
        raise config_lib.ConfigError(
            f"--resume: the processes see different checkpoints in {checkpoint.path} (latest "
            f"step by process: {seen.tolist()}, -1 = none): the workdir must be on a filesystem "
            "every process sees."
        )
    return step


def _to_devices(x: Any, sharding: jax.sharding.Sharding | None) -> jax.Array:
    """A host array laid out by `sharding` (None: as it is). A sharding over several processes'
    devices (jax.distributed) gets each process's shards from the same host array, which every
    process holds whole (the grid is the same everywhere)."""
    if sharding is None:
        return jnp.asarray(x)
    if sharding.is_fully_addressable:
        return jax.device_put(x, sharding)
    x = np.asarray(x)
    return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])


def _on_host(x: Any) -> np.ndarray:
    """A device array as numpy; one that spans several processes is gathered from all of them
    (every process then holds every run's numbers)."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(x)


def _unprefix(host: dict[str, np.ndarray], prefix: str) -> dict[str, np.ndarray]:
    return {k[len(prefix) :]: v for k, v in host.items() if k.startswith(prefix)}


def grad_zero_fraction(grads: Params) -> jax.Array:
    """Fraction of the gradient's entries that are exactly zero (float16 underflows)."""
    leaves = jax.tree.leaves(grads)
    zeros = jnp.sum(jnp.stack([jnp.sum(g == 0) for g in leaves]))
    return zeros.astype(jnp.float32) / sum(g.size for g in leaves)


def _per_device(
    chunk: Callable, sharding: jax.sharding.Sharding | None, split_batch: bool = False
) -> Callable:
    """chunk(state, step, hparams) on each device's own runs (a shard_map over the run axis), so
    that groups of runs apply per device and devices never talk to each other; other shardings
    are left to the partitioner. With split_batch, every device holds the same (single) run and
    its step averages the devices' shares of the batch (check_vma off: the gradient of a share
    is that device's own, averaged explicitly in step_one)."""
    if not isinstance(sharding, jax.sharding.NamedSharding):
        return chunk
    if split_batch:
        return jax.shard_map(
            chunk, mesh=sharding.mesh, in_specs=(P(), P(), P()), out_specs=P(), check_vma=False
        )
    runs = sharding.spec
    return jax.shard_map(chunk, mesh=sharding.mesh, in_specs=(runs, P(), runs), out_specs=runs)


def _grouped(vmapped: Callable, runs_per_group: int | None) -> Callable:
    """vmapped(state, step, hparams) over at most runs_per_group runs at a time: a lax.map over
    groups (the last group padded with copies of the first run, dropped after)."""
    if runs_per_group is None:
        return vmapped

    def grouped(state: TrainState, first_step: jax.Array, hparams: HParams) -> Any:
        num_runs = jax.tree.leaves(state)[0].shape[0]
        if num_runs <= runs_per_group:
            return vmapped(state, first_step, hparams)
        num_groups = -(-num_runs // runs_per_group)
        pad = num_groups * runs_per_group - num_runs

        runs = np.concatenate([np.arange(num_runs), np.zeros(pad, int)])

        def split(x: jax.Array) -> jax.Array:
            return x[runs].reshape((num_groups, runs_per_group) + x.shape[1:])

        out = jax.lax.map(
            lambda group: vmapped(group[0], first_step, group[1]),
            jax.tree.map(split, (state, hparams)),
        )
        return jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:])[:num_runs], out)

    return grouped


def _snapshots_per_chunk(num_snapshots: int, log_every: int, chunk_steps: int | None) -> int:
    """Snapshots per compiled chunk: a divisor of num_snapshots, about chunk_steps / log_every."""
    if chunk_steps is None:  # about ten progress lines per run
        target = max(1, round(num_snapshots / 10))
    else:
        if chunk_steps % log_every:
            raise ValueError(
                f"chunk_steps = {chunk_steps} must be a multiple of log_every = {log_every}."
            )
        target = chunk_steps // log_every
    divisors = [d for d in range(1, num_snapshots + 1) if num_snapshots % d == 0]
    return min(divisors, key=lambda d: (abs(d - target), d))


def _progress_line(
    done: int, num_steps: int, loss: np.ndarray, first_bad: np.ndarray, seconds: float
) -> str:
    last = loss[:, -1]
    finite = last[np.isfinite(last)]
    spread = (
        f"loss {finite.mean():.4g} (min {finite.min():.3g}, max {finite.max():.3g})"
        if finite.size
        else "loss non-finite in every run"
    )
    bad = int((first_bad >= 0).sum())
    return (
        f"step {done:>{len(str(num_steps))}}/{num_steps} | {loss.shape[0]} runs | {spread}"
        f"{f' | {bad} runs non-finite' if bad else ''} | {seconds:.2f} s"
    )


class _Recorder:
    """Streams metrics.jsonl rows (one per run per snapshot step) while a run goes on."""

    def __init__(
        self,
        workdir: Any,
        hparams: dict[str, np.ndarray],
        seeds: np.ndarray,
        log_every: int,
        num_runs: int,
        tags: dict[str, Any],
    ) -> None:
        self.workdir, self.log_every, self.tags = workdir, log_every, tags
        self.hparams = {k: np.asarray(v)[:num_runs] for k, v in hparams.items()}
        self.seeds = seeds[:num_runs]

    def write_rows(
        self, first_step: int, loss: np.ndarray | None, snaps: dict[str, np.ndarray]
    ) -> None:
        scalars = {k: v for k, v in snaps.items() if np.ndim(v) == 2}  # (R, S), padded R
        num_snaps = (
            next(iter(snaps.values())).shape[1]
            if snaps
            else (1 if loss is None else loss.shape[1] // self.log_every)
        )
        rows = []
        for s in range(num_snaps):
            step = first_step + (0 if loss is None else (s + 1) * self.log_every)
            for r, seed in enumerate(self.seeds):
                row = {"step": int(step), "run": r, "seed": int(seed), **self.tags}
                row.update({k: v[r].item() for k, v in self.hparams.items()})
                if loss is not None:  # batch loss of the last step before this snapshot
                    row["loss"] = float(loss[r, (s + 1) * self.log_every - 1])
                row.update({k: float(v[r, s]) for k, v in scalars.items()})
                rows.append(row)
        self.workdir.append_metrics(rows)

    def save_partial(self, losses: list[np.ndarray], snaps: list[dict[str, np.ndarray]]) -> None:
        """arrays.npz of a run stopped early: the steps so far, real runs only."""
        n = len(self.seeds)
        self.workdir.save_arrays(
            losses=np.concatenate(losses, axis=1)[:n],
            **{
                f"snapshot_{k}": np.concatenate([s[k] for s in snaps], axis=1)[:n] for k in snaps[0]
            },
        )
