"""Runs over several devices and processes: arrays laid out by a sharding and gathered back to
the host, and the one decision every process takes at a chunk boundary (jax.distributed)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from landscape.engine import config as config_lib


def agree(save: bool, stop: bool) -> tuple[bool, bool]:
    """Over several processes, one decision at a chunk boundary: save when process 0's clock
    says so (every process gathers the state, process 0 writes it), stop when any process was
    asked to (a SIGTERM reaching one process stops them all at the same step)."""
    from jax.experimental import multihost_utils

    wants = np.asarray(multihost_utils.process_allgather(np.array([save, stop], np.int32)))
    return bool(wants[0, 0]), bool(wants[:, 1].any())


def same_config(config: dict[str, Any]) -> None:
    """Over several processes, before anything trains: raise ConfigError (one sentence, on every
    process) unless every process was given the same config, by the sha256 of its JSON."""
    if jax.process_count() == 1:
        return
    from jax.experimental import multihost_utils

    text = json.dumps(config, sort_keys=True, default=repr)
    digest = np.frombuffer(hashlib.sha256(text.encode()).digest(), np.uint8)
    seen = np.asarray(multihost_utils.process_allgather(digest))
    differ = [i for i in range(len(seen)) if not np.array_equal(seen[i], seen[0])]
    if differ:
        hexes = [seen[i].tobytes().hex()[:12] for i in (differ[0], 0)]
        raise config_lib.ConfigError(
            f"process {differ[0]} was given another config than process 0 (sha256 {hexes[0]}... "
            f"against {hexes[1]}...), so none of them trains: run the same command, with the "
            "same --config and overrides, in every process."
        )


def latest_step_everywhere(checkpoint: Any) -> int | None:
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


def to_devices(x: Any, sharding: jax.sharding.Sharding | None) -> jax.Array:
    """A host array laid out by `sharding` (None: as it is). A sharding over several processes'
    devices (jax.distributed) gets each process's shards from the same host array, which every
    process holds whole (the grid is the same everywhere)."""
    if sharding is None:
        return jnp.asarray(x)
    if sharding.is_fully_addressable:
        return jax.device_put(x, sharding)
    x = np.asarray(x)
    return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])


def on_host(x: Any) -> np.ndarray:
    """A device array as numpy; one that spans several processes is gathered from all of them
    (every process then holds every run's numbers)."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(x)
