"""What every benchmark group shares: rows printed as they are measured, best-of timers, and a
count of the programs XLA compiles (or loads from the persistent compilation cache)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import jax
from jax._src import monitoring  # no public API counts compiles; the events are JAX's own

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


# JAX's events: the first wraps every backend compile, a program loaded from the persistent
# cache included; the second marks such a load
BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"
CACHE_HIT = "/jax/compilation_cache/cache_hits"


@dataclasses.dataclass
class Compiles:
    """What XLA was asked for inside `counting_compiles()`: programs compiled (`compiled`), those
    loaded from the persistent compilation cache (`loaded`), and the seconds of both."""

    requests: int = 0
    loaded: int = 0
    seconds: float = 0.0

    @property
    def compiled(self) -> int:
        return self.requests - self.loaded

    def as_dict(self) -> dict[str, Any]:
        return dict(compiled=self.compiled, loaded=self.loaded, xla_seconds=round(self.seconds, 3))


@contextlib.contextmanager
def counting_compiles() -> Iterator[Compiles]:
    """Count the backend compiles (and cache loads) of the code inside, in this process."""
    found = Compiles()

    def on_duration(event: str, duration_secs: float, **kwargs: str | int) -> None:
        if event == BACKEND_COMPILE:
            found.requests += 1
            found.seconds += duration_secs

    def on_event(event: str, **kwargs: str | int) -> None:
        if event == CACHE_HIT:
            found.loaded += 1

    monitoring.register_event_duration_secs_listener(on_duration)
    monitoring.register_event_listener(on_event)
    try:
        yield found
    finally:
        monitoring.unregister_event_duration_listener(on_duration)
        monitoring.unregister_event_listener(on_event)
