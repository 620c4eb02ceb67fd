"""The host loop of a training program: `train` runs any number of runs at once (a vmapped run
axis, `lax.scan` chunks, Python looping only over chunks), records them, checks them for
non-finite losses, checkpoints them and stops on request. The step itself is `step.py`, the
optimizers `optimizers.py`, the result `result.py`; this module re-exports what paper packages
and scripts use (`training.Problem`, `training.train`, `training.default_optim_config`).
See docs/design/training.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from landscape import _checks
from landscape.engine import backend, distributed, keeping, memory, records, regroup
from landscape.engine.grouping import grouped as _grouped
from landscape.engine.grouping import per_device as _per_device
from landscape.engine.optimizers import OPTIMIZERS as OPTIMIZERS
from landscape.engine.optimizers import SCHEDULES as SCHEDULES
from landscape.engine.optimizers import default_optim_config as default_optim_config
from landscape.engine.optimizers import direction as direction
from landscape.engine.optimizers import onecycle as onecycle
from landscape.engine.optimizers import schedule as schedule
from landscape.engine.optimizers import validate_optim as validate_optim
from landscape.engine.result import RunResult as RunResult
from landscape.engine.result import run_timing as run_timing
from landscape.engine.step import (
    BATCH_AXIS,
    METRICS_AT,
    HParams,
    Params,
    StepSpec,
    TrainState,
    first_records,
    init_state,
    step_spec,
    train_chunk,
)
from landscape.engine.step import CURRENT_PREFIX as CURRENT_PREFIX
from landscape.engine.step import Problem as Problem
from landscape.engine.step import batch_devices as batch_devices
from landscape.engine.step import batch_share as batch_share
from landscape.engine.step import default_averaging as default_averaging
from landscape.engine.step import grad_zero_fraction as grad_zero_fraction
from landscape.engine.step import run_keys as run_keys
from landscape.engine.step import snapshot_at as snapshot_at
from landscape.engine.step import train_step as train_step
from landscape.engine.step import validate_averaging as validate_averaging
from landscape.engine.track import Track


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
_saving = threading.Event()  # a checkpoint is being written
_stop_after_save = threading.Event()


def request_stop() -> bool:
    """Ask a running `train` to stop at its next chunk boundary. Returns False when no training
    loop is running (nothing would see the request; the caller should stop at once instead)."""
    _stop.set()
    return _in_loop.is_set()


def stop_after_save() -> bool:
    """While a checkpoint is being written, have `train` stop as soon as it is whole and return
    True (a stop at once would leave orbax's writer half-way); otherwise False."""
    if not _saving.is_set():
        return False
    _stop_after_save.set()
    return True


def clear_stop() -> None:
    _stop.clear()
    _stop_after_save.clear()


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
    params_every: int = 0,
    track: Track | None = None,
) -> RunResult:
    """Train R runs at once (R = len(seeds)); hparams maps names to arrays of shape (R,).

    Each run starts from `init_state` and takes `train_step`s, `train_chunk` by `train_chunk`
    (one compiled program, vmapped over runs); Python only loops over chunks. `log_every` is the
    snapshot cadence; `chunk_steps` (a multiple of it) the cadence of progress lines, non-finite
    checks, stop requests, checkpoints and streamed records. `on_nonfinite`: "stop" raises
    `NonFiniteLossError` naming the step (after writing the records so far); "mark" carries on
    and reports the first bad step per run. `record_tags`: extra metrics.jsonl columns.
    `sharding` spreads the runs over devices; `batch_over` splits a single run's batch over
    devices instead (`batch_devices`). `hparam_dtype`: the dtype of the traced hyperparameters
    and the optimizer's scalars (`step_spec`); records keep the numbers as given. `metrics_at`:
    snapshots at the "current" parameters, their debiased "ema" (`optax.ema(ema_decay)`), or
    "both" (current ones prefixed "current_"). `params_every`: keep every run's parameters at
    steps 0, params_every, ..., num_steps (`RunResult.params_at`; the bytes are said before the
    run). `track`: curvature measured inside the chunk every `track.every` steps (`Track`).

    With a `workdir`: checkpoints and --resume, bit-identical (docs/guide/resume.md).
    """
    check_run_options(num_steps, log_every, chunk_steps, on_nonfinite, metrics_at, ema_decay)
    keeping.check_arguments(params_every, track, num_steps, log_every)
    spec = step_spec(
        problem,
        optim,
        num_steps=num_steps,
        log_every=log_every,
        chunk_steps=chunk_steps,
        metrics_at=metrics_at,
        ema_decay=ema_decay,
        dtype=hparam_dtype,
        params_every=params_every,
        track=track,
    )
    runs = _place_runs(problem, hparams, seeds, sharding, batch_over, hparam_dtype)
    spec = dataclasses.replace(spec, batch_shares=runs.shares)
    t_start = time.perf_counter()
    state, (first_snapshot, first_tracked), chunk = _compile(spec, runs)
    initial_params = jax.tree.map(
        lambda x: np.array(distributed.on_host(x)), state.params
    )  # copies:
    # the chunk donates the state's buffers
    keeping.check_kept_memory(spec, num_steps, initial_params, progress)
    host = _Host(
        runs,
        num_steps,
        spec.snapshots_per_chunk * log_every,
        on_nonfinite,
        progress,
        workdir,
        time.perf_counter() - t_start,
        kept=keeping.Kept(spec),
    )
    memory.check_compiled_memory(
        chunk, 1 if runs.sharding is None else len(runs.sharding.device_set)
    )
    host.kept.start(initial_params, jax.tree.map(distributed.on_host, first_tracked))
    host.start(first_snapshot, log_every, record_tags or {})
    start, state = host.resume(state)
    state = _loop(host, chunk, state, start, runs.hparams)
    return host.result(state, log_every, initial_params)


