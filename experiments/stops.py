"""How a CLI run starts its records and how it stops: Ctrl-C and SIGTERM (at the next chunk
boundary), and a full disk (one sentence, the workdir left for `--resume`)."""

from __future__ import annotations

import contextlib
import signal
import sys
import types
from collections.abc import Iterator
from typing import Any

from landscape.engine import records, training


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
    with contextlib.suppress(OSError):  # DiskFullError among them
        workdir.write_status(status, **fields)


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


@contextlib.contextmanager
def on_signals() -> Iterator[None]:
    """First Ctrl-C / SIGTERM: stop training at the next chunk boundary (outside a training
    loop: at once); a second one: at once."""
    asked: list[int] = []

    def handler(signum: int, frame: types.FrameType | None) -> None:
        if asked or not training.request_stop():
            raise KeyboardInterrupt
        asked.append(signum)
        print(
            f"\n{signal.Signals(signum).name}: stopping at the next chunk boundary "
            "(again to stop at once)",
            file=sys.stderr,
            flush=True,
        )

    previous: dict[signal.Signals, Any] = {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, handler)
    except ValueError:  # not the main thread: leave signals alone
        pass
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        training.clear_stop()
