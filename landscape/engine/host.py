"""Process-wide settings for scripts, notebooks and the CLIs alike: `setup()`.

The CLIs (experiments/cli.py) and a user's script call the same function, so a sweep computes the
same numbers from both: one CPU device per core (a sweep's runs are sharded over the devices, and
the device count changes float32 rounding), JAX's persistent compilation cache, float32 matmuls
in full float32 (landscape/engine/backend.py), and glibc's allocator kept from trimming XLA's heap.
`current()` is what the latest `setup()` set; records (records.provenance) include it.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import logging
import os
import pathlib
from collections.abc import Callable
from typing import Any

import jax

from landscape import _checks
from landscape.engine import backend

DEFAULT_CACHE = "~/.cache/landscape/jax"
# XLA's own caches kept in the compilation cache's folder (jax_persistent_cache_enable_xla_caches:
# "all" adds XLA:GPU's kernel cache, which also changes how LLVM modules are split)
XLA_CACHES = "xla_gpu_per_fusion_autotune_cache_dir"


@dataclasses.dataclass(frozen=True)
class Setup:
    """What `setup()` set (or found), as recorded in config.json's provenance."""

    backend: str
    device_count: int
    host_devices: int | None  # the CPU device count asked for; None: left as it was
    compilation_cache: str | None
    matmul_precision: str | None
    allocator_tuned: bool
    x64: bool = False
    note: str = ""  # a sentence when something could not be set

    def __str__(self) -> str:
        line = (
            f"landscape.setup: backend {self.backend}, {self.device_count} device(s), "
            f"compilation cache {_home_as_tilde(self.compilation_cache) or 'off'}, float32 matmuls "
            f"{'in full float32' if self.matmul_precision == 'highest' else 'at JAX default'}"
            f"{', float64 allowed' if self.x64 else ''}"
        )
        return line + (f". {self.note}" if self.note else "")

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _home_as_tilde(path: str | None) -> str | None:
    """`path` with the user's home folder written ~ (a printed line shows no user's folder)."""
    home = str(pathlib.Path.home())
    if path and home != "/" and (path == home or path.startswith(home + os.sep)):
        return "~" + path[len(home) :]
    return path


_current: Setup | None = None


def current() -> Setup | None:
    """What the latest `setup()` of this process set (None before any)."""
    return _current


def setup(
    host_devices: int | None = None,
    compilation_cache: str | None = DEFAULT_CACHE,
    *,
    float32_matmuls: bool = True,
    x64: bool = False,
    tune_allocator: bool = True,
    before_backend: Callable[[], object] | None = None,
    progress: Callable[[str], object] | None = print,
) -> Setup:
    """Set up this process as the CLIs do, and say what was set (through `progress`).

    host_devices: CPU devices (None: one per usable core, unless XLA_FLAGS or JAX_NUM_CPU_DEVICES
    chose a count). This must come before JAX starts its backend; if it has started already,
    the devices stay as they are and the returned `note` says so. compilation_cache: a folder
    ('' or None: off). before_backend: called after the device count and before the backend
    starts (the CLIs start jax.distributed there). x64: allow float64 arrays (landscape and
    theory checks; training stays in its config's dtype).
    """
    global _current
    _check_setup(host_devices, compilation_cache, float32_matmuls, x64, tune_allocator)
    for name, function in (("before_backend", before_backend), ("progress", progress)):
        if function is not None and not callable(function):
            raise _checks.ArgumentTypeError(
                f"{name} = {function!r}: must be a function or None, not "
                f"{_checks.type_name(function)}."
            )
    note = ""
    try:
        asked = use_host_devices(host_devices)
    except RuntimeError:
        asked = None
        note = (
            "JAX had already started its backend, so the CPU device count stays as it was "
            "(call landscape.setup() before any JAX computation to get one device per core)."
        )
    if before_backend is not None:
        before_backend()
    tuned = tune_allocator and backend.cpu_tuned() and use_tuned_allocator()
    cache = use_compilation_cache(compilation_cache)
    if float32_matmuls:
        backend.use_float32_matmuls()
    if x64:
        jax.config.update("jax_enable_x64", True)
    logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)  # no "no TPU" notice
    _current = Setup(
        backend=jax.default_backend(),
        device_count=jax.device_count(),
        host_devices=asked,
        compilation_cache=cache,
        matmul_precision=jax.config.jax_default_matmul_precision,  # type: ignore[attr-defined]  # a flag
        allocator_tuned=bool(tuned),
        x64=bool(jax.config.jax_enable_x64),  # type: ignore[attr-defined]  # a flag
        note=note,
    )
    if progress:
        progress(str(_current))
    return _current


