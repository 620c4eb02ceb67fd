"""One writer per workdir: the lock is held by the process, on the workdir folder itself
(`fcntl.flock` on a descriptor of the folder), so deleting a file cannot admit a second writer, and
the operating system releases it when the process ends, however it ends. `<workdir>/.lock` only
says who holds it (the holder's pid) and goes away when the holder releases it."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pathlib
import stat

from landscape.engine.writes import WorkdirError

LOCK = ".lock"
# the descriptors holding a lock in this process: a fork()ed child closes its copies at once, so
# the lock ends with the process that took it and never with a child left running (flock belongs
# to the open file, which fork shares)
_HELD: set[int] = set()


def _close_in_child() -> None:
    for descriptor in _HELD:
        with contextlib.suppress(OSError):
            os.close(descriptor)
    _HELD.clear()


os.register_at_fork(after_in_child=_close_in_child)
_KINDS = {
    stat.S_IFDIR: "a folder",
    stat.S_IFLNK: "a link",
    stat.S_IFIFO: "a named pipe",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a device",
    stat.S_IFBLK: "a device",
}


def lock(path: str | pathlib.Path) -> int:
    """Take the workdir's lock and return its descriptor, held until `release` (or closed, or
    the process ends); <workdir>/.lock then holds this process's id. Raises WorkdirError (one
    sentence) naming the holder's pid if another process holds it, or for a `.lock` that is not
    a file."""
    path = pathlib.Path(path)
    check_lock_file(path)
    descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(descriptor)
        raise _in_use(path) from None
    try:
        _write_pid(path)
    except BaseException:
        os.close(descriptor)
        raise
    _HELD.add(descriptor)
    return descriptor


def release(path: str | pathlib.Path, descriptor: int) -> None:
    """Release the lock `lock` took: <workdir>/.lock goes (where it still names this process),
    then the lock itself."""
    file = pathlib.Path(path) / LOCK
    with contextlib.suppress(OSError):  # the workdir moved, or the file is gone already
        if file.is_file() and not file.is_symlink() and _holder(file) == str(os.getpid()):
            file.unlink()
    _HELD.discard(descriptor)
    os.close(descriptor)


def check_free(path: str | pathlib.Path) -> None:
    """Raise WorkdirError (naming the holder's pid) if a process holds the workdir's lock, or
    for a `.lock` that is not a file; takes nothing and creates nothing."""
    path = pathlib.Path(path)
    check_lock_file(path)
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:  # not a folder (yet): nothing holds it
        return
    try:
        fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        raise _in_use(path) from None
    finally:
        os.close(descriptor)  # closing releases the probe's shared lock


def check_lock_file(path: pathlib.Path) -> None:
    """One sentence for a `.lock` that is not a plain file (a folder, a link, a pipe): a run
    writes its pid there and will not write through it."""
    file = path / LOCK
    try:
        mode = os.lstat(file).st_mode
    except OSError:
        return
    if not stat.S_ISREG(mode):
        kind = _KINDS.get(stat.S_IFMT(mode), "not a plain file")
        raise WorkdirError(
            f"{file} is {kind}, not the lock file a run writes there: remove it (a run writes "
            "it again), then run again."
        )
    if not _holder(file).isdigit() and os.lstat(file).st_size:  # a pid, or empty (a kill)
        raise WorkdirError(
            f"{file} does not hold a process id, so it is not the lock file a run writes there "
            "but someone else's file: move it out of the workdir (it is never replaced), then "
            "run again."
        )


def _write_pid(path: pathlib.Path) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK
    descriptor = os.open(path / LOCK, flags, 0o644)
    try:
        os.write(descriptor, f"{os.getpid()}\n".encode())
    finally:
        os.close(descriptor)


def _holder(file: pathlib.Path) -> str:
    with contextlib.suppress(OSError):
        if file.is_file() and not file.is_symlink():
            return file.read_bytes()[:32].decode(errors="replace").strip()
    return ""


def _in_use(path: pathlib.Path) -> WorkdirError:
    """The sentence for a workdir whose lock another process holds."""
    holder = _holder(path / LOCK)
    who = f"process {holder}" if holder else "another process (its .lock, naming it, is gone)"
    if holder.isdigit() and not pathlib.Path(f"/proc/{holder}").exists():
        others = _openers(path)  # the holder ended: a process it started holds the lock
        if others:
            return WorkdirError(
                f"--workdir={path}: process {holder}, which took its lock, has ended, but "
                f"process {others[0]} it started still holds it: stop that process (kill "
                f"{others[0]}), then run again (--resume continues the run)."
            )
    return WorkdirError(
        f"--workdir={path} is in use by {who} (it holds the workdir's lock): one run writes a "
        "workdir at a time, so wait for that one to end or stop it (a stopped or killed run "
        "can then be continued with --resume)."
    )


def _openers(path: pathlib.Path) -> list[int]:
    """The processes (Linux's /proc) other than this one holding the folder `path` open."""
    found, target = [], os.path.realpath(path)
    for fd_folder in pathlib.Path("/proc").glob("[0-9]*/fd"):
        pid = int(fd_folder.parent.name)
        with contextlib.suppress(OSError):
            if pid != os.getpid() and any(os.readlink(fd) == target for fd in fd_folder.iterdir()):
                found.append(pid)
    return sorted(found)
