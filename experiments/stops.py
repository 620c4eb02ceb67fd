"""How a CLI run starts its records and how it stops: Ctrl-C and SIGTERM (at the next chunk
boundary; a second one at once, or once a checkpoint being saved is whole), a full disk or a
refused write (one sentence, the workdir left for `--resume`), and every other ending of the run
in one sentence and an honest `summary.json` status."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import sys
import types
from collections.abc import Iterator
from typing import Any

from landscape.engine import config as config_lib
from landscape.engine import records, training

EXIT_USAGE, EXIT_FAILED, EXIT_INTERRUPTED = 2, 1, 130


class Output(io.TextIOBase):
    """sys.stdout or sys.stderr of a run: a write that fails (a closed pipe, `| head -1`,
    /dev/full, a closed descriptor) drops what the run prints from then on, never the run nor
    its records; one line on stderr says so where stderr can take it."""

    def __init__(self, stream: Any, name: str) -> None:
        self.stream, self.name = stream, name

    def write(self, text: str) -> int:
        if self.stream is not None:
            try:
                return self.stream.write(text)
            except (OSError, ValueError) as error:  # ValueError: the stream was closed
                self._lose(error)
        return len(text)

    def flush(self) -> None:
        if self.stream is not None:
            try:
                self.stream.flush()
            except (OSError, ValueError) as error:
                self._lose(error)

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:  # faulthandler and the like write to the descriptor itself
        if self.stream is None:
            raise io.UnsupportedOperation("fileno")
        return int(self.stream.fileno())

    @property
    def encoding(self) -> str:  # type: ignore[override] # the stream's, else UTF-8
        return str(getattr(self.stream, "encoding", None) or "utf-8")

    def isatty(self) -> bool:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            return self.stream is not None and self.stream.isatty()
        return False

    def _lose(self, error: Exception) -> None:
        stream, self.stream = self.stream, None
        with contextlib.suppress(OSError, ValueError, AttributeError):  # what it still buffers
            target, null = stream.fileno(), os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, target)  # goes nowhere at exit, instead of a traceback
            os.close(null)
        why = getattr(error, "strerror", None) or str(error)
        if self.name == "stdout":
            _say(f"stdout cannot be written ({why}): the run goes on without its progress lines.")


@contextlib.contextmanager
def output() -> Iterator[None]:
    """A CLI's stdout and stderr as `Output`s (a closed descriptor: os.devnull, so no file the
    run opens takes descriptor 1 or 2), as they were again after."""
    for descriptor in (0, 1, 2):
        try:
            os.fstat(descriptor)
        except OSError:  # closed (`>&-`): the next open takes this descriptor
            os.open(os.devnull, os.O_RDWR)
    saved = sys.stdout, sys.stderr
    sys.stdout = Output(sys.stdout, "stdout")
    sys.stderr = Output(sys.stderr, "stderr")
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def fail(message: str, status: int) -> int:
    """Print `message` as one line on stderr; returns `status`."""
    sys.stdout.flush()
    print(" ".join(message.split()), file=sys.stderr)
    return status


def start_records(workdir: records.Workdir, cfg: Any, resume_line: str) -> None:
    """config.json first, before anything large (a run that meets a full disk after it is one
    `--resume` continues), then summary.json's status "running" (it stays if killed)."""
    workdir.write_config(cfg)
    workdir.write_status(
        "running", started=(workdir.provenance or {}).get("time"), resume=resume_line
    )


def write_status(workdir: records.Workdir, status: str, **fields: Any) -> None:
    """summary.json's status as a run stops, where there is room for it: a full disk (or a
    workdir gone read-only) leaves the status it had ("running", as after a kill), and the one
    sentence the CLI prints still says where the records are and how to resume."""
    with contextlib.suppress(OSError):  # DiskFullError and WriteError among them
        workdir.write_status(status, **fields)


