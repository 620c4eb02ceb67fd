"""The processes of one run over jax.distributed, ended in one sentence rather than a C++ abort:
each waits a stated, bounded time for the others to join, then beats in jax's key-value store;
a process whose beats stop (killed, crashed, hung) ends the others within that time, naming it.

Limits: a lost process 0 (the coordinator, which holds the store) ends the others at once, in
jax's own message; the times are `--process_timeout` (jax's own timeouts are set above it).
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import jax

from experiments import host

EXIT_FAILED = 1
BEAT_SECONDS = 1.0  # how often each process says it is alive
AFTER_A_FAILED_COLLECTIVE = 5.0  # seconds of silence that then name the lost process
_KEY = "landscape/alive/"
_failed = threading.Event()  # an error in this process: the others are judged sooner
_last_words: list[Callable[[str], object]] = []  # called with the sentence that ends a process


def initialize(
    address: str | None, num_processes: int | None, process_id: int | None, timeout: float
) -> None:
    """jax.distributed.initialize (the address and ids detected when None), waiting at most
    `timeout` seconds for every process to join (a line says so, a sentence says who did not),
    then the beats that end this process when another one is lost (`watch`)."""
    where = f" at {address} (this is process {process_id} of {num_processes})" if address else ""
    print(f"waiting up to {timeout:g} s for every process to join{where}", flush=True)
    joined = threading.Event()
    deadline = threading.Thread(
        target=_join_deadline,
        args=(joined, timeout, address, num_processes, process_id),
        daemon=True,
    )
    deadline.start()
    patience = int(timeout) + 30  # jax's own limits, after ours: its abort never comes first
    jax.distributed.initialize(
        address,
        num_processes=num_processes,
        process_id=process_id,
        initialization_timeout=patience,
        heartbeat_timeout_seconds=patience,
    )
    joined.set()
    watch(timeout)


def flags_error() -> str | None:
    """One sentence if the multi-process flags do not go together, else None."""
    given = [
        host.COORDINATOR.value is not None,
        host.NUM_PROCESSES.value is not None,
        host.PROCESS_ID.value is not None,
    ]
    if any(given) and not all(given):
        return (
            "--coordinator_address, --num_processes and --process_id go together (or "
            "--distributed alone, to let jax.distributed detect them)."
        )
    process_id, num_processes = host.PROCESS_ID.value, host.NUM_PROCESSES.value
    if all(given) and process_id is not None and num_processes is not None:
        if process_id >= num_processes:
            return f"--process_id={process_id}: must be below --num_processes={num_processes}."
    if all(given) and host.DISTRIBUTED.value:
        return "--distributed detects the processes itself: leave out --coordinator_address."
    return None


def start() -> bool:
    """jax.distributed.initialize() as the flags ask (before the backends start), with CPU
    collectives over gloo so that CPU processes can run one program; False when not asked."""
    if not (host.DISTRIBUTED.value or host.COORDINATOR.value):
        return False
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    initialize(  # None, None, None: detected (--distributed)
        host.COORDINATOR.value,
        host.NUM_PROCESSES.value,
        host.PROCESS_ID.value,
        host.PROCESS_TIMEOUT.value,
    )
    return True


def _join_deadline(
    joined: threading.Event,
    timeout: float,
    address: str | None,
    num_processes: int | None,
    process_id: int | None,
) -> None:
    if joined.wait(timeout):
        return
    if process_id == 0 and num_processes == 2:
        who = "process 1 never joined"
    elif process_id and address and not _answers(address):
        who = f"process 0 (the coordinator, at {address}) never started"
    else:
        who = "not every process joined"
    me = f" (this is process {process_id} of {num_processes})" if address else ""
    _end(
        f"{who} within {timeout:g} s{me}: start every process with the same "
        "--coordinator_address and --num_processes and its own --process_id (or all with "
        "--distributed), or wait longer with --process_timeout."
    )


def _answers(address: str) -> bool:
    host, _, port = address.rpartition(":")
    with contextlib.suppress(OSError, ValueError):
        socket.create_connection((host, int(port)), timeout=2).close()
        return True
    return False


def watch(timeout: float) -> None:
    """Beat in jax's key-value store every second from a daemon thread, and end this process
    (one sentence) once another process has not beaten for `timeout` seconds (5 once an
    error stopped this one, see `failed`)."""
    try:  # the client has no public handle: without it (another jax), no beats
        from jax._src import distributed as jax_distributed

        client = jax_distributed.global_state.client
    except (ImportError, AttributeError):
        return
    if client is None or jax.process_count() == 1:
        return
    me, count = jax.process_index(), jax.process_count()
    threading.Thread(
        target=_beat, args=(client, me, count, timeout), daemon=True, name="process-beats"
    ).start()


def _beat(client: Any, me: int, count: int, timeout: float) -> None:
    beats, changed = 0, dict.fromkeys(range(count), time.monotonic())
    seen: dict[int, str] = {}  # each process's last beat, and when it changed
    while True:
        beats += 1
        with contextlib.suppress(Exception):  # the store's process is gone: its beats stop
            client.key_value_set(f"{_KEY}{me}", str(beats), allow_overwrite=True)
            seen_now = dict(client.key_value_dir_get(_KEY))
            for other in range(count):
                value = seen_now.get(f"{_KEY}{other}")
                if value is not None and value != seen.get(other):
                    seen[other], changed[other] = value, time.monotonic()
        limit = min(timeout, AFTER_A_FAILED_COLLECTIVE) if _failed.is_set() else timeout
        silent = [p for p in range(count) if p != me and time.monotonic() - changed[p] > limit]
        if silent:
            _end(
                f"process {silent[0]} stopped answering (killed, crashed or hung: silent for "
                f"{limit:g} s), so this process ({me} of {count}) ends too: once every process "
                "runs again, continue with --resume on each of them."
            )
        time.sleep(BEAT_SECONDS)


def failed(error: BaseException, timeout: float) -> None:
    """In a run over several processes, an error here (e.g. gloo's "connection closed by peer"
    when another process is gone) first waits a few seconds for the beats to judge the others:
    a silent one is named and ends this process; otherwise the error goes on as it was."""
    if jax.process_count() == 1:
        return
    _failed.set()
    time.sleep(min(timeout, AFTER_A_FAILED_COLLECTIVE) + 2 * BEAT_SECONDS)


def on_end(record: Callable[[str], object]) -> None:
    """Have `record(sentence)` run (e.g. this run's summary.json status written) before a lost
    process ends this one, in place of an earlier run's; a failure of it is ignored, the
    sentence still printed."""
    _last_words[:] = [record]


def _end(sentence: str) -> None:
    """Print `sentence` and end this process now: jax's exit would wait for the lost process
    at its shutdown barrier, then abort with a C++ stack."""
    for record in _last_words:
        with contextlib.suppress(Exception):
            record(sentence)
    sys.stdout.flush()
    print(sentence, file=sys.stderr, flush=True)
    os._exit(EXIT_FAILED)
