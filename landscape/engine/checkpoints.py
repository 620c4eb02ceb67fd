"""Checkpoints of a training program's state for `--resume` (orbax), the atomic writes every
record file goes through (a temporary file, then a rename), and the one error a full disk gives."""

from __future__ import annotations

import contextlib
import errno
import os
import pathlib
from collections.abc import Callable, Iterator
from typing import IO, Any

import numpy as np

# what a write meets on a full disk, over its quota, or past the process's file size limit
DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


class DiskFullError(OSError):
    """A record could not be written for lack of space: `filename` names it, `strerror` says
    why (ENOSPC, EDQUOT, or EFBIG past the process's file size limit)."""


def disk_full_code(error: BaseException) -> int | None:
    """The errno of a full disk in `error` or the errors it was raised from (orbax's name it
    in words only), or None for any other error."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in DISK_FULL:
            return seen.errno
        for code in DISK_FULL:
            if os.strerror(code) in str(seen):
                return code
        seen = seen.__cause__ or seen.__context__
    return None


@contextlib.contextmanager
def space_for(path: pathlib.Path) -> Iterator[None]:
    """Writes to `path` inside: a full disk met there becomes one DiskFullError naming it."""
    try:
        yield
    except DiskFullError:
        raise
    except Exception as error:
        code = disk_full_code(error)
        if code is None:
            raise
        raise DiskFullError(code, os.strerror(code), str(path)) from None


@contextlib.contextmanager
def atomic(path: pathlib.Path, mode: str, **kwargs: Any) -> Iterator[IO[Any]]:
    """Open a temporary file beside `path`; rename it onto `path` once written (a full disk:
    DiskFullError naming `path`, which keeps what it held)."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with space_for(path), open(tmp, mode, **kwargs) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


class Checkpoint:
    """The latest training state of one program, for `--resume` (orbax, keeping only the latest).

    A save holds the device state (params, optimizer state, data keys) through orbax, and beside
    it `host-<step>.npz`: what the host had recorded so far (losses, metrics, snapshots), the
    size of metrics.jsonl at that point, and whether the program had finished.

    Over several processes (jax.distributed) the state is the whole gathered state, which every
    process holds: process 0 alone writes it (`writable`), and on --resume every process reads it
    from the same folder, so the workdir must be on a filesystem they all see.
    """

    def __init__(
        self,
        path: pathlib.Path,
        writable: bool = True,
        written: Callable[[list[pathlib.Path]], None] | None = None,
    ) -> None:
        self.path = pathlib.Path(path)
        self.writable = writable
        self.written = written  # told of each save's files (host records, orbax's)
        self._manager: Any = None  # an orbax CheckpointManager, made on first use

    def _orbax(self) -> Any:
        if self._manager is None:
            import jax
            import orbax.checkpoint as ocp  # here: importing orbax costs ~0.5 s

            options: dict[str, Any] = dict(max_to_keep=1, enable_async_checkpointing=False)
            if jax.process_count() > 1:  # this process alone: no barrier with the others
                me = jax.process_index()
                options.update(
                    create=False,
                    multiprocessing_options=ocp.options.MultiprocessingOptions(
                        primary_host=me, active_processes={me}
                    ),
                )
            if not self.writable:
                options.update(read_only=True, max_to_keep=None)
            with _absl_quiet():  # orbax warns that a read-only folder is read-only
                self._manager = ocp.CheckpointManager(
                    self.path.absolute(), options=ocp.CheckpointManagerOptions(**options)
                )
        return self._manager

    def latest_step(self) -> int | None:
        steps = committed_steps(self.path)
        return steps[-1] if steps else None

    def save(self, step: int, state: Any, host: dict[str, np.ndarray]) -> None:
        """Save (a reader, i.e. a process other than 0, saves nothing)."""
        if not self.writable:
            return
        import orbax.checkpoint as ocp

        self.path.mkdir(parents=True, exist_ok=True)
        with atomic(self.path / f"host-{step}.npz", "wb") as f:
            np.savez(f, **host)  # type: ignore[arg-type]  # stub: a key could be allow_pickle
        # a failed save (its error raised here, not logged by orbax's threads as well) leaves a
        # temporary folder, as a killed one does
        with space_for(self.path / str(step)), _absl_quiet(errors_too=True):
            self._orbax().save(step, args=ocp.args.StandardSave(state), force=True)
            self._orbax().wait_until_finished()
        for old in _host_steps(self.path)[:-1]:
            if old != step:
                (self.path / f"host-{old}.npz").unlink()
        if self.written:  # the step's files, for their sizes and checksums
            orbax_files = sorted(p for p in (self.path / str(step)).rglob("*") if p.is_file())
            self.written([self.path / f"host-{step}.npz", *orbax_files])

    def restore(self, template: Any) -> tuple[int, Any, dict[str, np.ndarray]]:
        """(step, state shaped like `template` (numpy arrays), host arrays) of the latest save."""
        import orbax.checkpoint as ocp

        steps = committed_steps(self.path)
        if not steps:
            raise FileNotFoundError(f"no complete checkpoint in {self.path}")
        step = steps[-1]
        state = self._orbax().restore(step, args=ocp.args.StandardRestore(template))
        with np.load(self.path / f"host-{step}.npz") as host:
            return step, state, dict(host)


@contextlib.contextmanager
def _absl_quiet(errors_too: bool = False) -> Iterator[None]:
    """absl's warnings (with `errors_too`, its errors) left unsaid inside."""
    from absl import logging as absl_logging

    level = absl_logging.get_verbosity()
    absl_logging.set_verbosity(absl_logging.FATAL if errors_too else absl_logging.ERROR)
    try:
        yield
    finally:
        absl_logging.set_verbosity(level)


def _host_steps(path: pathlib.Path) -> list[int]:
    if not path.is_dir():
        return []
    return sorted(int(f.stem.split("-")[1]) for f in path.glob("host-*.npz"))


def committed_steps(path: pathlib.Path) -> list[int]:
    """Steps saved whole: the host records and orbax's finished step folder (a save killed
    midway leaves only a temporary folder, and the step before it stays the latest)."""
    return [s for s in _host_steps(path) if (path / str(s)).is_dir()]


def latest_checkpoint_metrics_bytes(path: str | pathlib.Path) -> int:
    """Size of metrics.jsonl at the newest checkpoint of a workdir (0 without one): rows past it
    belong to work a resumed run redoes."""
    root = pathlib.Path(path) / "checkpoints"
    cells = (
        sorted((int(c.name[4:]), c) for c in root.glob("cell*") if c.name[4:].isdigit())
        if root.is_dir()
        else []
    )
    for _, cell in reversed(cells):
        steps = committed_steps(cell)
        if steps:
            with np.load(cell / f"host-{steps[-1]}.npz") as host:
                return int(host["metrics_bytes"])
    return 0