def _loop(
    host: _Host, chunk: Callable, state: TrainState, start: int, hparams: HParams
) -> TrainState:
    """The chunks from step `start` on: Python's only loop (records, checks, checkpoints)."""
    host.t_run = host.last_save = time.perf_counter()
    _in_loop.set()
    try:
        for first_step in range(start, host.num_steps, host.chunk_len):
            out = chunk(state, jnp.int32(first_step), hparams)
            state = out.state
            host.kept.add(first_step, *jax.tree.map(distributed.on_host, (out.tracked, out.kept)))
            done = host.record(first_step, out.losses, out.metrics, out.snapshots)
            host.save_or_stop(done, state)
    finally:
        _in_loop.clear()
    jax.block_until_ready(state)
    return state


def check_run_options(
    num_steps: int,
    log_every: int,
    chunk_steps: int | None = None,
    on_nonfinite: str = "stop",
    metrics_at: str = "current",
    ema_decay: float = 0.999,
) -> None:
    """`train`'s run options, each refused with one sentence naming it (sweeps.run checks them
    before it opens a workdir)."""
    _checks.check_int("num_steps", num_steps, 1, "the training steps of every run")
    _checks.check_int("log_every", log_every, 1, "the steps between snapshots")
    if chunk_steps is not None:
        _checks.check_int("chunk_steps", chunk_steps, 1, "the steps of one compiled chunk")
    if num_steps % log_every:
        raise ValueError(f"num_steps = {num_steps} must be a multiple of log_every = {log_every}.")
    if on_nonfinite not in ("stop", "mark"):
        raise ValueError(f"on_nonfinite = {on_nonfinite!r}: must be 'stop' or 'mark'.")
    if metrics_at not in METRICS_AT:
        raise ValueError(f"metrics_at = {metrics_at!r}: must be one of {METRICS_AT}.")
    _checks.check_real("ema_decay", ema_decay, low=0, high=1, low_open=True, high_open=True)


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
        return distributed.to_devices(x, sharding)

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


class Programs(NamedTuple):
    """The programs `train` is about to compile, jitted, with the arguments it calls them at:
    `init(*init_args)` gives the runs' states, `first_records(state, hparams)` their records at
    step 0, `chunk(state, jnp.int32(first_step), hparams)` a chunk of steps (the state donated)."""

    init: Any
    init_args: tuple[Any, ...]
    first_records: Any
    chunk: Any
    hparams: HParams


_programs_hooks: list[Callable[[Programs], object]] = []


@contextlib.contextmanager
def watching_programs(hook: Callable[[Programs], object]) -> Iterator[None]:
    """While inside, `train` calls `hook(programs)` before it compiles its `Programs` (a timing
    tool measures them there: experiments/bench/compile_timing.py); an exception the hook
    raises ends the run before anything is compiled."""
    _programs_hooks.append(hook)
    try:
        yield
    finally:
        _programs_hooks.remove(hook)


