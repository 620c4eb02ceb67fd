"""What a training program keeps on the host besides its losses, metrics and snapshots: the
parameters at chosen steps (`params_every`) and the curvature tracked along training (`Track`),
chunk by chunk as the compiled chunk returns them, through checkpoints, into the `RunResult`.
docs/guide/tracking.md."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from landscape.engine import memory
from landscape.engine.config import ConfigError
from landscape.engine.step import StepSpec, kept_steps
from landscape.engine.track import PRECONDITIONED, TRACKED, Track

Params = Any

KEPT = "kept_params/"  # checkpoint entries: one per leaf, (R, steps so far, ...)
TRACKS = "tracks/"  # checkpoint entries: one per tracked metric, (R, snapshots so far)


def check_arguments(params_every: int, track: Any, num_steps: int, log_every: int) -> None:
    """One sentence for a params_every or track the run cannot honour."""
    if isinstance(params_every, bool) or not isinstance(params_every, (int, np.integer)):
        raise TypeError(f"params_every = {params_every!r}: must be an integer (0: off).")
    misplaced = params_every and (params_every % log_every or num_steps % params_every)
    if params_every < 0 or misplaced:
        raise ValueError(
            f"params_every = {params_every}: must be 0 (off) or a multiple of log_every = "
            f"{log_every} that divides num_steps = {num_steps}."
        )
    if track is None:
        return
    if not isinstance(track, Track):
        raise TypeError(f"track = {track!r}: must be a landscape.Track or None.")
    track.check_cadence(log_every, num_steps)


def check_metric_names(track: Track | None, metrics: Any) -> None:
    """A problem metric may not take a tracked metric's name."""
    names = TRACKED + ("negative_mass",) + PRECONDITIONED
    clash = sorted(set(metrics) & set(names)) if track else []
    if clash:
        raise ValueError(
            f"the problem's metrics {clash} take the names of tracked metrics: rename them."
        )


def kept_bytes(spec: StepSpec, num_runs: int, num_steps: int, params: Params) -> int:
    """Bytes the host keeps for the parameters at every params_every steps of every run."""
    if not spec.params_every:
        return 0
    per_run = sum(np.dtype(x.dtype).itemsize * int(np.prod(x.shape[1:])) for x in _leaves(params))
    return (num_steps // spec.params_every + 1) * num_runs * per_run


def check_kept_memory(
    spec: StepSpec, num_steps: int, params: Params, progress: Callable[[str], None] | None
) -> None:
    """Say the bytes the kept parameters take before the run, and refuse (one sentence) when
    they exceed the memory available."""
    if not spec.params_every:
        return
    num_runs = _leaves(params)[0].shape[0]
    need, count = kept_bytes(spec, num_runs, num_steps, params), num_steps // spec.params_every + 1
    available = memory.available_memory_bytes()
    if need > available:
        raise ConfigError(
            f"params_every = {spec.params_every} keeps the parameters at {count} steps of "
            f"{num_runs} runs, {memory.format_bytes(need)}, but {memory.format_bytes(available)} "
            "of memory is available: raise params_every (or train fewer runs at once)."
        )
    if progress:
        progress(
            f"keeping the parameters every {spec.params_every} steps: {count} steps x "
            f"{num_runs} runs, {memory.format_bytes(need)}"
        )


def _leaves(params: Params) -> list:
    return jax.tree.leaves(params)


@dataclasses.dataclass
class Kept:
    """The kept parameters and tracked metrics of a run so far (host arrays, padded runs)."""

    spec: StepSpec
    treedef: Any = None
    steps: list[int] = dataclasses.field(default_factory=list)
    params: list[list[np.ndarray]] = dataclasses.field(default_factory=list)  # per part, leaves
    tracked: list[dict[str, np.ndarray]] = dataclasses.field(default_factory=list)  # (R, S)

    def start(self, initial: Params, tracked: dict[str, np.ndarray]) -> None:
        """Step 0: the initial parameters (host copies) and the tracked metrics there."""
        leaves, self.treedef = jax.tree.flatten(initial)
        if self.spec.params_every:
            self.steps, self.params = [0], [[np.asarray(x)[:, None] for x in leaves]]
        self.tracked = [{k: np.asarray(v)[:, None] for k, v in tracked.items()}]

    def add(self, first_step: int, tracked: dict[str, np.ndarray], kept: Params) -> None:
        """A chunk's tracked metrics (R, S) and its kept parameters (R, slots, ...), of which
        only the slots of steps that are multiples of params_every are real."""
        self.tracked.append({k: np.asarray(v) for k, v in tracked.items()})
        steps = kept_steps(self.spec, first_step)
        if steps:
            self.steps += steps
            self.params.append([np.asarray(x)[:, : len(steps)] for x in jax.tree.leaves(kept)])

    def arrays(self) -> dict[str, np.ndarray]:
        """Checkpoint entries (`restore` reads them back)."""
        out: dict[str, np.ndarray] = {}
        if self.spec.params_every:
            out["kept_steps"] = np.asarray(self.steps, np.int64)
            for i, parts in enumerate(zip(*self.params, strict=True)):
                out[f"{KEPT}{i}"] = np.concatenate(parts, axis=1)
        for name in self.tracked[0] if self.tracked else {}:
            out[TRACKS + name] = np.concatenate([t[name] for t in self.tracked], axis=1)
        return out

    def restore(self, host: dict[str, np.ndarray]) -> None:
        if self.spec.params_every:
            self.steps = [int(s) for s in host["kept_steps"]]
            count = sum(1 for k in host if k.startswith(KEPT))
            self.params = [[host[f"{KEPT}{i}"] for i in range(count)]]
        self.tracked = [{k[len(TRACKS) :]: v for k, v in host.items() if k.startswith(TRACKS)}]

    def result_fields(
        self, snapshot_steps: np.ndarray, real: Callable[[Any], np.ndarray]
    ) -> dict[str, Any]:
        """RunResult's params_steps, kept_params, tracked_steps and the tracked metrics."""
        out: dict[str, Any] = {"params_steps": None, "kept_params": None, "tracked_steps": None}
        if self.spec.params_every:
            parts = zip(*self.params, strict=True)
            leaves = [real(np.concatenate(leaf_parts, axis=1)) for leaf_parts in parts]
            out["params_steps"] = np.asarray(self.steps, np.int64)
            out["kept_params"] = jax.tree.unflatten(self.treedef, leaves)
        track = self.spec.track
        if track is not None:
            at = snapshot_steps % track.every == 0
            out["tracked_steps"] = snapshot_steps[at]
            out["tracked"] = {
                k: real(np.concatenate([t[k] for t in self.tracked], axis=1))[:, at]
                for k in self.tracked[0]
            }
        return out
