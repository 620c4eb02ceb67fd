"""Entry points give the CPU backend one device per core unless the user chose a count."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = """
import sys, jax
from experiments import host
count = None if sys.argv[1] == "None" else int(sys.argv[1])
print(host.use_host_devices(count), jax.device_count())
try:
    host.use_host_devices(jax.device_count() + 1)     # too late: the backend is up
except RuntimeError:
    print("too late")
"""


@pytest.mark.parametrize(
    "count, xla_flags, expected",
    [
        (None, "", f"{len(os.sched_getaffinity(0))} {len(os.sched_getaffinity(0))}"),
        (3, "", "3 3"),
        (None, "--xla_force_host_platform_device_count=2", "None 2"),  # the user's count stays
        (3, "--xla_force_host_platform_device_count=2", "3 3"),  # an explicit count wins
    ],
)
def test_use_host_devices(count, xla_flags, expected):
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_NUM_CPU_DEVICES")}
    env.update(PYTHONPATH=ROOT, XLA_FLAGS=xla_flags, JAX_PLATFORMS="cpu")
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(count)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    assert out[:2] == [expected, "too late"]
