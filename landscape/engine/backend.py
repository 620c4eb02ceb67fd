"""Which formulation of a hot path to trace: the one place that decides.

`cpu_tuned()`: the formulations tuned for XLA's CPU backend on a few cores apply on CPU, the plain
XLA ones elsewhere (same numbers up to float rounding), decided at trace time. Sizes follow:
`runs_per_group` and `per_batch` give the CPU's cache-sized groups on the CPU and, on an
accelerator, as many as fit in its free memory. `use_float32_matmuls()` keeps float32 dots
float32 on GPUs (no TF32); `compiler_options()` are the XLA options of a program on this backend.
See docs/design/cpu_formulations.md and docs/design/precision.md.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

import jax

from landscape.engine import memory

TUNINGS = ("cpu", "plain")
_forced: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "landscape_tuning", default=None
)
_device_bytes: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "landscape_device_bytes", default=None
)

# The share of a device's free memory that the plain formulation fills with vmapped runs (or
# items of a batched loop): the sizes come from shape arithmetic, which leaves out XLA's own
# temporaries, fusion buffers and the programs themselves.
USABLE = 0.5

# XLA options that the probes' and the training programs compile with on a GPU, per program
# (`jax.jit(f, compiler_options=...)`): none until the device check's compile_settings row has
# measured a setting that beats XLA's defaults (docs/performance.md#the-device-check)
GPU_COMPILER_OPTIONS: dict[str, bool | int] = {}


def current() -> str:
    """ "cpu" on the CPU backend, "plain" elsewhere, unless `tuning` forces one."""
    forced = _forced.get()
    if forced is not None:
        return forced
    return "cpu" if jax.default_backend() == "cpu" else "plain"


def cpu_tuned() -> bool:
    return current() == "cpu"


def compiler_options() -> dict[str, Any] | None:
    """The XLA options a program compiles with on this backend, per program (None: XLA's
    defaults): `GPU_COMPILER_OPTIONS` on a GPU, none elsewhere. Which options, if any, is the
    choice `python -m experiments.device_check --device_rows=compile_settings` measures."""
    if jax.default_backend() != "gpu" or not GPU_COMPILER_OPTIONS:
        return None
    return dict(GPU_COMPILER_OPTIONS)


def use_float32_matmuls() -> None:
    """float32 x float32 dots in full float32 (not TF32 or bfloat16 passes) on any backend."""
    jax.config.update("jax_default_matmul_precision", "highest")


@contextlib.contextmanager
def tuning(name: str, device_bytes: float | None = None) -> Iterator[None]:
    """Trace with the formulations of `name` ("cpu" or "plain") on any backend (tests,
    benchmarks); `device_bytes`: size groups as if the device had that much free memory."""
    if name not in TUNINGS:
        raise ValueError(f"tuning {name!r}: must be one of {TUNINGS}.")
    if device_bytes is not None and not device_bytes > 0:
        raise ValueError(f"device_bytes = {device_bytes!r}: must be a positive number of bytes.")
    token, bytes_token = _forced.set(name), _device_bytes.set(device_bytes)
    try:
        yield
    finally:
        _forced.reset(token)
        _device_bytes.reset(bytes_token)


def free_bytes() -> float:
    """The device's free memory (`memory.device_free_bytes`), or what `tuning` says it is."""
    forced = _device_bytes.get()
    return memory.device_free_bytes() if forced is None else forced


def runs_per_group(cpu_group: int | None, run_bytes: float | None) -> int | None:
    """Runs vmapped together (None: all of them). CPU: `cpu_group`, a cache-sized group. Plain:
    as many as fit in USABLE x the free memory at `run_bytes` each (at least one), or all of
    them when a problem gives no size (XLA's memory analysis still checks the program)."""
    if cpu_tuned():
        return cpu_group
    if run_bytes is None:
        return None
    return max(1, int(USABLE * free_bytes() // max(run_bytes, 1.0)))


def per_batch(cpu_size: int, item_bytes: float, total: int) -> int:
    """Items of a loop (test sequences, evaluation chunks) taken at once, vmapped: `cpu_size`
    on the CPU; plain: as many of `total` as fit in USABLE x the free memory (at least one)."""
    if cpu_tuned():
        return max(1, min(cpu_size, total))
    return max(1, min(total, int(USABLE * free_bytes() // max(item_bytes, 1.0))))