def _check_setup(
    host_devices: object,
    compilation_cache: object,
    float32_matmuls: object,
    x64: object,
    tune_allocator: object,
) -> None:
    """setup()'s arguments, each refused with one sentence naming it."""
    if host_devices is not None:
        _checks.check_int("host_devices", host_devices, 1, "CPU devices; None: one per core")
    if compilation_cache is not None and not isinstance(compilation_cache, (str, os.PathLike)):
        raise _checks.ArgumentTypeError(
            f"compilation_cache = {compilation_cache!r}: must be a folder (a string or path), "
            f"or '' or None for no cache, not {_checks.type_name(compilation_cache)}."
        )
    _checks.check_bool("float32_matmuls", float32_matmuls)
    _checks.check_bool("x64", x64, "allow float64 arrays")
    _checks.check_bool("tune_allocator", tune_allocator)


def use_host_devices(count: int | None = None) -> int | None:
    """Give the CPU backend `count` devices (None: one per usable core) so that a sweep's runs,
    sharded over all devices (landscape.engine.sweeps), run on every core at once: XLA's CPU
    fusions use one thread each. Without an explicit count, a device count the user set (XLA_FLAGS'
    --xla_force_host_platform_device_count or JAX_NUM_CPU_DEVICES) is kept and None returned.
    Must run before any JAX computation initialises the backends (jax.config raises then).
    """
    if count is None:
        if (
            "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", "")
            or "JAX_NUM_CPU_DEVICES" in os.environ
        ):
            return None
        count = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    jax.config.update("jax_num_cpu_devices", count)
    return count


def use_compilation_cache(path: str | None) -> str | None:
    """Point JAX's persistent compilation cache at `path` (None or '': off); returns the folder in
    use. Every program is written, eager operations included (no compile-time or size floor), so
    a second process with the same model compiles nothing; on a GPU, XLA's per-fusion autotune
    results are kept in the same folder (`XLA_CACHES`). A folder set by JAX_COMPILATION_CACHE_DIR
    (e.g. the test suite's) is kept with its own settings. A hit is the compiled executable
    itself, so no number changes."""
    if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return os.environ["JAX_COMPILATION_CACHE_DIR"]
    if not path:
        jax.config.update("jax_enable_compilation_cache", False)
        return None
    folder = pathlib.Path(path).expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_enable_compilation_cache", True)
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)  # -1: no floor
    with contextlib.suppress(AttributeError):  # a JAX without the option keeps its own
        jax.config.update("jax_persistent_cache_enable_xla_caches", XLA_CACHES)
    return str(folder)


def use_tuned_allocator() -> bool:
    """Keep glibc from returning XLA's large temporaries to the OS after every step.

    By default each large buffer is a fresh mmap, so every training step page-faults its
    temporaries in again (~80k faults per GPT step at N = 1024); serving them from a heap that is
    never trimmed halves such steps on CPU. Process-wide, so only entry points call it.
    Returns False where glibc's mallopt is unavailable (nothing changes then).
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    M_TRIM_THRESHOLD, M_MMAP_MAX, M_ARENA_MAX = -1, -4, -8
    return all(
        libc.mallopt(option, value) == 1
        for option, value in ((M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, 2**30), (M_ARENA_MAX, 1))
    )
