"""A grid of swept numbers x seeds as one compiled program, laid over every visible device.

The grid is flattened into one run axis R = (product of axis lengths) x seeds. That axis is
sharded over a 1-D `jax.sharding.Mesh` of all devices (GPUs, TPU cores, hosts after
`jax.distributed.initialize()`, or CPU devices forced with
`XLA_FLAGS=--xla_force_host_platform_device_count=N`), so the same code runs one process on a
laptop or a pod. R is padded to a multiple of the device count; the padding is dropped afterwards.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import ml_collections
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from landscape import config as config_lib
from landscape import training


@dataclasses.dataclass(frozen=True)
class Grid:
    """Named axes of swept values, times seeds; runs are ordered axis-major, seeds last.

    zipped=True pairs the axes instead of taking their product (all of one length: the points
    (p, q) = (0.5, 0.8), (0.2, 0.3) rather than four combinations); the grid then has one axis.
    """

    axes: dict[str, np.ndarray]
    seeds: np.ndarray
    zipped: bool = False

    @classmethod
    def make(
        cls,
        axes: Mapping[str, Sequence[float] | np.ndarray],
        seeds: Sequence[int] | np.ndarray,
        zipped: bool = False,
    ) -> Grid:
        flat = {k: np.asarray(v, np.float64).reshape(-1) for k, v in axes.items()}
        if zipped and len({len(v) for v in flat.values()}) > 1:
            raise ValueError(
                "zipped sweep axes must have equal lengths; got "
                + ", ".join(f"{k}: {len(v)}" for k, v in flat.items())
            )
        return cls(flat, np.asarray(seeds, np.int64).reshape(-1), zipped)

    @property
    def shape(self) -> tuple[int, ...]:
        if self.zipped:
            return (len(next(iter(self.axes.values()))) if self.axes else 1, len(self.seeds))
        return tuple(len(v) for v in self.axes.values()) + (len(self.seeds),)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    def flat(self) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """(hparams {name: (R,)}, seeds (R,)) for every cell and seed."""
        cells = (
            list(zip(*self.axes.values(), strict=True))  # equal lengths: make() checks
            if self.zipped
            else list(itertools.product(*self.axes.values()))
        ) or [()]
        hparams = {
            k: np.repeat([c[i] for c in cells], len(self.seeds)) for i, k in enumerate(self.axes)
        }
        return hparams, np.tile(self.seeds, len(cells))

    def unflatten(self, x: np.ndarray) -> np.ndarray:
        """(R, ...) -> (*axes, seeds, ...)."""
        x = np.asarray(x)
        return x.reshape(self.shape + x.shape[1:])


def run_axis_sharding(devices: Sequence[jax.Device] | None = None) -> NamedSharding:
    """Shards the leading (run) axis of every array over a 1-D mesh of `devices` (default: all)."""
    mesh = Mesh(np.asarray(devices if devices is not None else jax.devices()), ("runs",))
    return NamedSharding(mesh, PartitionSpec("runs"))


def run(
    problem: training.Problem,
    optim: ml_collections.ConfigDict,
    base_hparams: Mapping[str, float],
    grid: Grid,
    *,
    devices: Sequence[jax.Device] | None = None,
    dtype: Any = np.float32,
    **train_kwargs: Any,
) -> training.RunResult:
    """Train every cell of `grid` (and every seed) as one program, sharded over `devices`.

    `base_hparams` gives every traced number; the grid's axes override some of them per cell.
    The result has R = grid.size runs in grid order (use `grid.unflatten`); `train` pads R to a
    multiple of the device count and drops the padding. A single run of a problem with a
    `batch_size` splits its batch over the devices instead (`training.batch_devices`).
    """
    unknown = set(grid.axes) - set(base_hparams)
    if unknown:
        raise ValueError(
            f"sweep axes {sorted(unknown)} are not hyperparameters of this problem "
            f"(known: {sorted(base_hparams)})."
        )
    swept, seeds = grid.flat()
    hparams = {
        k: np.asarray(swept.get(k, np.full(len(seeds), v)), np.float64)
        for k, v in base_hparams.items()
    }  # traced in `dtype`, recorded as given
    train_kwargs["hparam_dtype"] = dtype
    devices = list(jax.devices() if devices is None else devices)
    if grid.size == 1:  # one run: its batch over the devices, where the problem allows it
        split = training.batch_devices(problem, devices)
        return training.train(
            problem,
            optim,
            hparams,
            seeds,
            batch_over=split if len(split) > 1 else None,
            **train_kwargs,
        )
    # no device holds only padding; several processes (jax.distributed) all take part
    sharding = run_axis_sharding(devices if jax.process_count() > 1 else devices[: grid.size])
    return training.train(
        problem,
        optim,
        hparams,
        seeds,
        sharding=sharding if sharding.mesh.size > 1 else None,
        **train_kwargs,
    )


def run_cell(
    problem: training.Problem,
    cell: ml_collections.ConfigDict,
    traced: Sequence[str],
    grid: Grid,
    *,
    fields: Mapping[str, Any],
    workdir: Any = None,
    progress: Callable[[str], None] | None = print,
) -> training.RunResult:
    """`run` for one structural cell of an experiment config: the traced fields' values in `cell`
    are the base hyperparameters, and `cell.optim` / `cell.train` (dtype and `train_options`)
    set the run; metrics rows are tagged with the cell's `fields`."""
    base = {k: config_lib.get(cell, k) for k in traced}
    return run(
        problem,
        cell.optim,
        base,
        grid,
        dtype=np.dtype(cell.train.dtype),
        progress=progress,
        workdir=workdir,
        record_tags=dict(fields),
        **train_options(cell),
    )


def train_options(cfg: ml_collections.ConfigDict) -> dict[str, Any]:
    """`training.train`'s run options from a config's `train` group: num_steps, log_every,
    chunk_steps (0 or absent: about ten chunks), on_nonfinite, metrics_at and ema_decay."""
    t = cfg.train
    return dict(
        num_steps=t.num_steps,
        log_every=t.log_every,
        chunk_steps=t.get("chunk_steps", 0) or None,
        on_nonfinite=t.on_nonfinite,
        metrics_at=t.metrics_at,
        ema_decay=t.ema_decay,
    )
