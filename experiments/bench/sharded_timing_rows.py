"""One probe of the sharded benchmark in a fresh process of 1 or 8 emulated CPU devices (its
script and the call that runs it); the group, its flags and its rows: bench/sharded_timing.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

_SCRIPT = r"""
import dataclasses, json, resource, sys, time
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import landscape
from experiments.bench import peers, peers_data

probe, width, inputs = sys.argv[1], int(sys.argv[2]), sys.argv[3]
one = peers.mlp_point(peers_data.mlp_arrays(width))
point = one
if jax.device_count() > 1:
    mesh = Mesh(np.array(jax.devices()).reshape(2, 4), ("data", "model"))
    specs = {"w1": P(None, "model"), "b1": P("model"), "w2": P("model", None), "b2": P(),
             "w3": P(), "b3": P()}
    params = {k: jax.device_put(v, NamedSharding(mesh, specs[k])) for k, v in one.params.items()}
    point = one.with_params(params)
    if inputs == "data":
        over = NamedSharding(mesh, P("data"))
        split_inputs = tuple(jax.device_put(x, over) for x in one.inputs)
        point = dataclasses.replace(point, inputs=split_inputs)


def hvp_loop(point):
    # 100 Hutchinson forms v . Hv by jax.jvp of jax.grad on the params as they lie, one at a time:
    # the jitted function
    objective, inputs = point.shared
    where = {name: x.sharding for name, x in point.params.items()}

    @jax.jit
    def forms(params, inputs, key):
        def form(i):
            keys = jax.random.split(jax.random.fold_in(key, i), len(params))
            v = {name: jax.random.rademacher(k, x.shape, x.dtype)
                 for k, (name, x) in zip(keys, params.items())}
            if jax.device_count() > 1:
                v = {name: jax.lax.with_sharding_constraint(x, where[name])
                     for name, x in v.items()}
            hv = jax.jvp(jax.grad(lambda p: objective(p, inputs)), (params,), (v,))[1]
            return sum(jnp.vdot(v[name], hv[name]) for name in params)
        return jax.lax.map(form, jnp.arange(100))

    return forms


def trace_program(point):
    # the Hutchinson trace's block program as `trace` calls it (its probes one at a time)
    from landscape.core import layout
    from landscape.core import blocks
    from landscape.probes import spectra, traces
    lay = layout.spread(point.params)
    zeros = (np.zeros((0, lay.padded if lay else one.num_params), np.float32),
             np.zeros((), np.float32), np.zeros((100,), np.float32))
    objective, inputs = point.shared
    indices = np.arange(blocks.MAPPED_BLOCK, dtype=np.int32)
    return traces.trace_block.lower(objective, point.params, inputs, jax.random.key(0),
                                     traces.TraceState(*zeros), np.int32(2), indices, False, lay)


ready = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
began = time.perf_counter()
if probe == "top5":
    found = landscape.eigenpairs(point, 5, "largest", dense_below=0, progress=None)
    answer = found.values.tolist()
elif probe in ("trace", "hutchpp"):
    method = "hutchinson" if probe == "trace" else "hutch++"
    answer = [landscape.trace(point, 100, method=method, progress=None).value]
elif probe == "hvp_loop":
    answer = [float(hvp_loop(point)(point.params, point.shared[1], jax.random.key(0)).mean())]
else:
    answer = landscape.spectral_density(point, 8, 30, progress=None).nodes[:, -1].tolist()
seconds = time.perf_counter() - began
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
device_mb = None  # XLA's count of a device's temporaries, after the peak is read
if probe in ("trace", "hvp_loop"):
    program = (trace_program(point) if probe == "trace" else
               hvp_loop(point).lower(point.params, point.shared[1], jax.random.key(0)))
    device_mb = program.compile().memory_analysis().temp_size_in_bytes / 2**20
print(json.dumps(dict(D=one.num_params, devices=jax.device_count(), seconds=seconds,
                      ready_mb=ready, peak_mb=peak, device_temp_mb=device_mb, answer=answer)))
"""


def one(probe: str, devices: int, width: int, inputs: str) -> dict[str, Any]:
    """The probe's row (D, seconds, memory, answer) in a process of `devices` devices."""
    flags_now = os.environ.get("XLA_FLAGS", "")
    env = dict(
        os.environ, XLA_FLAGS=f"{flags_now} --xla_force_host_platform_device_count={devices}"
    )
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT, probe, str(width), inputs],
        env=env, capture_output=True, text=True, timeout=3600,
    )  # fmt: skip
    if proc.returncode:
        return {"error": proc.stderr[-2000:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])
