"""A result computed once a test session and read by every pytest-xdist worker: the first
caller takes an exclusive lock file in the session's folder and computes; the others wait for
its JSON. A failure is written too, so nobody waits for a result that will not come."""

import json
import os
import pathlib
import time
from collections.abc import Callable

import pytest


def session_folder(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> pathlib.Path:
    """The folder every worker of this session shares (a worker's own base folder's parent)."""
    base = tmp_path_factory.getbasetemp()
    return base if not hasattr(request.config, "workerinput") else base.parent


def once(path: pathlib.Path, compute: Callable[[], dict]) -> dict:
    """compute() by the first caller of the session, its JSON at `path` read by the others."""
    try:
        os.close(os.open(path.with_suffix(".lock"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        deadline = time.monotonic() + 900
        while not path.exists():
            assert time.monotonic() < deadline, f"no {path.name} after 900 s"
            time.sleep(1)
        found = json.loads(path.read_text())
        assert "failed" not in found, found.get("failed")
        return found
    try:
        found = compute()
    except BaseException as error:
        found = {"failed": repr(error)[-3000:]}
        raise
    finally:
        path.with_suffix(".part").write_text(json.dumps(found))
        path.with_suffix(".part").rename(path)
    return found
