"""Child Python processes of the tests: started in the repository's root, with it on their path."""

import json
import os
import pathlib
import subprocess
import sys
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]


def environment(devices: int | None = None) -> dict[str, str]:
    """This process's environment with the repository on PYTHONPATH; with `devices`, that many
    emulated CPU devices and JAX's float32 default (the conftest's XLA flags kept)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if devices is not None:
        flags = f" --xla_force_host_platform_device_count={devices}"
        env["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + flags
        env.pop("JAX_ENABLE_X64", None)
    return env


def start(script: str, *args: str) -> subprocess.Popen:
    """`python -c script args...`, its stdout a text pipe to read while it runs."""
    command = [sys.executable, "-c", script, *args]
    return subprocess.Popen(command, cwd=ROOT, env=environment(), stdout=subprocess.PIPE, text=True)


def last_json_line(script: str, devices: int, timeout: float) -> Any:
    """The last line `python -c script` prints on `devices` emulated devices, read as JSON; its
    stderr's end if it fails."""
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=environment(devices), capture_output=True,
        text=True, timeout=timeout,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
