"""How a chunk meets the devices: each device trains its own runs (a shard_map over the run
axis), or every device a share of a single run's batch; and within a device, runs vmapped in
groups of at most `runs_per_group` (a lax.map over groups). docs/architecture.md, "The engine"."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.sharding import PartitionSpec as P

from landscape.engine.step import HParams, TrainState


def per_device(
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


def grouped(vmapped: Callable, runs_per_group: int | None, balance: bool = False) -> Callable:
    """vmapped(state, step, hparams) over at most runs_per_group runs at a time: a lax.map over
    groups (the last group padded with copies of the first run, dropped after). `balance`: as
    many groups, of equal sizes (50 runs at most 42 a group: 2 of 25, not 2 of 42)."""
    if runs_per_group is None:
        return vmapped

    def grouped(state: TrainState, first_step: jax.Array, hparams: HParams) -> Any:
        num_runs = jax.tree.leaves(state)[0].shape[0]
        if num_runs <= runs_per_group:
            return vmapped(state, first_step, hparams)
        num_groups = -(-num_runs // runs_per_group)
        size = -(-num_runs // num_groups) if balance else runs_per_group
        pad = num_groups * size - num_runs

        runs = np.concatenate([np.arange(num_runs), np.zeros(pad, int)])

        def split(x: jax.Array) -> jax.Array:
            return x[runs].reshape((num_groups, size) + x.shape[1:])

        out = jax.lax.map(
            lambda group: vmapped(group[0], first_step, group[1]),
            jax.tree.map(split, (state, hparams)),
        )
        return jax.tree.map(
            lambda x: x.reshape((x.shape[0] * x.shape[1],) + x.shape[2:])[:num_runs], out
        )

    return grouped
