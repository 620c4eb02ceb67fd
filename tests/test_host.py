"""Entry points give the CPU backend one device per core unless the user chose a count; the
compilation cache that setup() turns on serves a second process every program of a probe."""

import json
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


CACHED_PROCESS = """
import json, sys
import numpy as np
import landscape
from experiments.bench.timing import counting_compiles

landscape.setup(compilation_cache=sys.argv[1], progress=None)
import jax, jax.numpy as jnp

rng = np.random.default_rng(0)
params = {"w1": rng.standard_normal((8, 16)), "w2": rng.standard_normal((16, 3))}
params = {k: v.astype(np.float32) for k, v in params.items()}
x, y = rng.standard_normal((32, 8)).astype(np.float32), rng.integers(0, 3, 32)

def objective(p, data):
    x, y = data
    z = jnp.tanh(x @ p["w1"]) @ p["w2"]
    return jnp.mean(jax.nn.logsumexp(z, -1) - jnp.take_along_axis(z, y[:, None], -1)[:, 0])

with counting_compiles() as counted:
    x0, matvec = landscape.hvp_flat(landscape.Point(params, objective=objective, inputs=(x, y)))
    hv = np.asarray(matvec(np.ones(x0.size, np.float32)))
print(json.dumps(dict(counted.as_dict(), hv=hv.tolist())))
"""


def test_a_second_process_loads_every_program_of_a_probe_from_the_cache(tmp_path):
    """landscape.setup(compilation_cache=DIR): the first process compiles hvp_flat's programs
    (eager operations included) and writes them; a second one with the same model compiles
    none and gives the same product."""
    skip = ("JAX_COMPILATION_CACHE_DIR", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS")
    env = {k: v for k, v in os.environ.items() if k not in skip}
    env.update(PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")

    def process() -> dict:
        out = subprocess.run(
            [sys.executable, "-c", CACHED_PROCESS, str(tmp_path / "cache")],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr[-2000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    first, second = process(), process()
    assert first["compiled"] >= 1 and first["loaded"] == 0  # the product (one program)
    assert second["compiled"] == 0 and second["loaded"] == first["compiled"]
    assert second["hv"] == first["hv"]
