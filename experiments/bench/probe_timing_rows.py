"""The rows of the interactive probes' timing, one JSON object each: theta_pi, each probe's first
call, the same point again and a new (p, q), then a grid of Hessians in one call; the command
line and its flags: experiments/bench/probe_timing.py."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np


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


def run(grid_size: int, seq_len: int) -> None:
    """Print every row: `grid_size` x `grid_size` Hessians in the last, theta_pi at `seq_len`."""
    jax.config.update("jax_enable_x64", True)
    import landscape  # after x64: its points are float64

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
    axis = np.linspace(0.1, 0.9, grid_size)
    grid = [theta_pi(float(p), float(q)) for p in axis for q in axis]
    _row(
        "grid_hessians",
        points=len(grid),
        seconds=_seconds(lambda: landscape.hessian_at(grid)[-1].matrix),
    )
