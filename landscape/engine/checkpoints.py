"""Checkpoints of a training program's state for `--resume` (orbax), each one belonging to the
records that wrote it: a save is entered in the workdir's manifest before it is written, sealed
there (each file's size and sha256) once written whole, and the step it replaces is removed by its
exact paths after that; a resume restores only a step the manifest seals. orbax writes one step's
state into a folder we name (`<step>/default`): it never scans, keeps or removes steps itself.
docs/guide/resume.md."""

from __future__ import annotations

import contextlib
import os
import pathlib
import re
import shutil
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

import numpy as np

from landscape.engine.writes import WorkdirError, atomic, writes_to

ITEM = "default"  # orbax's folder of the state inside a step folder
# what orbax leaves of a save killed midway, inside a step folder (and beside it, in the layout
# of checkpoints written before steps were named by us)
ORBAX_TMP = re.compile(r"(default|\d+)\.orbax-checkpoint-tmp[-\w.]*")


class Ledger(Protocol):
    """What a checkpoint tells the workdir's manifest (records.Workdir keeps it)."""

    def owns(self, path: pathlib.Path) -> bool: ...

    def enter(self, paths: Sequence[pathlib.Path]) -> None: ...

    def seal(self, files: Sequence[pathlib.Path], drop: Sequence[pathlib.Path] = ()) -> None: ...


class Checkpoint:
    """The latest training state of one program, for `--resume` (the latest sealed step only).

    A save holds the device state (params, optimizer state, data keys) through orbax in
    `<step>/default`, and beside it `host-<step>.npz`: what the host had recorded so far (losses,
    metrics, snapshots), the size and sha256 of metrics.jsonl at that point, whether the program
    had finished, and `stamp` (the run's id and config digest, checked on resume).

    Over several processes (jax.distributed) the state is the whole gathered state, which every
    process holds: process 0 alone writes it (`writable`), and on --resume every process reads it
    from the same folder, so the workdir must be on a filesystem they all see.
    """

    def __init__(
        self,
        path: pathlib.Path,
        writable: bool = True,
        ledger: Ledger | None = None,
        sealed: Sequence[int] = (),
        stamp: dict[str, str] | None = None,
    ) -> None:
        self.path = pathlib.Path(path)
        self.writable = writable
        self.ledger = ledger  # the manifest: what is ours, entered before written, sealed after
        self.steps = sorted(sealed)  # the steps the records seal: what a resume may restore
        self.stamp = dict(stamp or {})
        self._checkpointer: Any = None  # an orbax Checkpointer, made on first use

    def _orbax(self) -> Any:
        if self._checkpointer is None:
            import jax
            import orbax.checkpoint as ocp  # here: importing orbax costs ~0.5 s

            options = ocp.options.MultiprocessingOptions()
            if jax.process_count() > 1:  # this process alone: no barrier with the others
                me = jax.process_index()
                options = ocp.options.MultiprocessingOptions(primary_host=me, active_processes={me})
            handler = ocp.StandardCheckpointHandler(multiprocessing_options=options)
            self._checkpointer = ocp.Checkpointer(handler, multiprocessing_options=options)
        return self._checkpointer

    def latest_step(self) -> int | None:
        return self.steps[-1] if self.steps else None

    def save(self, step: int, state: Any, host: dict[str, np.ndarray]) -> None:
        """Save (a reader, i.e. a process other than 0, saves nothing): entered, written,
        sealed, then the step it replaces removed."""
        if not self.writable:
            return
        import orbax.checkpoint as ocp

        folder, host_file = self.path / str(step), self.path / f"host-{step}.npz"
        self._check_free(folder, host_file, step)
        if self.ledger:
            self.ledger.enter([folder, host_file])
        with writes_to(folder):
            folder.mkdir(parents=True, exist_ok=True)
        with atomic(host_file, "wb") as f:
            np.savez(f, **host, **{k: np.asarray(v) for k, v in self.stamp.items()})  # type: ignore[arg-type]  # stub: a key could be allow_pickle
        # a failed save (its error raised here, not logged by orbax's threads as well) leaves a
        # temporary folder inside the step's, as a killed one does
        with writes_to(folder), _absl_quiet(errors_too=True), _closed_loops_quiet():
            item = (folder / ITEM).absolute()
            self._orbax().save(item, args=ocp.args.StandardSave(state), force=True)
        old = [s for s in self.steps if s != step]
        if self.ledger:  # the step's files, for their sizes and checksums
            self.ledger.seal([host_file, *sorted(p for p in folder.rglob("*") if p.is_file())])
        self.steps = [*old, step]
        for s in old:
            remove_step(self.path, s)
        if self.ledger and old:
            drop = [p for s in old for p in (self.path / str(s), self.path / f"host-{s}.npz")]
            self.ledger.seal([], drop=drop)
        self.steps = [step]

    def _check_free(self, folder: pathlib.Path, host_file: pathlib.Path, step: int) -> None:
        """Refuse (one sentence) to write a step over a folder or file this run did not write."""
        for target in (folder, host_file):
            if os.path.lexists(target) and not (self.ledger and self.ledger.owns(target)):
                raise WorkdirError(
                    f"{target} is in the way of the checkpoint at step {step} and was not "
                    "written by this run (its manifest does not list it): move it out of "
                    f"{self.path}, then continue with --resume."
                )

    def restore(self, template: Any) -> tuple[int, Any, dict[str, np.ndarray]]:
        """(step, state shaped like `template` (numpy arrays), host arrays) of the latest sealed
        save."""
        import orbax.checkpoint as ocp

        if not self.steps:
            raise FileNotFoundError(f"no sealed checkpoint in {self.path}")
        step = self.steps[-1]
        with np.load(self.path / f"host-{step}.npz") as saved:
            host = dict(saved)
        item = (self.path / str(step) / ITEM).absolute()
        state = self._orbax().restore(item, args=ocp.args.StandardRestore(template))
        return step, state, host

    def read_host(self) -> dict[str, np.ndarray]:
        """The host records of the latest sealed step (what `restore` returns beside the state)."""
        with np.load(self.path / f"host-{self.steps[-1]}.npz") as saved:
            return dict(saved)


