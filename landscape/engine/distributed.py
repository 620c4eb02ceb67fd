"""Runs over several devices and processes: arrays laid out by a sharding and gathered back to
the host, the one decision every process takes at a chunk boundary (jax.distributed), and the
sentence naming a process lost during a probe (docs/guide/split_model.md, "Many hosts")."""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from landscape.engine import config as config_lib

EXIT_LOST = 1  # the CLIs' exit status for a run that failed (docs/guide/many_machines.md)
# what a collective or the coordination service says when a peer process is gone
_GONE = re.compile(
    r"closed by peer|reset by peer|broken pipe|heartbeat|unhealthy|socket closed|"
    r"connection refused|failed to connect",
    re.IGNORECASE,
)
_TASK = (  # how the coordination service names the lost task, most specific first
    re.compile(r"\btask (\d+) heartbeat timeout", re.IGNORECASE),
    re.compile(r"stopped sending heartbeats\):\s*(\d+)"),
    re.compile(r"/task:(\d+)"),
)
_PEER = re.compile(r"\[([^\]/]+)\]:\d+")  # gloo's "[host]:port" of the peer


class ProcessLost(RuntimeError):
    """Another process of this jax.distributed run was lost (killed or crashed): one sentence
    naming it. This process then exits with EXIT_LOST, skipping jax's shutdown barrier."""


def lost_sentence(text: str, me: int, count: int) -> str | None:
    """The sentence naming the process lost in a distributed runtime's error `text` (its id
    as the coordination service names it, the other one of two, else "a peer process"; its
    host from gloo's "[host]:port"), or None when the text is no lost peer's."""
    if count < 2 or not _GONE.search(text):
        return None
    lost = next((int(m.group(1)) for p in _TASK if (m := p.search(text))), None)
    if lost is None and count == 2:
        lost = 1 - me
    peer = _PEER.search(text)
    return _said(None if lost == me else lost, peer.group(1) if peer else None, me, count)


def _said(lost: int | None, host: str | None, me: int, count: int) -> str:
    who = "a peer process" if lost is None else f"process {lost}"
    at = f" (host {host})" if host else ""
    return (
        f"{who}{at} of this jax.distributed run was lost (killed or crashed), so this process "
        f"({me} of {count}) stops too: start every process again."
    )


@contextlib.contextmanager
def lost_processes_named(patience: float = 20.0) -> Iterator[None]:
    """Within it, a collective's error whose peer process is gone is raised as ProcessLost,
    one sentence naming that process, and a process silent for `patience` seconds (beats in
    jax's key-value store, as the CLIs' experiments/processes.py) ends this one with that
    sentence; either way this process exits with EXIT_LOST without jax's shutdown barrier
    (which would wait for the lost process, then abort with a C++ stack)."""
    if not patience > 0:
        raise ValueError(f"patience={patience!r}: must be a number of seconds above 0.")
    judging = _watch(patience) if jax.process_count() > 1 else None
    try:
        yield
    except Exception as error:
        count = jax.process_count()
        sentence = lost_sentence(str(error), jax.process_index(), count)
        if sentence is None:
            raise
        atexit.register(_exit_lost)  # after jax's own: atexit runs this one first
        raise ProcessLost(sentence) from None
    finally:
        if judging is not None:
            judging.clear()  # the beats go on: a process that left is not lost


def _exit_lost() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(EXIT_LOST)


def _watch(patience: float) -> threading.Event | None:
    """Start (once) a daemon thread beating in jax's key-value store every second, with this
    host's name; it ends this process, naming the silent process, while the event is set."""
    try:  # the client has no public handle: without it (another jax), no beats
        from jax._src import distributed as jax_distributed

        client = jax_distributed.global_state.client
    except (ImportError, AttributeError):
        return None
    if client is None:
        return None
    if _judging.get(client) is None:
        _judging[client] = threading.Event()
        args = (client, jax.process_index(), jax.process_count(), _judging[client])
        threading.Thread(target=_beat, args=args, daemon=True, name="lost-processes").start()
    _patience[0] = patience
    _judging[client].set()
    return _judging[client]


_judging: dict[Any, threading.Event] = {}
_patience = [20.0]
_KEY = "landscape/probing/"


def _beat(client: Any, me: int, count: int, judging: threading.Event) -> None:
    beats, host = 0, socket.gethostname()
    changed, seen = dict.fromkeys(range(count), time.monotonic()), dict[int, str]()
    while True:
        beats += 1
        with contextlib.suppress(Exception):  # the store's process is gone: its beats stop
            client.key_value_set(f"{_KEY}{me}", f"{beats} {host}", allow_overwrite=True)
            for key, value in client.key_value_dir_get(_KEY):
                other = int(key.rpartition("/")[2])
                if value != seen.get(other):
                    seen[other], changed[other] = value, time.monotonic()
        silent = [p for p in range(count) if time.monotonic() - changed[p] > _patience[0]]
        silent = [p for p in silent if p != me]
        if silent and judging.is_set():
            lost_host = seen.get(silent[0], "? ?").partition(" ")[2] or None
            print(_said(silent[0], lost_host, me, count), file=sys.stderr, flush=True)
            _exit_lost()
        time.sleep(1.0)


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
