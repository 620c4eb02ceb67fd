"""Seconds of the probes at the papers' sizes, one JSON object per row.

python -m experiments.bench.paper_size_probes [--rows=hessian,ggn128,...] [--host_devices=2]

hessian     dense hessian_at, numpy eigh of its matrix, describe(): n-gram Fig. 3 (D = 2548,
            4096 sequences)
ggn128      ggn_at at Markov theta_pi, N = 128 (256 sequences, D = 709), with G_bb
ggn_ngram   ggn_at at the n-gram Fig. 3 point (its Hessian included)
eigen       eigenpairs(k=4, "smallest"): dense, Lanczos on a 15-fold eigenvalue, the fallback
Machines here are shared: run it twice, alternating with the code you compare against.
"""

from __future__ import annotations

import os

from absl import app, flags

from experiments.bench.paper_size_probes_rows import time_rows

_ROWS = flags.DEFINE_list("rows", ["hessian", "ggn128", "ggn_ngram", "eigen"], "Rows to time.")
_DEVICES = flags.DEFINE_integer("host_devices", 2, "CPU devices (one per core, as setup()).")


def main(argv: list[str]) -> None:
    del argv
    flags_now = os.environ.get("XLA_FLAGS", "")
    if "device_count" not in flags_now:
        count = f"--xla_force_host_platform_device_count={_DEVICES.value}"
        os.environ["XLA_FLAGS"] = f"{flags_now} {count}".strip()
    import jax

    jax.config.update("jax_enable_x64", True)
    time_rows(_ROWS.value)


if __name__ == "__main__":
    app.run(main)
