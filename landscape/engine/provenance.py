"""What ran a record: the command, the versions of the packages, the git commit, the machine and
the process-wide settings (`landscape.setup`), for config.json's "provenance"."""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import pathlib
import subprocess
import sys
from typing import Any

import jax

from landscape.engine import backend, integrity
from landscape.engine import host as host_lib

PACKAGES = (
    "jax",
    "jaxlib",
    "flax",
    "optax",
    "chex",
    "numpy",
    "ml_collections",
    "absl-py",
    "diffrax",
    "orbax-checkpoint",
    "matplotlib",
)


def provenance(command: str | None = None, **extra: Any) -> dict[str, Any]:
    """What ran a config: the command (default: this process's), package versions, the git
    commit, backend and devices, and what `landscape.setup()` set (None when it was not called)."""
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    settings = host_lib.current()
    return dict(
        command=command if command is not None else " ".join(["python", *sys.argv]),
        time=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        python=sys.version.split()[0],
        packages=versions,
        git=git_commit(pathlib.Path(__file__).resolve().parents[2]),  # the repository
        code=integrity.code_sha256(),  # the library's sources, as the manifest keeps it
        backend=jax.default_backend(),
        device_count=jax.device_count(),
        devices=sorted({d.device_kind for d in jax.devices()}),
        # a flag: jax.config sets it as an attribute, which its type does not declare
        matmul_precision=jax.config.jax_default_matmul_precision,  # type: ignore[attr-defined]
        formulations=backend.current(),
        cwd=os.getcwd(),
        setup=settings.as_dict() if settings else None,
        **extra,
    )


def git_commit(root: pathlib.Path) -> dict[str, Any] | None:
    """{"commit", "dirty"} of the git checkout at `root` (None outside one)."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
        if commit.returncode:
            return None
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit.stdout.strip(), "dirty": bool(dirty)}
