"""Times the hot paths, writes JSON: python -m experiments.benchmark [--only=scan_snap] [--out=f].

Groups: scan_snap (the 2-core targets against the authors' PyTorch code), wikitext, recall,
markov, ngrams, curvature (bench/probe_timing.py in a fresh process), cache (a warm compilation
cache), compile (each program's trace, lower and XLA compile seconds, cold), track (curvature
tracked inside the n-gram Fig. 3 run), tracker (the functional tracker in a plain optax loop),
peers (our probes against PyHessian and curvlinops), sharded (8 emulated devices against one),
paper_sizes (the probes at the papers' sizes), finite_differences (exact products against
central differences), bfloat16_storage (bfloat16 vectors against float32), device (the device
check, --budget). Rows and targets: docs/design/experiments.md."""

import json
import os
import pathlib
import platform
import time

import jax
from absl import app, flags

from experiments import host
from experiments.bench import device_check, peers_timing  # noqa: F401 (peers_timing: its flags)
from experiments.bench.benchmark_rows import BENCHMARKS
from landscape.engine import backend
from landscape.engine import host as landscape_host

_OUT = flags.DEFINE_string("out", None, "JSON output (default runs/benchmark/<time>.json).")
_ONLY = flags.DEFINE_list(
    "only",
    ["scan_snap", "wikitext", "recall", "markov", "ngrams"],
    "Which benchmarks to run (device: the device check, alone).",
)
_ALLOCATOR = flags.DEFINE_bool("tune_allocator", True, "Apply landscape.setup's tuned allocator.")
_ONE_BY_ONE = flags.DEFINE_integer("one_by_one", 4, "Single runs per K timed for the comparison.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed repeats (the best is reported).")


def main(argv: list[str]) -> None:
    del argv
    for name in _ONLY.value:
        if name not in (*BENCHMARKS, "device"):
            raise app.UsageError(f"--only={name}: must be one of {', '.join(BENCHMARKS)}, device.")
    if "device" in _ONLY.value:  # before this process takes the accelerator
        if len(_ONLY.value) > 1:
            raise app.UsageError(
                "--only=device runs alone (the device check starts each row in a fresh "
                "process): run the other groups in a call of their own."
            )
        return device_check.run_from_flags()
    # before anything initialises the backends
    landscape_host.use_host_devices(host.HOST_DEVICES.value)
    tuned = landscape_host.use_tuned_allocator() if _ALLOCATOR.value else False
    backend.use_float32_matmuls()
    report = {
        "allocator_tuned": tuned,
        "backend": jax.default_backend(),
        "device": str(jax.devices()[0]),
        "num_devices": jax.device_count(),
        "cpu_count": os.cpu_count(),
        "jax": jax.__version__,
        "python": platform.python_version(),
    }
    out = pathlib.Path(_OUT.value or f"runs/benchmark/{time.strftime('%Y%m%d-%H%M%S')}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    for name in _ONLY.value:  # rows print as measured; the file is rewritten after each
        print(f"{name}:", flush=True)  # benchmark, so a stopped run keeps them
        report[name] = BENCHMARKS[name](_REPEATS.value, _ONE_BY_ONE.value)
        out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written to {out}")


if __name__ == "__main__":
    app.run(main)
