"""Seconds of the interactive probes in a fresh process, as a user at a prompt meets them.

The child process of `python -m experiments.benchmark --only=curvature` (and of the device
check's probe rows), started as `python -m experiments.bench.probe_timing [--grid=10]
[--seq_len=10]` so that every "first" is a cold start; not a benchmark command of its own.
theta_pi (tied, d = 4), x64, the first call, the same point again and a new (p, q), for each
probe; then a grid x grid of theta_pi Hessians in one call. Prints one JSON object per row.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from absl import app, flags

_GRID = flags.DEFINE_integer("grid", 10, "The (p, q) grid is grid x grid points.")
_SEQ_LEN = flags.DEFINE_integer("seq_len", 10, "theta_pi's sequence length N (2^N sequences).")


def _seconds(call: Callable[..., Any], *args: Any) -> float:
    start = time.perf_counter()
    jax.block_until_ready(call(*args))
    return time.perf_counter() - start


def _row(name: str, **values: Any) -> None:
    print(json.dumps({"row": name, **values}), flush=True)


def _star(point: Any) -> Any:
    """theta_star of theta_pi's (p, q) and size, the other end of its path."""
    import landscape

    meta, seq_len = point.meta, point.meta["model"].seq_len
    return landscape.markov.theta_star(meta["p"], meta["q"], seq_len=seq_len)


def _slice(landscape: Any, point: Any) -> np.ndarray:
    u = landscape.random_direction(point, jax.random.key(1))
    v = landscape.random_direction(point, jax.random.key(2))
    ticks = np.linspace(-1.0, 1.0, 11)
    return landscape.slice_2d(point, u, v, ticks, ticks).losses


def main(argv: list[str]) -> None:
    del argv
    jax.config.update("jax_enable_x64", True)
    import landscape  # after x64: its points are float64

    seq_len = _SEQ_LEN.value

    def theta_pi(p: float, q: float) -> landscape.Point:
        return landscape.markov.theta_pi(p=p, q=q, seq_len=seq_len)

    first = _seconds(lambda: theta_pi(0.5, 0.8).params)
    point, other = theta_pi(0.5, 0.8), theta_pi(0.6, 0.7)
    _row(
        "theta_pi",
        first=first,
        again=_seconds(lambda: theta_pi(0.5, 0.8).params),
        D=point.num_params,
    )
    probes: dict[str, Callable[[landscape.Point], Any]] = {
        "gradient_at": lambda x: landscape.gradient_at(x).vector,
        "hessian_at": lambda x: landscape.hessian_at(x).matrix,
        "lanczos_spectrum_30": lambda x: landscape.lanczos_spectrum(x, num_iters=30).ritz_values,
        "spectral_density_16x30": lambda x: landscape.spectral_density(x, 16, 30).nodes,
        "trace_hutchpp_32": lambda x: landscape.trace(x, 32).value,
        "eigenpairs_lanczos_5": lambda x: landscape.eigenpairs(x, 5, dense_below=0).values,
        "ggn_at": lambda x: landscape.ggn_at(x).ggn,
        "path_to_theta_star_51": lambda x: landscape.path(x, _star(x)).losses,
        "slice_2d_11x11": lambda x: _slice(landscape, x),
    }
    for name, probe in probes.items():
        cold = _seconds(probe, point)
        again = _seconds(probe, point)
        new = _seconds(probe, other)
        _row(name, first=cold, again=again, new_point=new)
    axis = np.linspace(0.1, 0.9, _GRID.value)
    grid = [theta_pi(float(p), float(q)) for p in axis for q in axis]
    _row(
        "grid_hessians",
        points=len(grid),
        seconds=_seconds(lambda: landscape.hessian_at(grid)[-1].matrix),
    )


if __name__ == "__main__":
    app.run(main)