def _compile(spec: StepSpec, runs: _Runs) -> tuple[TrainState, tuple[dict, dict], Any]:
    """The runs' initial states, their first snapshots and tracked metrics (step 0), and the
    compiled chunk. Every input and
    output has the run axis first: pinned to the sharding (if any) so the compiled chunk keeps
    runs spread over devices from one call to the next. A long-lived process (a report, a
    notebook) first drops its compiled programs near its limit on memory mappings."""
    memory.free_programs_near_the_map_limit()
    sharding = runs.sharding
    pinned: dict[str, Any] = {} if sharding is None else dict(out_shardings=sharding)
    options = backend.compiler_options()  # XLA's defaults unless measured otherwise
    init = jax.jit(jax.vmap(functools.partial(init_state, spec)), **pinned)
    first = jax.vmap(functools.partial(first_records, spec))
    first_jitted = jax.jit(first, **pinned, compiler_options=options)
    chunk = _chunk_program(spec, runs)
    for hook in list(_programs_hooks):
        hook(Programs(init, (runs.seeds_dev, runs.hparams), first_jitted, chunk, runs.hparams))
    init_lowered = init.lower(runs.seeds_dev, runs.hparams)
    chunk_lowered = chunk.lower(init_lowered.out_info, jnp.int32(0), runs.hparams)
    keeping.check_metric_names(spec.track, chunk_lowered.out_info.metrics)
    # One program after the other: compiling the chunk on a second thread while this one
    # compiled init saved 0.1-0.2 s, and once crashed XLA (a segfault while the persistent
    # cache wrote one executable and the other thread compiled).
    state = init_lowered.compile(options)(runs.seeds_dev, runs.hparams)
    records = first_jitted(state, runs.hparams)
    return state, records, chunk_lowered.compile(options)


