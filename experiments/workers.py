"""Worker processes that end with their parent, for the report's configs run side by side.

`pool` is a process pool (spawned workers) inside which a SIGTERM to the parent (as `timeout`
sends) is a KeyboardInterrupt, like Ctrl-C; either one stops the workers (SIGTERM, then SIGKILL
after a few seconds) before it reaches the caller. Each worker also follows its parent: a
parent that is gone however it ended (even kill -9) takes its workers with it within a second.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from typing import Any

GRACE_SECONDS = 5.0  # from the workers' SIGTERM to their SIGKILL
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


@contextlib.contextmanager
def pool(
    workers: int,
    initializer: Callable[..., object] | None = None,
    initargs: tuple[Any, ...] = (),
    grace: float = GRACE_SECONDS,
) -> Iterator[concurrent.futures.ProcessPoolExecutor]:
    """A ProcessPoolExecutor of `workers` spawned processes (each runs `initializer(*initargs)`
    first) that end with this one: an exception inside, KeyboardInterrupt included (which a
    SIGTERM raises here), cancels what is queued and stops the workers (`stop`). Submit from
    the thread that opened it: on Linux a worker ends with the thread that started it."""
    executor = concurrent.futures.ProcessPoolExecutor(
        workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=follow_parent,
        initargs=(os.getpid(), initializer, initargs),
    )
    with _sigterm_interrupts():
        try:
            yield executor
        except BaseException:
            stop(executor, grace)
            raise
    executor.shutdown(wait=True)


def stop(executor: concurrent.futures.ProcessPoolExecutor, grace: float = GRACE_SECONDS) -> None:
    """Cancel the pool's queued calls and end its processes: SIGTERM (a CLI run in one stops at
    its next chunk boundary), then SIGKILL for any still alive after `grace` seconds."""
    processes = list((getattr(executor, "_processes", None) or {}).values())
    executor.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        with contextlib.suppress(OSError, ValueError):  # ended already
            process.terminate()
    deadline = time.monotonic() + grace
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
    for process in processes:
        if process.is_alive():
            process.kill()
            process.join(5)


def follow_parent(
    parent: int, initializer: Callable[..., object] | None, initargs: tuple[Any, ...]
) -> None:
    """In a worker: end it when `parent` is gone (on Linux the kernel sends SIGKILL at once,
    elsewhere a thread notices within a second), then run the pool's own initializer."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    threading.Thread(target=_watch, args=(parent,), daemon=True, name="follow-parent").start()
    if initializer is not None:
        initializer(*initargs)


def _watch(parent: int) -> None:
    """Poll the parent's pid; once this process has another parent (it was re-parented), die."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGKILL)


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """Inside: a SIGTERM raises KeyboardInterrupt in the main thread (elsewhere: unchanged)."""

    def interrupt(signum: int, frame: types.FrameType | None) -> None:
        raise KeyboardInterrupt(f"{signal.Signals(signum).name}")

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
