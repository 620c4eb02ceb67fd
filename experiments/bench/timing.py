"""What every benchmark group shares: rows printed as they are measured, and best-of timers."""

import json
import time
from collections.abc import Callable

import jax

from landscape.engine.result import RunResult


class Rows(dict):
    """A benchmark's rows, each printed as soon as it is measured: a benchmark stopped by a time
    limit (a lent accelerator's, say) still shows what it measured."""

    def __setitem__(self, name: str, row: object) -> None:
        super().__setitem__(name, row)
        print(f"  {name}: {json.dumps(row, default=float)}", flush=True)


def best_run_seconds(fn: Callable[[], RunResult], repeats: int) -> tuple[float, float]:
    """Best run time over repeats; each call compiles first (not counted) and runs."""
    results = [fn() for _ in range(repeats)]
    return min(r.run_seconds for r in results), results[0].compile_seconds


def best_call_seconds(call: Callable[[], object], times: int) -> float:
    """The fastest of `times` calls, after one untimed call (compilation, first touch)."""
    call()
    best = float("inf")
    for _ in range(times):
        t0 = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - t0)
    return best


def call_and_wait(f: Callable[..., jax.Array], args: list[jax.Array]) -> jax.Array:
    """f(*args), waited for."""
    return f(*args).block_until_ready()
