"""Seconds of the interactive probes in a fresh process, as a user at a prompt meets them.

The child process of `python -m experiments.benchmark --only=curvature` (and of the device
check's probe rows), started as `python -m experiments.bench.probe_timing [--grid=10]
[--seq_len=10]` so that every "first" is a cold start; not a benchmark command of its own.
theta_pi (tied, d = 4), x64, the first call, the same point again and a new (p, q), for each
probe; then a grid x grid of theta_pi Hessians in one call. Prints one JSON object per row.
"""

from __future__ import annotations

from absl import app, flags

from experiments.bench.probe_timing_rows import run

_GRID = flags.DEFINE_integer("grid", 10, "The (p, q) grid is grid x grid points.")
_SEQ_LEN = flags.DEFINE_integer("seq_len", 10, "theta_pi's sequence length N (2^N sequences).")


def main(argv: list[str]) -> None:
    del argv
    run(_GRID.value, _SEQ_LEN.value)


if __name__ == "__main__":
    app.run(main)
