"""How every record reaches the disk: atomic writes (a temporary file, then a rename), and the
errors a write can meet, each turned into one error naming the file: a full disk
(`DiskFullError`), a filesystem that refuses the write (read-only, permissions, the workdir moved
away: `WriteError`), and a workdir that cannot be used as asked (`WorkdirError`)."""

from __future__ import annotations

import contextlib
import errno
import os
import pathlib
from collections.abc import Iterator
from typing import IO, Any

# what a write meets on a full disk, over its quota, or past the process's file size limit
DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
# what a write meets on a filesystem that refuses it: read-only, no permission, the folder gone,
# a folder where the file goes
REFUSED = (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOENT, errno.EISDIR, errno.ENOTDIR)
# how tensorstore (orbax's writer) names them in its messages
_STATUS_WORDS = {"PERMISSION_DENIED": errno.EACCES, "NOT_FOUND": errno.ENOENT}


class WorkdirError(ValueError):
    """A workdir cannot be used as asked (a file, not writable, or holding earlier records)."""


class WriteError(OSError):
    """A record could not be written: `filename` names it, `strerror` says why (a read-only
    filesystem, no permission, the workdir moved or removed while the run wrote it)."""


class DiskFullError(WriteError):
    """A record the disk had no space for: `filename` names it, `strerror` says why (ENOSPC,
    EDQUOT, or EFBIG past the process's file size limit)."""


def error_code(error: BaseException, codes: tuple[int, ...]) -> int | None:
    """The first errno of `codes` in `error` or the errors it was raised from (orbax's name them
    in words only), or None."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in codes:
            return seen.errno
        text = str(seen)
        for code in codes:
            if os.strerror(code) in text:
                return code
        for word, code in _STATUS_WORDS.items():
            if word in text and code in codes:
                return code
        seen = seen.__cause__ or seen.__context__
    return None


def disk_full_code(error: BaseException) -> int | None:
    """The errno of a full disk in `error` or the errors it was raised from, or None."""
    return error_code(error, DISK_FULL)


@contextlib.contextmanager
def writes_to(path: pathlib.Path) -> Iterator[None]:
    """Writes to `path` inside: a full disk met there becomes one DiskFullError naming it, a
    refused write (read-only, permissions, a folder gone) one WriteError naming it."""
    try:
        yield
    except WriteError:
        raise
    except Exception as error:
        code = disk_full_code(error)
        if code is not None:
            raise DiskFullError(code, os.strerror(code), str(path)) from None
        code = error_code(error, REFUSED)
        if code is None:
            raise
        raise WriteError(code, os.strerror(code), str(path)) from None


space_for = writes_to  # its older name


@contextlib.contextmanager
def atomic(path: pathlib.Path, mode: str, **kwargs: Any) -> Iterator[IO[Any]]:
    """Open a temporary file beside `path`; rename it onto `path` once written (a full disk:
    DiskFullError naming `path`, which keeps what it held; a refused write: WriteError)."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with writes_to(path):
            with open(tmp, mode, **kwargs) as f:
                yield f
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            if tmp.exists():
                tmp.unlink()