def _chunk_program(spec: StepSpec, runs: _Runs) -> Any:
    """The jitted chunk: runs vmapped (in groups), per device; the state donated."""
    sharding = runs.sharding
    pinned: dict[str, Any] = {}
    if sharding is not None:
        pinned = dict(out_shardings=sharding, in_shardings=(sharding, None, sharding))
    chunk_runs = jax.vmap(functools.partial(train_chunk, spec), in_axes=(0, None, 0))
    group = backend.runs_per_group(spec.problem.runs_per_group, spec.problem.run_bytes)
    return jax.jit(
        _per_device(
            _grouped(chunk_runs, group, balance=not backend.cpu_tuned()),
            sharding,
            runs.shares > 1,
        ),
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
    kept: keeping.Kept
    losses: list = dataclasses.field(default_factory=list)
    metrics: list = dataclasses.field(default_factory=list)
    snaps: list = dataclasses.field(default_factory=list)
    first_bad: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, int))
    recorder: records.MetricsRecorder | None = None
    checkpoint: Any = None
    elapsed: float = 0.0  # run seconds of earlier processes (a resumed run)
    t_run: float = 0.0
    last_save: float = 0.0

    def seconds(self) -> float:
        return self.elapsed + time.perf_counter() - self.t_run

    def start(self, first_snapshot: dict[str, jax.Array], log_every: int, tags: dict) -> None:
        runs = self.runs
        self.snaps = [jax.tree.map(lambda x: distributed.on_host(x)[:, None], first_snapshot)]
        self.first_bad = np.full(len(runs.seeds), -1)
        if self.workdir:
            self.recorder = records.MetricsRecorder(
                self.workdir, runs.given_hparams, runs.seeds, log_every, runs.num_runs, tags
            )
            # several processes (jax.distributed): process 0 writes the checkpoints and the
            # records (experiments/running.py); every process reads the same checkpoint on --resume
            self.checkpoint = self.workdir.next_checkpoint()

    def resume(self, state: TrainState) -> tuple[int, TrainState]:
        """The step to start from and the state there: a checkpoint's (--resume), or 0."""
        checkpoint = self.checkpoint
        if checkpoint is None or distributed.latest_step_everywhere(checkpoint) is None:
            if checkpoint is not None and self.workdir.resuming and self.progress:
                self.progress(f"started at step 0: {checkpoint.path} holds no sealed checkpoint")
            if self.recorder:
                self.recorder.write_rows(0, None, self.snaps[0], self._tracked_rows())
            return 0, state
        start, state, host = self._restore(checkpoint, state)
        self.losses = [host["losses"]]
        self.metrics = [_unprefix(host, "metrics/")]
        self.snaps = [_unprefix(host, "snapshots/")]
        self.first_bad, self.elapsed = host["first_bad"], float(host["run_seconds"])
        self.kept.restore(host)
        if self.progress:
            self.progress(f"resumed at step {start}/{self.num_steps} from {checkpoint.path}")
        return start, _device_state(state, self.runs.sharding)

    def _restore(self, checkpoint: Any, state: TrainState) -> tuple[int, Any, dict[str, Any]]:
        """The checkpoint's step, state and host records, its runs padded again when the
        device count changed (regroup.py)."""
        host, runs = checkpoint.read_host(), self.runs
        regroup.check_devices(host, self.devices(), runs.shares)
        rows, saved = len(runs.seeds), regroup.saved_rows(host)
        if saved == rows:
            return checkpoint.restore(_saveable(state))
        step, state, host = checkpoint.restore(regroup.template(_saveable(state), saved))
        if self.progress:
            self.progress(f"{runs.num_runs} runs saved as {saved} rows, padded to {rows} here")
        num_runs = runs.num_runs
        return (
            step,
            regroup.repad_state(state, num_runs, rows),
            regroup.repad_host(host, num_runs, rows),
        )

    def devices(self) -> int:
        """The devices the program runs on."""
        return 1 if self.runs.sharding is None else len(self.runs.sharding.device_set)

    def record(self, first_step: int, loss: Any, metrics: Any, snaps: Any) -> int:
        """Keep a chunk's numbers, stream its rows, print progress, stop at a non-finite loss;
        returns the steps done."""
        loss = distributed.on_host(loss)
        self.losses.append(loss)
        self.metrics.append(jax.tree.map(distributed.on_host, metrics))
        self.snaps.append(jax.tree.map(distributed.on_host, snaps))
        bad = ~np.isfinite(loss)
        newly_bad = bad.any(axis=1) & (self.first_bad < 0)
        self.first_bad[newly_bad] = first_step + bad[newly_bad].argmax(axis=1)
        newly_bad[self.runs.num_runs :] = False  # padding runs are never reported
        done = first_step + self.chunk_len
        if self.recorder:
            self.recorder.write_rows(first_step, loss, self.snaps[-1], self._tracked_rows())
        if self.progress:
            n = self.runs.num_runs
            line = _progress_line(
                done, self.num_steps, loss[:n], self.first_bad[:n], self.seconds()
            )
            self.progress(line)
        if self.on_nonfinite == "stop" and newly_bad.any():
            self._stop_at_nonfinite(int(np.flatnonzero(newly_bad)[0]), done)
        return done

    def _tracked_rows(self) -> tuple[dict[str, np.ndarray], int]:
        """The last part's tracked metrics (R, S) for metrics.jsonl, and their cadence."""
        track = self.kept.spec.track
        return (self.kept.tracked[-1], track.every) if track is not None else ({}, 0)

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
            save, stop = distributed.agree(save, stop)
        if save:  # over several processes every one gathers, process 0 writes
            _saving.set()
            try:
                self.checkpoint.save(done, _saveable(state), self.arrays(done == self.num_steps))
            finally:
                _saving.clear()
            self.last_save = time.perf_counter()
        if stop or _stop_after_save.is_set():
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
            "metrics_sha256": np.asarray(self.workdir.metrics_sha256()),  # verified on resume
            "complete": np.bool_(complete),
            "devices": np.int64(self.devices()),  # a resume on another count: regroup.py
            "shares": np.int64(self.runs.shares),
            "compile_seconds": np.float64(self.compile_seconds),
            "run_seconds": np.float64(self.seconds()),
            **self.kept.arrays(),
        }

    def result(self, state: TrainState, log_every: int, initial_params: Params) -> RunResult:
        run_seconds = self.seconds()

        def real(x: Any) -> np.ndarray:
            return distributed.on_host(x)[: self.runs.num_runs]

        def joined(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
            return {k: real(np.concatenate([p[k] for p in parts], axis=1)) for k in parts[0]}

        snapshot_steps = np.arange(0, self.num_steps + 1, log_every)
        kept = self.kept.result_fields(snapshot_steps, real)
        return RunResult(
            hparams={k: real(v) for k, v in self.runs.given_hparams.items()},
            seeds=real(self.runs.seeds),
            losses=real(np.concatenate(self.losses, axis=1)),
            metrics={**joined(self.metrics), **kept.pop("tracked", {})},
            snapshot_steps=snapshot_steps,
            snapshots=joined(self.snaps),
            final_params=jax.tree.map(real, state.params),
            first_nonfinite_step=real(self.first_bad),
            compile_seconds=self.compile_seconds,
            run_seconds=run_seconds,
            initial_params=jax.tree.map(real, initial_params),
            backend=jax.default_backend(),
            device_count=jax.device_count(),
            program_devices=self.devices(),
            **kept,
        )


def _saveable(state: TrainState) -> TrainState:
    """The state as numpy arrays, the typed data keys as their raw key data (for orbax)."""
    return jax.tree.map(distributed.on_host, state._replace(key=jax.random.key_data(state.key)))


def _device_state(state: TrainState, sharding: jax.sharding.Sharding | None) -> TrainState:
    state = jax.tree.map(lambda x: distributed.to_devices(x, sharding), state)
    return state._replace(key=jax.random.wrap_key_data(state.key))


def _unprefix(host: dict[str, np.ndarray], prefix: str) -> dict[str, np.ndarray]:
    return {k[len(prefix) :]: v for k, v in host.items() if k.startswith(prefix)}


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