def remove_step(cell: pathlib.Path, step: int) -> None:
    """Remove a step this run saved, by its exact paths: host-<step>.npz and, in <step>/, orbax's
    folder (and a killed save's temporary one); the step's folder once empty. A link there is
    left alone (the library writes none), as is anything else in the folder."""
    host = cell / f"host-{step}.npz"
    if host.is_file() and not host.is_symlink():
        host.unlink()
    folder = cell / str(step)
    if not folder.is_dir() or folder.is_symlink():
        return
    for child in folder.iterdir():
        if (child.name == ITEM or ORBAX_TMP.fullmatch(child.name)) and not child.is_symlink():
            shutil.rmtree(child) if child.is_dir() else child.unlink()
        elif child.name == "_CHECKPOINT_METADATA" and child.is_file():  # the older layout's
            child.unlink()
    with contextlib.suppress(OSError):
        folder.rmdir()


@contextlib.contextmanager
def _closed_loops_quiet() -> Iterator[None]:
    """A save that fails (a full disk) leaves tensorstore callbacks for orbax's closed event
    loop; each would print "RuntimeError: Event loop is closed" (an unraisable error, during the
    save and after it) around the sentence that names the failure. From the first save on,
    those are left unsaid, and no other error."""
    if not getattr(sys.unraisablehook, "quiet_closed_loops", False):
        sys.unraisablehook = _closed_loops_unsaid(sys.unraisablehook)
    yield


def _closed_loops_unsaid(previous: Callable[[Any], object]) -> Callable[[Any], object]:
    def hook(unraisable: Any) -> None:
        error = unraisable.exc_value
        if not (isinstance(error, RuntimeError) and str(error) == "Event loop is closed"):
            previous(unraisable)

    hook.quiet_closed_loops = True  # type: ignore[attr-defined]  # installed once
    return hook


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