def ended(error: BaseException, workdir: records.Workdir, resume_line: str) -> int:
    """The CLI's sentence, exit status and summary.json status for a run that ended in `error`
    (anything else is a bug: it is raised again, its traceback kept for its report)."""
    path = workdir.path
    if isinstance(error, training.Interrupted):
        write_status(workdir, "interrupted", step=error.step, resume=resume_line)
        return fail(
            f"Interrupted at step {error.step}: the records so far and a checkpoint are in "
            f"{path}; resume with: {resume_line}",
            EXIT_INTERRUPTED,
        )
    if isinstance(error, KeyboardInterrupt):
        return interrupted(workdir, resume_line)
    if isinstance(error, training.NonFiniteLossError):
        write_status(workdir, "stopped at a non-finite loss", step=error.step, message=str(error))
        return fail(f"Stopped: {error}", EXIT_FAILED)
    if isinstance(error, records.DiskFullError):  # the workdir is left for --resume
        return fail(disk_full(error, workdir, resume_line), EXIT_FAILED)
    if isinstance(error, OSError):  # a refused write: read-only, permissions, the workdir moved
        return fail(refused(error, workdir, resume_line), EXIT_FAILED)
    if isinstance(error, (config_lib.ConfigError, records.WorkdirError)):
        write_status(workdir, "failed", message=str(error))  # e.g. XLA's memory analysis
        return fail(str(error), EXIT_USAGE)
    raise error


def interrupted(workdir: records.Workdir, resume_line: str) -> int:
    """Ctrl-C or SIGTERM that stopped the run at once (outside training, or a second one)."""
    write_status(workdir, "interrupted", step=None, resume=resume_line)
    return fail(
        f"Interrupted: the records so far are in {workdir.path}; resume with: {resume_line}",
        EXIT_INTERRUPTED,
    )


def disk_full(error: OSError, workdir: records.Workdir, resume_line: str) -> str:
    """The one sentence for a run stopped by a full disk. A workdir whose config.json was
    written is left as a killed run's (`--resume` continues it from its last checkpoint, and
    summary.json says so when there is room for it); one without it is emptied of what this
    run wrote, so that the same command runs again."""
    path, file = workdir.path, error.filename or "a record"
    try:
        resumable = bool(records.load_config_json(path / "config.json"))
    except records.WorkdirError:
        resumable = False
    if not resumable:
        with contextlib.suppress(OSError, records.WorkdirError):
            records.remove_records(path)
        return (
            f"{file} could not be written: the disk is full ({error.strerror}) before the "
            f"run's config was recorded, so nothing was kept in {path}: free space, then run "
            "the same command again."
        )
    write_status(workdir, "stopped: the disk is full", file=str(file), resume=resume_line)
    return (
        f"{file} could not be written: the disk is full ({error.strerror}); the records up to "
        f"the last checkpoint are kept in {path}: free space, then continue with: {resume_line}"
    )


def refused(error: OSError, workdir: records.Workdir, resume_line: str) -> str:
    """The one sentence for a write the filesystem refused (read-only, no permission, the
    workdir moved or removed, a folder where a file goes); summary.json says so where it can
    still be written, and `--resume` continues from the last checkpoint once it can."""
    path, file = workdir.path, error.filename or "a record"
    why = error.strerror or type(error).__name__
    if not path.is_dir():
        return (
            f"{file} could not be written ({why}): {path} was moved or removed while the run "
            "wrote it; if it was moved, continue from its new place with "
            f"{resume_line.replace(str(path), 'NEW_PLACE')}"
        )
    write_status(workdir, "stopped: a record could not be written", file=str(file), error=why)
    return (
        f"{file} could not be written ({why}); the records up to the last checkpoint are kept "
        f"in {path}: once it can be written again, continue with: {resume_line}"
    )


class Signals:
    """What `on_signals` saw: `at_once` counts the stops that raised KeyboardInterrupt at once
    (a library that swallows one, e.g. inside a gc callback, leaves the count behind)."""

    def __init__(self) -> None:
        self.asked: list[int] = []
        self.at_once = 0


@contextlib.contextmanager
def on_signals() -> Iterator[Signals]:
    """First Ctrl-C / SIGTERM: stop training at the next chunk boundary (outside a training
    loop: at once); a second one: at once, or, during a checkpoint save, once it is whole."""
    seen = Signals()

    def handler(signum: int, frame: types.FrameType | None) -> None:
        if seen.asked and training.stop_after_save():  # a save is being written: finish it
            _say(f"\n{signal.Signals(signum).name}: stopping once the checkpoint is written")
            return
        if seen.asked or not training.request_stop():
            seen.at_once += 1
            raise KeyboardInterrupt
        seen.asked.append(signum)
        _say(
            f"\n{signal.Signals(signum).name}: stopping at the next chunk boundary "
            "(again to stop at once)"
        )

    previous: dict[signal.Signals, Any] = {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, handler)
    except ValueError:  # not the main thread: leave signals alone
        pass
    try:
        yield seen
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        training.clear_stop()


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
