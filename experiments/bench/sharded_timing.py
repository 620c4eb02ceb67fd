"""Probes on a model split over 8 emulated CPU devices against one device
(`python -m experiments.benchmark --only=sharded`): the 64 -> h -> h -> 10 tanh MLP of the peers
benchmark, its hidden weights split Megatron-style over "model" of a (2, 4) mesh, each probe in
a fresh process of 1 and of 8 devices: peak memory (the process's), time, and the answers'
agreement. The issue's target: the 8-device process at most 1.5x the one-device one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from absl import flags

from experiments.bench.timing import Rows

_WIDTH = flags.DEFINE_integer("sharded.width", 1400, "Hidden width (1400: D = 2.07e6).")
_PROBES = flags.DEFINE_list("sharded.probes", ["top5", "trace", "hutchpp", "slq"], "Probes.")

_SCRIPT = r"""
import json, resource, sys, time
import jax, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import landscape
from experiments.bench import peers

probe, width = sys.argv[1], int(sys.argv[2])
one = peers.mlp_point(peers.mlp_arrays(width))
params = one.params
if jax.device_count() > 1:
    mesh = Mesh(np.array(jax.devices()).reshape(2, 4), ("data", "model"))
    specs = {"w1": P(None, "model"), "b1": P("model"), "w2": P("model", None), "b2": P(),
             "w3": P(), "b3": P()}
    params = {k: jax.device_put(v, NamedSharding(mesh, specs[k])) for k, v in params.items()}
point = one.with_params(params)
ready = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
began = time.perf_counter()
if probe == "top5":
    found = landscape.eigenpairs(point, 5, "largest", dense_below=0, progress=None)
    answer = found.values.tolist()
elif probe in ("trace", "hutchpp"):
    method = "hutchinson" if probe == "trace" else "hutch++"
    answer = [landscape.trace(point, 100, method=method, progress=None).value]
else:
    answer = landscape.spectral_density(point, 8, 30, progress=None).nodes[:, -1].tolist()
seconds = time.perf_counter() - began
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(dict(D=one.num_params, devices=jax.device_count(), seconds=seconds,
                      ready_mb=ready, peak_mb=peak, answer=answer)))
"""


def _one(probe: str, devices: int, width: int) -> dict[str, Any]:
    flags_now = os.environ.get("XLA_FLAGS", "")
    env = dict(
        os.environ, XLA_FLAGS=f"{flags_now} --xla_force_host_platform_device_count={devices}"
    )
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT, probe, str(width)],
        env=env, capture_output=True, text=True, timeout=3600,
    )  # fmt: skip
    if proc.returncode:
        return {"error": proc.stderr[-2000:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def bench_sharded(repeats: int, one_by_one: int) -> dict[str, Any]:
    del repeats, one_by_one
    out = Rows()
    for probe in _PROBES.value:
        one, eight = _one(probe, 1, _WIDTH.value), _one(probe, 8, _WIDTH.value)
        if "error" in one or "error" in eight:
            out[probe] = dict(one=one, eight=eight)
            continue
        a, b = (sum(abs(x) for x in r["answer"]) for r in (one, eight))
        gap = max(abs(x - y) for x, y in zip(one["answer"], eight["answer"], strict=True))
        out[probe] = dict(
            D=one["D"], one=one, eight=eight,
            peak_ratio=round(eight["peak_mb"] / one["peak_mb"], 2),
            relative_gap=gap / max(a, b, 1e-30),
        )  # fmt: skip
    return out
