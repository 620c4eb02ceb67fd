"""Which formulation of a hot path to trace: the one place that decides.

`cpu_tuned()`: the formulations tuned for XLA's CPU backend on a few cores apply on CPU, the plain
XLA ones elsewhere (same numbers up to float rounding), decided at trace time.
`use_float32_matmuls()` keeps float32 dots float32 on GPUs (no TF32).
See docs/design/cpu_formulations.md and docs/design/precision.md.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import jax

TUNINGS = ("cpu", "plain")
_forced: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "landscape_tuning", default=None
)


def current() -> str:
    """ "cpu" on the CPU backend, "plain" elsewhere, unless `tuning` forces one."""
    forced = _forced.get()
    if forced is not None:
        return forced
    return "cpu" if jax.default_backend() == "cpu" else "plain"


def cpu_tuned() -> bool:
    return current() == "cpu"


def use_float32_matmuls() -> None:
    """float32 x float32 dots in full float32 (not TF32 or bfloat16 passes) on any backend."""
    jax.config.update("jax_default_matmul_precision", "highest")


@contextlib.contextmanager
def tuning(name: str) -> Iterator[None]:
    """Trace with the formulations of `name` ("cpu" or "plain") on any backend (tests,
    benchmarks)."""
    if name not in TUNINGS:
        raise ValueError(f"tuning {name!r}: must be one of {TUNINGS}.")
    token = _forced.set(name)
    try:
        yield
    finally:
        _forced.reset(token)
